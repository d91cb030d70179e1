"""The app offloads both models by default on a GPU build (faked where the session reads
it; the models load on this CPU, which ignores the counts) and says where they are in
the memory panel; the settings' GPU layers default to auto, and old settings keep
their meaning."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_devices import as_gpu_build

from specdesk.ui.main_window import MainWindow
from specdesk.ui.settings import AUTO_LAYERS, LAYERS_FORMAT_KEY, ChatSettings, SettingsDialog

WHERE = "all 31 layers on CUDA0 (NVIDIA H200)"


@pytest.fixture
def gpu_build(monkeypatch):
    as_gpu_build(monkeypatch)


def test_the_app_with_its_defaults_loads_both_models_on_the_gpu_and_says_so(qtbot, tmp_path, gpu_build, smol_path,
                                                                           smol_draft_path):
    w = MainWindow(tmp_path / "data", autoload=False)
    w.show()
    try:
        assert w.settings.target_gpu_layers == w.settings.draft_gpu_layers == AUTO_LAYERS
        checked = []
        w.loader.checked.connect(checked.append)
        with qtbot.waitSignal(w.models_changed, timeout=120_000) as blocker:
            w.load_models(Path(smol_path), Path(smol_draft_path), confirm_memory=False)
        s = blocker.args[0]
        assert s is not None, w.error_banner.text()
        assert (s.target.spec.n_gpu_layers, s.draft.spec.n_gpu_layers) == (31, 31)
        # the check says it before the load, the memory panel after
        assert f"target: {WHERE}; draft: {WHERE}" in checked[0]
        assert w.stats.mem_target.text().startswith(f"<b>target</b>: {WHERE}<br>weights ")
        assert w.stats.mem_draft.text().startswith(f"<b>draft</b>: {WHERE}<br>weights ")
    finally:
        w.close()


def test_gpu_layers_default_to_auto_and_0_stays_0():
    s = ChatSettings()
    assert s.model_spec("t.gguf", "target").n_gpu_layers is None  # auto
    assert ChatSettings(target_gpu_layers=0).model_spec("t.gguf", "target").n_gpu_layers == 0
    assert ChatSettings(draft_gpu_layers=12).model_spec("d.gguf", "draft").n_gpu_layers == 12
    # stored since: 0 means 0
    saved = ChatSettings(target_gpu_layers=0, draft_gpu_layers=0).to_dict()
    assert saved[LAYERS_FORMAT_KEY] is True
    assert ChatSettings.from_dict(saved) == ChatSettings(target_gpu_layers=0, draft_gpu_layers=0)
    assert ChatSettings.from_dict(s.to_dict()) == s


def test_old_settings_keep_what_was_chosen_and_their_untouched_default_becomes_auto():
    """Before, every setting was stored, GPU layers 0 and 0 included, whether or not the
    user had seen them (the boxes were disabled on a CPU-only build): that pair was the
    old default and becomes auto; a count a user set stays, with the 0 beside it."""
    old = {k: v for k, v in ChatSettings(temperature=0.3).to_dict().items() if k != LAYERS_FORMAT_KEY}
    s = ChatSettings.from_dict({**old, "target_gpu_layers": 0, "draft_gpu_layers": 0})
    assert (s.target_gpu_layers, s.draft_gpu_layers, s.temperature) == (AUTO_LAYERS, AUTO_LAYERS, 0.3)
    s = ChatSettings.from_dict({**old, "target_gpu_layers": 20, "draft_gpu_layers": 0})
    assert (s.target_gpu_layers, s.draft_gpu_layers) == (20, 0)
    assert ChatSettings.from_dict({"max_tokens": 64}).target_gpu_layers == AUTO_LAYERS


def test_the_dialog_shows_auto_and_gives_it_back(qtbot):
    dlg = SettingsDialog(ChatSettings(draft_gpu_layers=0), has_gpu=True)
    qtbot.addWidget(dlg)
    assert dlg.target_gpu_layers.text() == "auto" and dlg.draft_gpu_layers.text() == "0"
    assert dlg.target_gpu_layers.isEnabled() and "auto" in dlg.target_gpu_layers.toolTip()
    dlg.draft_gpu_layers.stepDown()
    assert dlg.draft_gpu_layers.text() == "auto" and dlg.value().draft_gpu_layers == AUTO_LAYERS
    dlg.target_gpu_layers.stepUp()
    assert dlg.value().target_gpu_layers == 0 and dlg.value().needs_reload(ChatSettings())
