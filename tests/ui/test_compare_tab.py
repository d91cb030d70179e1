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


def _configure(tab, configs=("draft:k=2", "ngram")):
    for name, box in tab.config_boxes.items():
        box.setChecked(name in configs)
    tab.repeats.setValue(1)
    tab.max_tokens.setValue(24)
    tab.use_advisor.setChecked(False)


def test_compare_a_prompt_shows_speedups_identity_and_answers(qtbot, window, tmp_path):
    tab = window.compare
    _configure(tab)
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
    cells = {tab.table.item(r, 0).text(): [tab.table.item(r, c).text() for c in range(8)] for r in range(3)}
    assert cells["draft:k=2"][2].endswith("×") and cells["draft:k=2"][4].endswith("%")
    assert "identical" in cells["draft:k=2"][7] or "near-tie" in cells["draft:k=2"][7] or "MISMATCH" in cells["draft:k=2"][7]
    assert "RAM" in cells["draft:k=2"][6] and "no draft model" in cells["ngram:auto"][6]
    # what "identical" means on this machine: the measured kernel drift, next to the identity column
    drift = res["drift"]
    assert drift["positions"] > 0 and [b["batch"] for b in drift["by_batch"]] == list(range(2, 10))
    assert "drift flips" in cells["draft:k=2"][7]
    assert tab.exactness.isVisible() and "as llama.cpp computes it in a verify batch" in tab.exactness.text()
    assert "batch 2:" in tab.exactness.toolTip()
    # answers side by side: one column per configuration, code as code (monospace, one
    # source line per line: a narrow column scrolls sideways instead of wrapping)
    assert tab.answer_split.count() == 3
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
    assert len(list(csv.DictReader(open(tmp_path / "report" / "report.csv")))) == 3
    assert "## Exactness and kernel drift" in (tmp_path / "report" / "report.md").read_text()
    assert window.send_btn.isEnabled()


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
