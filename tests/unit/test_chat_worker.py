"""The chat template's helper process: the operating system bounds a render's
memory and time, a breach or a cancel kills the helper, and the next render gets a
fresh one. Real processes, no model needed."""

from __future__ import annotations

import os
import signal
import sys
import time

import psutil
import pytest

from specdesk.chat.sandbox import CHATML, Budget, TemplateBudgetError, render_chat
from specdesk.chat.worker import TemplateRenderer
from specdesk.errors import Cancelled, SpecDeskError

CHAT = [{"role": "user", "content": "hi"}]
HI = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
# one C-level call (sum of lists, quadratic) that runs for minutes and holds little memory
SLOW = "{{ ([[1]] * 300000)|sum(start=[])|length }}"
# 40 strings of 4 MB in a list literal: each is within the sandbox's size budget, the
# literal is built before anything can measure it (160 MB)
BIG = "{% set s = 'x' * 4000000 %}{{ [" + ", ".join(f"s ~ {i}" for i in range(40)) + "]|length }}"
MiB = 1 << 20


@pytest.fixture
def renderers():
    made = []

    def make(**kw) -> TemplateRenderer:
        r = TemplateRenderer(**kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_helper_renders_what_the_sandbox_renders(renderers):
    r = renderers()
    tpl = ("{% for m in messages %}{{ m.role|upper }}:{{ m.content|trim }}|{% endfor %}"
           "{{ bos_token }}{{ eos_token }}{{ add_generation_prompt }}")
    msgs = [{"role": "system", "content": " s "}, {"role": "user", "content": "héllo ✓"}]
    for template in (None, CHATML, tpl):
        for agp in (True, False):
            want = render_chat(template, msgs, bos_token="<s>", eos_token="</s>", add_generation_prompt=agp)
            assert r.render(template, msgs, bos_token="<s>", eos_token="</s>", add_generation_prompt=agp) == want
    assert r.starts == 1 and r.kills == 0  # one helper, reused


def test_a_render_past_its_deadline_is_killed_and_the_next_one_renders(renderers):
    r = renderers(deadline=0.5)
    assert r.render(None, CHAT) == HI
    pid = r.pid
    with pytest.raises(TemplateBudgetError) as e:
        r.render(SLOW, CHAT)
    assert str(e.value) == "the model's chat template needs more than 0.5 s to render; use --raw or another template"
    assert r.kills == 1 and _gone(pid)
    assert r.render(None, CHAT) == HI  # a fresh helper
    assert r.starts == 2 and r.pid != pid


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_CPU is POSIX")
def test_the_helper_ends_itself_past_its_cpu_time(renderers):
    # should this side not be waiting (gone, stuck), the OS still ends the render
    r = renderers(deadline=600.0, cpu_seconds=1)
    with pytest.raises(TemplateBudgetError, match="^the model's chat template needs more than 1 s of CPU time to render"):
        r.render(SLOW, CHAT)
    assert r.kills == 0  # nobody here killed it
    assert r.render(None, CHAT) == HI


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux")
def test_the_address_space_limit_stops_what_the_sandbox_cannot_see(renderers):
    # the sandbox alone builds it (in this process it would take 160 MB)
    r = renderers(memory=64 * MiB)
    assert r.render(None, CHAT) == HI
    assert r.bounded_by == "address space"
    with pytest.raises(TemplateBudgetError, match="^the model's chat template needs more than 64 MiB to render; use --raw"):
        r.render(BIG, CHAT)
    assert r.render(None, CHAT) == HI
    assert r.starts == 2  # a fresh heap after a breach


def test_the_watchdog_bounds_memory_where_the_os_does_not(renderers):
    r = renderers(memory=64 * MiB, os_limit=False)
    assert r.render(None, CHAT) == HI
    assert r.bounded_by == "watchdog"
    with pytest.raises(TemplateBudgetError, match="needs more than 64 MiB to render"):
        r.render(BIG, CHAT)
    assert r.kills == 1
    assert r.render(None, CHAT) == HI


def test_cancel_during_a_render_kills_the_helper(renderers):
    r = renderers(deadline=600.0)
    assert r.render(None, CHAT) == HI
    polled = []

    def cancel() -> bool:  # true once the helper is rendering
        polled.append(r.busy)
        return r.busy

    with pytest.raises(Cancelled):
        r.render(SLOW, CHAT, cancel=cancel)
    assert polled[-1] is True and r.kills == 1
    assert r.render(None, CHAT) == HI


def test_a_cancel_before_the_render_sends_nothing(renderers):
    r = renderers()
    with pytest.raises(Cancelled):
        r.render(SLOW, CHAT, cancel=lambda: True)  # while the helper starts
    assert r.kills == 0
    assert r.render(None, CHAT) == HI


def test_errors_of_the_template_come_back_as_one_line(renderers):
    r = renderers()
    with pytest.raises(SpecDeskError) as e:
        r.render("{{ raise_exception('no\nway') }}", CHAT)
    assert str(e.value) == "the model's chat template failed: no way"
    assert r.kills == 0 and r.render(None, CHAT) == HI  # the helper stays
    small = renderers(budget=Budget(steps=10))  # the sandbox's budget applies inside the helper
    with pytest.raises(TemplateBudgetError, match="needs more than 10 steps"):
        small.render("{% for i in range(100) %}{% endfor %}", CHAT)
    assert small.kills == 0


def test_a_helper_that_died_is_replaced(renderers):
    r = renderers()
    assert r.render(None, CHAT) == HI
    pid = r.pid
    os.kill(pid, signal.SIGKILL)
    while not _gone(pid):  # dead, not reaped: the renderer reaps its own
        time.sleep(0.01)
    assert r.render(None, CHAT) == HI
    assert r.starts == 2 and r.pid != pid


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")
def test_the_helper_does_not_load_llama_cpp(renderers):
    import specdesk.engine.model  # noqa: F401 - this process has llama.cpp loaded

    r = renderers()
    assert r.render(None, CHAT) == HI
    maps = [m.path for m in psutil.Process(r.pid).memory_maps()]
    assert maps and not [p for p in maps if "llama" in os.path.basename(p) or "ggml" in os.path.basename(p)]


def test_a_script_without_a_main_guard_gets_its_render(tmp_path):
    """The helper must not run the parent's script again (multiprocessing's spawn
    re-imports ``__main__``): a user's script, or a test's, that renders at its top
    level got "the renderer did not start" after a minute."""
    import subprocess

    script = tmp_path / "unguarded.py"
    script.write_text("from specdesk.chat.worker import TemplateRenderer\n"
                      "print('RAN', flush=True)\n"
                      "r = TemplateRenderer()\n"
                      "print(repr(r.render(None, [{'role': 'user', 'content': 'hi'}])), flush=True)\n"
                      "r.close()\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["RAN", repr(HI)]
