"""The real app with a probe: ``python app_probe.py ARGS...`` runs ``specdesk ARGS...``
(``specdesk.__main__.main``: the CLI's routing, the launcher, the single-instance guard,
the window) and reports what its window does as JSON lines on stdout:

    {"event": "ready", "pid": ..., "data_dir": ..., "socket": ...}   the window is up and listening
    {"event": "loaded", "target": PATH, "draft": PATH or null}       a pair (or a target alone) loaded
    {"event": "load_failed"}                                         a load failed
    {"event": "error", "text": ...}                                  an error the window shows
    {"event": "request", "files": [...], "target": ..., "draft": ...}  a second launch handed a request
    {"event": "asked", "text": ...}                                  the window asks which role a file takes
    {"event": "exit", "code": N}

Commands on stdin, one a line: ``quit`` closes the window (as the user would); ``fileopen
PATH`` sends the app a QFileOpenEvent (as the macOS Finder does); end of input quits.
"""

from __future__ import annotations

import json
import os
import sys
import threading


def emit(**kw) -> None:
    print(json.dumps(kw), flush=True)


def main() -> int:
    from PySide6.QtCore import QCoreApplication, QObject, QTimer, Signal
    from PySide6.QtGui import QFileOpenEvent

    from specdesk.__main__ import main as specdesk_main
    from specdesk.ui import main_window
    from specdesk.ui.single_instance import InstanceGuard

    class Commands(QObject):
        line = Signal(str)

    commands = Commands()

    class ProbedWindow(main_window.MainWindow):
        def __init__(self, *a, **kw) -> None:
            super().__init__(*a, **kw)
            self.models_changed.connect(self._probe_loaded)
            self.error_shown.connect(lambda text: emit(event="error", text=text))
            self.opener.asked.connect(lambda box: emit(event="asked", text=box.text()))
            commands.line.connect(self._probe_command)
            QTimer.singleShot(0, self._probe_ready)

        def _probe_ready(self) -> None:
            guard = QCoreApplication.instance().findChild(InstanceGuard)
            guard.request_received.connect(lambda r: emit(event="request", files=list(r.files), target=r.target,
                                                          draft=r.draft))
            emit(event="ready", pid=os.getpid(), data_dir=str(self.data_dir), socket=guard.name)

        def _probe_loaded(self, session) -> None:
            if session is None:
                emit(event="load_failed")
            else:
                emit(event="loaded", target=str(session.target.spec.path),
                     draft=str(session.draft.spec.path) if session.draft else None)

        def _probe_command(self, line: str) -> None:
            if line == "quit":
                self.close()
            elif line.startswith("fileopen "):
                QCoreApplication.postEvent(QCoreApplication.instance(), QFileOpenEvent(line[len("fileopen "):]))

    main_window.MainWindow = ProbedWindow

    def read_commands() -> None:
        for raw in sys.stdin:
            commands.line.emit(raw.strip())
        commands.line.emit("quit")

    threading.Thread(target=read_commands, name="probe-stdin", daemon=True).start()
    code = specdesk_main(sys.argv[1:])
    emit(event="exit", code=code)
    return code


if __name__ == "__main__":
    sys.exit(main())
