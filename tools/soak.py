#!/usr/bin/env python3
"""A soak through the Session API: many generations on one loaded pair, mixing the
proposers (draft, ngram, hybrid, none), k (1..6 and auto), the temperature (0, 0.7,
1.2) and now and then a Stop, while the process RSS is sampled. A benchmark tool,
not a timed test: it reports, and fails only when asked to (--max-slope-mib).

    .venv/bin/python tools/soak.py                       # 1000 generations on SmolLM2, itself as the draft
    .venv/bin/python tools/soak.py -n 200 --threads 1 --max-tokens 16 --draft models/other.gguf
    .venv/bin/python tools/soak.py --json soak.json --max-slope-mib 5

It prints RSS at the start (after the load and a first generation, so the one-off
allocations of the first decode are not counted as growth), every --every
generations, and at the end; the growth from start to end; and the slope in MiB per
1000 generations, a least-squares fit over the second half of the samples (the first
half includes the warm-up of allocator pools and caches). Each sample follows a
gc.collect(), so garbage not yet collected is not mistaken for a leak.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from specdesk.errors import SpecDeskError
from specdesk.library.defaults import default_models
from specdesk.session import GenerationConfig, ModelSpec, Session, rss_bytes
from specdesk.speculative.proposers import registry
from specdesk.speculative.sampling import SamplingParams

KS: tuple[int | str, ...] = (1, 2, 3, 4, 5, 6, "auto")
TEMPERATURES = (0.0, 0.7, 1.2)
PROMPTS = (
    "Write a Python function that reverses a string.",
    "Name three rivers in Europe.",
    "Explain recursion in one sentence.",
    "Continue the list: 1, 2, 3, 4,",
    "def fibonacci(n):",
    "Translate 'good morning' into French and Spanish.",
    "What is the capital of Japan?",
    "Write a haiku about autumn.",
)
MIB = 2**20


def slope_per_1000(points: list[tuple[int, int]]) -> float | None:
    """Least-squares slope of RSS (bytes) over generation index, in MiB per 1000."""
    if len(points) < 2:
        return None
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    if np.ptp(x) == 0:
        return None
    slope = np.polyfit(x, y, 1)[0]  # bytes per generation
    return float(slope * 1000 / MIB)


def generate(session: Session, prompt: list[int], cfg: GenerationConfig, stop_after: int | None) -> int:
    """One generation through the API; Stop after ``stop_after`` steps. Returns its token count."""
    steps = 0

    def cancel() -> bool:
        return stop_after is not None and steps >= stop_after

    n = 0
    for step in session.generate(prompt, cfg, cancel=cancel):
        steps += 1
        n += len(step.tokens)
    return n


def sample(i: int) -> tuple[int, int]:
    gc.collect()
    return i, rss_bytes()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--generations", type=int, default=1000)
    ap.add_argument("--target", type=Path, help="target GGUF (default: the test model, SmolLM2)")
    ap.add_argument("--draft", type=Path, help="draft GGUF (default: the target file itself)")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: physical cores)")
    ap.add_argument("--every", type=int, default=None, help="sample RSS every N generations (default: n/20)")
    ap.add_argument("--stop-share", type=float, default=0.1, help="share of generations stopped after 2 steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the samples and figures here")
    ap.add_argument("--max-slope-mib", type=float, default=None,
                    help="exit 1 when the slope exceeds this many MiB per 1000 generations")
    a = ap.parse_args(argv)
    if a.generations < 2:
        ap.error("--generations must be at least 2")
    every = a.every or max(1, a.generations // 20)

    target = a.target or default_models(["test"])[0].path
    draft = a.draft or target
    rng = np.random.default_rng(a.seed)
    try:
        session = Session.load(ModelSpec(target, threads=a.threads, n_ctx=a.ctx),
                               ModelSpec(draft, threads=a.threads, n_ctx=a.ctx), remember_costs=False)
    except SpecDeskError as e:
        print(f"soak: {e}", file=sys.stderr)
        return 2

    counts: Counter[str] = Counter()
    tokens = 0
    samples: list[tuple[int, int]] = []
    t0 = time.perf_counter()
    with session:
        print(f"soak: {a.generations} generations on {target.name} (draft {draft.name}), "
              f"max_tokens {a.max_tokens}, ctx {a.ctx}, threads {session.target.ctx.threads}, seed {a.seed}")
        # what this pair can run: "translated" needs two vocabularies (on two it is what "draft" runs)
        runnable = [p for p in registry.NAMES if not registry.kind(p).pair_dependent or session.translated]
        for i in range(a.generations):
            proposer = runnable[int(rng.integers(len(runnable)))]
            k = KS[int(rng.integers(len(KS)))]
            temperature = TEMPERATURES[int(rng.integers(len(TEMPERATURES)))]
            stop = bool(rng.random() < a.stop_share)
            prompt = session.chat_prompt([{"role": "user", "content": PROMPTS[int(rng.integers(len(PROMPTS)))]}])
            cfg = GenerationConfig(proposer=proposer, k=k, sampling=SamplingParams(temperature=temperature),
                                   seed=int(rng.integers(2**31)), max_tokens=a.max_tokens)
            tokens += generate(session, prompt, cfg, stop_after=2 if stop else None)
            counts[proposer] += 1
            counts["stopped"] += stop
            counts[f"T={temperature:g}"] += 1
            if i == 0 or (i + 1) % every == 0 or i + 1 == a.generations:
                samples.append(sample(i + 1))
                rss = samples[-1][1]
                print(f"  {i + 1:6d} generations  RSS {rss / MIB:8.1f} MiB  ({time.perf_counter() - t0:6.1f} s)",
                      flush=True)
    elapsed = time.perf_counter() - t0

    start, end = samples[0][1], samples[-1][1]
    half = [p for p in samples if p[0] >= a.generations / 2]
    slope = slope_per_1000(half)
    mix = ", ".join(f"{p} {counts[p]}" for p in registry.NAMES)
    temps = ", ".join(f"T={t:g} {counts[f'T={t:g}']}" for t in TEMPERATURES)
    print(f"mix: {mix}; {temps}; stopped {counts['stopped']}")
    print(f"tokens: {tokens} in {elapsed:.1f} s ({tokens / elapsed:.1f} tok/s overall)")
    print(f"RSS start {start / MIB:.1f} MiB, end {end / MIB:.1f} MiB, growth {(end - start) / MIB:+.1f} MiB")
    print(f"slope over the second half ({len(half)} samples): "
          + (f"{slope:+.2f} MiB per 1000 generations" if slope is not None else "n/a (too few samples)"))
    if a.json:
        a.json.write_text(json.dumps({
            "generations": a.generations, "max_tokens": a.max_tokens, "ctx": a.ctx, "seed": a.seed,
            "target": str(target), "draft": str(draft), "tokens": tokens, "seconds": elapsed,
            "mix": {p: counts[p] for p in registry.NAMES}, "stopped": counts["stopped"],
            "rss_samples": [{"generations": i, "rss_bytes": r} for i, r in samples],
            "rss_start_bytes": start, "rss_end_bytes": end, "growth_bytes": end - start,
            "slope_mib_per_1000": slope,
        }, indent=2), encoding="utf-8")
    if a.max_slope_mib is not None and slope is not None and slope > a.max_slope_mib:
        print(f"soak: the slope {slope:+.2f} MiB/1000 exceeds {a.max_slope_mib} MiB/1000", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
