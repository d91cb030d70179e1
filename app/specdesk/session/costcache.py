"""What ``auto`` measured on a model pair, kept for the next session on that pair.

``auto`` prices every draft length from measured costs: a target step, a verify
batch of each size, a draft call of each length. A new process knows none of them
and spends its first few dozen steps measuring, which is most of a short answer.
So the costs are saved per pair and setup (both files, by path, size and mtime;
threads; GPU layers) in the user cache, and seed the next session's controller,
each counted as a few measurements only, so this run's own measurements soon take
over when the machine is busier or idler than last time. Acceptance is not kept:
it follows the text being written.

The file is a small JSON object, written atomically (ASCII escapes: file names that
are not valid UTF-8 stay writable). A file that cannot be read or is not an object
(damaged, nested too deep) is moved aside and kept, with a log line; entries and
costs of the wrong shape are left out when read. Never an error.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..files import read_json_object, write_json_atomic
from ..paths import user_cache_dir

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


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _costs(d: object) -> dict:
    """{size: cost} with the keys and values that can be one; the rest left out."""
    if not isinstance(d, dict):
        return {}
    return {k: v for k, v in d.items() if isinstance(k, str) and _is_number(v)}


def _clean_state(state: object) -> dict | None:
    """The saved costs in the shape ``AutoK.restore_costs`` reads, or None: a list where
    a dict belongs, a text where a number belongs, is dropped, never passed on."""
    if not isinstance(state, dict):
        return None
    out: dict = {name: _costs(state[name]) for name in ("verify", "draft") if name in state}
    counts = state.get("counts")
    if isinstance(counts, dict):
        out["counts"] = {name: _costs(counts[name]) for name in ("verify", "draft") if name in counts}
    cu = state.get("catch_up")
    if isinstance(cu, list) and len(cu) == 2 and all(_is_number(x) for x in cu):
        out["catch_up"] = list(cu)
    return out


def _seq(entry: object) -> int:
    seq = entry.get("seq") if isinstance(entry, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else 0


def _read(path: Path) -> dict:
    """The usable entries: {key: {"seq": int, "state": dict}}."""
    data = read_json_object(path, "saved auto costs", keep_damaged=True)
    pairs = data.get("pairs")
    if data.get("version") != VERSION or not isinstance(pairs, dict):
        if data:
            log.info("ignoring the saved auto costs in %s: not version %d", path, VERSION)
        return {}
    out = {}
    for key, entry in pairs.items():
        state = _clean_state(entry.get("state")) if isinstance(entry, dict) else None
        if state is not None:
            out[key] = {"seq": _seq(entry), "state": state}
    return out


def load(key: str, path: Path | None = None) -> dict | None:
    entry = _read(path or default_path()).get(key)
    return entry["state"] if entry is not None else None


def save(key: str, state: dict, path: Path | None = None) -> None:
    """Store ``state`` under ``key``, keeping the most recently used entries."""
    path = path or default_path()
    try:
        pairs = _read(path)
        stamp = max((e["seq"] for e in pairs.values()), default=0) + 1
        pairs[key] = {"seq": stamp, "state": state}
        if len(pairs) > MAX_ENTRIES:
            keep = sorted(pairs, key=lambda k: pairs[k]["seq"])[-MAX_ENTRIES:]
            pairs = {k: pairs[k] for k in keep}
        write_json_atomic(path, {"version": VERSION, "pairs": pairs})
    except (OSError, ValueError) as e:  # a read-only cache (or an unencodable state) must not break generation
        log.info("could not save the auto costs to %s: %s", path, e)
