"""Start the app, and make every failure to start (and every crash) visible.

A double-clicked app has no terminal: when it cannot start, the reason goes to a
dialog where one can be shown, and always to stderr and to a log file (see
``log``). The Qt platform and the data directory are checked before the
QApplication exists (``preflight``); crashes while it runs are logged and shown
(``crash``). A silent exit is never acceptable.
"""

from __future__ import annotations

import traceback

from . import crash
from .crash import EXIT_FAILURE, install_crash_logging, uninstall_crash_logging
from .failure import report_startup_failure
from .log import write_log
from .preflight import data_dir_problem, platform_problem

def launch_gui(argv: list[str] | None = None, files=(), target=None, draft=None, new_instance: bool = False) -> int:
    """The app, opening ``files`` (roles decided by the app), ``target`` and ``draft``;
    handed to the app already running on this data folder when there is one."""
    try:
        import PySide6.QtCore  # noqa: F401
        import PySide6.QtWidgets  # noqa: F401
    except ImportError as e:
        report_startup_failure(f"the Qt library (PySide6) is missing or broken: {e}", traceback.format_exc(), qt_dialog=False)
        return EXIT_FAILURE
    try:
        problem = platform_problem()
    except Exception as e:  # noqa: BLE001 - the check itself failed: let Qt try, the handler catches aborts
        write_log(f"platform check failed: {type(e).__name__}: {e}")
        problem = None
    if problem:
        report_startup_failure(problem, qt_dialog=False)
        return EXIT_FAILURE
    # From here on Qt can show a dialog. A fatal Qt message is reported, not a silent abort.
    install_crash_logging()
    try:
        from ..app import data_dir, run
        from ..open_files import OpenRequest
        from ..single_instance import InstanceUnavailable
    except ImportError as e:
        report_startup_failure(f"a required library is missing or broken: {e}", traceback.format_exc())
        return EXIT_FAILURE
    try:
        d = data_dir()
        problem = data_dir_problem(d)
    except Exception as e:  # noqa: BLE001
        problem = f"cannot determine the user data directory: {e}"
    if problem:
        report_startup_failure(problem)
        return EXIT_FAILURE
    crash.set_app_started(True)
    try:
        return run(argv, OpenRequest.from_command_line(files, target, draft), new_instance)
    except InstanceUnavailable as e:
        report_startup_failure(str(e))
        return EXIT_FAILURE
    except Exception as e:  # noqa: BLE001 - shown to the user instead of a silent exit
        report_startup_failure(f"{type(e).__name__}: {e}", traceback.format_exc())
        return EXIT_FAILURE
    finally:
        crash.set_app_started(False)
        uninstall_crash_logging()
