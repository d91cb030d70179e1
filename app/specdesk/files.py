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


def read_json_object(path: Path, what: str = "file", keep_damaged: bool = False) -> dict:
    """The JSON object in ``path``; {} when it is missing, unreadable, nested too deep or
    not an object (logged: a damaged settings or cache file must never stop the app).
    With ``keep_damaged``, a file that exists but cannot be used is moved aside."""
    path = Path(path)
    try:
        data = json.loads(read_limited(path, MAX_JSON_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as e:
        log.warning("ignoring the unreadable %s %s: %s", what, path, str(e)[:200])
        if keep_damaged and path.is_file():
            move_aside(path, str(e)[:200])
        return {}
    if not isinstance(data, dict):
        log.warning("ignoring the %s %s: not a JSON object", what, path)
        if keep_damaged:
            move_aside(path, "not a JSON object")
        return {}
    return data


def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    """The file's sha256 as hex, read in chunks; ``progress`` gets each chunk's size."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(CHUNK), b""):
            h.update(b)
            if progress:
                progress(len(b))
    return h.hexdigest()
