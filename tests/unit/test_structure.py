"""Bounds on the package's structure that a review would miss one change at a time
(the function length has its own test, test_function_length.py):

- target alone is the registry's baseline flag, not a name spelled in checks:
  ``== "none"`` and ``!= "none"`` appear at most 3 times in app/ (the issue's own
  measure: ``grep -rn '== "none"\\|!= "none"' app/``);
- a proposer's name and its preset configurations are written once, on its registry
  row (the names that are no draft source: ``ngram+history``, ``hybrid``), and no
  module compares a value with any proposer's or source's name, or keeps a table of
  them: a source's own fields answer (its code, label, colour, is_model);
- above the library, the MTP heads are named in code (identifiers and strings, not
  comments or docstrings) only in the MTP modules themselves and the session's table
  of draft sources: every other module asks the draft-source interface;
- ui/ (its startup/ aside) holds only modules that use Qt, and none reaches into the
  session's auto controller or another object's _private members;
- no module replaces another object's method with a function or a lambda at run time
  (a call rerouted that way is invisible where it is made);
- tools/README.md names every file in tools/, and no file that is not there.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from source_scan import docstring_ids

import specdesk
from specdesk.speculative.proposers import registry

APP = Path(specdesk.__file__).parent
ROOT = APP.parents[1]
NONE_CHECKS = re.compile(r'== "none"|!= "none"')
MAX_NONE_CHECKS = 3


def _py(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py"))


def none_checks(root: Path = APP) -> list[str]:
    return [f"{p.relative_to(root)}:{i}" for p in _py(root)
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if NONE_CHECKS.search(line)]


def test_target_alone_is_a_flag_not_a_spelled_name():
    found = none_checks()
    assert len(found) <= MAX_NONE_CHECKS, "use registry.BASELINE or the baseline flag:\n" + "\n".join(found)


# -- proposer names ----------------------------------------------------------------------

def names_outside_the_registry(root: Path = APP, kinds=registry.KINDS) -> list[str]:
    """String constants (docstrings aside) that are a kind's name that is no draft
    source (those are also the algorithm's words), or a configuration of a kind
    (``draft:k=2``, ``ngram:auto``), anywhere but in the registry."""
    sources = {s for k in kinds for s in k.sources}
    only = {k.name for k in kinds if k.name not in sources and not k.baseline}
    config = re.compile(r"^(%s):(k=|auto|p_min|p-min|history)" % "|".join(re.escape(k.name) for k in kinds))
    found = []
    for path in _py(root):
        if path.name == "registry.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = docstring_ids(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
                    and (node.value in only or config.match(node.value))):
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.value!r}")
    return found


def test_proposer_names_and_presets_are_written_once_in_the_registry():
    assert names_outside_the_registry() == []


def _all_names(kinds=registry.KINDS) -> set[str]:
    from specdesk.speculative.proposers.base import SOURCES

    return ({k.name for k in kinds} | set(SOURCES)) - {k.name for k in kinds if k.baseline}


def _const_strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _literal(node: ast.AST) -> bool:
    """A table's value: a constant, or a tuple of them (a code, a colour and a label)."""
    return isinstance(node, ast.Constant) or (isinstance(node, ast.Tuple) and all(isinstance(e, ast.Constant) for e in node.elts))


def name_comparisons(root: Path = APP, names: set[str] | None = None) -> list[str]:
    """``x == "mtp"``, ``x in ("draft", "translated")``, ``{"draft": "d", "ngram": "n"}``:
    a value compared with a proposer's or source's name, or a table of two or more of
    them, outside the registry and the table of sources (a role compared with "draft"
    is a role, not a source: its other side names a role)."""
    names = _all_names() if names is None else names
    found = []
    for path in _py(root):
        if path.name == "registry.py" or (path.name == "base.py" and path.parent.name == "proposers"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                hit = [v for side in sides for v in _const_strings(side) if v in names]
                if hit and not any("role" in ast.unparse(side) for side in sides):
                    found.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(node)[:80]}")
            elif isinstance(node, ast.Dict) and all(_literal(v) for v in node.values):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
                if sum(k in names for k in keys) >= 2:
                    found.append(f"{path.relative_to(root)}:{node.lineno} a table keyed by names")
    return found


def test_no_module_compares_a_value_with_a_source_or_proposer_name():
    assert name_comparisons() == [], "ask the source (Source.of(x).is_model, .code, .colour) or the registry row"


def test_the_comparison_check_sees_each_way_of_spelling_a_name(tmp_path):
    (tmp_path / "m.py").write_text(
        "def f(x, role):\n"
        "    if x == 'mtp' or x in ('draft', 'ngram'):\n"
        "        return {'draft': 'd', 'history': 'h'}\n"
        "    return role == 'draft'\n")
    assert [f.split(" ")[0] for f in name_comparisons(tmp_path)] == ["m.py:2", "m.py:2", "m.py:3"]


_MTP = re.compile(r"mtp|nextn", re.I)
ABOVE_LIBRARY = ("session", "bench", "server", "cli", "ui")


def mtp_mentions(root: Path = APP) -> dict[str, list[int]]:
    """Modules above the library that name the MTP heads in code (an identifier, an
    imported name or a string that is not a docstring), but the MTP modules themselves."""
    found: dict[str, list[int]] = {}
    for layer in ABOVE_LIBRARY:
        for path in _py(root / layer):
            if path.stem == "mtp":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            skip = docstring_ids(tree)
            for node in ast.walk(tree):
                words: list[str] = []
                if isinstance(node, ast.Name):
                    words = [node.id]
                elif isinstance(node, ast.Attribute):
                    words = [node.attr]
                elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.arg)):
                    words = [getattr(node, "name", None) or getattr(node, "arg", "")]
                elif isinstance(node, ast.alias):
                    words = [node.name, node.asname or ""]
                elif isinstance(node, ast.ImportFrom):
                    words = [node.module or ""]
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                    words = [node.value]
                if any(_MTP.search(w) for w in words):
                    found.setdefault(str(path.relative_to(root)), []).append(getattr(node, "lineno", 0))
    return found


