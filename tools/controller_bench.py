#!/usr/bin/env python3
"""What auto's decisions cost per step: budget() + take_decision() + observe(), timed
over scripted step streams (no model), against a fixed k's on the same streams.

    .venv/bin/python tools/controller_bench.py [--steps 3000] [--repeats 7]

Three streams, as the loop feeds them: target alone (a "none" answer: observe only),
draft-model auto on a machine where drafting pays (so it drafts and learns every step)
and n-gram auto with match lengths that vary (many arms). Each is run ``--repeats``
times; it prints the median microseconds per step with the range, and the ratio to
FixedK's cost on the same stream, measured in the same run. A tool, not a test: on a
busy machine the absolute figures swell, the ratios less.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))

from specdesk.speculative.controller import FixedK, StepCost  # noqa: E402
from specdesk.speculative.auto import AutoK  # noqa: E402


def stream(kind: str, controller, steps: int, seed: int = 0) -> float:
    """Seconds spent in the controller over ``steps`` steps of ``kind``."""
    rnd = random.Random(seed)
    spent = 0.0
    clock = time.thread_time  # CPU time of this thread: a step that waits for a core counts no more
    for _ in range(steps):
        if kind == "none":
            cost = StepCost("", None, 0, 0, 0.0, 0.010, emitted=1, step_seconds=0.0102)
            t0 = clock()
            controller.observe(cost)
            spent += clock() - t0
            continue
        source, hint = ("draft", 2) if kind == "draft" else ("ngram", rnd.choice((1, 2, 3, 5, 9, 20)))
        t0 = clock()
        k = controller.budget(source, hint, 400)
        d = controller.take_decision()
        spent += clock() - t0
        acc = rnd.randint(0, k) if k else 0
        draft = 0.002 * k if kind == "draft" else 0.0
        verify = 0.010 + 0.0005 * k
        cost = StepCost(source if k else "", hint if kind == "ngram" else None, k, acc, draft, verify,
                        draft_synced=2 if kind == "draft" and k else 0, emitted=acc + 1,
                        step_seconds=verify + draft + 0.0003, decision=d)
        t0 = clock()
        controller.observe(cost)
        spent += clock() - t0
    return spent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    print(f"{args.steps} steps a stream, {args.repeats} repeats; microseconds per step, median [min-max]")
    for kind in ("none", "draft", "ngram"):
        auto_us, ratios = [], []
        for r in range(args.repeats):
            a = stream(kind, AutoK(), args.steps, seed=r)
            f = stream(kind, FixedK(4), args.steps, seed=r)
            auto_us.append(1e6 * a / args.steps)
            ratios.append(a / f if f > 0 else float("nan"))
        label = {"none": "target alone", "draft": "draft auto", "ngram": "ngram auto"}[kind]
        print(f"  {label:<13} auto {statistics.median(auto_us):6.1f} us [{min(auto_us):.1f}-{max(auto_us):.1f}]"
              f"   auto / fixed k {statistics.median(ratios):5.1f}x [{min(ratios):.1f}-{max(ratios):.1f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
