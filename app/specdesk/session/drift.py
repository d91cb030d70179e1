"""The kernel drift of a loaded target, measured once per setup and kept.

:mod:`specdesk.speculative.drift` measures how far a verify batch moves the target's
distribution from a single-token step (pure, over the Backend protocol). This module
is where a session gets it: it depends on the target file, the thread count and
offload, the machine (CPU, GPU) and the llama.cpp build, and on nothing that a
session changes, so :func:`pair_drift` measures it once per such setup over a fixed
text (sized to a few seconds from measured costs) and keeps it in the user cache,
keyed by all of them. The draft plays no part: a target keeps its drift whichever
draft is paired with it. The words for it are in :mod:`specdesk.session.text`.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Callable, Sequence

from ..engine.model import system_info
from ..speculative.costmodel import CostModel
from ..speculative.drift import Drift, measure_drift, probe_cost
from ..speculative.sampling import SamplingParams
from ..jsoncache import JsonCache
from .runtime import machine

log = logging.getLogger(__name__)

#: The text the drift probe reads, as the target's chat (the advisor calibrates on it too).
PROBE_PROMPT = (
    "Here is a small Python module. Explain in two sentences what it does, then rewrite `load` "
    "so that it also accepts a pathlib.Path.\n\n"
    "import json\nimport os\n\n\n"
    "class Store:\n"
    "    \"\"\"A tiny JSON-backed key-value store.\"\"\"\n\n"
    "    def __init__(self, path):\n"
    "        self.path = path\n"
    "        self.data = {}\n\n"
    "    def load(self):\n"
    "        if not os.path.exists(self.path):\n"
    "            return\n"
    "        with open(self.path) as f:\n"
    "            self.data = json.load(f)\n\n"
    "    def save(self):\n"
    "        tmp = self.path + '.tmp'\n"
    "        with open(tmp, 'w') as f:\n"
    "            json.dump(self.data, f, indent=2, sort_keys=True)\n"
    "        os.replace(tmp, self.path)\n\n"
    "    def get(self, key, default=None):\n"
    "        return self.data.get(key, default)\n\n"
    "    def set(self, key, value):\n"
    "        self.data[key] = value\n"
    "        self.save()\n"
)

# The kernel drift probe: T=1 without truncation shows the whole distribution's
# drift (and the T=0 flips come from the same logits); positions per window; the
# most windows; the seconds it may take when the costs are known.
DRIFT_PARAMS = SamplingParams(temperature=1.0)
DRIFT_WINDOW = 16
DRIFT_MAX_WINDOWS = 6
DRIFT_BUDGET_SECONDS = 8.0

FILE_NAME = "kernel-drift.json"
MAX_ENTRIES = 32
VERSION = 2  # 2: the shared cache format (entries/value)


def _clean(value: object) -> dict | None:
    if not isinstance(value, dict):
        return None
    Drift.from_dict(value)  # raises on a damaged entry: the cache leaves it out
    return value


CACHE = JsonCache(FILE_NAME, "saved kernel drift", version=VERSION, max_entries=MAX_ENTRIES, clean=_clean)


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


def cache_key(target: str, machine_key: str, build: str, probe: str) -> str:
    """One entry per target setup, machine, llama.cpp build and probe settings."""
    return " + ".join((target, machine_key, build, probe))


def _load(k: str, path: Path | None) -> Drift | None:
    d = CACHE.load(k, path)
    return Drift.from_dict(d) if d is not None else None


def drift_text(session) -> list[int]:
    """The text the drift probe reads: the calibration prompt, as the target's chat."""
    return session.chat_prompt([{"role": "user", "content": PROBE_PROMPT}])


def pair_drift(
    session,
    costs: CostModel | None = None,
    batch_sizes: Sequence[int] = tuple(range(2, 10)),
    params: SamplingParams = DRIFT_PARAMS,
    windows: int | None = None,
    budget_seconds: float = DRIFT_BUDGET_SECONDS,
    progress: Callable[[float], None] | None = None,
    use_cache: bool = True,
    cache_path: Path | None = None,
    control: bool = False,
) -> Drift:
    """The loaded target's kernel drift: from the cache when this target setup,
    machine and llama.cpp build were measured before, else measured now over the
    calibration text and saved. With measured ``costs`` the number of windows fits
    ``budget_seconds``; without, two windows (or ``windows``). ``control`` adds the
    single-step repeat (batch 1), which must show no drift. Leaves the target
    context empty."""
    text = drift_text(session)
    spec = session.target.spec
    k = None
    if use_cache:
        try:
            k = cache_key(
                target_id(spec.path, session.target.ctx.threads, spec.n_gpu_layers),
                machine_id(),
                llama_build(),
                probe_id(params, batch_sizes, text) + ("|control" if control else ""),
            )
        except OSError:
            k = None
        cached = _load(k, cache_path) if k is not None else None
        if cached is not None:
            return replace(cached, extra={**cached.extra, "cached": True})
    if windows is None:
        windows = 2
        step = costs.verify_cost(1) if costs is not None else None
        if step:
            one = probe_cost(step, lambda b: costs.verify_cost(b) or b * step, batch_sizes, DRIFT_WINDOW)
            windows = int(max(1, min(DRIFT_MAX_WINDOWS, round(budget_seconds / one))))
    session.target.ctx.rollback(0)
    drift = measure_drift(
        session.target.ctx, text, batch_sizes=batch_sizes, window=DRIFT_WINDOW, windows=windows,
        params=params, progress=progress, control=control,
    )
    drift = replace(drift, extra={"target": spec.path.name, "build": llama_build(), "cached": False,
                                  "threads": getattr(session.target.ctx, "threads", None)})
    if k is not None:
        CACHE.save(k, replace(drift, extra={**drift.extra, "cached": True}).to_dict(), cache_path)
    return drift
