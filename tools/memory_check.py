#!/usr/bin/env python3
"""Memory estimate (before loading) vs what llama.cpp allocated (after), per model.

    .venv/bin/python tools/memory_check.py [--ctx 4096] [MODEL.gguf ...]   (default: the default pair)

The estimate reads only the GGUF header; the measurement is the sum of the buffers
llama.cpp reports (mapped/repacked weights, KV cache) plus the process RSS growth.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import psutil

from specdesk.engine.context import Context
from specdesk.engine.model import Model, repack_types
from specdesk.library.defaults import default_models
from specdesk.library.gguf import estimate_memory, validate_gguf


def mib(n: float) -> str:
    return f"{n / 2**20:8.1f} MiB"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--ctx", type=int, default=4096)
    a = ap.parse_args()
    paths = a.models or [m.path for m in default_models(["target", "draft"])]
    proc = psutil.Process()
    print(f"{'model':<44} {'estimate W+R+KV':>16} {'llama.cpp W+R+KV':>17} {'error':>7}   {'RSS growth':>12}")
    for p in paths:
        est = estimate_memory(validate_gguf(p), n_ctx=a.ctx, repack_types=repack_types())
        e = est["weights_bytes"] + est["repack_bytes"] + est["kv_bytes"]
        r0 = proc.memory_info().rss
        m = Model(p)
        c = Context(m, n_ctx=a.ctx)
        toks = m.tokenize("Measure the memory of this model.")
        c.prefill(toks)
        rss = proc.memory_info().rss - r0
        got = sum(b.bytes for b in m.buffers if b.kind == "model") + sum(b.bytes for b in c.buffers if b.kind == "KV")
        print(f"{p.name:<44} {mib(e):>16} {mib(got):>17} {100 * (e - got) / got:+6.1f}%   {mib(rss):>12}")
        c.close()
        m.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
