"""The algorithm holds no user-facing sentence: what users read is rendered by
specdesk.session.text from typed results (an import contract keeps the text module
out of the core; this test keeps sentences from being written there directly).

One exception: a proposer kind's ``label=`` on its registry row, a name of a few
words that the app and the CLI's help offer it under (the row is the one place a
kind is written, label included)."""

import ast
from pathlib import Path

from source_scan import docstring_ids

import specdesk.speculative

CORE = Path(specdesk.speculative.__file__).parent
MAX_WORDS = 5  # decision reasons and source names are labels of a few words


def _in_raise(tree: ast.AST) -> set[int]:
    """Strings inside a raise: errors for programmers misusing the API (the session
    checks every user input first, with its own messages)."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise):
            ids.update(id(n) for n in ast.walk(node))
    return ids


def _labels(tree: ast.AST) -> set[int]:
    """A kind's label on a registry row: ``ProposerKind(..., label="...")``."""
    return {id(kw.value) for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "ProposerKind" for kw in node.keywords if kw.arg == "label"}


def sentences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = docstring_ids(tree) | _in_raise(tree) | _labels(tree)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if len(text.split()) > MAX_WORDS:
            out.append(f"{path.name}:{node.lineno}: {text[:60]!r}")
    return out


def test_the_core_holds_no_sentence():
    found = [s for p in sorted(CORE.rglob("*.py")) for s in sentences(p)]
    assert not found, "sentences for users belong in specdesk.session.text:\n" + "\n".join(found)


def test_the_check_finds_a_sentence(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('def f(x):\n    """A docstring may say anything at all."""\n'
                   '    return f"the draft paid off {x} times on this machine"\n')
    assert sentences(bad) and "bad.py:3" in sentences(bad)[0]


def test_only_a_kind_s_label_is_exempt(tmp_path):
    row = tmp_path / "row.py"
    row.write_text('ProposerKind("x", label="N-gram lookup, earlier turns too (no draft model)")\n'
                   'Other("x", label="a sentence of many words is prose here")\n')
    assert [s.split(":")[1] for s in sentences(row)] == ["2"]