def test_the_mtp_heads_are_named_only_by_their_own_modules_and_the_table_of_sources():
    assert sorted(mtp_mentions()) == ["session/source_table.py"]


def test_the_mtp_check_sees_code_not_comments(tmp_path):
    (tmp_path / "ui").mkdir()
    (tmp_path / "ui" / "a.py").write_text('"""About MTP heads."""\n# the MTP heads\nx = 1\n')
    (tmp_path / "ui" / "b.py").write_text("from ..session.mtp import TargetHeads\n")
    (tmp_path / "ui" / "mtp.py").write_text("mtp = 1\n")
    assert sorted(mtp_mentions(tmp_path)) == ["ui/b.py"]


# -- ui/ holds the window ------------------------------------------------------------------------

def ui_modules_without_qt(root: Path = APP / "ui") -> list[str]:
    out = []
    for path in _py(root):
        if "startup" in path.relative_to(root).parts or path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        mods = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        if not any(m.startswith(("PySide6", "pyqtgraph")) for m in mods):
            out.append(path.name)
    return out


def private_reaches(root: Path = APP / "ui") -> list[str]:
    """``x.auto`` on a session, or ``other._member``: what the window must not reach."""
    found = []
    for path in _py(root):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            owner = ast.unparse(node.value)
            private = (node.attr.startswith("_") and not node.attr.startswith("__")
                       and owner not in ("self", "cls", "super()", "os", "sys"))
            if private or (node.attr == "auto" and "session" in owner):
                found.append(f"{path.relative_to(root)}:{node.lineno} {owner}.{node.attr}")
    return found


def test_ui_holds_only_qt_modules():
    assert ui_modules_without_qt() == [], "rules and stores without Qt belong below ui/"


def test_ui_reaches_no_private_member_and_not_into_auto():
    assert private_reaches() == [], "ask the session (or the widget) through a public method"


def test_the_name_check_sees_a_list_of_names(tmp_path):
    (tmp_path / "tab.py").write_text('"""Offers hybrid."""\nPRESETS = ["draft:k=2", "hybrid", "ngram"]\nNOTE = "draft: none"\n')
    assert names_outside_the_registry(tmp_path) == ["tab.py:2 'draft:k=2'", "tab.py:2 'hybrid'"]


# -- no call rerouted at run time --------------------------------------------------------------

def reroutes(root: Path = APP) -> list[str]:
    """``other.name = lambda ...`` or ``other.name = obj.method``: an attribute of an
    object other than ``self`` set to a function. ``method`` is a name the package
    defines as a function and never assigns as data (``self.method = ...``)."""
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in _py(root)}
    defs: set[str] = set()
    data: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        data.add(t.attr)
    methods = defs - data
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign):
                continue
            value = node.value
            function = isinstance(value, ast.Lambda) or (isinstance(value, ast.Attribute) and value.attr in methods)
            for t in node.targets:
                if function and isinstance(t, ast.Attribute) and not (isinstance(t.value, ast.Name) and t.value.id == "self"):
                    found.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(node)[:80]}")
    return found


def test_no_module_replaces_another_objects_method_at_run_time():
    assert reroutes() == [], "pass the function in (a constructor argument, a signal) instead"


def test_the_reroute_check_sees_both_kinds(tmp_path):
    (tmp_path / "w.py").write_text(
        "class W:\n"
        "    def chat_steps(self): ...\n"
        "    def build(self):\n"
        "        self.chats.steps_of = self.serve.chat_steps\n"
        "        self.banner.mousePressEvent = lambda e: None\n"
        "        self.queue.capacity = self.settings.queue\n"
        "        self.route = self.serve.chat_steps\n")
    assert [f.split(" ")[0] for f in reroutes(tmp_path)] == ["w.py:4", "w.py:5"]


# -- tools ---------------------------------------------------------------------------------

def undocumented_tools(tools: Path = ROOT / "tools") -> tuple[list[str], list[str]]:
    """(files of tools/ the README does not list, files it lists that are not there)."""
    listed = re.findall(r"^- `([^`]+)`", (tools / "README.md").read_text(encoding="utf-8"), re.M)
    present = sorted(p.name for p in tools.iterdir() if p.is_file() and p.name != "README.md"
                     and not p.name.endswith(".pyc"))
    return [f for f in present if f not in listed], [f for f in listed if f not in present]


def test_every_file_in_tools_is_documented_in_its_readme():
    missing, gone = undocumented_tools()
    assert missing == [], f"say in tools/README.md what these measure and when to run them: {missing}"
    assert gone == [], f"tools/README.md lists files that are not in tools/: {gone}"


def test_the_tools_check_sees_an_undocumented_file(tmp_path):
    (tmp_path / "README.md").write_text("- `a.py`: measures a; run it after changing a.\n- `gone.py`: was here.\n")
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    assert undocumented_tools(tmp_path) == (["b.py"], ["gone.py"])
