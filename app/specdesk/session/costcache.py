"""What ``auto`` measured on a model pair, kept for the next session on that pair.

``auto`` judges drafting by its realized cost per emitted token, as a ratio to target
alone's (the outcomes), and prices draft lengths from measured costs (a target step,
a verify batch of each size, a draft call of each length). A new process knows none
of them and would spend its first answer exploring again. So both are saved per pair
and setup (both files, by path, size and mtime; the thread count llama.cpp runs with;
GPU layers) in the user cache, and seed the next session's controller, each counted as
a few steps only, so this run's own soon take over when the machine is busier or idler
than last time. The CLI and the app share the cache, so they start from the same
knowledge. Acceptance is not kept: it follows the text being written; nor target
alone's seconds, which follow the machine's load.

They are kept in a :class:`~specdesk.jsoncache.JsonCache` (bounded, versioned,
never an error); a state of the wrong shape is cleaned to what can be used.
"""

from __future__ import annotations

from pathlib import Path

from ..jsoncache import JsonCache

FILE_NAME = "auto-costs.json"
MAX_ENTRIES = 32
VERSION = 2  # 2: the shared cache format (entries/value)


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


def clean_state(state: object) -> dict | None:
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
    outcomes = state.get("outcomes")
    if isinstance(outcomes, dict):
        kept = {k: list(v) for k, v in outcomes.items()
                if isinstance(k, str) and isinstance(v, list) and len(v) == 4 and all(_is_number(x) for x in v)}
        if kept:
            out["outcomes"] = kept
    return out


CACHE = JsonCache(FILE_NAME, "saved auto costs", version=VERSION, max_entries=MAX_ENTRIES, clean=clean_state)


def default_path() -> Path:
    return CACHE.default_path()


def load(key: str, path: Path | None = None) -> dict | None:
    return CACHE.load(key, path)


def save(key: str, state: dict, path: Path | None = None) -> None:
    """Store ``state`` under ``key``, keeping the most recently used entries."""
    CACHE.save(key, state, path)
