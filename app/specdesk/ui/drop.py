"""Drag and drop of GGUF files onto the window.

- On the target or the draft picker: the file loads in that role, as if opened there.
- Anywhere else on the window: one file becomes the target (or, when a target is loaded
  and the file can draft for it, the app asks: ``open_files.FileOpener``); two files are a
  pair, the larger the target.
- While dragging, the picker it would land on is outlined and a banner over the window
  says what the drop will do; anything else (text, a folder, a file that is no GGUF, a
  web address, three files) is refused with the reason, in the same banner.

The drag events are handled where the platform delivers them, on the window's QWindow,
before Qt routes them to a child widget: so a file dragged over the message box is a
model to open, not text to insert; a drag without files over a widget that takes text
(the message box) still goes to that widget.

What a dragged file is, is found off the Qt thread (``FileChecks``), once per file and
drag: ``os.stat`` first, and only a regular file is opened (a FIFO, a device or a
socket is refused without being opened: opening a FIFO blocks until a writer comes, and
it did so on the Qt thread, on every DragEnter and DragMove, freezing the window); a
file without a .gguf name is then read for GGUF's magic bytes, opened non-blocking. The
Qt thread waits for that at most ``CHECK_WAIT_S`` (a file on a slow or hung network
mount): meanwhile the banner says it is being checked, the drag is accepted, and a drop
made then is carried out (or refused) when the check ends. Once a file's check has
answered, the landing's own look-ups (its size, its real path) find a file system that
answers.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QEvent, QMimeData, QObject, QPoint, QRect, Qt, QTimer, Signal
from PySide6.QtWidgets import QLabel, QWidget

from .model_bar import ModelBar
from ..library.opening import OpenRequest, Opening, check_file, models_of, plan

#: How long the Qt thread waits for a dragged file's check (then: "checking…", and the
#: answer when it comes). A local file answers in microseconds.
CHECK_WAIT_S = 0.2
#: A check's answer not known yet (``FileChecks.result``).
PENDING = object()


@dataclass(frozen=True)
class Dropped:
    """The models a drag carries (split models by their first part), or why it is
    refused, or the files whose check has not answered yet."""

    models: tuple[Path, ...] = ()
    refusal: str | None = None
    checking: tuple[Path, ...] = ()


def dropped_models(mime: QMimeData, check: Callable[[Path], object] = check_file) -> Dropped:
    """The GGUF models in a drag's data, or the reason it cannot be opened. ``check(path)``
    says why a local file cannot be opened (None: it can; ``PENDING``: not known yet)."""
    if not mime.hasUrls():
        what = "text" if mime.hasText() else "this"
        return Dropped(refusal=f"Only GGUF model files can be dropped here, not {what}")
    paths, checking = [], []
    for url in mime.urls():
        if not url.isLocalFile():
            name = url.fileName() or url.toDisplayString()
            return Dropped(refusal=f"{name} is not a file on this computer: download it first (Library tab)")
        p = Path(url.toLocalFile())
        why = check(p)
        if why is PENDING:
            checking.append(p)
        elif why is not None:
            return Dropped(refusal=str(why))
        paths.append(p)
    if checking:
        return Dropped(checking=tuple(checking))
    models = models_of(paths)
    if len(models) > 2:
        return Dropped(refusal=f"{len(models)} models: drop one (a target or a draft) or two (a pair)")
    return Dropped(tuple(models))


class FileChecks(QObject):
    """``check_file`` of each dragged file on a thread of its own, answered once per drag
    (``reset`` at each DragEnter): the Qt thread never opens, reads or stats a dragged
    file itself, and waits for an answer ``CHECK_WAIT_S`` at most. A check that hangs (a
    dead network mount) leaves its daemon thread behind, one per file however many
    times it is dragged again: a later drag waits for the check still running."""

    #: a check answered after the Qt thread stopped waiting for it
    answered = Signal()

    def __init__(self, parent: QObject | None = None, check: Callable[[Path], str | None] = check_file) -> None:
        super().__init__(parent)
        #: the check each dragged file gets (``check_file``)
        self.check = check
        self._lock = threading.Lock()
        self._results: dict[str, object] = {}  # this drag's answers (PENDING: asked, not answered)
        self._running: dict[str, threading.Event] = {}  # checks not answered yet, of any drag

    def reset(self) -> None:
        """A new drag: check every file again (it may have changed since); one whose check
        is still running gets that check's answer."""
        with self._lock:
            self._results.clear()

    @property
    def checking(self) -> bool:
        """A check of this drag has not answered yet."""
        with self._lock:
            return any(r is PENDING for r in self._results.values())

    @property
    def running(self) -> int:
        """Checks not answered yet, of this drag and earlier ones (a thread each)."""
        with self._lock:
            return len(self._running)

    def result(self, path: Path) -> object:
        """Why ``path`` cannot be dropped, None when it can, or ``PENDING``."""
        key = os.fspath(path)
        with self._lock:
            if key in self._results:
                r = self._results[key]
                if r is not PENDING:
                    return r
                done = None  # waited for once already in this drag
            else:
                self._results[key] = PENDING
                done = self._running.get(key)
                if done is None:  # no check of it still running from an earlier drag
                    done = self._running[key] = threading.Event()
                    threading.Thread(target=self._run, args=(Path(path), key, done), daemon=True,
                                     name=f"check {Path(path).name}").start()
        if done is not None and done.wait(CHECK_WAIT_S):
            with self._lock:
                return self._results.get(key, PENDING)
        return PENDING

    def _run(self, path: Path, key: str, done: threading.Event) -> None:
        try:
            why = self.check(path)
        except Exception as e:  # noqa: BLE001 - a check must answer, whatever it met
            why = f"{path.name} cannot be read: {e}"
        with self._lock:
            del self._running[key]
            if self._results.get(key) is PENDING:  # the drag now under way asked for it
                self._results[key] = why
        done.set()
        try:
            self.answered.emit()  # queued to the Qt thread; ignored if it already had the answer
        except RuntimeError:  # the window closed while this check hung
            pass


