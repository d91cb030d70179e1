#!/usr/bin/env python3
"""Does the default path ever lose? Target alone (none) against the default
configuration (draft:auto, the app's default p-min) on every built-in suite.

    .venv/bin/python tools/bench_default_path.py [--repeats 3] [--max-tokens 128] [--prompts N]
        [--suites all] [--target T --draft D] [--threads N] [--remember-costs] [--json OUT]

It drives the benchmark runner's public API (the same runs as `specdesk bench`:
configurations rotated from repeat to repeat, each run from empty contexts, paired
ratios). For each suite it prints the median ratio draft:auto / none over every
(prompt, repeat), its spread (min, quartiles, max), the geometric mean and its 95%
interval, how many runs a 5% effect needs at the spread seen, the tokens drafted and
why auto drafted or not (its decisions, counted over the steps).

A tool, not a test: its figures hold only on a quiet machine.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from specdesk.bench.configs import parse_config
from specdesk.bench.runner import BenchOptions, SessionTarget, paired_ratios, run_bench
from specdesk.bench.suites import load_suite
from specdesk.files import write_json_atomic
from specdesk.library.defaults import default_models
from specdesk.session import GenerationConfig, ModelSpec, Session, default_threads

DEFAULT = f"draft:auto:p_min={GenerationConfig().p_min:g}"


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def suite_rows(result: dict, config: str) -> list[dict]:
    """Per suite: the paired ratios config / none and their spread."""
    ratios = paired_ratios(result["runs"], config)
    rows = []
    for suite in result["meta"]["settings"]["suites"]:
        xs = [x for (s, _), v in ratios.items() if s == suite for x in v]
        runs = [r for r in result["runs"] if r["suite"] == suite and r["config"] == config]
        if not xs:
            continue
        logs = [math.log(x) for x in xs]
        mean = statistics.fmean(logs)
        sd = statistics.stdev(logs) if len(logs) > 1 else 0.0
        half = 1.96 * sd / math.sqrt(len(logs)) if len(logs) > 1 else float("nan")
        decisions: dict[str, int] = {}
        for r in runs:
            for k, n in (r["stats"].get("decisions") or {}).items():
                decisions[k] = decisions.get(k, 0) + n
        rows.append(
            {
                "suite": suite,
                "n": len(xs),
                "median": statistics.median(xs),
                "min": min(xs),
                "p25": _quantile(xs, 0.25),
                "p75": _quantile(xs, 0.75),
                "max": max(xs),
                "geomean": math.exp(mean),
                "ci95": [math.exp(mean - half), math.exp(mean + half)] if half == half else None,
                # runs for a 95% interval of +-5% around the mean ratio, at this spread
                "runs_for_5pct": math.ceil((1.96 * sd / math.log(1.05)) ** 2) if sd else 1,
                "drafted": sum(r["stats"]["drafted"] for r in runs),
                "draft_seconds": sum(r["stats"]["draft_seconds"] for r in runs),
                "decisions": dict(sorted(decisions.items(), key=lambda kv: -kv[1])),
            }
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suites", default="all")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=0, help="only the first N prompts of each suite (0 = all)")
    ap.add_argument("--config", default=DEFAULT, help=f"the configuration held against none (default {DEFAULT})")
    ap.add_argument("--target", type=Path)
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--remember-costs", action="store_true",
                    help="start auto from the costs saved for this pair, as the app does (default: a cold start)")
    ap.add_argument("--json", type=Path, help="write the whole result (runs included) here")
    a = ap.parse_args()
    if a.repeats < 3:
        print("note: fewer than 3 repeats cannot show a 5% effect on a noisy machine", file=sys.stderr)

    t = a.target or default_models(["target"])[0].path
    d = a.draft or default_models(["draft"])[0].path
    suites = load_suite(a.suites)
    if a.prompts > 0:
        suites = [replace(s, prompts=s.prompts[: a.prompts]) for s in suites]
    config = parse_config(a.config)
    configs = [parse_config("none"), config]
    total = sum(len(s.prompts) for s in suites) * a.repeats * len(configs)
    print(f"{t.name} + {d.name}: {config.name} vs none on {', '.join(s.name for s in suites)}; "
          f"{total} runs of {a.max_tokens} tokens", flush=True)

    t0 = time.monotonic()
    session = Session.load(ModelSpec(t, threads=a.threads), ModelSpec(d, threads=a.threads), remember_costs=a.remember_costs)
    try:
        def progress(done: int, n: int, what: str) -> None:
            if done % 10 == 0 or done == n:
                print(f"  {done}/{n} {what} ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)

        result = run_bench(SessionTarget(session), suites, configs,
                           BenchOptions(repeats=a.repeats, max_tokens=a.max_tokens), progress=progress)
    finally:
        session.close()

    rows = suite_rows(result, config.name)
    result["default_path"] = {"config": config.name, "per_suite": rows}
    print(f"\n{config.name} / none, paired per (prompt, repeat); {a.threads or default_threads()} threads")
    print(f"{'suite':<18} {'n':>3} {'median':>7} {'min':>6} {'p25':>6} {'p75':>6} {'max':>6} {'geomean [95%]':>21}"
          f" {'runs@5%':>7} {'drafted':>7} {'draft s':>7}  why (steps)")
    for r in rows:
        ci = r["ci95"]
        ci_s = f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "-"
        why = ", ".join(f"{k} {n}" for k, n in list(r["decisions"].items())[:3])
        print(f"{r['suite']:<18} {r['n']:>3} {r['median']:>7.3f} {r['min']:>6.2f} {r['p25']:>6.2f} {r['p75']:>6.2f}"
              f" {r['max']:>6.2f} {r['geomean']:>6.3f} {ci_s:>14} {r['runs_for_5pct']:>7} {r['drafted']:>7}"
              f" {r['draft_seconds']:>7.2f}  {why}")
    worst = min((r["median"] for r in rows), default=None)
    if worst is not None:
        print(f"\nworst suite median: {worst:.3f}x ({'holds' if worst >= 0.97 else 'BELOW'} the 0.97x floor); "
              f"{time.monotonic() - t0:.0f} s in all")
    if a.json:
        write_json_atomic(a.json, result, indent=1)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
