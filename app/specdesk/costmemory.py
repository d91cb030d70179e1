"""What ``auto`` measured on a model pair, kept for the next session on that pair.

``auto`` prices every draft length from measured costs: a target step, a verify
batch of each size, a draft call of each length. A new process knows none of them
and spends its first few dozen steps measuring, which is most of a short answer.
So the costs are saved per pair and setup (both files, by path, size and mtime;
threads; GPU layers) in the user cache, and seed the next session's controller,
each counted as a few measurements only, so this run's own measurements soon take
over when the machine is busier or idler than last time. Acceptance is not kept:
it follows the text being written.

The file is a small JSON object, written atomically; a damaged or unreadable file
is ignored (with a log line), never an error.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .jsonfile import read_object, write_atomic
from .paths import user_cache_dir

log = logging.getLogger(__name__)

FILE_NAME = "auto-costs.json"
MAX_ENTRIES = 32
VERSION = 1


def default_path() -> Path:
    return user_cache_dir() / FILE_NAME


def pair_key(target: Path, target_threads: int | None, target_gpu_layers: int,
             draft: Path | None, draft_threads: int | None, draft_gpu_layers: int) -> str:
    """One key per pair and setup: a changed file, thread count or offload is a new key."""

    def one(path: Path, threads: int | None, gpu: int) -> str:
        p = Path(path).resolve()
        st = p.stat()
        return f"{p}|{st.st_size}|{st.st_mtime_ns}|t{threads or 'auto'}|g{gpu}"

    return one(target, target_threads, target_gpu_layers) + " + " + (
        one(draft, draft_threads, draft_gpu_layers) if draft is not None else "no draft"
    )


def _read(path: Path) -> dict:
    data = read_object(path, "saved auto costs")
    if data.get("version") != VERSION or not isinstance(data.get("pairs"), dict):
        return {}
    return data["pairs"]


def load(key: str, path: Path | None = None) -> dict | None:
    entry = _read(path or default_path()).get(key)
    return entry.get("state") if isinstance(entry, dict) and isinstance(entry.get("state"), dict) else None


def save(key: str, state: dict, path: Path | None = None) -> None:
    """Store ``state`` under ``key``, keeping the most recently used entries."""
    path = path or default_path()
    try:
        pairs = _read(path)
        stamp = max((e.get("seq", 0) for e in pairs.values() if isinstance(e, dict)), default=0) + 1
        pairs[key] = {"seq": stamp, "state": state}
        if len(pairs) > MAX_ENTRIES:
            keep = sorted(pairs, key=lambda k: pairs[k].get("seq", 0) if isinstance(pairs[k], dict) else 0)[-MAX_ENTRIES:]
            pairs = {k: pairs[k] for k in keep}
        write_atomic(path, {"version": VERSION, "pairs": pairs})
    except OSError as e:  # a read-only cache must not break generation
        log.info("could not save the auto costs to %s: %s", path, e)
