"""Benchmark prompt suites: the built-in data files and the user-file loader."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specdesk.bench import suites as S
from specdesk.bench.suites import (
    BUILTIN,
    Prompt,
    Suite,
    SuiteError,
    builtin_dir,
    describe_builtin,
    load_file,
    load_suite,
)
from specdesk.errors import SpecDeskError

KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
CODE_BLOCK = re.compile(r"```([A-Za-z]+)\n(.*?)\n```", re.S)


def one_line_error(excinfo) -> str:
    msg = str(excinfo.value)
    assert isinstance(excinfo.value, SpecDeskError)
    assert msg and "\n" not in msg and "\r" not in msg
    return msg


# ------------------------------------------------------------------ built-in suites


def test_builtin_names_and_order():
    assert BUILTIN == ("code_boilerplate", "structured_output", "code_editing", "chat_qa", "creative", "multi_turn")
    assert sorted(p.stem for p in builtin_dir().glob("*.jsonl")) == sorted(BUILTIN)


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_suite_loads(name):
    (suite,) = load_suite(name)
    assert isinstance(suite, Suite)
    assert suite.name == name
    assert suite.path == builtin_dir() / f"{name}.jsonl"
    assert suite.description
    assert len(suite.prompts) >= {"code_editing": 7, "multi_turn": 4}.get(name, 6)
    ids = [p.id for p in suite.prompts]
    assert len(set(ids)) == len(ids)
    for p in suite.prompts:
        assert isinstance(p, Prompt)
        assert KEBAB.match(p.id), p.id
        assert p.suite == name
        assert p.text.strip() == p.text and p.text
        assert len(p.note) > 20, p.id  # every built-in prompt says why it is there


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_files_are_plain_jsonl(name):
    lines = (builtin_dir() / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    for line in lines:
        obj = json.loads(line)
        assert set(obj) == ({"id", "turns", "note"} if name == "multi_turn" else {"id", "prompt", "note"})


def test_code_editing_prompts_hold_a_realistic_snippet():
    (suite,) = load_suite("code_editing")
    langs = []
    snippets = set()
    for p in suite.prompts:
        blocks = CODE_BLOCK.findall(p.text)
        assert len(blocks) == 1, p.id
        lang, code = blocks[0]
        langs.append(lang)
        assert 1200 <= len(code) <= 3500, (p.id, len(code))
        assert 25 <= code.count("\n") + 1 <= 60, p.id
        assert "complete updated code only" in p.text and "no explanation" in p.text, p.id
        snippets.add(code)
    assert len(snippets) == len(suite.prompts)  # distinct snippets
    assert langs.count("python") >= 4
    assert {"typescript", "sql", "bash"} <= set(langs)


def test_all_gives_every_builtin_in_order():
    assert [s.name for s in load_suite("all")] == list(BUILTIN)
    assert [s.name for s in load_suite(" ALL ")] == list(BUILTIN)


def test_comma_separated_specs_and_dedup():
    assert [s.name for s in load_suite("code_editing,chat_qa")] == ["code_editing", "chat_qa"]
    assert [s.name for s in load_suite("chat_qa, code-editing,")] == ["chat_qa", "code_editing"]
    assert [s.name for s in load_suite("chat_qa,all")] == [
        "chat_qa", "code_boilerplate", "structured_output", "code_editing", "creative", "multi_turn"]


def test_describe_builtin():
    rows = describe_builtin()
    assert [r[0] for r in rows] == list(BUILTIN)
    for name, n, desc in rows:
        assert n == len(load_suite(name)[0].prompts)
        assert desc and "\n" not in desc


def test_builtin_dir_falls_back_to_meipass(tmp_path, monkeypatch):
    bundled = tmp_path / "specdesk" / "data" / "suites"
    bundled.mkdir(parents=True)
    monkeypatch.setattr(S, "_PKG_DIR", tmp_path / "nowhere")
    monkeypatch.setattr(S.sys, "_MEIPASS", str(tmp_path), raising=False)
    assert builtin_dir() == bundled


def test_missing_builtin_data_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "_PKG_DIR", tmp_path)
    monkeypatch.delattr(S.sys, "_MEIPASS", raising=False)
    assert builtin_dir() == tmp_path / "data" / "suites"
    with pytest.raises(SuiteError) as e:
        load_suite("chat_qa")
    assert "chat_qa" in one_line_error(e) and "reinstall" in str(e.value)


# ------------------------------------------------------------------ user files


def test_text_file_blank_line_separated(tmp_path):
    f = tmp_path / "mine.txt"
    f.write_text(
        "\n"
        "First prompt\n"
        "continues here.\n"
        "\n\n"
        "Second prompt\n"
        "   \n"
        "Third prompt, last line without newline",
        encoding="utf-8",
    )
    (suite,) = load_suite(str(f))
    assert suite.name == "mine" and suite.path == f
    assert [p.text for p in suite.prompts] == [
        "First prompt\ncontinues here.",
        "Second prompt",
        "Third prompt, last line without newline",
    ]
    assert [p.id for p in suite.prompts] == ["mine-2", "mine-6", "mine-8"]
    assert all(p.suite == "mine" and p.note == "" for p in suite.prompts)


def test_text_file_dash_separators_keep_blank_lines(tmp_path):
    f = tmp_path / "code.prompts"
    f.write_text(
        "---\n"
        "Fix this:\n"
        "\n"
        "def f(x):\n"
        "    return x+1\n"
        "---\n"
        "\n"
        "Second one\n"
        "---\n",
        encoding="utf-8",
    )
    suite = load_file(f)
    assert suite.name == "code"
    assert [p.text for p in suite.prompts] == ["Fix this:\n\ndef f(x):\n    return x+1", "Second one"]
    assert [p.id for p in suite.prompts] == ["code-2", "code-8"]


def test_text_file_crlf_and_bom(tmp_path):
    f = tmp_path / "win.txt"
    f.write_bytes("\ufeffone\r\ntwo\r\n\r\nthree\r\n".encode("utf-8"))
    suite = load_file(f)
    assert [p.text for p in suite.prompts] == ["one\ntwo", "three"]
    assert [p.id for p in suite.prompts] == ["win-1", "win-4"]


def test_jsonl_file_defaults(tmp_path):
    f = tmp_path / "set.jsonl"
    f.write_text(
        '{"prompt": "hello"}\n'
        "\n"
        '{"id": "named", "prompt": "  second\\nline  ", "note": "why"}\n'
        '{"prompt": "third", "extra": 1}\n',
        encoding="utf-8",
    )
    (suite,) = load_suite(str(f))
    assert suite.name == "set"
    assert [(p.id, p.text, p.note) for p in suite.prompts] == [
        ("set-1", "hello", ""),
        ("named", "second\nline", "why"),
        ("set-4", "third", ""),
    ]


def test_load_file_explicit_name(tmp_path):
    f = tmp_path / "x.txt"
    f.write_text("a\n\nb\n", encoding="utf-8")
    suite = load_file(f, name="custom")
    assert suite.name == "custom"
    assert [p.id for p in suite.prompts] == ["custom-1", "custom-3"]


def test_user_file_mixed_with_builtin(tmp_path):
    f = tmp_path / "extra.txt"
    f.write_text("only one\n", encoding="utf-8")
    assert [s.name for s in load_suite(f"chat_qa,{f}")] == ["chat_qa", "extra"]
    assert [s.name for s in load_suite(f"{f},{f}")] == ["extra"]


def test_file_with_comma_in_its_name(tmp_path):
    f = tmp_path / "a,b.txt"
    f.write_text("p\n", encoding="utf-8")
    assert [s.name for s in load_suite(str(f))] == ["a,b"]


# ------------------------------------------------------------------ errors


def test_unknown_suite_lists_known_and_mentions_paths():
    with pytest.raises(SpecDeskError) as e:
        load_suite("nonsense")
    msg = one_line_error(e)
    assert "nonsense" in msg
    for name in (*BUILTIN, "all"):
        assert name in msg
    assert "path" in msg


def test_unknown_suite_inside_a_list():
    with pytest.raises(SpecDeskError) as e:
        load_suite("chat_qa,bogus")
    assert "'bogus'" in one_line_error(e)


def test_empty_spec():
    for spec in ("", "  ", ","):
        with pytest.raises(SpecDeskError) as e:
            load_suite(spec)
        assert "code_editing" in one_line_error(e)


def test_file_not_found(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(SpecDeskError) as e:
        load_suite(str(missing))
    msg = one_line_error(e)
    assert "not found" in msg and str(missing) in msg
    with pytest.raises(SpecDeskError) as e:
        load_file(tmp_path / "gone.txt")
    assert "gone.txt" in one_line_error(e)


def test_directory_given(tmp_path):
    d = tmp_path / "adir"
    d.mkdir()
    with pytest.raises(SpecDeskError) as e:
        load_suite(str(d))
    msg = one_line_error(e)
    assert "directory" in msg and str(d) in msg


def test_unreadable_file(tmp_path, monkeypatch):
    f = tmp_path / "locked.txt"
    f.write_text("x\n", encoding="utf-8")
    real = S.read_limited

    def deny(path, limit):  # root reads through chmod 000: the denial is the file system's answer, stood in
        if Path(path) == f:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, limit)

    monkeypatch.setattr(S, "read_limited", deny)
    with pytest.raises(SpecDeskError) as e:
        load_file(f)
    msg = one_line_error(e)
    assert "cannot read" in msg and "locked.txt" in msg and "Permission denied" in msg


@pytest.mark.parametrize("name,content", [
    ("empty.txt", ""),
    ("blank.txt", "\n  \n\n"),
    ("dashes.txt", "---\n\n---\n"),
    ("empty.jsonl", ""),
    ("blank.jsonl", "\n\n   \n"),
])
def test_no_prompts(tmp_path, name, content):
    f = tmp_path / name
    f.write_text(content, encoding="utf-8")
    with pytest.raises(SpecDeskError) as e:
        load_file(f)
    assert one_line_error(e) == f"no prompts in {f}"


def test_malformed_jsonl_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    lines = ['{"prompt": "ok %d"}' % i for i in range(6)] + ['{"prompt": "broken",', '{"prompt": "after"}']
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(SpecDeskError) as e:
        load_file(f)
    msg = one_line_error(e)
    assert msg.startswith(f"{f} line 7: not valid JSON: ")


@pytest.mark.parametrize("line3", [
    '{"id": "x", "text": "wrong key"}',
    '{"prompt": 42}',
    '{"prompt": null}',
])
def test_jsonl_without_prompt_string(tmp_path, line3):
    f = tmp_path / "noprompt.jsonl"
    f.write_text('{"prompt": "a"}\n{"prompt": "b"}\n' + line3 + "\n", encoding="utf-8")
    with pytest.raises(SpecDeskError) as e:
        load_file(f)
    assert one_line_error(e) == f'{f} line 3: no "prompt" string (or "turns" list)'


def test_jsonl_line_not_an_object(tmp_path):
    f = tmp_path / "arr.jsonl"
    f.write_text('{"prompt": "a"}\n["prompt", "b"]\n', encoding="utf-8")
    with pytest.raises(SpecDeskError) as e:
        load_file(f)
    msg = one_line_error(e)
    assert msg.startswith(f"{f} line 2: expected a JSON object")


def test_jsonl_empty_prompt(tmp_path):
    f = tmp_path / "e.jsonl"
    f.write_text('{"prompt": "a"}\n{"prompt": "   \\n  "}\n', encoding="utf-8")
    with pytest.raises(SpecDeskError) as e:
        load_file(f)
    assert one_line_error(e) == f"{f} line 2: empty prompt"


def test_text_empty_prompt_between_separators(tmp_path):
    f = tmp_path / "gap.txt"
    f.write_text("first\n---\n\n   \n---\nsecond\n", encoding="utf-8")
    with pytest.raises(SpecDeskError) as e:
        load_file(f)
    msg = one_line_error(e)
    assert msg.startswith(f"{f} line 3: empty prompt")


def test_jsonl_bad_id_and_note(tmp_path):
    f = tmp_path / "ids.jsonl"
    f.write_text('{"prompt": "a", "id": ""}\n', encoding="utf-8")
    with pytest.raises(SpecDeskError) as e:
        load_file(f)
    assert one_line_error(e).startswith(f'{f} line 1: "id"')
    f.write_text('{"prompt": "a", "note": ["x"]}\n', encoding="utf-8")
    with pytest.raises(SpecDeskError) as e:
        load_file(f)
    assert one_line_error(e).startswith(f'{f} line 1: "note"')


def test_duplicate_ids(tmp_path):
    f = tmp_path / "dup.jsonl"
    f.write_text(
        '{"id": "a", "prompt": "1"}\n{"id": "b", "prompt": "2"}\n\n{"id": "a", "prompt": "3"}\n',
        encoding="utf-8",
    )
    with pytest.raises(SpecDeskError) as e:
        load_file(f)
    msg = one_line_error(e)
    assert msg == f"{f} line 4: duplicate id 'a' (first on line 1)"


def test_explicit_id_colliding_with_a_default_id(tmp_path):
    f = tmp_path / "mix.jsonl"
    f.write_text('{"prompt": "1"}\n{"id": "mix-1", "prompt": "2"}\n', encoding="utf-8")
    with pytest.raises(SpecDeskError) as e:
        load_file(f)
    assert "line 2: duplicate id 'mix-1'" in one_line_error(e)


@pytest.mark.parametrize("suffix", [".txt", ".jsonl"])
def test_non_utf8_file(tmp_path, suffix):
    f = tmp_path / f"latin{suffix}"
    body = '{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n' if suffix == ".jsonl" else "ok\n\ncaf\xe9\n"
    f.write_bytes(body.encode("latin-1"))
    with pytest.raises(SpecDeskError) as e:
        load_file(f)
    msg = one_line_error(e)
    line = 2 if suffix == ".jsonl" else 3
    assert msg.startswith(f"{f} line {line}: not UTF-8")


def test_user_file_named_like_a_builtin_is_rejected(tmp_path):
    f = tmp_path / "chat_qa.txt"
    f.write_text("my own\n", encoding="utf-8")
    assert load_suite(str(f))[0].name == "chat_qa"  # alone it is fine
    with pytest.raises(SpecDeskError) as e:
        load_suite(f"chat_qa,{f}")
    msg = one_line_error(e)
    assert "chat_qa" in msg and str(f) in msg


def test_suite_error_is_a_specdesk_error():
    assert issubclass(SuiteError, SpecDeskError)


# ------------------------------------------------------------------ multi-turn tasks

def test_multi_turn_suite_revises_the_first_answer():
    (suite,) = load_suite("multi_turn")
    for p in suite.prompts:
        assert len(p.messages) == 3, p.id
        assert p.text == p.messages[0] == p.turns[0]
        # turns 2 and 3 ask for a revision of what the chat already holds
        assert all(any(w in m.lower() for w in ("updated", "rewrite", "keep", "now add")) for m in p.messages[1:]), p.id
    # single prompts have one message and no turns
    (single,) = load_suite("chat_qa")
    assert all(p.turns == () and p.messages == (p.text,) for p in single.prompts)


def test_user_jsonl_with_turns(tmp_path):
    f = tmp_path / "chats.jsonl"
    f.write_text('{"id": "a", "turns": ["write x", " now change x "]}\n{"turns": ["only one"]}\n{"prompt": "plain"}\n')
    (suite,) = load_suite(str(f))
    a, one, plain = suite.prompts
    assert a.messages == ("write x", "now change x") and a.text == "write x"
    assert one.messages == ("only one",) and one.turns == ()  # one turn is a single prompt
    assert plain.messages == ("plain",)


@pytest.mark.parametrize("line, needle", [
    ('{"turns": []}', '"turns" must be a non-empty list of strings'),
    ('{"turns": "abc"}', '"turns" must be a non-empty list of strings'),
    ('{"turns": ["a", 3]}', '"turns" must be a non-empty list of strings'),
    ('{"turns": ["a", "  "]}', "turn 2 is empty"),
    ('{"turns": ["a"], "prompt": "b"}', 'not both'),
    ('{"id": "x"}', 'no "prompt" string (or "turns" list)'),
])
def test_bad_turns_are_one_line_errors(tmp_path, line, needle):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "fine"}\n' + line + "\n")
    with pytest.raises(SuiteError) as e:
        load_suite(str(f))
    msg = one_line_error(e)
    assert needle in msg and "line 2" in msg and str(f) in msg


@pytest.mark.parametrize("line2,words", [
    ("[" * 100_000, "nested too deep"),
    ('{"prompt": "a", "n": ' + "9" * 5000 + "}", "a number too long"),
    ('{"prompt": "x\\ud800y"}', "lone surrogate"),  # JSON's escape for half a UTF-16 pair: no tokenizer takes it
    ('{"turns": ["ok", "x\\udfffy"]}', "lone surrogate"),
])
def test_jsonl_lines_json_reads_but_no_prompt_can_use(tmp_path, line2, words):
    """Lines that crashed the run with a traceback (RecursionError, ValueError) or failed
    only after the models loaded (a lone surrogate reached the tokenizer): one line, naming it."""
    f = tmp_path / "odd.jsonl"
    f.write_text('{"prompt": "fine"}\n' + line2 + "\n", encoding="utf-8")
    with pytest.raises(SpecDeskError) as e:
        load_file(f)
    msg = one_line_error(e)
    assert msg.startswith(f"{f} line 2: ") and words in msg, msg


def test_a_fifo_or_a_device_as_a_suite_is_refused_not_read(tmp_path):
    """A FIFO blocked the run for ever and a link to /dev/zero read until memory ran out."""
    import os

    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.txt"
    zero.symlink_to("/dev/zero")
    for f in (fifo, zero):
        with pytest.raises(SpecDeskError) as e:
            load_file(f)
        assert one_line_error(e) == f"cannot read {f}: not a regular file"


def test_a_json_file_is_a_list_of_prompts_not_text(tmp_path):
    """A .json suite was read as plain text: a list of three prompts became one prompt
    of brackets and quotes, benchmarked without a word."""
    f = tmp_path / "mine.json"
    f.write_text('[\n  "Write a haiku.",\n  {"id": "sum", "prompt": "Sum a list in Python."},\n'
                 '  {"turns": ["Write add(a, b).", "Add type hints."]}\n]\n')
    (s,) = load_suite(str(f))
    assert [p.id for p in s.prompts] == ["mine-1", "sum", "mine-3"]
    assert s.prompts[0].text == "Write a haiku." and s.prompts[2].turns == ("Write add(a, b).", "Add type hints.")
    g = tmp_path / "wrapped.json"
    g.write_text(json.dumps({"prompts": ["One.", "Two."]}))
    assert [p.text for p in load_suite(str(g))[0].prompts] == ["One.", "Two."]


@pytest.mark.parametrize("content, needle", [
    ('{"prompt": "one object"}', "expected a JSON list of prompts"),
    ('["ok", 3]', "item 2: expected a JSON object, got int"),
    ('["ok", ""]', "item 2: empty prompt"),
    ('[{"id": "a", "prompt": "x"}, {"id": "a", "prompt": "y"}]', "item 2: duplicate id 'a' (first on item 1)"),
    ('["unclosed', "not valid JSON"),
    ("[]", "no prompts in"),
])
def test_a_bad_json_suite_is_one_line_naming_the_item(tmp_path, content, needle):
    f = tmp_path / "bad.json"
    f.write_text(content)
    with pytest.raises(SuiteError) as e:
        load_suite(str(f))
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".csv"])
def test_data_formats_are_refused_not_read_as_text(tmp_path, suffix):
    f = tmp_path / f"prompts{suffix}"
    f.write_text("- prompt: Write a haiku.\n- prompt: Sum a list.\n")
    with pytest.raises(SuiteError, match=f"a {suffix} file is not a prompt suite"):
        load_suite(str(f))
