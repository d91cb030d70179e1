"""Start the app, and make every failure to start visible.

A double-clicked app has no terminal: when it cannot start, the reason goes to a
dialog where one can be shown, and always to stderr and to a log file in the user
data directory. A silent exit is never acceptable.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path

from .paths import user_data_dir

log = logging.getLogger(__name__)


def _log_file() -> Path | None:
    for d in (user_data_dir(), Path.home() / ".cache" / "specdesk"):
        try:
            d.mkdir(parents=True, exist_ok=True)
            f = d / "specdesk.log"
            with open(f, "a", encoding="utf-8"):
                pass
            return f
        except OSError:
            continue
    return None


def report_startup_failure(message: str, detail: str = "") -> None:
    """stderr, the log file, and a dialog if a GUI can be shown at all."""
    print(f"specdesk: cannot start: {message}", file=sys.stderr)
    f = _log_file()
    if f is not None:
        try:
            with open(f, "a", encoding="utf-8") as out:
                import datetime

                out.write(f"{datetime.datetime.now().isoformat()} cannot start: {message}\n{detail}\n")
            print(f"specdesk: details in {f}", file=sys.stderr)
        except OSError:
            pass
    try:
        from PySide6.QtWidgets import QApplication, QMessageBox

        if QApplication.instance() is not None:
            QMessageBox.critical(None, "SpecDesk cannot start", message)
    except Exception:  # noqa: BLE001 - no dialog possible: stderr and the log have it
        pass


def _display_problem() -> str | None:
    if sys.platform.startswith("linux"):
        plat = os.environ.get("QT_QPA_PLATFORM", "")
        if plat.startswith(("offscreen", "minimal", "vnc", "eglfs", "linuxfb")):
            return None
        if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
            return "no display: DISPLAY and WAYLAND_DISPLAY are unset (run it in a desktop session, or set QT_QPA_PLATFORM=offscreen)"
    return None


def launch_gui(argv: list[str] | None = None) -> int:
    problem = _display_problem()
    if problem:
        report_startup_failure(problem)
        return 1
    try:
        from .ui.app import run
    except ImportError as e:
        report_startup_failure(f"a required library is missing or broken: {e}", traceback.format_exc())
        return 1
    try:
        return run(argv)
    except Exception as e:  # noqa: BLE001 - shown to the user instead of a silent exit
        report_startup_failure(f"{type(e).__name__}: {e}", traceback.format_exc())
        return 1
