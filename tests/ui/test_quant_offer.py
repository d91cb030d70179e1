"""The Compare tab's memory advice, end to end: a target from the Hugging Face cache,
the advisor's calibration, the target's repo asked (a stand-in Hub on 127.0.0.1), and
the offered quant opened in the download dialog, selected and ready."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from specdesk.library.quants import estimated_size, quant_of
from specdesk.ui.main_window import MainWindow

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hubserver import FakeHub  # noqa: E402

REPO = "org/SmolLM2-135M-Instruct-GGUF"
Q8 = "smollm2-135m-instruct-q8_0.gguf"


@pytest.fixture
def hub_env(tmp_path, monkeypatch, smol_path):
    quant, size = quant_of(Path(smol_path))
    q8 = tmp_path / "q8.gguf"
    with open(q8, "wb") as f:
        f.truncate(estimated_size(quant, size, "Q8_0"))
    served = {REPO: {"smollm2-135m-instruct-q4_1.gguf": smol_path, Q8: q8}}
    snap = tmp_path / "hf" / f"models--{REPO.replace('/', '--')}" / "snapshots" / ("c" * 40)
    snap.mkdir(parents=True)
    target = snap / "smollm2-135m-instruct-q4_1.gguf"
    os.symlink(smol_path, target)
    with FakeHub(served) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield target


def test_the_advice_offers_the_published_quant_and_opens_its_download(qtbot, tmp_path, hub_env, smol_draft_path):
    from specdesk.ui.hub_dialog import HubDialog

    w = MainWindow(tmp_path / "data", autoload=False)
    w.show()
    try:
        with qtbot.waitSignal(w.models_changed, timeout=120_000):
            w.load_models(hub_env, Path(smol_draft_path))
        tab = w.compare
        w.tabs.setCurrentWidget(tab)
        for name, box in tab.config_boxes.items():
            box.setChecked(name == "draft:k=2")
        tab.repeats.setValue(1)
        tab.max_tokens.setValue(16)
        tab.use_advisor.setChecked(True)
        done, errors = [], []
        tab.finished.connect(done.append)
        tab.error.connect(errors.append)  # a failed comparison ends the test with its message, not a timeout
        tab.run_btn.click()
        qtbot.waitUntil(lambda: bool(done or errors), timeout=600_000)
        assert not errors, errors
        res = done[0]
        assert res["advisor"]["calibration"]["quant_upgrade"]["current"] == "Q4_1"
        pub = res["published_quant"]
        assert pub is not None, res.get("published_quant_note")
        assert (pub["repo"], pub["file"]) == (REPO, Q8)
        assert tab.quant_btn.isVisible() and "Q8_0" in tab.quant_btn.text()
        assert f"{REPO} publishes Q8_0" in tab.advice.text()
        tab.quant_btn.click()
        dlg = next(d for d in w.library.findChildren(HubDialog))
        qtbot.waitUntil(lambda: bool(dlg.files and dlg.table.selectionModel().selectedRows()), timeout=60_000)
        row = dlg.table.selectionModel().selectedRows()[0].row()
        assert dlg.repo.text() == REPO and dlg.files[row].name == Q8
        assert dlg.download_btn.isEnabled()
        dlg.close()
    finally:
        w.close()
