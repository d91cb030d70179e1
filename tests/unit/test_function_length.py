"""No function in the package is over 100 lines: a function that long does several
jobs, and the next change to one of them has to read all of them. Qt layout code
too: a window or a dialog builds one section per method (``_build_*``), in the order
its widgets are created."""

from __future__ import annotations

import ast
from pathlib import Path

import specdesk

LIMIT = 100
ROOT = Path(specdesk.__file__).parent


def long_functions(root: Path = ROOT, limit: int = LIMIT) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_over_100_lines():
    assert long_functions() == []


def test_the_check_sees_a_long_function_qt_layout_code_included(tmp_path):
    (tmp_path / "ui").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "long.py").write_text(f"def run():\n{body}\n")
    (tmp_path / "ui" / "window.py").write_text(f"class W:\n    def _build(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n")
    (tmp_path / "short.py").write_text("def run():\n    return 1\n")
    assert long_functions(tmp_path) == ["long.py:1 run (101 lines)", "ui/window.py:2 _build (101 lines)"]
