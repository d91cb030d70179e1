#!/usr/bin/env python3
"""auto against the best fixed k on the replayed H200 profiles, over a range of draft
acceptances (each token right with that chance, independently), as ratios from one run:
where `tools/replay.py` holds the acceptance at the profile's own (0.98), this shows what
a change to auto costs or gains for drafts that are not always right.

    .venv/bin/python tools/auto_sweep.py                        # 0.6 to 0.98, both H200 profiles
    .venv/bin/python tools/auto_sweep.py --acceptance 0.9,0.95 --tokens 512 --rounds 3

Each line: the best fixed k of the round, auto against it (median over the rounds), auto
against target alone; last, the geometric mean of auto against the best fixed k over
every line. Deterministic (the replayed devices' seconds only).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from specdesk.bench.replay import load_profile, run_replay  # noqa: E402

KS = [2, 4, 8, 12, 16, 24, 32]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", default="h200-7b-d0.5,h200-7b-d1l")
    ap.add_argument("--acceptance", default="0.6,0.75,0.85,0.92,0.98")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--answers", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    ratios = []
    for name in args.profiles.split(","):
        for acceptance in (float(a) for a in args.acceptance.split(",")):
            p = dataclasses.replace(load_profile(name), acceptance=acceptance)
            res = run_replay(p, KS, rounds=args.rounds, answers=args.answers, tokens=args.tokens)
            r = statistics.median(res.auto_vs_best())
            ratios.append(r)
            print(f"{name:14} acceptance {acceptance:.2f}: best fixed {res.best_fixed:5}  auto/best {r:.3f}"
                  f"  auto/target alone {statistics.median(res.ratio('auto')):.2f}", flush=True)
    print(f"geometric mean of auto/best over {len(ratios)} lines: {statistics.geometric_mean(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
