#!/usr/bin/env python3
"""Read a `specdesk bench` report.json and print the performance targets as ratios
from that one run:

1. Python's own overhead (decode time outside llama_decode and the logits copy)
   as a share of decode time, per config;
2. draft:auto against none on every suite (goal: >= 0.95);
3. ngram / hybrid on code_editing against none (goal: >= 1.2);
4. the best adaptive config per suite against the best fixed config of the sweep
   (goal: within 10%);
and the advisor's predicted vs measured speedups (goal: within 15%).

    .venv/bin/python tools/check_targets.py bench-out/.../report.json
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> int:
    res = json.load(open(path, encoding="utf-8"))
    rows = res["summary"]["per_suite"]
    suites = list(dict.fromkeys(r["suite"] for r in rows))
    by = {(r["suite"], r["config"]): r for r in rows}
    configs = res["configs"]

    print("1. Python overhead share of decode time, per config (all suites):")
    for r in res["summary"]["overall"]:
        print(f"   {r['config']:<14} {100 * (r['overhead_share'] or 0):5.2f}%")

    print("\n2. draft:auto / none per suite (goal >= 0.95):")
    for s in suites:
        r = by.get((s, "draft:auto"))
        if r:
            ok = "ok" if r["speedup"] >= 0.95 else "MISSED"
            print(f"   {s:<18} {r['speedup']:.2f}  {ok}")

    print("\n3. n-gram / hybrid on code_editing (goal >= 1.2):")
    for c in configs:
        if c.startswith(("ngram", "hybrid")) and ("code_editing", c) in by:
            print(f"   {c:<14} {by[('code_editing', c)]['speedup']:.2f}")

    print("\n4. best adaptive config vs the best fixed config of the sweep, per suite (goal: within 10%):")
    for s in suites:
        fixed = [(by[(s, c)]["speedup"], c) for c in configs if (s, c) in by and (c == "none" or ":k=" in c)]
        adaptive = [(by[(s, c)]["speedup"], c) for c in configs if (s, c) in by and c.endswith(":auto")]
        if not fixed or not adaptive:
            continue
        bf, af = max(fixed), max(adaptive)
        gap = af[0] / bf[0] - 1
        print(f"   {s:<18} best fixed {bf[1]} {bf[0]:.2f}, best adaptive {af[1]} {af[0]:.2f} ({100 * gap:+.1f}%)"
              f"  {'ok' if gap >= -0.10 else 'MISSED'}")

    adv = res.get("advisor")
    if adv and adv.get("predictions"):
        print("\nadvisor: predicted vs measured speedup (goal: within 15%):")
        errs = []
        for p in adv["predictions"]:
            errs.append(abs(p["error"] or 0))
            flag = "" if abs(p["error"] or 0) <= 0.15 else "  > 15%"
            print(f"   {p['suite']:<18} {p['config']:<14} predicted {p['predicted_speedup']:.2f}  measured "
                  f"{p['measured_speedup']:.2f}  error {100 * p['error']:+.1f}%{flag}")
        inside = sum(1 for e in errs if e <= 0.15)
        print(f"   {inside}/{len(errs)} within 15%, mean |error| {100 * sum(errs) / len(errs):.1f}%")
        print("\nadvisor says:", adv.get("recommendation"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
