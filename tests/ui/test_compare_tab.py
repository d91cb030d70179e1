"""The Compare tab with real models: run, progress, table, chart, answers, report, cancel."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from PySide6.QtWidgets import QPlainTextEdit

from specdesk.ui.fonts import draws_monospace
from specdesk.ui.main_window import MainWindow

TIMEOUT = 600_000


@pytest.fixture
def window(qtbot, tmp_path, smol_path, smol_draft_path):
    w = MainWindow(tmp_path / "data", autoload=False)
    w.show()
    with qtbot.waitSignal(w.models_changed, timeout=120_000):
        w.load_models(Path(smol_path), Path(smol_draft_path))
    w.tabs.setCurrentWidget(w.compare)
    yield w
    w.close()


def _configure(tab, configs=("draft:k=2", "ngram"), repeats=1):
    for name, box in tab.config_boxes.items():
        box.setChecked(name in configs)
    tab.until_sure.setChecked(False)
    tab.repeats.setValue(repeats)
    tab.max_tokens.setValue(24)
    tab.use_advisor.setChecked(False)


def test_compare_a_prompt_shows_speedups_identity_and_answers(qtbot, window, tmp_path):
    tab = window.compare
    _configure(tab, repeats=2)
    tab.prompt.setPlainText("Write a Python function that reverses a string.")
    progress = []
    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT) as blocker:
        tab.run_btn.click()
        tab._task.progress.connect(lambda m, f: progress.append(f))
        assert not window.send_btn.isEnabled()  # no chat while comparing
    res = blocker.args[0]
    assert progress and max(progress) <= 1.0
    assert res["configs"] == ["none", "draft:k=2", "ngram:auto"]
    assert tab.table.rowCount() == 3
    cells = {tab.table.item(r, 0).text(): [tab.table.item(r, c).text() for c in range(9)] for r in range(3)}
    assert cells["target alone"][2:4] == ["1.00×", "baseline"]
    # the speedup with its 95% interval from the 2 paired repeats, and the verdict it allows
    rows = {r["config"]: r for r in res["summary"]["overall"]}
    k2 = rows["draft:k=2"]
    lo, hi = k2["speedup_ci"]
    assert k2["pairs"] == 2 and cells["draft:k=2"][2] == f"{k2['speedup']:.2f}× ({lo:.2f}–{hi:.2f})"
    assert cells["draft:k=2"][3] == {"faster": "faster", "slower": "slower", "within-noise": "within noise"}[k2["verdict"]]
    k2_row = next(r for r in range(3) if tab.table.item(r, 0).text() == "draft:k=2")
    if k2["verdict"] == "within-noise":  # the smallest difference the run could see, where the user points
        assert "cannot be seen with 2 pairs" in tab.table.item(k2_row, 3).toolTip()
    assert "95% interval" in tab.table.item(1, 2).toolTip() or "95% interval" in tab.table.item(2, 2).toolTip()
    assert cells["draft:k=2"][5].endswith("%")
    assert "identical" in cells["draft:k=2"][8] or "near-tie" in cells["draft:k=2"][8] or "MISMATCH" in cells["draft:k=2"][8]
    assert cells["draft:k=2"][7].startswith("+") and "B" in cells["draft:k=2"][7] and "no draft" in cells["ngram:auto"][7]
    assert res["stopping"] == {"mode": "fixed", "repeats": 2, "reason": "repeats"}
    assert "Ran 2 repeats" in tab.advice.text() and "from one repeat to the next" in tab.advice.text()
    # what "identical" means on this machine: the measured kernel drift, next to the identity column
    drift = res["drift"]
    assert drift["positions"] > 0 and [b["batch"] for b in drift["by_batch"]] == list(range(2, 10))
    assert "drift flips" in cells["draft:k=2"][8]
    assert tab.exactness.isVisible() and "as llama.cpp computes it in a verify batch" in tab.exactness.text()
    assert "batch 2:" in tab.exactness.toolTip()
    # answers side by side: one column per configuration, code as code (monospace, one
    # source line per line: a narrow column scrolls sideways instead of wrapping), replayable
    assert tab.answer_split.count() == 3 and tab.race.replay_btn.isEnabled()
    views = tab.answer_split.findChildren(QPlainTextEdit)
    assert len(views) == 3 and all(v.isReadOnly() for v in views)
    assert all(draws_monospace(v.font()) for v in views)  # what is drawn, whatever fontconfig says of the font
    assert all(v.lineWrapMode() == QPlainTextEdit.LineWrapMode.NoWrap for v in views)
    assert {v.toPlainText() for v in views} <= {r["text"] for r in res["runs"]}
    # the chat's list and statistics make room on this tab, and come back with the chat
    assert not window.sidebar.isVisible() and not window.stats_scroll.isVisible()
    window.tabs.setCurrentIndex(0)
    assert window.sidebar.isVisible() and window.stats_scroll.isVisible()
    window.tabs.setCurrentWidget(tab)
    # the chat's reference line learns target alone's speed
    assert window.stats.reference and window.stats.reference > 0
    # the report: the same files as the CLI
    paths = tab.save_report(tmp_path / "report")
    names = {p.name for p in paths}
    assert {"report.json", "report.csv", "report.md", "speedup.png"} <= names
    assert json.loads((tmp_path / "report" / "report.json").read_text())["configs"] == res["configs"]
    assert len(list(csv.DictReader(open(tmp_path / "report" / "report.csv")))) == 6
    assert "## Exactness and kernel drift" in (tmp_path / "report" / "report.md").read_text()
    assert window.send_btn.isEnabled()
    # the chat's verdict line learns how noisy this machine is
    assert window.stats._run_noise == pytest.approx(res["summary"]["noise"]["run_to_run"])


def test_compare_runs_until_sure_by_default_and_stops_at_its_budget(qtbot, window):
    """The app's default: repeats until every interval is within the target; at +-0.5%
    two repeats cannot be sure on this machine, so it stops at its budget of 2 and says so."""
    tab = window.compare
    assert tab.until_sure.isChecked() and not tab.repeats.isEnabled() and tab.max_repeats.isEnabled()
    _configure(tab, configs=("ngram",))
    tab.until_sure.setChecked(True)
    tab.sure_within.setValue(0.5)
    tab.max_repeats.setValue(2)
    statuses = []
    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT) as blocker:
        tab.run_btn.click()
        tab._task.progress.connect(lambda m, f: statuses.append(m))
    res = blocker.args[0]
    # (sure at +-0.5% with one prompt and 2 pairs would need their log ratios within 0.08% of each other)
    assert (res["stopping"]["mode"], res["stopping"]["reason"], res["stopping"]["repeats"]) == ("until-sure", "repeats", 2)
    assert any(m.startswith("repeat 1 of at most 2; ngram:auto") for m in statuses)
    assert "Stopped at the budget of 2 repeats" in tab.advice.text() and "ngram:auto ±" in tab.advice.text()


def test_compare_can_be_cancelled(qtbot, window):
    tab = window.compare
    _configure(tab, configs=("draft:k=2", "draft:k=4", "ngram"))
    tab.source.setCurrentIndex(tab.source.findData("chat_qa"))
    tab.max_tokens.setValue(200)
    with qtbot.waitSignal(tab.stopped, timeout=TIMEOUT):
        tab.run_btn.click()
        qtbot.waitUntil(lambda: tab.progress.value() > 0, timeout=TIMEOUT)
        tab.cancel_btn.click()
    assert tab.status.text() == "cancelled"
    assert tab.run_btn.isEnabled() and not tab.cancel_btn.isEnabled()


def test_bad_inputs_are_messages(qtbot, window):
    tab = window.compare
    _configure(tab, configs=())
    with qtbot.waitSignal(tab.error, timeout=5000) as blocker:
        tab.run_btn.click()
    assert "at least one configuration" in blocker.args[0]
    _configure(tab)
    tab.extra_configs.setText("draft:k=zero")
    with qtbot.waitSignal(tab.error, timeout=5000) as blocker:
        tab.run_btn.click()
    assert "k must be" in blocker.args[0]
    assert window.error_banner.isVisible()
