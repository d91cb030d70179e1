"""Local state and cancellation that must never cost the user a crash or a session:
malformed stored settings, a cancelled task's result, library details from a
hostile file, and the CLI's progress in a log."""

from __future__ import annotations

import io
import json

from PySide6.QtCore import QSettings

from specdesk.cli.output import LOG_INTERVAL_S, progress_bar
from specdesk.ui.settings import LAYERS_FORMAT_KEY, RANGES, ChatSettings, SettingsDialog, load_defaults
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


def _outside(name: str) -> list:
    """Values just outside what the setting's widget accepts, and far outside it."""
    lo, hi = RANGES[name]
    if isinstance(ChatSettings().to_dict()[name], float):
        return [lo - 0.01, hi + 0.01, float("inf"), -float("inf")]
    return [lo - 1, hi + 1, 2**31, 2**63, -(2**31) - 1]


def test_every_stored_setting_is_checked_against_the_range_its_widget_accepts(qtbot, caplog):
    """A stored value the settings dialog could not show falls back to the default with a
    log line: a negative seed made numpy refuse every answer in that chat, a top-k or seed
    past 2**31 - 1 made the dialog's QSpinBox overflow, k = 64 was shown as 16."""
    d = ChatSettings()
    names = {f for f in d.to_dict()} - {LAYERS_FORMAT_KEY}  # a marker, not a setting
    assert set(RANGES) | {"proposer", "auto_k", "rpc"} == names  # every setting has its check
    for name in RANGES:
        for bad in _outside(name):
            caplog.clear()
            assert ChatSettings.from_dict({name: bad}) == d, (name, bad)
            [line] = [r.getMessage() for r in caplog.records]
            assert f"ignoring the stored setting {name}=" in line and f"using {getattr(d, name)!r}" in line
    # every value the widgets accept is kept, and the dialog shows it unchanged
    for end in (0, 1):
        stored = {name: rng[end] for name, rng in RANGES.items()}
        s = ChatSettings.from_dict(stored)
        assert all(getattr(s, k) == v for k, v in stored.items()), (s, stored)
        dlg = SettingsDialog(s, has_gpu=True)
        qtbot.addWidget(dlg)
        assert dlg.value() == s
    # the values that broke a chat or the dialog
    s = ChatSettings.from_dict({"seed": -1, "top_k": 2**40, "temperature": 0.9})
    assert (s.seed, s.top_k, s.temperature) == (d.seed, d.top_k, 0.9)
    dlg = SettingsDialog(ChatSettings.from_dict({"seed": 2**40, "top_k": 2**40}), has_gpu=False)
    qtbot.addWidget(dlg)
    assert dlg.value().seed == d.seed and dlg.value().top_k == d.top_k


def test_a_chat_with_a_stored_negative_seed_still_answers(qtbot, tmp_path, smol_path):
    """The chat's stored settings (another version's, a damaged file's) come back through
    ChatSettings.from_dict: a seed of -1 falls back to 0 instead of failing every answer."""
    from pathlib import Path

    from specdesk.session.chatstore import ChatStore
    from specdesk.ui.main_window import MainWindow

    data = tmp_path / "data"
    store = ChatStore(data / "chats.sqlite3")
    store.create_chat("sampled", {"seed": -1, "temperature": 0.9, "proposer": "none", "max_tokens": 4,
                                  "n_ctx": 512, "threads": 1})
    store.close()
    w = MainWindow(data, autoload=False)
    w.show()
    errors: list[str] = []
    w.error_shown.connect(errors.append)
    try:
        with qtbot.waitSignal(w.models_changed, timeout=120_000) as loaded:
            w.load_models(Path(smol_path), None)
        assert loaded.args[0] is not None, errors
        done: list = []
        w.generation_finished.connect(done.append)
        assert w.send("Say hi.")
        qtbot.waitUntil(lambda: bool(done or errors), timeout=120_000)
        assert errors == [] and done[0].text
        assert (w.settings.seed, w.settings.temperature) == (0, 0.9)
    finally:
        w.close()


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


def test_settings_saved_with_the_old_default_p_min_take_the_new_one():
    """p-min's default was 0.75 and is now 0 (off): settings stored before, holding the
    old default, take the new one; a p-min stored since stays as it is."""
    from specdesk.ui.settings import LAYERS_FORMAT_KEY, ChatSettings

    old = ChatSettings.from_dict({"p_min": 0.75})
    assert old.p_min == 0.0
    assert ChatSettings.from_dict({"p_min": 0.5}).p_min == 0.5
    assert ChatSettings.from_dict({"p_min": 0.75, LAYERS_FORMAT_KEY: True}).p_min == 0.75
