#!/usr/bin/env python3
"""The real decode loop and the real auto on a measured machine's costs (a replay:
no model runs), against every fixed k and target alone, as ratios from one run.

    .venv/bin/python tools/replay.py                                  # the H200 profiles and this CPU's
    .venv/bin/python tools/replay.py --profiles h200-7b-d1l --ks 8,16,24,32 --rounds 6
    .venv/bin/python tools/replay.py --real                           # the host's own time counts too

Profiles are :mod:`specdesk.bench.replay`'s (``specdesk/data/replay``) or a JSON file of
the same form. By default the clock counts only the replayed devices' seconds
(deterministic); with ``--real`` the loop's own Python counts as well, as beside a GPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from specdesk.bench.replay import load_profile, profile_names, report, run_replay  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", default="h200-7b-d0.5,h200-7b-d1l,cpu-2core",
                    help=f"comma-separated: {', '.join(profile_names())} or .json files")
    ap.add_argument("--ks", default="4,8,12,16,24,32", help="the fixed draft lengths to run beside auto")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--answers", type=int, default=4, help="answers per configuration and round (auto learns across them)")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--real", action="store_true", help="count the host's own time as well")
    ap.add_argument("--vocab", type=int, default=4096, help="logits per row (151936: Qwen's, for the host's real cost)")
    args = ap.parse_args()
    ks = [int(k) for k in args.ks.split(",") if k]
    for name in args.profiles.split(","):
        t0 = time.perf_counter()
        res = run_replay(load_profile(name), ks, rounds=args.rounds, answers=args.answers, tokens=args.tokens,
                         real=args.real, n_vocab=args.vocab)
        print(report(res))
        print(f"  ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
