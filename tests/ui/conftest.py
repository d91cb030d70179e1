"""UI tests: the real widgets under QT_QPA_PLATFORM=offscreen, real models.

The autouse ``no_leaks`` fixture fails any test that leaves a top-level widget
open or a worker thread running.
"""

from __future__ import annotations

import os
import threading

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import QCoreApplication, QSettings, QStandardPaths  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402



@pytest.fixture(scope="session")
def qapp_args():
    return ["specdesk-tests"]


@pytest.fixture(scope="session", autouse=True)
def _isolated_settings(tmp_path_factory):
    QStandardPaths.setTestModeEnabled(True)
    QCoreApplication.setOrganizationName("SpecDeskTests")
    QCoreApplication.setApplicationName("SpecDeskTests")
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp_path_factory.mktemp("qsettings")))
    yield


@pytest.fixture(autouse=True)
def no_leaks(qapp, monkeypatch, tmp_path):
    """Fail a test that leaves top-level widgets open or threads running."""
    monkeypatch.setenv("SPECDESK_DATA_DIR", str(tmp_path / "data"))
    QSettings().clear()
    before_threads = {t.ident for t in threading.enumerate()}
    before_widgets = {id(w) for w in QApplication.topLevelWidgets() if w.isVisible()}
    yield
    from specdesk.ui.tasks import running_tasks

    qapp.processEvents()
    leaked_tasks = running_tasks()
    for t in leaked_tasks:
        t.stop_and_wait(30000)
    leaked_widgets = [w for w in QApplication.topLevelWidgets() if w.isVisible() and id(w) not in before_widgets]
    for w in leaked_widgets:
        w.close()
    leaked_threads = [t for t in threading.enumerate() if t.ident not in before_threads and t.is_alive() and not t.daemon]
    assert not leaked_tasks, f"worker threads left running: {[t.name for t in leaked_tasks]}"
    assert not leaked_widgets, f"top-level widgets left open: {[type(w).__name__ for w in leaked_widgets]}"
    assert not leaked_threads, f"Python threads left running: {leaked_threads}"


@pytest.fixture
def window(qtbot, tmp_path):
    """A fresh main window on a data folder of its own, nothing loaded; closed after."""
    from specdesk.ui.main_window import MainWindow

    w = MainWindow(tmp_path / "data", autoload=False)
    w.show()
    yield w
    w.close()
