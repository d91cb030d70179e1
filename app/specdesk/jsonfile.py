"""Small JSON files SpecDesk keeps (settings, caches): read forgivingly, write atomically."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


def read_object(path: Path, what: str = "file") -> dict:
    """The JSON object in ``path``; {} when it is missing, unreadable or not an object
    (logged: a damaged settings or cache file must never stop the app)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("ignoring the unreadable %s %s: %s", what, path, e)
        return {}
    return data if isinstance(data, dict) else {}


def write_atomic(path: Path, data: object, indent: int | None = None) -> None:
    """Write ``data`` through a temporary file in the same folder, then os.replace: an
    interrupted write never leaves a half-written file under the real name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=indent, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
