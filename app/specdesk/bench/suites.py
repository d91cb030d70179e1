"""Benchmark prompt suites: the built-in ones shipped in data/suites, and user files.

A suite is a list of prompts, each sent as one user chat message, or of multi-turn
tasks: several user messages sent one after the other in the same chat, each answered
before the next (the runner replays the earlier turns, answers included, as the
app's chat does). Built-in suites are JSONL files (one {"id", "prompt", "note"} or
{"id", "turns", "note"} object a line). A user may pass:

- a ``.jsonl`` file: one JSON object a line with a "prompt" string or a "turns"
  list of strings (the user's messages, in order), and optionally "id" and "note"
  (ids default to ``<file stem>-<line number>``); blank lines are skipped;
- a ``.json`` file: a list of such objects, or of prompt strings, or an object
  whose "prompts" is that list (ids default to ``<file stem>-<item number>``);
- a ``.yaml``, ``.csv`` and other data formats: refused, not read as text;
- any other file, read as plain text: prompts separated by blank lines, so a prompt
  may span several lines. If the file contains a line that is exactly ``---``, then
  ``---`` lines are the only separators and prompts may contain blank lines (code,
  paragraphs). Ids are ``<file stem>-<first line of the prompt>``.

Every problem raises :class:`SuiteError` (a SpecDeskError) with a one-line message
that names the file and, where it applies, the line.

Pure Python: no Qt, no llama_cpp.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from specdesk.errors import SpecDeskError
from specdesk.files import read_limited

__all__ = [
    "BUILTIN",
    "Prompt",
    "Suite",
    "SuiteError",
    "builtin_dir",
    "describe_builtin",
    "load_file",
    "load_suite",
]


class SuiteError(SpecDeskError):
    """A prompt suite that cannot be found, read or parsed."""


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str  # the first (or only) user message
    suite: str
    note: str = ""
    # A multi-turn task: every user message in order (the first is ``text``);
    # empty for a single prompt.
    turns: tuple[str, ...] = ()

    @property
    def messages(self) -> tuple[str, ...]:
        """The user's messages, one per turn (a single prompt has one)."""
        return self.turns or (self.text,)


@dataclass(frozen=True)
class Suite:
    name: str
    prompts: tuple[Prompt, ...]
    path: Path | None
    description: str

    def __len__(self) -> int:
        return len(self.prompts)


BUILTIN: tuple[str, ...] = (
    "code_boilerplate",
    "structured_output",
    "code_editing",
    "chat_qa",
    "creative",
    "multi_turn",
)

_DESCRIPTIONS: dict[str, str] = {
    "code_boilerplate": "boilerplate code (dataclasses, CLI skeletons, CRUD endpoints, DDL): "
    "predictable tokens, speculation usually pays",
    "structured_output": "JSON/YAML from a description or pasted data: rigid syntax and copied values",
    "code_editing": "small edits to a 45-60 line snippet, answered with the whole code: "
    "the output repeats the prompt, where n-gram lookup shines",
    "chat_qa": "short factual and explanatory answers in prose: moderate acceptance",
    "creative": "poems, micro-stories, brainstorming: high-entropy text where speculation helps least",
    "multi_turn": "three-turn chats where turns 2 and 3 revise the first answer (code, a document): "
    "the earlier answers are replayed, so history lookup can copy from them",
}

ALL = "all"
_SEPARATOR = "---"
MAX_SUITE_BYTES = 64 << 20  # a prompt file of 64 MiB is millions of prompts: beyond it, a wrong file
_PATH_SUFFIXES = (".jsonl", ".txt", ".json", ".md", ".prompts", ".yaml", ".yml", ".csv")

_PKG_DIR = Path(__file__).resolve().parent.parent  # app/specdesk


def builtin_dir() -> Path:
    """The folder holding the built-in suite files.

    The package's data/suites (checkout, wheel, or a PyInstaller bundle that collected
    specdesk's package data), else the copy a bundle may keep under sys._MEIPASS.
    When none exists, the package path is returned, and loading names it as missing.
    """
    candidates = [_PKG_DIR / "data" / "suites"]
    meipass = getattr(sys, "_MEIPASS", None)
    if meipass:
        base = Path(meipass)
        candidates += [
            base / "specdesk" / "data" / "suites",
            base / "data" / "suites",
            base / "suites",
        ]
    for c in candidates:
        if c.is_dir():
            return c
    return candidates[0]


def _err(message: str) -> SuiteError:
    """A SuiteError whose message is guaranteed to fit on one line."""
    return SuiteError(message.replace("\r", " ").replace("\n", " "))


