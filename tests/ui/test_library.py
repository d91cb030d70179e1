"""The model library in the app: discovery, the draft picker's pairing, and a Hub
download through the real client against the local stand-in Hub."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from hubserver import FakeHub
from specdesk.ui.main_window import MainWindow


@pytest.fixture
def library_env(tmp_path, monkeypatch, smol_path, smol_draft_path, qwen_draft_path):
    """A home with LM Studio models, and models/ with the SmolLM2 pair and a Qwen draft."""
    home = tmp_path / "home"
    lms = home / ".lmstudio" / "models" / "qwen" / "coder-gguf"
    lms.mkdir(parents=True)
    os.symlink(qwen_draft_path, lms / "qwen-draft.gguf")
    models = tmp_path / "models"
    models.mkdir()
    os.symlink(smol_path, models / "smol.gguf")
    os.symlink(smol_draft_path, models / "smol-q4_0.gguf")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SPECDESK_MODELS_DIR", str(models))
    monkeypatch.setenv("SPECDESK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    return tmp_path


@pytest.fixture
def window(qtbot, library_env):
    w = MainWindow(library_env / "data", autoload=False)
    w.show()
    yield w
    w.close()


def _scanned(qtbot, w):
    with qtbot.waitSignal(w.library.scanned, timeout=60_000) as b:
        w.library.rescan(use_cache=False)
    return b.args[0]


def test_library_lists_models_from_each_place(qtbot, window):
    entries = _scanned(qtbot, window)
    by_source = {e.path.name: e.sources for e in entries}
    assert "lmstudio" in by_source["qwen-draft.gguf"]
    assert "models" in by_source["smol.gguf"]
    t = window.library.table
    assert t.rowCount() == len(entries)
    names = [t.item(r, 7).text() for r in range(t.rowCount())]
    assert any(n.endswith("qwen-draft.gguf") for n in names)
    window.library.select_path(Path(entries[0].path))
    assert "architecture" in window.library.details.toPlainText()


def test_draft_picker_greys_out_incompatible_models_with_the_reason(qtbot, window, library_env):
    _scanned(qtbot, window)
    smol = (library_env / "models" / "smol.gguf").resolve()
    combo = window.target_combo
    with qtbot.waitSignal(window.pairing_checked, timeout=120_000, check_params_cb=lambda a: a[0] == smol) as b:
        combo.setCurrentIndex(combo.findData(str(smol)))
    res = b.args[0][1]
    combo = window.draft_combo
    texts = [combo.itemText(i) for i in range(combo.count())]
    # the compatible draft comes first (after "no draft") and can be chosen
    assert combo.itemData(1).endswith("smol_q4_0.gguf") or combo.itemData(1).endswith("smol-q4_0.gguf")
    assert combo.model().item(1).isEnabled()
    # the Qwen draft is listed, greyed out, with its reason
    i = next(i for i, t in enumerate(texts) if "qwen" in t.lower())
    assert not combo.model().item(i).isEnabled()
    assert "special tokens differ" in combo.itemData(i, Qt.ItemDataRole.ToolTipRole)
    assert [c.compatible for c in res].count(False) >= 1


def test_draft_picker_offers_smaller_models_with_another_vocabulary_as_translated(qtbot, window, library_env):
    """The Qwen model as target: no library model shares its vocabulary, yet the
    picker is not empty: both SmolLM2 files can draft translated, and say so."""
    _scanned(qtbot, window)
    qwen = (library_env / "home" / ".lmstudio" / "models" / "qwen" / "coder-gguf" / "qwen-draft.gguf").resolve()
    combo = window.target_combo
    with qtbot.waitSignal(window.pairing_checked, timeout=120_000,
                          check_params_cb=lambda a: a[0].resolve() == qwen.resolve()) as b:
        combo.setCurrentIndex(combo.findData(str(qwen)))
    res = b.args[0][1]
    assert [c.kind for c in res] == ["translated", "translated"]
    combo = window.draft_combo
    for i in range(1, combo.count()):
        assert combo.model().item(i).isEnabled(), combo.itemText(i)
        assert combo.itemText(i).endswith("translated")
        assert "re-tokenized" in combo.itemData(i, Qt.ItemDataRole.ToolTipRole)
    assert combo.count() == 3


def test_use_as_target_from_the_library_loads_with_a_compatible_draft(qtbot, window, library_env):
    entries = _scanned(qtbot, window)
    smol = next(e for e in entries if e.path.name == "smol.gguf")
    window.library.select_path(smol.path)
    with qtbot.waitSignal(window.models_changed, timeout=180_000) as b:
        window.library.target_btn.click()
    s = b.args[0]
    assert s is not None and s.draft is not None
    assert s.draft.spec.path.name.startswith("smol")  # the compatible one, not the Qwen draft


def test_download_from_the_hub_dialog(qtbot, window, library_env, smol_path):
    from specdesk.ui.hub_dialog import HubDialog

    with FakeHub({"someone/SmolLM2-GGUF": {"SmolLM2-135M-Instruct.Q4_1.gguf": Path(smol_path), "README.md": b"# hi"}}) as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        try:
            dlg = HubDialog(window)
            dlg.show()
            dlg.repo.setText("someone/SmolLM2-GGUF")
            with qtbot.waitSignal(dlg.table.itemSelectionChanged, timeout=60_000):
                dlg.list_btn.click()
            assert dlg.table.rowCount() == 1 and dlg.table.item(0, 0).text() == "Q4_1"
            # the listing's thread ends just after its result arrives; until then
            # Download is disabled, as for a user
            qtbot.waitUntil(lambda: not dlg.busy and dlg.download_btn.isEnabled(), timeout=10_000)
            progress = []
            with qtbot.waitSignal(dlg.downloaded, timeout=120_000) as b:
                dlg.download_btn.click()
                dlg._task.progress.connect(lambda m, f: progress.append(f))
            path = Path(b.args[0])
            assert path.is_file() and path.stat().st_size == Path(smol_path).stat().st_size
            assert str(library_env / "hf-cache") in str(path)
            assert progress and progress == sorted(progress)
            dlg.close()
        finally:
            del os.environ["HF_ENDPOINT"]
    entries = _scanned(qtbot, window)
    assert any("hf-cache" in e.sources for e in entries)


@pytest.fixture
def split_in_hf_cache(library_env, smol_path, tmp_path_factory):
    """SmolLM2 in three parts in the Hugging Face cache, laid out as huggingface_hub
    writes it: blobs named by their sha256, snapshot links named by part."""
    import hashlib
    import shutil
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "gguf"))
    from split_gguf import split_gguf

    parts = split_gguf(smol_path, tmp_path_factory.mktemp("split") / "smol-split.gguf", 3)
    repo = library_env / "hf-cache" / "models--org--smol-split-GGUF"
    snapshot = repo / "snapshots" / ("d" * 40)
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for part in parts:
        sha = hashlib.sha256(part.read_bytes()).hexdigest()
        shutil.move(part, repo / "blobs" / sha)
        os.symlink(f"../../blobs/{sha}", snapshot / part.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("d" * 40)
    return snapshot / parts[0].name


def test_a_split_model_is_one_row_and_one_choice_and_loads(qtbot, window, library_env, split_in_hf_cache):
    """One library row ("in 3 parts"), one item in each picker, by its first part's
    snapshot link (not the blob it points to, whose name llama.cpp could not follow),
    and it loads as the target."""
    first = split_in_hf_cache
    entries = _scanned(qtbot, window)
    [entry] = [e for e in entries if e.repo_id == "org/smol-split-GGUF"]
    assert entry.path == first and entry.valid and entry.parts == 3
    t = window.library.table
    [row] = [r for r in range(t.rowCount()) if t.item(r, 7).text() == str(first)]
    assert t.item(row, 5).text().endswith(" in 3 parts") and t.item(row, 6).text() == "ok"
    combo = window.target_combo
    datas = [combo.itemData(i) for i in range(combo.count())]
    assert datas.count(str(first)) == 1 and not any("-0000" in d and d != str(first) for d in datas)
    smol = (library_env / "models" / "smol.gguf").resolve()
    with qtbot.waitSignal(window.pairing_checked, timeout=120_000, check_params_cb=lambda a: a[0] == smol):
        combo.setCurrentIndex(combo.findData(str(smol)))
    drafts = [window.draft_combo.itemData(i) for i in range(window.draft_combo.count())]
    assert drafts.count(str(first)) == 1  # the split model drafts for SmolLM2: one choice
    window.library.select_path(first)
    with qtbot.waitSignal(window.models_changed, timeout=180_000) as b:
        window.library.target_btn.click()
    s = b.args[0]
    assert s is not None and s.target.spec.path == first


def test_the_details_say_what_a_hybrid_model_can_be(qtbot, tmp_path, monkeypatch):
    """A qwen35 file with an MTP head: a target rolling back by snapshots, a draft by
    checkpoints, and its own heads; a hybrid SpecDesk does not check: not usable, why."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from synth.hybrid import HybridSpec, write_hybrid_model

    models = tmp_path / "models"
    models.mkdir()
    write_hybrid_model(models / "hybrid.gguf", HybridSpec(heads="agree"))
    monkeypatch.setenv("SPECDESK_MODELS_DIR", str(models))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    w = MainWindow(tmp_path / "data", autoload=False)
    w.show()
    try:
        entries = _scanned(qtbot, w)
        w.library.select_path(next(Path(e.path) for e in entries if Path(e.path).name == "hybrid.gguf"))
        text = w.library.details.toPlainText()
        assert "as a target" in text and "rolls back by recurrent-state snapshots (16 kept" in text
        assert "as a draft" in text and "rolls back by checkpoints" in text
        assert "MTP heads" in text and "1 MTP head" in text
    finally:
        w.close()
