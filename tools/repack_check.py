#!/usr/bin/env python3
"""Weights repacked by name against weights in the mapped file, on a llama.cpp built
with AMX code (where SpecDesk turns llama.cpp's extra buffers off and names the
weights CPU_REPACK takes itself: ``specdesk.engine.model.amx_compiled``).

    .venv/bin/python tools/repack_check.py [--model PATH] [--rounds 5] [--steps 16] [--threads N]

Both copies of the model are loaded side by side; each round times, for each copy in
turn (the order alternating), the prompt's prefill, ``--steps`` one-token greedy steps
and three verify batches of 5 tokens. It prints the repacked copy's time over the
mapped one's per round, their median and range (min-max), the repacked buffer's
size, and how far the two copies' greedy tokens agree (the repacked kernels sum in
another order, so a near-tie may go the other way). A tool, not a test: its figures
hold only on a quiet machine. Elsewhere (no AMX code) llama.cpp repacks by itself and
there is nothing to compare.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from specdesk.engine.context import Context  # noqa: E402
from specdesk.engine.model import Model, amx_compiled  # noqa: E402
from specdesk.library.defaults import default_models  # noqa: E402
from specdesk.session.core import weights_to_repack  # noqa: E402

PROMPT = ("Write a short note for a colleague who takes over a small Python service next week: where the logs "
          "are, how to restart it, and what to watch on the first morning.")


def timed(ctx: Context, prompt: list[int], steps: int) -> tuple[float, float, float, list[int]]:
    """Prefill seconds, median step seconds, median verify-5 seconds, the greedy tokens."""
    ctx.reset()
    t0 = time.perf_counter()
    ctx.prefill(prompt[:-1], logits=False)
    prefill = time.perf_counter() - t0
    tok, out, ts = prompt[-1], [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        tok = ctx.eval([tok], fn=lambda r: int(r.argmax()))
        ts.append(time.perf_counter() - t0)
        out.append(tok)
    tv = []
    for _ in range(3):
        n = ctx.n_past
        t0 = time.perf_counter()
        ctx.eval(out[-5:], fn=lambda r: None)
        tv.append(time.perf_counter() - t0)
        ctx.rollback(n)
    return prefill, statistics.median(ts), statistics.median(tv), out


def greedy(ctx: Context, prompt: list[int], steps: int) -> tuple[list[int], list[float]]:
    """The greedy tokens and, at each, the gap between the best two logits (untimed)."""
    ctx.reset()
    ctx.prefill(prompt[:-1], logits=False)
    tok, out, gaps = prompt[-1], [], []

    def best(rows: np.ndarray) -> tuple[int, float]:
        top = np.partition(rows[0], -2)[-2:]
        return int(rows[0].argmax()), float(top[1] - top[0])

    for _ in range(steps):
        tok, gap = ctx.eval([tok], fn=best)
        out.append(tok)
        gaps.append(gap)
    return out, gaps


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=None, help="a GGUF (default: the default target)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if not amx_compiled():
        print("this llama.cpp has no AMX code: it repacks its weights by itself, and there is nothing to compare")
        return 0
    path = args.model or default_models(["target"])[0].path
    names = weights_to_repack(path, 0)
    if not names:
        print(f"{path.name}: no weight of a type this CPU repacks: nothing to compare")
        return 0
    mapped = Model(path)
    repacked = Model(path, repack=names)
    size = sum(b.bytes for b in repacked.buffers if b.device == "CPU_REPACK")
    cm = Context(mapped, n_ctx=1024, threads=args.threads)
    cr = Context(repacked, n_ctx=1024, threads=args.threads)
    prompt = mapped.tokenize(PROMPT)
    ratios: dict[str, list[float]] = {"prefill": [], "step": [], "verify 5": []}
    agree = []
    for r in range(args.rounds):
        order = [(cm, "m"), (cr, "r")] if r % 2 == 0 else [(cr, "r"), (cm, "m")]
        got = {key: timed(ctx, prompt, args.steps) for ctx, key in order}
        for i, name in enumerate(ratios):
            ratios[name].append(got["r"][i] / got["m"][i])
        a, b = got["m"][3], got["r"][3]
        agree.append(next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a)))
        print(f"round {r + 1}: step {got['m'][1] * 1e3:.1f} ms mapped, {got['r'][1] * 1e3:.1f} ms repacked")
    print(f"{path.name}: {len(names)} weights repacked by name, {size / 2**20:.0f} MiB more RAM")
    print(f"prompt {len(prompt)} tokens, {args.steps} steps, {args.rounds} rounds; repacked / mapped time, "
          "median (min-max):")
    for name, xs in ratios.items():
        print(f"  {name:9s} {spread(xs)}")
    print(f"greedy tokens the same before the first difference: {min(agree)} of {args.steps} (worst round)")
    (a, ga), (b, gb) = greedy(cm, prompt, args.steps), greedy(cr, prompt, args.steps)
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if i is not None:
        smallest = sorted(ga[:i])[:1]
        print(f"  at the first difference (token {i + 1}) the best two logits were {ga[i]:.3f} apart in the mapped "
              f"copy and {gb[i]:.3f} in the repacked one (the smallest gap before it: "
              f"{smallest[0] if smallest else float('nan'):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
