#!/usr/bin/env python3
"""The real decode loop and the real auto on a measured machine's costs (a replay:
no model runs), against every fixed k and target alone, as ratios from one run.

    .venv/bin/python tools/replay.py                                  # the H200 profiles and this CPU's
    .venv/bin/python tools/replay.py --profiles h200-7b-d1l --ks 8,16,24,32 --rounds 6
    .venv/bin/python tools/replay.py --real                           # the host's own time counts too
    .venv/bin/python tools/replay.py --first-call-ms 300 --spikes 0.01:20   # a device's one-offs, no warm-up
    .venv/bin/python tools/replay.py --profiles h200-7b-d0.5,h200-7b-d1l --acceptance 0.6,0.75,0.85,0.92,0.98 \
        --ks 2,4,8,12,16,24,32 --rounds 2 --answers 3 --tokens 256          # drafts that are not always right

Profiles are :mod:`specdesk.bench.replay`'s (``specdesk/data/replay``) or a JSON file of
the same form. By default the clock counts only the replayed devices' seconds
(deterministic); with ``--real`` the loop's own Python counts as well, as beside a GPU.
``--first-call-ms``, ``--first-shape-ms`` and ``--spikes SHARE:TIMES`` add a device's
one-offs (each context's first decode, each batch shape's first use, that share of the
calls that many times slower); ``--warm-up`` pays them first, as a session's warm-up does.
``--acceptance`` replaces the profile's acceptance (each token right with that chance,
independently), one run per value, and ends with the geometric mean of auto against the
best fixed k over every run: what a change to auto costs or gains for drafts that are
not always right.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from specdesk.bench.replay import (geometric_mean, load_profile, profile_names, report, run_replay,  # noqa: E402
                                   with_one_offs)


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
    ap.add_argument("--first-call-ms", type=float, default=0.0, help="each context's first decode costs this much more")
    ap.add_argument("--first-shape-ms", type=float, default=0.0, help="each batch shape's first use costs this much more")
    ap.add_argument("--spikes", default="", metavar="SHARE:TIMES", help="that share of the calls that many times slower")
    ap.add_argument("--warm-up", action="store_true", help="warm the contexts first, as a session does")
    ap.add_argument("--acceptance", default="", metavar="A[,B...]",
                    help="instead of the profile's own, each token right with this chance (one run per value)")
    args = ap.parse_args()
    share, _, times = args.spikes.partition(":")
    ks = [int(k) for k in args.ks.split(",") if k]
    try:
        acceptances = [float(a) for a in args.acceptance.split(",") if a] or [None]
    except ValueError:
        ap.error(f"--acceptance: not a list of numbers: {args.acceptance!r}")
    if any(a is not None and not 0.0 <= a <= 1.0 for a in acceptances):
        ap.error("--acceptance: each value is a chance, from 0 to 1")
    auto_vs_best = []
    for name in args.profiles.split(","):
        for acceptance in acceptances:
            t0 = time.perf_counter()
            p = with_one_offs(load_profile(name), first_call_ms=args.first_call_ms,
                              first_shape_ms=args.first_shape_ms, spike_share=float(share or 0),
                              spike_times=float(times or 1))
            if acceptance is not None:
                p = dataclasses.replace(p, acceptance=acceptance)
            res = run_replay(p, ks, rounds=args.rounds, answers=args.answers, tokens=args.tokens, real=args.real,
                             n_vocab=args.vocab, warm_up=args.warm_up)
            auto_vs_best.append(statistics.median(res.auto_vs_best()))
            print(report(res))
            print(f"  ({time.perf_counter() - t0:.0f} s)")
    if args.acceptance and len(auto_vs_best) > 1:
        print(f"auto against the best fixed k, geometric mean of the {len(auto_vs_best)} medians: "
              f"{geometric_mean(auto_vs_best):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
