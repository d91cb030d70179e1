"""Drag and drop on the real window: real QDragEnterEvent / QDragMoveEvent / QDropEvent
with real QMimeData URLs, sent where the platform sends them (the window's QWindow, which
routes them to the widget under the pointer), and real models loading."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication, QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDragLeaveEvent, QDragMoveEvent, QDropEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QMessageBox, QPushButton

from specdesk.ui.main_window import MainWindow
from drive import load

LOAD_TIMEOUT = 120_000
CHECK_TIMEOUT = 60_000  # a dragged file's check, off the Qt thread (microseconds on an idle machine)
ACTIONS = Qt.DropAction.CopyAction | Qt.DropAction.MoveAction | Qt.DropAction.LinkAction


@pytest.fixture
def window(qtbot, tmp_path):
    from PySide6.QtGui import QFontDatabase, QFontMetrics

    fm = QFontMetrics(QFontDatabase.systemFont(QFontDatabase.SystemFont.GeneralFont))
    if fm.horizontalAdvance("iiii") == fm.horizontalAdvance("WWWW"):  # every glyph the same box: no font at all
        pytest.skip("no font is installed, so the window's layout (where a drop lands) is not a desktop's: "
                    "apt-get install fonts-dejavu-core")
    w = MainWindow(tmp_path / "data", autoload=False)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.close()


def files(*paths) -> QMimeData:
    m = QMimeData()
    m.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    return m


def at(w, widget) -> QPoint:
    """The centre of ``widget``, in the window's coordinates."""
    return widget.mapTo(w, widget.rect().center())


