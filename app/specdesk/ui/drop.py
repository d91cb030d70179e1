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
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QEvent, QMimeData, QObject, QPoint, QRect, Qt, QTimer
from PySide6.QtWidgets import QLabel, QWidget

from .model_bar import ModelBar
from .open_files import OpenRequest, Opening, models_of, plan

MAGIC = b"GGUF"


@dataclass(frozen=True)
class Dropped:
    """The models a drag carries (split models by their first part), or why it is refused."""

    models: tuple[Path, ...] = ()
    refusal: str | None = None


def _looks_like_gguf(path: Path) -> bool:
    """A .gguf name, or GGUF's magic bytes at offset 0 (a model saved under another name)."""
    if path.suffix.lower() == ".gguf":
        return True
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def dropped_models(mime: QMimeData) -> Dropped:
    """The GGUF models in a drag's data, or the reason it cannot be opened."""
    if not mime.hasUrls():
        what = "text" if mime.hasText() else "this"
        return Dropped(refusal=f"Only GGUF model files can be dropped here, not {what}")
    paths = []
    for url in mime.urls():
        if not url.isLocalFile():
            name = url.fileName() or url.toDisplayString()
            return Dropped(refusal=f"{name} is not a file on this computer: download it first (Library tab)")
        p = Path(url.toLocalFile())
        if p.is_dir():
            return Dropped(refusal=f"{p.name} is a folder: drop the .gguf files in it")
        if not p.exists():
            return Dropped(refusal=f"{p.name}: no such file")
        try:
            if not _looks_like_gguf(p):
                return Dropped(refusal=f"{p.name} is not a GGUF model (no .gguf name, no GGUF header)")
        except OSError as e:
            return Dropped(refusal=f"{p.name} cannot be read: {e.strerror or e}")
        paths.append(p)
    models = models_of(paths)
    if len(models) > 2:
        return Dropped(refusal=f"{len(models)} models: drop one (a target or a draft) or two (a pair)")
    return Dropped(tuple(models))


@dataclass(frozen=True)
class Landing:
    """What a drop at one place would do: ``opening`` (when ``ok``) and the words for it."""

    ok: bool
    text: str
    role: str | None = None  # the picker it lands on; None: the window
    opening: Opening | None = None


def landing(dropped: Dropped, role: str | None, chosen_target: Path | None, loaded_target: Path | None,
            name=lambda p: p.name) -> Landing:
    """The landing of ``dropped`` on the ``role`` picker (None: elsewhere on the window).
    ``chosen_target``: the target the draft picker drafts for (the one chosen in the model
    bar); ``loaded_target``: the target loaded now, if any; ``name(path)``: a model's name."""
    if dropped.refusal:
        return Landing(False, dropped.refusal, role)
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
            ("#c92a2a", "rgba(255, 245, 245, 235)", "#e03131")
        size, pad = ("15px", 12) if picker is not None else ("17px", 24)
        self.setStyleSheet(f"QLabel#dropOverlay {{ color: {fg}; background: {bg}; border: 3px dashed {border}; "
                           f"border-radius: 10px; font-size: {size}; font-weight: 600; padding: {pad}px; }}")
        self.setText(("⬆ " if picker is not None else "⬇ " if land.ok else "") + ("" if land.ok else "⛔ ") + land.text)
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
        self._handle = None
        window.installEventFilter(self)  # its Show: then its QWindow exists

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
            return self._drag(ev)
        if t == QEvent.Type.DragLeave:
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
        return landing(dropped_models(mime), role, chosen, loaded, w.catalog.name_of)

    def _drag(self, ev) -> bool:
        pos = ev.position().toPoint()
        if not ev.mimeData().hasUrls() and self._takes_text_at(pos):
            self.clear()
            return False  # text for the message box: Qt's own handling
        land = self.landing_at(ev.mimeData(), pos)
        self.show(land)
        if land.ok:
            ev.setDropAction(Qt.DropAction.CopyAction)
            ev.accept()
        else:
            ev.setDropAction(Qt.DropAction.IgnoreAction)
            ev.ignore()
        return True

    def _drop(self, ev) -> bool:
        pos = ev.position().toPoint()
        if not ev.mimeData().hasUrls() and self._takes_text_at(pos):
            self.clear()
            return False
        land = self.landing_at(ev.mimeData(), pos)
        self.clear()
        if not land.ok:
            ev.setDropAction(Qt.DropAction.IgnoreAction)
            ev.ignore()
            self.window.set_status(f"not opened: {land.text}")
            return True
        ev.setDropAction(Qt.DropAction.CopyAction)
        ev.accept()
        # open once the drop has been answered: the drag's source is not kept waiting
        QTimer.singleShot(0, lambda: self.opener.open_plan(land.opening))
        return True

    # -- what the user sees ------------------------------------------------------------

    def show(self, land: Landing) -> None:
        w = self.window
        bar = w.model_bar
        bar.show_drop_role(land.role, land.ok)
        picker = None
        if land.role is not None:
            r = bar.drop_rect(land.role)
            picker = QRect(bar.mapTo(w, r.topLeft()), r.size())
        self.overlay.show_landing(land, w.centralWidget().geometry(), picker)

    def clear(self) -> None:
        self.window.model_bar.show_drop_role(None)
        self.overlay.hide()


__all__ = ["DropController", "DropOverlay", "Dropped", "Landing", "dropped_models", "landing"]
