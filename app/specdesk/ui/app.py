"""QApplication set-up and the app's entry point."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QStandardPaths
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from .. import __version__
from ..paths import APP_NAME, asset_path

log = logging.getLogger(__name__)


def configure_identity() -> None:
    QCoreApplication.setOrganizationName(APP_NAME)
    QCoreApplication.setApplicationName(APP_NAME)
    QCoreApplication.setApplicationVersion(__version__)


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


def run(argv: list[str] | None = None) -> int:
    from .main_window import MainWindow

    app = create_app(argv)
    w = MainWindow(data_dir())
    w.show()
    return app.exec()