def move_to(w, pos: QPoint, mime: QMimeData) -> QDragMoveEvent:
    move = QDragMoveEvent(pos, ACTIONS, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QCoreApplication.sendEvent(w.windowHandle(), move)
    return move


def drag(w, pos: QPoint, mime: QMimeData) -> QDragMoveEvent:
    """The pointer enters the window and moves to ``pos`` carrying ``mime``; once the
    dragged files are checked (off the Qt thread), it moves again: that move event,
    accepted or not, as the platform gets it back."""
    QCoreApplication.sendEvent(w.windowHandle(), QDragEnterEvent(pos, ACTIONS, mime, Qt.MouseButton.LeftButton,
                                                                 Qt.KeyboardModifier.NoModifier))
    move = move_to(w, pos, mime)
    if getattr(w.drops, "checking", False):  # a loaded machine: the check took longer than the window waits
        assert QTest.qWaitFor(lambda: not w.drops.checking, CHECK_TIMEOUT)
        move = move_to(w, pos, mime)
    return move


def drop(w, pos: QPoint, mime: QMimeData) -> QDropEvent:
    ev = QDropEvent(QPointF(pos), ACTIONS, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QCoreApplication.sendEvent(w.windowHandle(), ev)
    return ev


def leave(w) -> None:
    QCoreApplication.sendEvent(w.windowHandle(), QDragLeaveEvent())


def dropped_and_loaded(qtbot, w, pos, mime):
    with qtbot.waitSignal(w.models_changed, timeout=LOAD_TIMEOUT) as blocker:
        ev = drop(w, pos, mime)
        assert ev.isAccepted() and ev.dropAction() == Qt.DropAction.CopyAction
    session = blocker.args[0]
    assert session is not None, w.error_banner.text()
    return session


def same(a, b) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def test_a_gguf_dropped_on_the_target_picker_loads_as_the_target(qtbot, window, smol_path):
    w = window
    pos = at(w, w.target_combo)
    mime = files(smol_path)
    move = drag(w, pos, mime)
    assert move.isAccepted() and move.dropAction() == Qt.DropAction.CopyAction
    # while dragging: the picker is outlined, the banner says what the drop does
    assert w.drops.overlay.isVisible() and w.drops.overlay.ok
    assert f"load {w.catalog.name_of(smol_path)} as the target" in w.drops.overlay.text()
    assert "#2f9e44" in w.target_combo.styleSheet() and w.draft_combo.styleSheet() == ""
    session = dropped_and_loaded(qtbot, w, pos, mime)
    assert same(session.target.spec.path, smol_path) and session.draft is None
    assert not w.drops.overlay.isVisible() and w.target_combo.styleSheet() == ""


def test_a_gguf_dropped_on_the_draft_picker_loads_as_the_draft(qtbot, window, smol_path, smol_draft_path):
    w = window
    load(qtbot, w, smol_path)
    pos = at(w, w.draft_combo)
    mime = files(smol_draft_path)
    assert drag(w, pos, mime).isAccepted()
    assert "#2f9e44" in w.draft_combo.styleSheet() and w.target_combo.styleSheet() == ""
    assert f"use {w.catalog.name_of(smol_draft_path)} as the draft for" in w.drops.overlay.text()
    session = dropped_and_loaded(qtbot, w, pos, mime)
    assert same(session.target.spec.path, smol_path) and same(session.draft.spec.path, smol_draft_path)


def test_one_file_dropped_on_the_window_asks_which_role_when_it_can_draft(qtbot, window, smol_path, smol_draft_path):
    w = window
    load(qtbot, w, smol_path)
    pos = at(w, w.chat_view)
    mime = files(smol_draft_path)
    assert drag(w, pos, mime).isAccepted()
    text = w.drops.overlay.text()
    assert w.catalog.name_of(smol_draft_path) in text and "as the draft for" in text and "you choose" in text
    assert w.target_combo.styleSheet() == "" and w.draft_combo.styleSheet() == ""  # the window, not a picker
    with qtbot.waitSignal(w.opener.asked, timeout=LOAD_TIMEOUT) as asked:
        assert drop(w, pos, mime).isAccepted()
    box = asked.args[0]
    assert isinstance(box, QMessageBox) and box.isVisible()
    assert f"Open {smol_draft_path.name} as the draft for" in box.text()
    assert "shares the target's vocabulary" in box.informativeText()
    with qtbot.waitSignal(w.models_changed, timeout=LOAD_TIMEOUT) as blocker:
        qtbot.mouseClick(box.findChild(QPushButton, "asDraftButton"), Qt.MouseButton.LeftButton)
    session = blocker.args[0]
    assert same(session.target.spec.path, smol_path) and same(session.draft.spec.path, smol_draft_path)


def test_the_question_can_make_the_file_the_new_target(qtbot, window, smol_path, smol_draft_path):
    w = window
    load(qtbot, w, smol_path)
    pos = at(w, w.chat_view)
    with qtbot.waitSignal(w.opener.asked, timeout=LOAD_TIMEOUT) as asked:
        drop(w, pos, files(smol_draft_path))
    with qtbot.waitSignal(w.models_changed, timeout=LOAD_TIMEOUT) as blocker:
        qtbot.mouseClick(asked.args[0].findChild(QPushButton, "asTargetButton"), Qt.MouseButton.LeftButton)
    assert same(blocker.args[0].target.spec.path, smol_draft_path)


def test_a_file_that_cannot_draft_becomes_the_target_without_a_question(qtbot, window, smol_path, qwen_draft_path):
    """Qwen 0.5B is larger than SmolLM2 and has another vocabulary: it cannot draft for it."""
    w = window
    load(qtbot, w, smol_path)
    asked = []
    w.opener.asked.connect(asked.append)
    session = dropped_and_loaded(qtbot, w, at(w, w.chat_view), files(qwen_draft_path))
    assert same(session.target.spec.path, qwen_draft_path)
    assert asked == []


def test_two_files_dropped_on_the_window_are_a_pair_the_larger_the_target(qtbot, window, smol_path, smol_draft_path):
    w = window
    assert smol_path.stat().st_size > smol_draft_path.stat().st_size  # Q4_1 is larger than Q4_0
    pos = at(w, w.chat_view)
    mime = files(smol_draft_path, smol_path)  # the smaller first
    assert drag(w, pos, mime).isAccepted()
    name = w.catalog.name_of
    assert f"{name(smol_path)} as the target (the larger), {name(smol_draft_path)} as the draft" in w.drops.overlay.text()
    session = dropped_and_loaded(qtbot, w, pos, mime)
    assert same(session.target.spec.path, smol_path) and same(session.draft.spec.path, smol_draft_path)


def refused(qtbot, w, pos, mime, reason: str) -> None:
    move = drag(w, pos, mime)
    assert not move.isAccepted() and move.dropAction() == Qt.DropAction.IgnoreAction
    assert w.drops.overlay.isVisible() and not w.drops.overlay.ok
    assert reason in w.drops.overlay.text(), w.drops.overlay.text()
    ev = drop(w, pos, mime)
    assert not ev.isAccepted()
    assert not w.drops.overlay.isVisible()
    assert reason in w.status_label.text()
    qtbot.wait(50)  # anything a drop would start would start now
    assert not w.loading and w.session is None


def test_anything_else_is_refused_with_a_reason(qtbot, window, tmp_path, smol_path):
    w = window
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model")
    folder = tmp_path / "models"
    folder.mkdir()
    chat = at(w, w.chat_view)
    refused(qtbot, w, chat, files(notes), "notes.txt is not a GGUF model")
    refused(qtbot, w, chat, files(folder), "models is a folder")
    refused(qtbot, w, chat, files(tmp_path / "gone.gguf"), "gone.gguf: no such file")
    web = QMimeData()
    web.setUrls([QUrl("https://huggingface.co/x/y/resolve/main/model.gguf")])
    refused(qtbot, w, chat, web, "model.gguf is not a file on this computer")
    text = QMimeData()
    text.setText("hello")
    refused(qtbot, w, chat, text, "Only GGUF model files can be dropped here, not text")
    three = [tmp_path / f"m{i}.gguf" for i in range(3)]
    for p in three:
        p.write_bytes(b"GGUF")
    refused(qtbot, w, chat, files(*three), "3 models: drop one")
    # on the pickers: the draft picker drafts for the target the bar shows
    from specdesk.ui.model_bar import ModelBar

    shown = ModelBar.path_of(w.target_combo)
    assert shown is not None
    refused(qtbot, w, at(w, w.draft_combo), files(shown), "is the target: drop another model as its draft")
    assert "#e03131" not in w.draft_combo.styleSheet()  # the outline went with the drag
    refused(qtbot, w, at(w, w.target_combo), files(smol_path, three[0]), "Drop one model on the target picker")


def test_a_gguf_under_another_name_is_known_by_its_header(qtbot, window, tmp_path, smol_path):
    w = window
    renamed = tmp_path / "model.bin"
    renamed.symlink_to(smol_path)
    assert drag(w, at(w, w.chat_view), files(renamed)).isAccepted()
    leave(w)
    assert not w.drops.overlay.isVisible()


def test_leaving_the_window_takes_the_banner_away(qtbot, window, smol_path):
    w = window
    drag(w, at(w, w.target_combo), files(smol_path))
    assert w.drops.overlay.isVisible()
    leave(w)
    assert not w.drops.overlay.isVisible() and w.target_combo.styleSheet() == ""


def test_text_dragged_onto_the_message_box_still_goes_to_it(qtbot, window, smol_path):
    w = window
    load(qtbot, w, smol_path)  # the chat page, with its message box, shows
    assert w.input.isVisible()
    w.input.clear()
    text = QMimeData()
    text.setText("dropped words")
    pos = at(w, w.input)
    move = drag(w, pos, text)
    assert move.isAccepted()  # the message box takes text, as before
    assert not w.drops.overlay.isVisible()
    assert drop(w, pos, text).isAccepted()
    assert "dropped words" in w.input.toPlainText()


class FifoWatch:
    """A watchdog on FIFOs: it notices anything that opens one for reading (its open
    would block until a writer came; on the Qt thread, that froze the window for ever),
    records it and opens the write end, so that the reader gets an empty file and a
    regression fails the test instead of hanging it."""

    def __init__(self, *fifos: Path) -> None:
        import threading

        self.fifos = fifos
        self.opened: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        import errno
        import os

        while not self._stop.is_set():
            for f in self.fifos:
                try:  # succeeds only when a reader has the FIFO open (or is blocked opening it)
                    fd = os.open(f, os.O_WRONLY | os.O_NONBLOCK)
                except OSError as e:
                    assert e.errno == errno.ENXIO, e
                    continue
                self.opened.append(f.name)
                os.close(fd)  # the reader sees the end of an empty file
            self._stop.wait(0.01)

    def __enter__(self) -> "FifoWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def test_a_fifo_dragged_over_the_window_is_refused_without_being_opened(qtbot, window, tmp_path):
    """Dragging a FIFO froze the window: it was opened on the Qt thread to read its
    header, and that open waits for a writer for ever. One named *.gguf was accepted as
    a model. Now neither is opened, and both are refused with the reason."""
    import os

    w = window
    fifos = [tmp_path / "pipe", tmp_path / "pipe.gguf"]
    for f in fifos:
        os.mkfifo(f)
    chat = at(w, w.chat_view)
    with FifoWatch(*fifos) as watch:
        for f in fifos:
            refused(qtbot, w, chat, files(f), f"{f.name} is not a regular file")
            refused(qtbot, w, at(w, w.target_combo), files(f), f"{f.name} is not a regular file")
    assert watch.opened == [], f"a dragged FIFO was opened: {watch.opened}"


@pytest.fixture
def hung_checks(window):
    """The window's file check made to hang, as a stat on a dead NFS server does until
    it comes back: yields (the event that lets the checks answer, the paths checked)."""
    import threading

    answer = threading.Event()
    real_check = window.drops.checks.check
    calls = []

    def hung(path):
        calls.append(path)
        answer.wait(300)
        return real_check(path)

    window.drops.checks.check = hung
    try:
        yield answer, calls
    finally:
        answer.set()
        window.drops.checks.check = real_check


def test_a_file_that_does_not_answer_never_blocks_the_window(qtbot, window, hung_checks, tmp_path):
    """A file on a network mount that hangs: its check does not answer, the window goes on
    (the banner says it is being checked, the drag is accepted), a drop then is accepted
    and carried out when the check answers: refused here, with the reason."""
    w = window
    answer, _ = hung_checks
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model")
    pos = at(w, w.chat_view)
    mime = files(notes)  # kept: an event holds its QMimeData by pointer
    QCoreApplication.sendEvent(w.windowHandle(), QDragEnterEvent(pos, ACTIONS, mime, Qt.MouseButton.LeftButton,
                                                                 Qt.KeyboardModifier.NoModifier))
    move = move_to(w, pos, mime)
    assert w.drops.checking and move.isAccepted()
    assert w.drops.overlay.isVisible() and "Checking notes.txt" in w.drops.overlay.text()
    ev = drop(w, pos, mime)
    assert ev.isAccepted() and not w.drops.overlay.isVisible()
    answer.set()
    qtbot.waitUntil(lambda: "not opened: notes.txt is not a GGUF model" in w.status_label.text(),
                    timeout=CHECK_TIMEOUT)
    assert not w.loading and w.session is None


def test_a_file_dragged_again_while_its_check_hangs_gets_no_second_thread(qtbot, window, hung_checks, tmp_path):
    """Dragged over and over from a dead mount: each drag waits for the one check still
    running, so the threads stuck in it stay one per file, and when it answers, the drag
    then under way has the answer."""
    import threading

    w = window
    answer, calls = hung_checks
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model")
    pos = at(w, w.chat_view)
    mime = files(notes)
    for _ in range(4):  # out of the window and in again, four times
        QCoreApplication.sendEvent(w.windowHandle(), QDragEnterEvent(pos, ACTIONS, mime, Qt.MouseButton.LeftButton,
                                                                     Qt.KeyboardModifier.NoModifier))
        assert move_to(w, pos, mime).isAccepted() and w.drops.checking
        assert "Checking notes.txt" in w.drops.overlay.text()
    assert len(calls) == 1 and w.drops.checks.running == 1
    assert sum(t.name == "check notes.txt" for t in threading.enumerate()) == 1
    answer.set()
    # the drag under way has its answer
    qtbot.waitUntil(lambda: "notes.txt is not a GGUF model" in w.drops.overlay.text(), timeout=CHECK_TIMEOUT)
    assert w.drops.checks.running == 0 and not w.drops.checking and len(calls) == 1