@dataclass(frozen=True)
class Landing:
    """What a drop at one place would do: ``opening`` (when ``ok``) and the words for it."""

    ok: bool
    text: str
    role: str | None = None  # the picker it lands on; None: the window
    opening: Opening | None = None
    checking: bool = False  # a dragged file's check has not answered: no verdict yet


def landing(dropped: Dropped, role: str | None, chosen_target: Path | None, loaded_target: Path | None,
            name=lambda p: p.name) -> Landing:
    """The landing of ``dropped`` on the ``role`` picker (None: elsewhere on the window).
    ``chosen_target``: the target the draft picker drafts for (the one chosen in the model
    bar); ``loaded_target``: the target loaded now, if any; ``name(path)``: a model's name."""
    if dropped.refusal:
        return Landing(False, dropped.refusal, role)
    if dropped.checking:
        names = ", ".join(p.name for p in dropped.checking)
        return Landing(False, f"Checking {names}…", role, checking=True)
    models = dropped.models
    if role is not None and len(models) != 1:
        return Landing(False, f"Drop one model on the {role} picker; two dropped on the window load as a pair", role)
    if role == "target":
        return Landing(True, f"Drop to load {name(models[0])} as the target", role, Opening(target=models[0]))
    if role == "draft":
        m = models[0]
        if chosen_target is None:
            return Landing(False, "Choose a target first: a draft speculates for a target", role)
        if m.resolve() == chosen_target.resolve():
            return Landing(False, f"{name(m)} is the target: drop another model as its draft", role)
        return Landing(True, f"Drop to use {name(m)} as the draft for {name(chosen_target)}", role, Opening(draft=m))
    if len(models) == 2:
        o = plan(OpenRequest(files=tuple(str(m) for m in models)))
        return Landing(True, f"Drop to load a pair: {name(o.target)} as the target (the larger), {name(o.draft)} as "
                             "the draft", None, o)
    m = models[0]
    if loaded_target is None:
        return Landing(True, f"Drop to load {name(m)} as the target", None, Opening(either=m))
    if m.resolve() == loaded_target.resolve():
        return Landing(False, f"{name(m)} is loaded already", None)
    return Landing(True, f"Drop to open {name(m)}: as the target, or as the draft for {name(loaded_target)} "
                         "if it can draft for it (you choose)", None, Opening(either=m))


