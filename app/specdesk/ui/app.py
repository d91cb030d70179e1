"""QApplication set-up and the app's entry point."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QSettings, QStandardPaths, QTimer, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QMessageBox

from .. import __version__
from ..paths import APP_NAME, asset_path, user_config_dir

log = logging.getLogger(__name__)


def configure_identity() -> None:
    QCoreApplication.setOrganizationName(APP_NAME)
    QCoreApplication.setApplicationName(APP_NAME)
    QCoreApplication.setApplicationVersion(__version__)
    config = user_config_dir()
    if config is not None:  # every QSettings made after this is $SPECDESK_CONFIG_DIR/SpecDesk/SpecDesk.ini
        QSettings.setDefaultFormat(QSettings.Format.IniFormat)
        QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(config))


def data_dir() -> Path:
    env = os.environ.get("SPECDESK_DATA_DIR")
    if env:
        return Path(env).expanduser()
    configure_identity()
    # <generic data>/SpecDesk: the same folder as specdesk.paths.user_data_dir() (the log,
    # the library settings) on Linux, macOS and Windows
    loc = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.GenericDataLocation)
    return Path(loc) / APP_NAME


class Application(QApplication):
    """The app's QApplication. It also takes the documents the macOS Finder opens with
    SpecDesk ("Open with", a double-click, a drop on the Dock icon): each comes as a
    QFileOpenEvent, at start and while the app runs."""

    def __init__(self, argv: list[str]) -> None:
        super().__init__(argv)
        self._on_file = None
        self._pending: list[str] = []  # opened before anything listened

    def on_file_open(self, handler) -> None:
        """``handler(path)`` for every file opened this way, the ones so far first."""
        self._on_file = handler
        pending, self._pending = self._pending, []
        for path in pending:
            handler(path)

    def event(self, e) -> bool:  # noqa: N802 - Qt API
        if e.type() == QEvent.Type.FileOpen:
            path = e.file() or e.url().toLocalFile()
            if path:
                if self._on_file is None:
                    self._pending.append(path)
                else:
                    self._on_file(path)
            return True
        return super().event(e)


def create_app(argv: list[str] | None = None) -> QApplication:
    configure_identity()
    app = QApplication.instance() or Application(argv if argv is not None else sys.argv[:1])
    app.setDesktopFileName("specdesk")
    icon = asset_path("icons/specdesk.svg")
    if icon is not None:
        app.setWindowIcon(QIcon(str(icon)))
    qss = asset_path("style.qss")
    if qss is not None:
        app.setStyleSheet(qss.read_text(encoding="utf-8"))
    return app


class RpcLostRelay(QObject):
    """An RPC server lost mid-step is reported on llama.cpp's connection thread: this
    carries the message to the GUI thread (a queued signal) and shows it."""

    lost = Signal(str)

    def __init__(self, parent_window) -> None:
        super().__init__()
        self._window = parent_window
        self.lost.connect(self._show)

    def _show(self, message: str) -> None:
        log.error("%s", message)
        self._window.rpc_lost(message)  # ends the work that waited on it, frees the window
        QMessageBox.warning(self._window, "RPC server lost", message + ". Load the models again (locally, or with the "
                            "server restarted) from the model bar; the app does not need a restart.")


def run(argv: list[str] | None = None, request=None, new_instance: bool = False) -> int:
    """The app, opening ``request`` (an OpenRequest: files from the command line); or,
    when an app already runs on this data folder, hand ``request`` to it and return 0."""
    from ..session.remote import lost_endpoints, set_lost_handler
    from .main_window import MainWindow
    from .open_files import OpenRequest
    from .single_instance import claim_for_launch

    request = request or OpenRequest()
    app = create_app(argv)
    guard = claim_for_launch(data_dir(), request, new_instance, parent=app)
    if guard is None:
        return 0  # the running app took the request
    w = MainWindow(guard.data_dir, autoload=request.empty)
    relay = RpcLostRelay(w)
    set_lost_handler(relay.lost.emit)  # then llama.cpp's waiting threads are parked, the app lives on
    guard.request_received.connect(w.opener.open)
    if isinstance(app, Application):
        app.on_file_open(lambda path: w.opener.open(OpenRequest(files=(path,))))
    w.show()
    if not request.empty:
        QTimer.singleShot(0, lambda: w.opener.open(request))
    try:
        code = app.exec()
    finally:
        guard.release()
    if lost_endpoints():
        # a thread still waits on the lost server inside llama.cpp: joining it at exit would hang
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
