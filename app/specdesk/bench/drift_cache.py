"""The kernel drift measured on a target, kept for the next run on the same setup.

The drift between llama.cpp's single-token steps and its verify batches
(:mod:`specdesk.speculative.drift`) depends on the target file, the thread count
and offload, the machine (CPU, GPU) and the llama.cpp build, and on nothing that a
session changes. It takes a few seconds to measure, so it is measured once per
such setup and kept in the user cache, keyed by all of them. The draft plays no part
in it: a target keeps its drift whichever draft is paired with it.

The file is a small JSON object, written atomically; a damaged or unreadable file
is ignored (with a log line), never an error.
"""

from __future__ import annotations

import hashlib
import logging
from importlib import metadata
from pathlib import Path
from typing import Sequence

from ..engine.model import system_info
from ..files import read_json_object, write_json_atomic
from ..paths import user_cache_dir
from ..speculative.drift import Drift
from ..speculative.sampling import SamplingParams
from .runner import machine

log = logging.getLogger(__name__)

FILE_NAME = "kernel-drift.json"
MAX_ENTRIES = 32
VERSION = 1


def default_path() -> Path:
    return user_cache_dir() / FILE_NAME


def llama_build() -> str:
    """The llama.cpp build: llama-cpp-python's version and a hash of the features
    it was compiled with (a CUDA build and a CPU build of one version differ)."""
    try:
        version = metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        version = "unknown"
    features = hashlib.sha256(system_info().encode("utf-8", "replace")).hexdigest()[:12]
    return f"llama-cpp-python {version} ({features})"


def machine_id(info: dict | None = None) -> str:
    m = info if info is not None else machine()
    return f"{m.get('cpu')}|{m.get('cores')}|{m.get('gpu')}"


def target_id(path: Path, threads: int | None, gpu_layers: int) -> str:
    p = Path(path).resolve()
    st = p.stat()
    return f"{p}|{st.st_size}|{st.st_mtime_ns}|t{threads or 'auto'}|g{gpu_layers}"


def probe_id(params: SamplingParams, batch_sizes: Sequence[int], text: Sequence[int]) -> str:
    text_hash = hashlib.sha256(",".join(str(int(t)) for t in text).encode()).hexdigest()[:12]
    sizes = ",".join(str(b) for b in sorted(set(batch_sizes)))
    return (f"T{params.temperature:g}|k{params.top_k}|p{params.top_p:g}|m{params.min_p:g}"
            f"|b{sizes}|text {text_hash}")


def key(target: str, machine_key: str, build: str, probe: str) -> str:
    """One entry per target setup, machine, llama.cpp build and probe settings."""
    return " + ".join((target, machine_key, build, probe))


def _read(path: Path) -> dict:
    data = read_json_object(path, "saved kernel drift")
    if data.get("version") != VERSION or not isinstance(data.get("entries"), dict):
        return {}
    return data["entries"]


def load(k: str, path: Path | None = None) -> Drift | None:
    entry = _read(path or default_path()).get(k)
    if not isinstance(entry, dict) or not isinstance(entry.get("drift"), dict):
        return None
    try:
        return Drift.from_dict(entry["drift"])
    except (KeyError, TypeError, ValueError) as e:
        log.info("ignoring a damaged saved drift: %s", e)
        return None


def save(k: str, drift: Drift, path: Path | None = None) -> None:
    """Store ``drift`` under ``k``, keeping the most recently saved entries."""
    path = path or default_path()
    try:
        entries = _read(path)
        stamp = max((e.get("seq", 0) for e in entries.values() if isinstance(e, dict)), default=0) + 1
        entries[k] = {"seq": stamp, "drift": drift.to_dict()}
        if len(entries) > MAX_ENTRIES:
            keep = sorted(entries, key=lambda x: entries[x].get("seq", 0) if isinstance(entries[x], dict) else 0)
            entries = {x: entries[x] for x in keep[-MAX_ENTRIES:]}
        write_json_atomic(path, {"version": VERSION, "entries": entries})
    except OSError as e:  # a read-only cache must not break a calibration
        log.info("could not save the kernel drift to %s: %s", path, e)
