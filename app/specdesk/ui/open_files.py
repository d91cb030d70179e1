"""Opening GGUF files that come from outside the pickers: the command line, a second
launch (``single_instance``), the macOS Finder (a QFileOpenEvent) and drops (``drop``).

An :class:`OpenRequest` says what was given (files with or without roles); :func:`plan`
turns it into an :class:`Opening` (a target and a draft, or one file whose role the
window decides); :class:`FileOpener` carries it out in the window, through the same
steps as the pickers, so a bad file gets the same one-line reason in the window:

- two files and no roles: the larger is the target (a split model counts all its parts);
- a split model is named by any of its parts and opened by its first one;
- one file and no role: the target, unless a target is loaded and the file can draft
  for it (``library.pairing``): then the app asks which role it takes.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMessageBox

from ..library.gguf.split import first_part, split_parts

log = logging.getLogger(__name__)

#: A request names at most this many files; a longer message is refused, not read.
MAX_FILES = 16


@dataclass(frozen=True)
class OpenRequest:
    """Files to open, as absolute paths: ``files`` without a role, and the ``target`` and
    ``draft`` given as such. An empty request asks the window only to show itself."""

    files: tuple[str, ...] = ()
    target: str | None = None
    draft: str | None = None

    @property
    def empty(self) -> bool:
        return not self.files and self.target is None and self.draft is None

    @classmethod
    def from_command_line(cls, files: Sequence[str | os.PathLike] = (), target: str | os.PathLike | None = None,
                          draft: str | os.PathLike | None = None, cwd: str | None = None) -> "OpenRequest":
        """Paths as the user typed them, made absolute against ``cwd`` (default: this
        process's), so that another process can open them."""
        base = cwd or os.getcwd()

        def absolute(p) -> str:
            return os.path.normpath(os.path.join(base, os.path.expanduser(os.fspath(p))))

        return cls(tuple(absolute(f) for f in files), absolute(target) if target else None,
                   absolute(draft) if draft else None)

    def to_json(self) -> str:
        return json.dumps({"files": list(self.files), "target": self.target, "draft": self.draft})

    @classmethod
    def from_json(cls, text: str) -> "OpenRequest":
        """The request in ``text``; ValueError for anything but a well-formed one."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        files = data.get("files", [])
        if not isinstance(files, list) or len(files) > MAX_FILES or not all(isinstance(f, str) and f for f in files):
            raise ValueError(f"'files' must be a list of at most {MAX_FILES} paths")
        roles = [data.get("target"), data.get("draft")]
        if not all(r is None or (isinstance(r, str) and r) for r in roles):
            raise ValueError("'target' and 'draft' must be paths or null")
        if not all(os.path.isabs(p) for p in files + [r for r in roles if r]):
            raise ValueError("paths must be absolute")
        return cls(tuple(files), roles[0], roles[1])


@dataclass(frozen=True)
class Opening:
    """What to open: ``target`` and ``draft``; or ``either``, one file whose role the
    window decides; or ``error``, why nothing can be opened."""

    target: Path | None = None
    draft: Path | None = None
    either: Path | None = None
    error: str | None = None


def model_size(path: Path) -> int:
    """The bytes of the model ``path`` names: every present part of a split model."""
    total = 0
    for p in split_parts(Path(path)):
        try:
            total += p.stat().st_size
        except OSError:
            pass
    return total


def _same(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def models_of(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Each path as the model it names (a split model by its first part), once each."""
    out: list[Path] = []
    for p in paths:
        m = first_part(Path(p))
        if not any(_same(m, o) for o in out):
            out.append(m)
    return out


def plan(req: OpenRequest) -> Opening:
    """The roles of the request's files (see the module's docstring)."""
    target = first_part(Path(req.target)) if req.target else None
    draft = first_part(Path(req.draft)) if req.draft else None
    if target is not None and draft is not None and _same(target, draft):
        return Opening(error=f"{target.name} is given as both the target and the draft: a model does not draft for itself")
    given = [m for m in (target, draft) if m is not None]
    files = [m for m in models_of(req.files) if not any(_same(m, g) for g in given)]
    free = (target is None) + (draft is None)
    if len(files) > free:
        every = given + files
        return Opening(error=f"SpecDesk opens a target and at most one draft, but {len(every)} models were given: "
                             + ", ".join(m.name for m in every))
    if not files:
        return Opening(target, draft)
    if target is None and draft is None:
        if len(files) == 1:
            return Opening(either=files[0])
        big, small = sorted(files, key=model_size, reverse=True)  # stable: equal sizes keep their order
        return Opening(big, small)
    if target is None:
        return Opening(files[0], draft)
    return Opening(target, files[0])


class FileOpener(QObject):
    """Carries out requests in the window, as the pickers would."""

    #: the "which role?" question (a QMessageBox), when it is shown
    asked = Signal(object)

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window

    def present(self) -> None:
        """Show the window in front (a second launch asked for it)."""
        w = self.window
        if w.isMinimized():
            w.showNormal()
        w.show()
        if QGuiApplication.platformName() not in ("offscreen", "minimal"):  # no window stacking there
            w.raise_()
            w.activateWindow()

    def open(self, req: OpenRequest) -> None:
        self.present()
        if not req.empty:
            self.open_plan(plan(req))

    def open_plan(self, o: Opening) -> None:
        w = self.window
        if o.error:
            w.show_error(o.error)
        elif o.either is not None:
            self.open_one(o.either)
        elif o.target is not None and o.draft is not None:
            w.load_models(o.target, o.draft)
        elif o.target is not None:
            w.open_model_file(o.target, "target")
        elif o.draft is not None:
            w.open_model_file(o.draft, "draft")

    def open_one(self, path: Path) -> None:
        """One file with no role: the target, unless it can draft for the loaded target;
        then the app asks."""
        w = self.window
        target = w.session.target.spec.path if w.session is not None else None
        if target is None or _same(path, target) or not path.is_file():
            w.open_model_file(path, "target")  # a missing file gets the picker's reason
            return
        w.catalog.remember(path)  # so that pairing checks it, as the library's models
        w.set_status(f"checking whether {path.name} can draft for {target.name}…")

        def paired(cands: list) -> None:
            if w.session is None or not _same(w.session.target.spec.path, target):
                w.open_model_file(path, "target")  # the loaded target changed meanwhile
                return
            cand = next((c for c in cands if _same(c.path, path)), None)
            if cand is not None and cand.usable:
                w.set_status(f"{path.name} can draft for {target.name}: as the draft, or as the new target?")
                self.ask_role(path, target, cand)
            else:
                w.set_status("")
                w.open_model_file(path, "target")

        w.catalog.pair(target, paired, lambda msg: (log.info("pairing failed: %s", msg), w.open_model_file(path, "target")))

    def ask_role(self, path: Path, target: Path, cand) -> QMessageBox:
        """Ask whether ``path`` drafts for ``target`` or becomes the new target (window-modal,
        without blocking: the answer opens it)."""
        w = self.window
        tname = w.catalog.name_of(target)
        box = QMessageBox(QMessageBox.Icon.Question, "Target or draft?",
                          f"Open {path.name} as the draft for {tname}, or as the new target?", parent=w)
        box.setObjectName("roleQuestion")
        how = ("It shares the target's vocabulary." if cand.compatible else
               "It has another vocabulary: it drafts translated (its text is re-tokenized for the target, "
               "which verifies every token; exact all the same).")
        box.setInformativeText(f"As the draft, it proposes tokens that {tname} verifies. {how}\n"
                               f"As the target, it replaces {tname}.")
        as_draft = box.addButton(f"Draft for {tname}", QMessageBox.ButtonRole.AcceptRole)
        as_draft.setObjectName("asDraftButton")
        as_target = box.addButton("New target", QMessageBox.ButtonRole.AcceptRole)
        as_target.setObjectName("asTargetButton")
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(as_draft)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.setWindowModality(Qt.WindowModality.WindowModal)

        def answered(button) -> None:
            role = "draft" if button is as_draft else "target" if button is as_target else None
            w.set_status("")
            if role is not None:
                w.open_model_file(path, role)

        box.buttonClicked.connect(answered)
        box.open()
        self.asked.emit(box)
        return box


__all__ = ["FileOpener", "OpenRequest", "Opening", "model_size", "models_of", "plan"]
