"""Local state and cancellation that must never cost the user a crash or a session:
malformed stored settings, a cancelled task's result, library details from a
hostile file, and the CLI's progress in a log."""

from __future__ import annotations

import io
import json

from PySide6.QtCore import QSettings

from specdesk.cli.output import LOG_INTERVAL_S, progress_bar
from specdesk.ui.settings import ChatSettings, load_defaults
from specdesk.ui.tasks import Task


def test_malformed_stored_settings_fall_back_to_the_defaults():
    d = ChatSettings()
    for raw in (5, "5", None, [], [1, 2], {"max_tokens": "lots"}, {"n_ctx": -4}, {"temperature": float("nan")},
                {"proposer": "telepathy"}, {"k": True}, {"top_p": 0.0}):
        assert ChatSettings.from_dict(raw) == d, raw
    ok = ChatSettings.from_dict({"max_tokens": 64, "temperature": 0.5, "n_ctx": -1})
    assert ok.max_tokens == 64 and ok.temperature == 0.5 and ok.n_ctx == d.n_ctx
    for stored in ("5", "[1, 2]", "{not json", "[" * 100_000):
        QSettings().setValue("chat/defaults", stored)
        assert load_defaults() == d, stored[:20]
    QSettings().setValue("chat/defaults", json.dumps({"max_tokens": 77}))
    assert load_defaults().max_tokens == 77
    QSettings().remove("chat/defaults")


class _Resource:
    closed = False

    def close(self) -> None:
        self.closed = True


def test_a_cancelled_task_never_hands_over_its_result(qtbot):
    res = _Resource()
    got: list = []
    task = Task(lambda t: (t.cancel(), res)[1], "cancelled load")
    task.succeeded.connect(got.append)
    with qtbot.waitSignal(task.was_cancelled, timeout=10_000):
        task.start()
    task.wait()
    qtbot.wait(20)
    assert got == [] and res.closed  # closed, not installed


def test_a_stopped_answer_keeps_its_result(qtbot):
    res = _Resource()
    task = Task(lambda t: (t.cancel(), res)[1], "generation", keep_result_on_cancel=True)
    with qtbot.waitSignal(task.succeeded, timeout=10_000) as blocker:
        task.start()
    task.wait()
    assert blocker.args[0] is res and not res.closed


def test_progress_in_a_log_prints_a_line_every_few_seconds():
    log = io.StringIO()  # not a terminal
    bar = progress_bar(total=1000, file=log)
    for _ in range(1000):
        bar.update(1)
    bar.close()
    assert bar.mininterval == LOG_INTERVAL_S >= 2
    assert log.getvalue().count("\r") + log.getvalue().count("\n") < 10  # not a line per update


def test_library_details_show_file_metadata_as_text_not_html(qtbot, tmp_path):
    """A GGUF's name and metadata come from the file: a name with markup is shown as
    those characters, never rendered (no link, no image, no injected table)."""
    from pathlib import Path

    from specdesk.library.discovery import LibraryEntry
    from specdesk.ui.library_tab import LibraryTab

    tab = LibraryTab()
    qtbot.addWidget(tab)
    evil = '<a href="http://x">click</a><img src="file:///etc/passwd">'
    e = LibraryEntry(path=Path(tmp_path / "m.gguf"), name=evil, sources=("folder",), size=10, mtime_ns=0,
                     info={"architecture": "<b>llama</b>", "parameters": 1000}, error="bad <i>thing</i>")
    tab.entries = [e]
    tab._fill()
    tab.table.selectRow(0)
    html = tab.details.toHtml()
    assert "&lt;a href" in html and "<a href" not in html and "<img" not in html
    assert "&lt;b&gt;llama&lt;/b&gt;" in html and "&lt;i&gt;thing&lt;/i&gt;" in html
    assert evil in tab.details.toPlainText()
