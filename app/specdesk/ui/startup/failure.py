"""Saying why the app cannot start: stderr, the log, and a dialog where one can be shown.

``SPECDESK_NO_DIALOGS=1`` suppresses all dialogs (scripts, CI). No modal dialog is
ever shown on the offscreen/minimal platforms, where nobody could close it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .log import stderr_line, write_log

_HEADLESS_PLATFORMS = ("offscreen", "minimal", "vnc", "eglfs", "linuxfb", "minimalegl", "vkkhrdisplay")



def dialogs_allowed() -> bool:
    if os.environ.get("SPECDESK_NO_DIALOGS", "") not in ("", "0"):
        return False
    plat = os.environ.get("QT_QPA_PLATFORM", "").split(";")[0].split(":")[0].strip()
    return plat not in _HEADLESS_PLATFORMS


def _qt_dialog(title: str, message: str, detail: str, where: Path | None) -> bool:
    """A modal error box, creating a QApplication if needed. Only call when the
    platform plugin is known to work."""
    try:
        from PySide6.QtWidgets import QApplication, QMessageBox

        app = QApplication.instance() or QApplication(sys.argv[:1])  # noqa: F841 - keeps it alive
        box = QMessageBox(QMessageBox.Icon.Critical, title, message)
        if where is not None:
            box.setInformativeText(f"Details are in {where}")
        if detail:
            box.setDetailedText(detail)
        box.exec()
        return True
    except Exception:  # noqa: BLE001 - no dialog possible: stderr and the log have it
        return False


def _external_dialog(title: str, message: str) -> bool:
    """zenity / kdialog / xmessage, for when Qt itself cannot show anything."""
    if not sys.platform.startswith("linux") or not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    for argv in (
        ["zenity", "--error", "--no-wrap", f"--title={title}", f"--text={message}"],
        ["kdialog", "--title", title, "--error", message],
        ["xmessage", "-center", "-title", title, f"{title}\n\n{message}"],
    ):
        if shutil.which(argv[0]):
            try:
                subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
                return True
            except OSError:
                continue
    return False


def report_startup_failure(message: str, detail: str = "", qt_dialog: bool = True) -> None:
    """stderr (one line), the log file, and a dialog where one can be shown.

    ``qt_dialog=False`` when Qt cannot show anything (no display, broken platform
    plugin): then an external dialog tool is tried instead.
    """
    message = " ".join(message.split())  # one line
    stderr_line(f"specdesk: cannot start: {message}")
    where = write_log(f"cannot start: {message}" + (f"\n{detail.rstrip()}" if detail else ""))
    if where is not None:
        stderr_line(f"specdesk: details in {where}")
    else:
        stderr_line("specdesk: (no log file could be written anywhere)")
    if not dialogs_allowed():
        return
    try:
        from PySide6.QtWidgets import QApplication

        have_app = QApplication.instance() is not None
    except Exception:  # noqa: BLE001
        have_app = False
    if (qt_dialog or have_app) and _qt_dialog("SpecDesk cannot start", message, detail, where):
        return
    _external_dialog("SpecDesk cannot start", message + (f"\n\nDetails are in {where}" if where else ""))