class DropOverlay(QLabel):
    """The banner over the window while a drag is over it: where the drop will land, or why not."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.setObjectName("dropOverlay")
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setWordWrap(True)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)  # never a drop target itself
        self.hide()
        self.ok = True

    def show_landing(self, land: Landing, area: QRect, picker: QRect | None = None) -> None:
        """Over all of ``area`` (the window's content) for a drop on the window; for a drop
        on a picker, a callout just below ``picker`` (both in the window's coordinates)."""
        self.ok = land.ok
        fg, bg, border = ("#1864ab", "rgba(231, 245, 255, 225)", "#1c7ed6") if land.ok else \
            ("#495057", "rgba(248, 249, 250, 235)", "#868e96") if land.checking else \
            ("#c92a2a", "rgba(255, 245, 245, 235)", "#e03131")
        size, pad = ("15px", 12) if picker is not None else ("17px", 24)
        self.setStyleSheet(f"QLabel#dropOverlay {{ color: {fg}; background: {bg}; border: 3px dashed {border}; "
                           f"border-radius: 10px; font-size: {size}; font-weight: 600; padding: {pad}px; }}")
        mark = "" if land.ok or land.checking else "⛔ "
        self.setText(("⬆ " if picker is not None else "⬇ " if land.ok else "") + mark + land.text)
        inner = area.adjusted(12, 12, -12, -12)
        if picker is None:
            self.setGeometry(inner)
        else:
            self.setWordWrap(False)
            hint = self.sizeHint()
            self.setWordWrap(True)
            width = min(hint.width(), inner.width())
            x = max(inner.left(), min(picker.left(), inner.right() - width))
            self.setGeometry(x, picker.bottom() + 8, width, self.heightForWidth(width))
        self.show()
        self.raise_()


class DropController(QObject):
    """Handles drags over ``window`` (a MainWindow) and opens what is dropped with
    ``opener`` (a FileOpener)."""

    def __init__(self, window, opener) -> None:
        super().__init__(window)
        self.window = window
        self.opener = opener
        self.overlay = DropOverlay(window)
        self.checks = FileChecks(self)
        self.checks.answered.connect(self._answered)
        self._dragging: tuple[QMimeData, QPoint] | None = None  # the drag over the window now
        self._dropped: tuple[QMimeData, QPoint] | None = None  # dropped while a check had not answered
        self._handle = None
        window.installEventFilter(self)  # its Show: then its QWindow exists

    @property
    def checking(self) -> bool:
        """A dragged file's check has not answered yet."""
        return self.checks.checking

    # -- events ------------------------------------------------------------------------

    def eventFilter(self, obj, ev) -> bool:  # noqa: N802 - Qt API
        t = ev.type()
        if obj is self.window:
            if t in (QEvent.Type.Show, QEvent.Type.WinIdChange):
                self._attach()
            return False
        if obj is not self._handle:
            return False
        if t in (QEvent.Type.DragEnter, QEvent.Type.DragMove):
            if t == QEvent.Type.DragEnter:
                self.checks.reset()  # a new drag: its files are checked again
            return self._drag(ev)
        if t == QEvent.Type.DragLeave:
            self._dragging = None
            self.clear()
            return False  # Qt tells its own drag target (the message box) too
        if t == QEvent.Type.Drop:
            return self._drop(ev)
        return False

    def _attach(self) -> None:
        handle = self.window.windowHandle()
        if handle is not None and handle is not self._handle:
            if self._handle is not None:
                self._handle.removeEventFilter(self)
            self._handle = handle
            handle.installEventFilter(self)

    def _takes_text_at(self, pos: QPoint) -> bool:
        """A widget that takes dropped text (the message box) is under ``pos``."""
        w = self.window.childAt(pos)
        while w is not None and w is not self.window and not w.acceptDrops():
            w = w.parentWidget()
        return w is not None and w is not self.window

    def landing_at(self, mime: QMimeData, pos: QPoint) -> Landing:
        """What dropping ``mime`` at ``pos`` (window coordinates) would do."""
        w = self.window
        bar = w.model_bar
        role = bar.drop_role_at(bar.mapFrom(w, pos)) if bar.isVisible() else None
        chosen = ModelBar.path_of(w.target_combo) or w.target_path
        loaded = w.session.target.spec.path if w.session is not None else None
        return landing(dropped_models(mime, self.checks.result), role, chosen, loaded, w.catalog.name_of)

    @staticmethod
    def _copy(mime: QMimeData) -> QMimeData:
        """What the landing needs of a drag's data, kept past the event (Qt deletes the
        drag's own QMimeData when the drag ends)."""
        out = QMimeData()
        if mime.hasUrls():
            out.setUrls(mime.urls())
        if mime.hasText():
            out.setText(mime.text())
        return out

    def _drag(self, ev) -> bool:
        pos = ev.position().toPoint()
        if not ev.mimeData().hasUrls() and self._takes_text_at(pos):
            self._dragging = None
            self.clear()
            return False  # text for the message box: Qt's own handling
        self._dragging = (self._copy(ev.mimeData()), pos)
        land = self.landing_at(ev.mimeData(), pos)
        self.show(land)
        if land.ok or land.checking:  # checking: a drop now is answered when the check is
            ev.setDropAction(Qt.DropAction.CopyAction)
            ev.accept()
        else:
            ev.setDropAction(Qt.DropAction.IgnoreAction)
            ev.ignore()
        return True

    def _drop(self, ev) -> bool:
        pos = ev.position().toPoint()
        self._dragging = None
        if not ev.mimeData().hasUrls() and self._takes_text_at(pos):
            self.clear()
            return False
        land = self.landing_at(ev.mimeData(), pos)
        self.clear()
        if land.checking:  # accepted; carried out when the check answers (``_answered``)
            self._dropped = (self._copy(ev.mimeData()), pos)
            ev.setDropAction(Qt.DropAction.CopyAction)
            ev.accept()
            self.window.set_status(land.text)
            return True
        self._land(land)
        if not land.ok:
            ev.setDropAction(Qt.DropAction.IgnoreAction)
            ev.ignore()
        else:
            ev.setDropAction(Qt.DropAction.CopyAction)
            ev.accept()
        return True

    def _land(self, land: Landing) -> None:
        """Carry out a drop's landing: open what it opens, or say why not."""
        if not land.ok:
            self.window.set_status(f"not opened: {land.text}")
            return
        # open once the drop has been answered: the drag's source is not kept waiting
        QTimer.singleShot(0, lambda: self.opener.open_plan(land.opening))

    def _answered(self) -> None:
        """A check answered: the banner of the drag under way says what it found, and a
        drop made while it was checked is carried out now."""
        if self._dropped is not None:
            mime, pos = self._dropped
            land = self.landing_at(mime, pos)
            if not land.checking:
                self._dropped = None
                self.checks.reset()
                self._land(land)
        elif self._dragging is not None:
            mime, pos = self._dragging
            self.show(self.landing_at(mime, pos))

    # -- what the user sees ------------------------------------------------------------

    def show(self, land: Landing) -> None:
        w = self.window
        bar = w.model_bar
        bar.show_drop_role(land.role, land.ok or land.checking)
        picker = None
        if land.role is not None:
            r = bar.drop_rect(land.role)
            picker = QRect(bar.mapTo(w, r.topLeft()), r.size())
        self.overlay.show_landing(land, w.centralWidget().geometry(), picker)

    def clear(self) -> None:
        self.window.model_bar.show_drop_role(None)
        self.overlay.hide()


__all__ = ["DropController", "DropOverlay", "Dropped", "FileChecks", "Landing", "check_file", "dropped_models", "landing"]
