"""Opening the log file without following anyone's links.

The last fallback for the log is a folder in the shared temp dir (``/tmp``), where
any local user can create names first: a symlink ``/tmp/specdesk-1000 -> ~victim``
or ``/tmp/specdesk-1000/specdesk.log -> ~/.bashrc`` would make the app append to a
file of the attacker's choosing. So:

- :func:`temp_log_dir` is per user (``specdesk-<uid>``) and :func:`private_dir`
  creates it 0o700 and refuses one that is a symlink, not a folder, or someone else's
  (a group/other-writable one of ours is tightened to 0o700);
- :func:`open_log` opens the file with ``O_NOFOLLOW`` (a symlink is refused, not
  followed), owner-only (0o600), and refuses anything but a regular file of ours
  with one link; rotation renames within that folder.

No Qt here: the launcher uses it before Qt starts. Every refusal is an ``OSError``,
so a caller that tries the next location on OSError needs no other change.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import TextIO

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def temp_log_dir() -> Path:
    """The per-user log folder in the temp dir: ``<tmp>/specdesk-<uid>``."""
    uid = _uid()
    return Path(tempfile.gettempdir()) / f"specdesk-{uid if uid is not None else os.environ.get('USERNAME', 'user')}"


def private_dir(d: Path) -> Path:
    """Create ``d`` (0o700) if missing and check it: a real folder (not a symlink),
    owned by this user, not writable by others (tightened if it is ours). Raises
    OSError otherwise."""
    d = Path(d)
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise OSError(errno.ENOTDIR, "not a private folder (a symlink or a file is in its place)", str(d))
    uid = _uid()
    if uid is not None:
        if st.st_uid != uid:
            raise OSError(errno.EPERM, "the folder belongs to another user", str(d))
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(d, 0o700)  # checked above: not a symlink
    return d


def _check_ours(fd: int, path: Path) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    uid = _uid()
    if uid is not None and st.st_uid != uid:
        raise OSError(errno.EPERM, "the file belongs to another user", str(path))
    if st.st_nlink > 1:
        raise OSError(errno.EMLINK, "the file has other hard links", str(path))


def open_log(path: Path, max_bytes: int | None = None) -> TextIO:
    """``path`` opened for appending text (UTF-8, line-buffered), created 0o600.

    A symlink at ``path`` is refused (``O_NOFOLLOW``), and so is a file that is not a
    regular file of this user with one link. Over ``max_bytes``, the file is first
    renamed to ``<name>.1`` (replacing an older one) and a new one started. Raises
    OSError when the file cannot be opened safely."""
    path = Path(path)
    if max_bytes is not None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_size > max_bytes:
            os.replace(path, path.with_name(path.name + ".1"))  # renames the link itself, never its target
    # O_NONBLOCK: a FIFO planted at the path fails at once (ENXIO) instead of blocking
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _CLOEXEC | _NONBLOCK, 0o600)
    try:
        _check_ours(fd, path)
        if hasattr(os, "fchmod") and stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            os.fchmod(fd, 0o600)
        if _NONBLOCK and hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace", buffering=1)
    except BaseException:
        os.close(fd)
        raise


__all__ = ["open_log", "private_dir", "temp_log_dir"]
