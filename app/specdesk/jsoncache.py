"""A small, bounded, versioned JSON cache in the user cache folder: what a session
measured once (auto's costs on a pair, a target's kernel drift) kept for the next.

The file is one JSON object ``{"version": V, "entries": {key: {"seq": n, "value": ...}}}``,
written atomically with ASCII escapes (file names that are not valid UTF-8 stay
writable). It keeps the ``max_entries`` most recently saved entries. Reading never
fails: a file that is not an object (damaged, nested too deep) is moved aside and
kept, with a log line, and one that cannot be read at the moment (too many open
files, an I/O error) reads as empty and is left as it is; another version is ignored; an entry of the
wrong shape (a null or text ``seq``, a value that ``clean`` refuses) is left out.
Saving never fails either: a cache that cannot be read or written only logs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .files import read_json_object, write_json_atomic
from .paths import user_cache_dir

log = logging.getLogger(__name__)


def _seq(entry: dict) -> int:
    seq = entry.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else 0


@dataclass(frozen=True)
class JsonCache:
    """``file_name`` in the user cache folder (or ``path`` given per call), holding at
    most ``max_entries``. ``clean`` turns a stored value into a usable one, or None to
    leave it out (it must not raise on any JSON value)."""

    file_name: str
    what: str  # for log lines: "saved auto costs"
    version: int = 1
    max_entries: int = 32
    clean: Callable[[Any], Any] = lambda v: v

    def default_path(self) -> Path:
        return user_cache_dir() / self.file_name

    def _read(self, path: Path, strict: bool = False) -> dict[str, dict]:
        """The usable entries: {key: {"seq": int, "value": cleaned}}. ``strict``: a file
        that could not be read raises OSError (``save`` then keeps it as it is)."""
        data = read_json_object(path, self.what, keep_damaged=True, strict=strict)
        entries = data.get("entries")
        if data.get("version") != self.version or not isinstance(entries, dict):
            if data:
                log.info("ignoring the %s in %s: not version %d", self.what, path, self.version)
            return {}
        out = {}
        for key, entry in entries.items():
            if not isinstance(key, str) or not isinstance(entry, dict):
                continue
            try:
                value = self.clean(entry.get("value"))
            except Exception as e:  # noqa: BLE001 - a damaged entry is left out, never an error
                log.info("ignoring a damaged entry of the %s: %s", self.what, e)
                value = None
            if value is not None:
                out[key] = {"seq": _seq(entry), "value": value}
        return out

    def load(self, key: str, path: Path | None = None) -> Any | None:
        entry = self._read(path or self.default_path()).get(key)
        return entry["value"] if entry is not None else None

    def save(self, key: str, value: Any, path: Path | None = None) -> None:
        """Store ``value`` under ``key``, keeping the most recently saved entries."""
        path = path or self.default_path()
        try:
            entries = self._read(path, strict=True)  # a read error must not empty the cache
            stamp = max((e["seq"] for e in entries.values()), default=0) + 1
            entries[key] = {"seq": stamp, "value": value}
            if len(entries) > self.max_entries:
                keep = sorted(entries, key=lambda k: entries[k]["seq"])[-self.max_entries:]
                entries = {k: entries[k] for k in keep}
            write_json_atomic(path, {"version": self.version, "entries": entries})
        except (OSError, ValueError, TypeError) as e:  # a read-only cache or an unencodable value: never an error
            log.info("could not save the %s to %s: %s", self.what, path, e)