def _read_text(path: Path) -> str:
    if not path.exists():
        raise _err(f"suite file not found: {path}")
    if path.is_dir():
        raise _err(f"{path} is a directory, not a prompt file")
    try:
        data = read_limited(path, MAX_SUITE_BYTES)  # not a FIFO (a read that never returns) nor a device
    except OSError as exc:
        raise _err(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise _err(
            f"{path} line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save it as UTF-8"
        ) from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _json_value(path: Path, where: str, raw: str):
    """``raw`` parsed as JSON, or one SuiteError naming ``where`` (a line, or the file)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _err(f"{path}{where}: not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})"
                   if not where else f"{path}{where}: not valid JSON: {exc.msg} (column {exc.colno})") from exc
    except RecursionError as exc:
        raise _err(f"{path}{where}: not valid JSON: nested too deep") from exc
    except ValueError as exc:  # Python's own limit: an integer of over 4300 digits
        raise _err(f"{path}{where}: not valid JSON: a number too long to read") from exc


def _prompt_from(path: Path, where: str, obj, default_id: str, name: str, seen: dict[str, str],
                 strings: bool = False) -> Prompt:
    """One prompt or multi-turn task from a JSON value: an object with "prompt" or
    "turns" (and optionally "id" and "note"), or, with ``strings`` (an item of a .json
    list), a plain string. ``where`` (" line 3", " item 2") goes into every error."""
    if strings and isinstance(obj, str):
        obj = {"prompt": obj}
    if not isinstance(obj, dict):
        raise _err(f"{path}{where}: expected a JSON object, got {type(obj).__name__}")
    turns: tuple[str, ...] = ()
    if "turns" in obj:
        raw_turns = obj["turns"]
        if "prompt" in obj:
            raise _err(f'{path}{where}: give "prompt" or "turns", not both')
        if not isinstance(raw_turns, list) or not raw_turns or not all(isinstance(t, str) for t in raw_turns):
            raise _err(f'{path}{where}: "turns" must be a non-empty list of strings')
        empty = next((i for i, t in enumerate(raw_turns, start=1) if not t.strip()), None)
        if empty is not None:
            raise _err(f"{path}{where}: turn {empty} is empty")
        turns = tuple(t.strip() for t in raw_turns)
        prompt = turns[0]
        if len(turns) == 1:
            turns = ()
    else:
        prompt = obj.get("prompt")
        if not isinstance(prompt, str):
            raise _err(f'{path}{where}: no "prompt" string (or "turns" list)')
        if not prompt.strip():
            raise _err(f"{path}{where}: empty prompt")
    for t in (prompt, *turns):
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as exc:  # JSON's \ud800 escape: a lone surrogate, no tokenizer takes it
            raise _err(f"{path}{where}: the prompt holds a lone surrogate (\\u{ord(t[exc.start]):04x}): "
                       "not text") from exc
    pid = obj.get("id", None)
    if pid is None:
        pid = default_id
    elif isinstance(pid, int) and not isinstance(pid, bool):
        pid = str(pid)
    elif not isinstance(pid, str) or not pid.strip():
        raise _err(f'{path}{where}: "id" must be a non-empty string')
    pid = pid.strip()
    note = obj.get("note", "")
    if note is None:
        note = ""
    if not isinstance(note, str):
        raise _err(f'{path}{where}: "note" must be a string')
    if pid in seen:
        raise _err(f"{path}{where}: duplicate id {pid!r} (first on{seen[pid]})")
    seen[pid] = where
    return Prompt(id=pid, text=prompt.strip(), suite=name, note=note.strip(), turns=turns)


def _parse_jsonl(path: Path, text: str, name: str) -> list[Prompt]:
    prompts: list[Prompt] = []
    seen: dict[str, str] = {}
    for lineno, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        where = f" line {lineno}"
        prompts.append(_prompt_from(path, where, _json_value(path, where, raw), f"{name}-{lineno}", name, seen))
    return prompts


def _parse_json(path: Path, text: str, name: str) -> list[Prompt]:
    """A .json file: a list of prompts (strings, or objects as a .jsonl line holds), or
    an object whose "prompts" is such a list. Read as text before, a JSON list became
    one prompt of brackets and quotes, benchmarked without a word."""
    data = _json_value(path, "", text)
    items = data.get("prompts") if isinstance(data, dict) else data
    if isinstance(data, dict) and not isinstance(items, list):
        got = (f'its "prompts" is {type(items).__name__ if items is not None else "null"}' if "prompts" in data
               else 'it is an object with no "prompts"')
        raise _err(f'{path}: expected a JSON list of prompts or an object with a "prompts" list; {got}')
    if not isinstance(items, list):
        raise _err(f'{path}: expected a JSON list of prompts (or an object with a "prompts" list), '
                   f"got {type(data).__name__}")
    seen: dict[str, str] = {}
    return [_prompt_from(path, f" item {i}", obj, f"{name}-{i}", name, seen, strings=True)
            for i, obj in enumerate(items, start=1)]


# Suites in these formats would be read as plain text, line by line: refused instead.
_UNREAD_SUFFIXES = (".yaml", ".yml", ".csv", ".tsv", ".parquet", ".toml", ".xml", ".xlsx")


def _parse_text(path: Path, text: str, name: str) -> list[Prompt]:
    lines = text.split("\n")
    dashed = any(line.strip() == _SEPARATOR for line in lines)
    # Each block: (line number of the separator before it, 0 for none; [(line number, line)]).
    blocks: list[tuple[int, list[tuple[int, str]]]] = []
    current: list[tuple[int, str]] = []
    last_sep = 0
    for lineno, line in enumerate(lines, start=1):
        if (line.strip() == _SEPARATOR) if dashed else (not line.strip()):
            if dashed or current:
                blocks.append((last_sep, current))
            current = []
            last_sep = lineno
            continue
        current.append((lineno, line.rstrip()))
    blocks.append((last_sep, current))

    prompts: list[Prompt] = []
    any_text = any(ln.strip() for _, block in blocks for _, ln in block)
    for i, (sep_line, block) in enumerate(blocks):
        filled = [(n, ln) for n, ln in block if ln.strip()]
        if not filled:
            # Blank space before the first `---` or after the last one is fine;
            # nothing between two separators is a mistake (in a file that has
            # prompts at all: one with none is reported as "no prompts").
            if dashed and any_text and 0 < i < len(blocks) - 1:
                raise _err(f"{path} line {sep_line + 1}: empty prompt between two '---' separators")
            continue
        body = "\n".join(ln for _, ln in block).strip()
        prompts.append(Prompt(id=f"{name}-{filled[0][0]}", text=body, suite=name))
    return prompts


def load_file(path: Path, name: str | None = None) -> Suite:
    """A suite from a .jsonl file or a plain-text prompt file; its name is the stem."""
    path = Path(os.path.expanduser(str(path)))
    name = name or path.stem
    suffix = path.suffix.lower()
    if suffix in _UNREAD_SUFFIXES:
        raise _err(f"{path}: a {suffix} file is not a prompt suite: use .jsonl (one JSON object a line), "
                   ".json (a list of prompts) or plain text")
    text = _read_text(path)
    if suffix == ".jsonl":
        prompts = _parse_jsonl(path, text, name)
    elif suffix == ".json":
        prompts = _parse_json(path, text, name)
    else:
        prompts = _parse_text(path, text, name)
    if not prompts:
        raise _err(f"no prompts in {path}")
    return Suite(
        name=name,
        prompts=tuple(prompts),
        path=path,
        description=f"prompts from {path}",
    )


@lru_cache(maxsize=None)
def _load_builtin_cached(directory: str, name: str) -> Suite:
    path = Path(directory) / f"{name}.jsonl"
    if not path.is_file():
        raise _err(f"built-in suite {name!r} is missing ({path}); reinstall SpecDesk")
    suite = load_file(path, name)
    return Suite(name=name, prompts=suite.prompts, path=path, description=_DESCRIPTIONS[name])


def _load_builtin(name: str) -> Suite:
    return _load_builtin_cached(str(builtin_dir()), name)


def _builtin_name(spec: str) -> str | None:
    key = spec.strip().lower().replace("-", "_")
    return key if key in BUILTIN else None


def _looks_like_path(spec: str) -> bool:
    return (
        "/" in spec
        or "\\" in spec
        or spec.startswith("~")
        or Path(spec).suffix.lower() in _PATH_SUFFIXES
    )


def _unknown(spec: str) -> SuiteError:
    known = ", ".join((*BUILTIN, ALL))
    return _err(f"unknown suite {spec!r}: known suites are {known}; a path to a .jsonl, .json or .txt prompt file is also accepted")


def _load_one(spec: str) -> list[Suite]:
    if spec.lower() == ALL:
        return [_load_builtin(n) for n in BUILTIN]
    builtin = _builtin_name(spec)
    if builtin is not None:
        return [_load_builtin(builtin)]
    path = Path(os.path.expanduser(spec))
    if path.exists() or _looks_like_path(spec):
        return [load_file(path)]
    raise _unknown(spec)


def load_suite(spec: str) -> list[Suite]:
    """Suites for a --suite value: a built-in name, "all", a file path, or a
    comma-separated list of those. Repeats are loaded once; two different suites
    with the same name (e.g. a user file named like a built-in) are an error."""
    spec = (spec or "").strip()
    if not spec or not spec.strip(", "):
        raise _err(f"no suite given: known suites are {', '.join((*BUILTIN, ALL))}; a path to a prompt file is also accepted")
    whole = Path(os.path.expanduser(spec))
    if "," in spec and whole.is_file():  # a file whose name contains a comma
        parts = [spec]
    else:
        parts = [p.strip() for p in spec.split(",") if p.strip()]
    out: list[Suite] = []
    by_name: dict[str, Suite] = {}
    for part in parts:
        for suite in _load_one(part):
            prev = by_name.get(suite.name)
            if prev is not None:
                if _same_source(prev, suite):
                    continue
                raise _err(
                    f"two suites are named {suite.name!r} ({_source(prev)} and {_source(suite)}); rename one file"
                )
            by_name[suite.name] = suite
            out.append(suite)
    return out


def _source(suite: Suite) -> str:
    return str(suite.path) if suite.path is not None else suite.name


def _same_source(a: Suite, b: Suite) -> bool:
    if a.path is None or b.path is None:
        return a is b
    try:
        return a.path.resolve() == b.path.resolve()
    except OSError:
        return a.path == b.path


def describe_builtin() -> list[tuple[str, int, str]]:
    """(name, number of prompts, description) of each built-in suite, in order."""
    return [(s.name, len(s.prompts), s.description) for s in (_load_builtin(n) for n in BUILTIN)]
