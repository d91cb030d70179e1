"""While the app runs: an uncaught exception (on the UI thread or any worker thread)
goes to the log file, to stderr and to a non-modal message box, and the app keeps
running; Qt's own messages go to the log; a fatal Qt message or a native crash
(faulthandler) is logged before the process ends."""

from __future__ import annotations

import logging
import os
import sys
import threading
import traceback

from .failure import dialogs_allowed, report_startup_failure
from .log import log_file, stderr_line, write_log
from .logfile import open_log

EXIT_FAILURE = 1
_fault_file = None



class _ErrorBox:
    """Shows uncaught exceptions in a non-modal box on the UI thread; one box at a time."""

    def __init__(self) -> None:
        from PySide6.QtCore import QObject, Qt, Signal

        class Bridge(QObject):
            raised = Signal(str, str)

        self.bridge = Bridge()
        self.bridge.raised.connect(self._show, Qt.ConnectionType.QueuedConnection)
        self.box = None
        self.more = 0

    def emit(self, summary: str, detail: str) -> None:
        try:
            self.bridge.raised.emit(summary, detail)
        except RuntimeError:  # the bridge is gone (shutdown)
            pass

    def _show(self, summary: str, detail: str) -> None:
        from PySide6.QtCore import Qt
        from PySide6.QtWidgets import QMessageBox

        where = log_file()
        tail = f"\n\nDetails are in {where}" if where else ""
        if self.box is not None and self.box.isVisible():
            self.more += 1
            self.box.setInformativeText(f"The app keeps running. {self.more} more error(s) since.{tail}")
            return
        self.more = 0
        box = QMessageBox(QMessageBox.Icon.Critical, "SpecDesk: unexpected error", f"Something went wrong: {summary}")
        box.setInformativeText(f"The app keeps running; please report this.{tail}")
        box.setDetailedText(detail)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.setWindowModality(Qt.WindowModality.NonModal)
        box.destroyed.connect(lambda *_: setattr(self, "box", None))
        self.box = box
        box.show()


_error_box: _ErrorBox | None = None


def _report_uncaught(exc_type, exc, tb, where: str = "") -> None:
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    write_log(f"uncaught exception{where}:\n{text}")
    stderr_line(text)
    if _error_box is not None and dialogs_allowed():
        _error_box.emit(f"{exc_type.__name__}: {exc}", text)


def _excepthook(exc_type, exc, tb) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    _report_uncaught(exc_type, exc, tb)


def _thread_excepthook(args) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    _report_uncaught(args.exc_type, args.exc_value, args.exc_traceback, f" in thread {name}")


def _qt_message(mode, context, message: str) -> None:
    from PySide6.QtCore import QtMsgType

    qlog = logging.getLogger("qt")
    if mode == QtMsgType.QtFatalMsg:
        from PySide6.QtCore import QCoreApplication

        if not _app_started or QCoreApplication.startingUp():
            report_startup_failure(f"Qt could not start: {message.strip().splitlines()[0] if message.strip() else message}",
                                   message, qt_dialog=False)
        else:
            stderr_line(f"specdesk: Qt stopped the app: {message}")
            write_log(f"Qt stopped the app (fatal): {message}")
        logging.shutdown()
        os._exit(EXIT_FAILURE)
    level = {
        QtMsgType.QtDebugMsg: logging.DEBUG,
        QtMsgType.QtInfoMsg: logging.INFO,
        QtMsgType.QtWarningMsg: logging.WARNING,
        QtMsgType.QtCriticalMsg: logging.ERROR,
    }.get(mode, logging.WARNING)
    qlog.log(level, "%s", message)


_app_started = False
_hooks_installed = False


def set_app_started(started: bool) -> None:
    """Whether the QApplication runs: a fatal Qt message before that is a failure to start."""
    global _app_started
    _app_started = started


def install_crash_logging() -> None:
    """Uncaught exceptions, Qt messages and native crashes go to the log file (and a
    box on screen for exceptions). Call once the Qt platform is known to work."""
    global _error_box, _hooks_installed, _fault_file
    if _hooks_installed:
        return
    _hooks_installed = True
    f = log_file()
    try:
        stream = open_log(f) if f is not None else None
    except OSError:
        stream = None  # stderr still has every message
    if stream is not None:
        h = logging.StreamHandler(stream)
        h.setLevel(logging.WARNING)
        h.setFormatter(logging.Formatter("%(asctime)s [%(process)d] %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S"))
        logging.getLogger().addHandler(h)
        try:
            import faulthandler

            _fault_file = open_log(f)  # kept open for faulthandler
            faulthandler.enable(_fault_file, all_threads=True)
        except (OSError, RuntimeError, ValueError):
            pass
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook
    try:
        from PySide6.QtCore import qInstallMessageHandler

        qInstallMessageHandler(_qt_message)
        _error_box = _ErrorBox()
    except Exception:  # noqa: BLE001 - Qt unusable: the hooks above still log
        pass


def uninstall_crash_logging() -> None:
    global _error_box, _hooks_installed
    try:
        from PySide6.QtCore import qInstallMessageHandler

        qInstallMessageHandler(None)
    except Exception:  # noqa: BLE001
        pass
    sys.excepthook = sys.__excepthook__
    threading.excepthook = threading.__excepthook__
    _error_box = None
    _hooks_installed = False
