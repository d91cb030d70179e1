"""Adding a draft source is one registry row, one Source and one implementation of the
session's draft-source interface: tests/fake_source.py registers one no module of
SpecDesk knows ("second-look", the target drafting for itself in a second context), and
it runs through ``specdesk generate``, the server and the Compare tab with no edit to
ui/, cli/ or bench/."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import fake_source
from clirun import PY, cli
from drive import load
from serving import start_serve

TESTS = str(Path(__file__).resolve().parents[1])
ENTRY = [PY, "-c", "import fake_source; fake_source.main()"]
COMMON = ["--ctx", "512", "--threads", "2"]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([TESTS, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@pytest.fixture
def registered():
    fake_source.register()
    yield
    fake_source.unregister()


def test_generate_drafts_with_it_and_keeps_the_target_s_answer(smol_path):
    ask = ["--target", smol_path, *COMMON, "--prompt", "Count from one to ten.", "--max-tokens", "32", "--json"]
    r = cli("generate", *ask, "--proposer", fake_source.NAME, "--k", "3", entry=ENTRY, env=_env())
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    alone = cli("generate", *ask, "--proposer", "none")
    assert alone.returncode == 0, alone.stderr
    assert out["tokens"] == json.loads(alone.stdout)["tokens"]  # exact at T=0
    st = out["stats"]
    assert st["drafted"] >= 8 and st["accepted"] >= 0.9 * st["drafted"]  # the target agrees with itself
    assert out["config"]["proposer"] == fake_source.NAME
    # a process that has not registered it refuses the name in one line, as any unknown proposer
    r = cli("generate", *ask, "--proposer", fake_source.NAME)
    assert r.returncode == 2 and "second-look" in r.stderr and "Traceback" not in r.stderr


def test_the_server_serves_with_it(smol_path, tmp_path):
    served = start_serve(["--target", smol_path, *COMMON, "--proposer", fake_source.NAME, "--k", "3"], tmp_path,
                         entry=ENTRY, PYTHONPATH=_env()["PYTHONPATH"])
    try:
        r = served.post("/v1/completions", {"prompt": "Count from one to ten:", "max_tokens": 24, "temperature": 0})
        assert r.status == 200, r.text
        spec = r.json()["speculation"]
        assert spec["proposer"] == fake_source.NAME and spec["drafted"] > 0 and spec["accepted"] > 0
    finally:
        served.stop()


def test_the_compare_tab_offers_it_and_runs_it(qtbot, registered, smol_path):
    from PySide6.QtGui import QColor

    from specdesk.ui.chat_view import PROVENANCE, Legend
    from specdesk.ui.main_window import MainWindow

    preset = f"{fake_source.NAME}:k=2"
    w = MainWindow(Path(os.environ["SPECDESK_DATA_DIR"]) / "new-source", autoload=False)
    w.show()
    try:
        load(qtbot, w, smol_path)
        tab = w.compare
        assert tab.config_boxes[preset].isChecked()  # its row's preset, ticked as the row says
        for name, box in tab.config_boxes.items():
            box.setChecked(name == preset)
        tab.until_sure.setChecked(False)
        tab.repeats.setValue(1)
        tab.max_tokens.setValue(16)
        tab.use_advisor.setChecked(False)
        tab.prompt.setPlainText("Count from one to five.")
        with qtbot.waitSignal(tab.finished, timeout=600_000) as blocker:
            tab.run_btn.click()
        res = blocker.args[0]
        assert res["configs"] == ["none", preset]
        row = next(r for r in res["summary"]["overall"] if r["config"] == preset)
        assert row["acceptance"] > 0.9
        # its accepted tokens have the colour its Source gives them, in the chat and its legend
        assert PROVENANCE[fake_source.NAME][0] == fake_source.SOURCE.colour
        legend = Legend()
        assert any(lbl.text() == fake_source.SOURCE.label for lbl in legend.findChildren(type(w.status_label)))
        legend.deleteLater()
        assert QColor(PROVENANCE[fake_source.NAME][0]).isValid()
    finally:
        w.close()
