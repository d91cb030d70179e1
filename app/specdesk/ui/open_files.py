"""Opening GGUF files that come from outside the pickers: the command line, a second
launch (``single_instance``), the macOS Finder (a QFileOpenEvent) and drops (``drop``).

Which file takes which role is the library's (:mod:`specdesk.library.opening`);
:class:`FileOpener` carries an :class:`~specdesk.library.opening.Opening` out in the
window, through the same steps as the pickers, so a bad file gets the same one-line
reason in the window.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMessageBox

from ..library.opening import OpenRequest, Opening, plan, same_file

log = logging.getLogger(__name__)

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
        if target is None or same_file(path, target) or not path.is_file():
            w.open_model_file(path, "target")  # a missing file gets the picker's reason
            return
        w.catalog.remember(path)  # so that pairing checks it, as the library's models
        w.set_status(f"checking whether {path.name} can draft for {target.name}…")

        def paired(cands: list) -> None:
            if w.session is None or not same_file(w.session.target.spec.path, target):
                w.open_model_file(path, "target")  # the loaded target changed meanwhile
                return
            cand = next((c for c in cands if same_file(c.path, path)), None)
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


__all__ = ["FileOpener", "OpenRequest", "Opening", "plan"]
