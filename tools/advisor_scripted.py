#!/usr/bin/env python3
"""The advisor on the test suite's scripted machines, over several seeds: per machine
and seed, each predicted configuration's error on the held-out prompts (predicted /
measured - 1), as `tests/unit/test_advisor_loop.py` checks it for seed 0.

    .venv/bin/python tools/advisor_scripted.py [--seeds 0,1,2,3]

Every figure is exact and repeatable (fake backends on a scripted clock); a seed
changes the draft's noise and the run-to-run jitter, so the seeds show how far the
bound holds beyond the one the test runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "unit")]

import test_advisor_loop as scripted  # noqa: E402  (the machines are defined there)

from specdesk.bench.advisor import advisor_section  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2,3")
    args = ap.parse_args()
    worst = 0.0
    for seed in (int(s) for s in args.seeds.split(",")):
        for machine in scripted.MACHINES:
            s, cal = scripted._calibrated(machine, seed)
            res = scripted._held_out(s, ",".join(cal.loop.configs) + ",draft:auto")
            rows = advisor_section(cal, res)["predictions"]
            fixed = [abs(r["error"]) for r in rows if r["config"] != "draft:auto"]
            worst = max([worst, *fixed])
            errors = "  ".join(f"{r['config']} {100 * r['error']:+.1f}%" for r in rows)
            print(f"seed {seed}  {machine:<15} rounds {cal.loop.repeats}  worst fixed-k |error| "
                  f"{100 * max(fixed, default=0):.1f}%   {errors}")
    print(f"worst |error| of a fixed k over all: {100 * worst:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
