"""The app's log file and stderr: where a failure to start, or a crash, is written.

The log is the first writable of the user data directory, the cache directory and a
per-user folder in the temp directory; it is rotated at about 1 MB.
"""

from __future__ import annotations

import datetime
import os
import sys
import tempfile
from pathlib import Path

from ...paths import user_cache_dir, user_data_dir
from .logfile import open_log, private_dir, temp_log_dir

LOG_NAME = "specdesk.log"
_LOG_MAX_BYTES = 1_000_000

_log_path: Path | None = None
_log_resolved = False


def writable_dir_problem(d: Path) -> str | None:
    """None if files can be created in ``d`` (created if needed), else why not."""
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".write-test-", dir=d)
        os.close(fd)
        os.unlink(name)
        return None
    except OSError as e:
        return e.strerror or str(e)


def _log_dirs() -> list[Path]:
    dirs = []
    for get in (user_data_dir, user_cache_dir):
        try:
            dirs.append(get())
        except Exception:  # noqa: BLE001 - platformdirs on a broken HOME
            pass
    dirs.append(temp_log_dir())
    return dirs


def log_file() -> Path | None:
    """The log file: the first writable of the user data dir, the cache dir, the temp dir."""
    global _log_path, _log_resolved
    if _log_resolved:
        return _log_path
    _log_resolved = True
    temp = temp_log_dir()
    for d in _log_dirs():
        f = d / LOG_NAME
        try:
            if d == temp:
                private_dir(d)  # shared /tmp: never follow someone else's folder or link
            else:
                d.mkdir(parents=True, exist_ok=True)
            with open_log(f, max_bytes=_LOG_MAX_BYTES):
                pass
            _log_path = f
            break
        except OSError:
            continue
    return _log_path


def _reset_log_file() -> None:  # for tests
    global _log_path, _log_resolved
    _log_path, _log_resolved = None, False


def write_log(text: str) -> Path | None:
    f = log_file()
    if f is None:
        return None
    try:
        with open_log(f) as out:
            out.write(f"{datetime.datetime.now().isoformat(timespec='seconds')} [{os.getpid()}] {text.rstrip()}\n")
        return f
    except OSError:
        return None


def stderr_line(text: str) -> None:
    # A windowed app on Windows (console=False) has sys.stderr = None.
    err = sys.stderr
    if err is None:
        return
    try:
        err.write(text.rstrip("\n") + "\n")
        err.flush()
    except (OSError, ValueError):
        pass
