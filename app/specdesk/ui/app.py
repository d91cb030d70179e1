"""QApplication set-up and the app's entry point."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QObject, QSettings, QStandardPaths, Signal
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


def create_app(argv: list[str] | None = None) -> QApplication:
    configure_identity()
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv[:1])
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


def run(argv: list[str] | None = None) -> int:
    from ..session.remote import lost_endpoints, set_lost_handler
    from .main_window import MainWindow

    app = create_app(argv)
    w = MainWindow(data_dir())
    relay = RpcLostRelay(w)
    set_lost_handler(relay.lost.emit)  # then llama.cpp's waiting threads are parked, the app lives on
    w.show()
    code = app.exec()
    if lost_endpoints():
        # a thread still waits on the lost server inside llama.cpp: joining it at exit would hang
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
