"""Chat templates: a hostile template stops within its budget with a one-line message;
strict templates (roles must alternate) get a history they accept after trimming."""

from __future__ import annotations

import tracemalloc

import pytest

from specdesk.chat.sandbox import (
    CHATML,
    DEFAULT_BUDGET,
    Budget,
    TemplateBudgetError,
    drop_oldest_turn,
    render_chat,
    valid_roles,
)
from specdesk.errors import SpecDeskError

CHAT = [{"role": "user", "content": "hi"}]

# Each of these froze (or took all memory in) the sandboxed renderer before the budget.
HOSTILE = {
    "nested loops": "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
    "nested loops over strings":
        "{% for a in 'x' * 100000 %}{% for b in 'y' * 100000 %}{{ '' }}{% endfor %}{% endfor %}",
    "huge string": "{{ 'x' * 10000000000 }}",
    "huge list": "{{ messages * 10000000000 }}",
    "doubling in a namespace":
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "doubling by concatenation": "{% set s = 'x' %}" + "{% set s = s ~ s %}" * 64 + "{{ s|length }}",
    "doubling by plus": "{% set s = 'x' %}" + "{% set s = s + s %}" * 64 + "{{ s|length }}",
    "huge power": "{{ 10 ** 100000000 }}",
    "huge product": "{% set ns = namespace(n=10) %}{% for i in range(64) %}{% set ns.n = ns.n * ns.n %}{% endfor %}",
    "wide indent": "{{ ('a\\n' * 1000000)|indent(1000000) }}",
    "wide center": "{{ 'x'|center(10000000000) }}",
    "wide ljust": "{{ 'x'.ljust(10000000000) }}",
    "wide percent format": "{{ '%999999999d' % 1 }}",
    "wide brace format": "{{ '{:>999999999}'.format(1) }}",
    "computed width": "{{ '{:{}}'.format(1, 999999999) }}",
    "replace everywhere": "{{ ('x' * 5000000)|replace('', 'x' * 5000000) }}",
    "endless output":
        "{% for a in range(100000) %}{% for b in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endfor %}",
    "macro recursion": "{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "lipsum": "{{ lipsum(1000000000) }}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_template_stops_with_a_one_line_message(name):
    with pytest.raises(SpecDeskError) as e:
        render_chat(HOSTILE[name], CHAT)
    msg = str(e.value)
    assert msg.startswith("the model's chat template"), msg
    assert "\n" not in msg and len(msg) < 300


_S = "{% set s = 'x' * 4000000 %}"
# Each of these built 48 million to 2 billion characters before the old sandbox
# measured them (issue 21): a list was sized by its items, not the characters it
# holds; the format filter and a %-mapping key skipped the width check; strftime and
# ``~`` were measured after they ran.
BUILT_BEFORE_MEASURED = {
    "format filter": "{{ '%2000000000d'|format(1) }}",
    "format filter, precision": "{{ '%.2000000000f'|format(1.5) }}",
    "format filter, keyword": "{{ '%(a)2000000000d'|format(a=1) }}",
    "list of a long string": _S + "{{ [s] * 60 }}",
    "joined": _S + "{{ ([s] * 60)|join }}",
    "as json": _S + "{{ ([s] * 60)|tojson }}",
    "joined by a string": _S + "{{ ''.join([s] * 60) }}",
    "concatenated": _S + "{{ " + " ~ ".join(["s"] * 60) + " }}",
    "added": _S + "{{ " + " + ".join(["s"] * 60) + " }}",
    "mapping key": "{{ '%(a)300000000d' % {'a': 1} }}",
    "many moderate widths": "{{ ('%900000d' * 100) % ((1,) * 100) }}",
    "many moderate brace widths": "{{ ('{:>900000}' * 100).format(*range(100)) }}",
    "strftime": "{{ strftime_now('%c' * 2000000) }}",
    "sort of long strings": "{% set s = 'x' * 1000000 %}{% set t = s ~ 'y' %}{{ ([s, t] * 4000)|sort|length }}",
}


@pytest.mark.parametrize("name", list(BUILT_BEFORE_MEASURED))
def test_the_sandbox_refuses_before_it_builds(name):
    tracemalloc.start()
    try:
        with pytest.raises(TemplateBudgetError) as e:
            render_chat(BUILT_BEFORE_MEASURED[name], CHAT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"{peak / 2**20:.0f} MiB allocated before it was refused"
    assert str(e.value) == (f"the model's chat template needs more than {DEFAULT_BUDGET.chars + 4:,} characters to render; "
                            "use --raw or another template")


def test_a_list_is_sized_by_the_characters_it_holds():
    s = "{% set s = 'x' * 1000 %}"
    assert render_chat(s + "{{ ([s] * 8)|join|length }}", CHAT, budget=Budget(chars=10_000)) == "8000"
    with pytest.raises(TemplateBudgetError, match="10,004 characters"):
        render_chat(s + "{{ ([s] * 11)|join|length }}", CHAT, budget=Budget(chars=10_000))


def test_the_step_budget_counts_loop_iterations():
    tpl = "{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}"
    with pytest.raises(TemplateBudgetError, match="more than 10,000 steps"):
        render_chat(tpl, CHAT, budget=Budget(steps=10_000, seconds=600))
    assert render_chat(tpl, CHAT, budget=Budget(steps=2_000_000, seconds=600)) == ""  # no clock in the way


def test_the_time_budget_stops_a_slow_template():
    # a step budget it would take minutes to spend: the clock stops it
    tpl = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
    with pytest.raises(TemplateBudgetError, match=r"needs more than 0\.05 s to render"):
        render_chat(tpl, CHAT, budget=Budget(seconds=0.05, steps=10**12))


def test_the_size_budget_grows_with_the_chat():
    long_chat = [{"role": "user", "content": "y" * 100_000}]
    text = render_chat(CHATML, long_chat, budget=Budget(chars=1000))
    assert "y" * 100_000 in text
    with pytest.raises(TemplateBudgetError, match="characters"):
        render_chat("{{ 'x' * 300000 }}", long_chat, budget=Budget(chars=1000))


def test_errors_of_template_code_are_one_line():
    with pytest.raises(SpecDeskError, match="^the model's chat template failed: ZeroDivisionError"):
        render_chat("{{ 1 // 0 }}", CHAT)
    with pytest.raises(SpecDeskError) as e:
        render_chat("{{ raise_exception('no\nway') }}", CHAT)
    assert str(e.value) == "the model's chat template failed: no way"


# A real template of the usual strict kind: Mistral-7B-Instruct's (tokenizer_config.json).
MISTRAL = (
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content'] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "\n"
    "{{- bos_token }}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception('After the optional system message, conversation roles must alternate "
    "user/assistant/user/assistant/...') }}\n"
    "    {%- endif %}\n"
    "    {%- if message['role'] == 'user' %}\n"
    "        {%- if loop.first and system_message is defined %}\n"
    "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n"
    "            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n"
    "        {%- endif %}\n"
    "    {%- elif message['role'] == 'assistant' %}\n"
    "        {{- ' ' + message['content'] + eos_token}}\n"
    "    {%- else %}\n"
    "        {{- raise_exception('Only user and assistant roles are supported, with the exception of an "
    "initial optional system message!') }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
)


def _m(role: str, content: str) -> dict:
    return {"role": role, "content": content}


def _roles(msgs) -> str:
    return "".join(m["role"][0] for m in msgs)


def test_the_mistral_template_refuses_what_the_old_trimming_left():
    chat = [_m("user", "u1"), _m("assistant", "a1"), _m("user", "u2")]
    assert render_chat(MISTRAL, chat, bos_token="<s>", eos_token="</s>").startswith("<s> [INST] u1")
    # dropping one message from the oldest side, as the prompt fitting did: assistant first
    with pytest.raises(SpecDeskError, match="roles must alternate"):
        render_chat(MISTRAL, chat[1:])


@pytest.mark.parametrize("system", [False, True])
def test_trimming_keeps_the_roles_a_strict_template_accepts(system):
    chat = [_m("system", "be brief")] if system else []
    for i in range(4):
        chat += [_m("user", f"u{i}"), _m("assistant", f"a{i}")]
    chat.append(_m("user", "last"))
    seen = []
    msgs = chat
    while msgs is not None:
        text = render_chat(MISTRAL, msgs, bos_token="<s>", eos_token="</s>")  # never raises
        assert text.rstrip().endswith("[INST] last [/INST]") or "last" in text
        assert ("be brief" in text) == system
        seen.append(_roles(msgs))
        msgs = drop_oldest_turn(msgs)
    head = "s" if system else ""
    assert seen == [head + "uauauauau", head + "uauauau", head + "uauau", head + "uau", head + "u"]


def test_valid_roles_repairs_a_broken_history():
    # a failed send left user,user; an old trim left assistant first; a stray system message
    broken = [_m("system", "s"), _m("assistant", "a0"), _m("user", "lost"), _m("user", "u1"),
              _m("system", "late"), _m("assistant", "a1"), _m("assistant", "a1 again"), _m("user", "u2")]
    fixed = valid_roles(broken)
    assert [m["content"] for m in fixed] == ["s", "u1", "a1 again", "u2"]
    render_chat(MISTRAL, fixed)  # accepted
    assert valid_roles([]) == []
    assert broken[2] == _m("user", "lost")  # the input is not modified


def test_drop_oldest_turn_stops_at_the_last_user_turn():
    assert drop_oldest_turn([_m("user", "u")]) is None
    assert drop_oldest_turn([_m("system", "s"), _m("user", "u")]) is None
    assert drop_oldest_turn([]) is None
    # a history that starts with assistant is repaired first
    assert _roles(drop_oldest_turn([_m("assistant", "a"), _m("user", "u1"), _m("assistant", "a1"),
                                    _m("user", "u2")])) == "u"
    # user,user: the earlier (unanswered) one is not counted as a turn
    assert _roles(drop_oldest_turn([_m("user", "x"), _m("user", "u1"), _m("assistant", "a1"),
                                    _m("user", "u2")])) == "u"


def test_ordinary_templates_still_render():
    text = render_chat(None, [_m("system", "s"), _m("user", "hi")])
    assert text == "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    tpl = ("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
           "{{ m.role|upper }}:{{ m.content|trim|indent(2) }}|{% endfor %}{{ ns.n }}"
           "{{ messages|tojson(indent=2)|length > 0 }}{{ strftime_now('%Y')|length }}{{ '%-5s|' % 'ab' }}")
    assert render_chat(tpl, [_m("user", " hi "), _m("assistant", "yo")]) == "USER:hi|ASSISTANT:yo|2True4ab   |"
