"""Files SpecDesk writes and reads itself: atomic writes, forgiving JSON reads, hashes.

One helper per job, used by every layer: a settings file, a cache, a report or a
downloaded model is written through a temporary file in the same folder and moved
into place with :func:`os.replace`, so an interrupted write never leaves a
half-written file under the real name.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import stat
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

log = logging.getLogger(__name__)

CHUNK = 1 << 20
#: What read_json_object reads at most: settings, caches and the library index are far smaller.
MAX_JSON_BYTES = 64 << 20


@contextmanager
def atomic_file(path: Path, mode: int | None = None, suffix: str = ".tmp") -> Iterator[BinaryIO]:
    """A file written under a unique temporary name beside ``path``: when the block
    ends it is fsynced and renamed onto ``path``; when the block raises (a failed
    check, a cancel, a full disk) it is removed and ``path`` is untouched.

    Unique temporary names let two processes write the same file at once: the last
    rename wins and neither sees the other's half-written bytes. ``mode`` (e.g. 0o600,
    or 0o644 for a public file: mkstemp gives 0o600) applies to the new file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    try:
        if mode is not None and hasattr(os, "fchmod"):
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_bytes_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` atomically (``atomic_file``)."""
    with atomic_file(path, mode) as f:
        f.write(data)


def dumps_json(data: object, indent: int | None = None) -> str:
    """JSON that always encodes: ASCII escapes keep file names that are not valid UTF-8
    (surrogate escapes) writable and readable again."""
    return json.dumps(data, indent=indent, ensure_ascii=True)


def write_json_atomic(path: Path, data: object, indent: int | None = None) -> None:
    write_bytes_atomic(path, dumps_json(data, indent).encode("ascii"))


def move_aside(path: Path, why: str) -> Path | None:
    """Keep a damaged file under a new name beside it (never delete a user's data) and log why.
    Returns the new path, or None if it could not be moved."""
    path = Path(path)
    dest = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    n = 1
    while dest.exists():
        dest = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
        n += 1
    try:
        os.replace(path, dest)
    except OSError as e:
        log.warning("%s is damaged (%s) and could not be moved aside: %s", path, why, e)
        return None
    log.warning("%s is damaged (%s); kept it as %s and started afresh", path, why, dest.name)
    return dest


def read_limited(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; OSError for anything else.
    A FIFO under a file's name blocks its reader for ever and a device (a link to
    /dev/zero) never ends: both are refused before a byte is read."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB", str(path))
    return data


def read_json_object(path: Path, what: str = "file", keep_damaged: bool = False, strict: bool = False) -> dict:
    """The JSON object in ``path``; {} when it is missing, unreadable, nested too deep or
    not an object (logged: a damaged settings or cache file must never stop the app).

    With ``keep_damaged``, a file that was read and is damaged (not JSON, not an object,
    nested too deep, larger than any such file) is moved aside; one that could not be
    read (too many open files, a permission, an I/O error, a FIFO) is left as it is: the
    next read may well succeed, and moving it aside would lose what it holds. With
    ``strict``, such a read error is raised (OSError) instead of returning {}: a caller
    about to write the file back must not write what it holds over with an empty object."""
    path = Path(path)
    try:
        raw = read_limited(path, MAX_JSON_BYTES)
    except FileNotFoundError:
        return {}
    except OSError as e:
        if e.errno != errno.EFBIG:  # not read: the file may be fine
            log.warning("could not read the %s %s: %s", what, path, str(e)[:200])
            if strict:
                raise
            return {}
        return _damaged(path, what, str(e)[:200], keep_damaged)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        return _damaged(path, what, str(e)[:200], keep_damaged)
    if not isinstance(data, dict):
        return _damaged(path, what, "not a JSON object", keep_damaged)
    return data


def _damaged(path: Path, what: str, why: str, keep_damaged: bool) -> dict:
    log.warning("ignoring the damaged %s %s: %s", what, path, why)
    if keep_damaged:
        move_aside(path, why)
    return {}


def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    """The file's sha256 as hex, read in chunks; ``progress`` gets each chunk's size."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(CHUNK), b""):
            h.update(b)
            if progress:
                progress(len(b))
    return h.hexdigest()
