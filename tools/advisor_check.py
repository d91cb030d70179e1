#!/usr/bin/env python3
"""The advisor against a benchmark on prompts it never saw, on real models.

    .venv/bin/python tools/advisor_check.py [--target GGUF] [--draft GGUF] [--threads 2] [--repeats 3]
        [--max-tokens 128] [--configs none,draft:k=2]

Calibrates the pair as ``specdesk advise`` does (the component costs, then short runs
of the real decode loop on the calibration prompts), starts auto from the measured
costs, then runs ``specdesk.bench`` (a warm-up, interleaved repeats rotated from one
repeat to the next) on held-out prompts of three kinds, one from each of the built-in
suites code_boilerplate (code), code_editing (an editing task) and creative (prose),
none of them a calibration prompt. Configurations: those the calibration ran, and
draft:auto (or ``--configs``). Prints, per configuration: the loop's prediction with
its 95% interval, whether the advisor says it pays, the measured speedup with its
interval, the error; and next to it the old component prediction for the same runs
(:func:`specdesk.bench.advisor.predict_run`) and its error (before vs after). Also
what the calibration cost, split into its parts, and the machine's load before and
after. Run it once, on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from scratch import scratch_dir  # tools/scratch.py: removed when the tool ends

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "app"))

HELD_OUT = (("code_boilerplate", "code"), ("code_editing", "editing"), ("creative", "prose"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=Path, default=ROOT / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--draft", type=Path, default=ROOT / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--configs", default=None, help="default: the calibration's configurations and draft:auto")
    args = ap.parse_args()
    os.environ.setdefault("SPECDESK_CACHE_DIR", scratch_dir("specdesk-advisor-cache-"))
    os.environ.setdefault("SPECDESK_DATA_DIR", scratch_dir("specdesk-advisor-data-"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from specdesk.bench.advisor import advise, calibrate, validate
    from specdesk.bench.configs import parse_configs
    from specdesk.bench.loop_calibration import CALIBRATION_PROMPTS
    from specdesk.bench.runner import BenchOptions, SessionTarget, run_bench
    from specdesk.bench.suites import Suite, load_suite
    from specdesk.session import ModelSpec, Session
    from specdesk.session.text import interval_text, predicted_cell, prediction_verdict_label

    prompts = tuple(load_suite(name)[0].prompts[0] for name, _ in HELD_OUT)
    assert not {p.text for p in prompts} & {p.text for p in CALIBRATION_PROMPTS}
    held_out = Suite("held-out", prompts, None, "one prompt each of code, an editing task and prose")
    load0 = os.getloadavg()
    with Session.load(ModelSpec(args.target, n_ctx=args.ctx, threads=args.threads),
                      ModelSpec(args.draft, n_ctx=args.ctx, threads=args.threads), remember_costs=False) as s:
        marks = {}

        def progress(msg: str, frac: float) -> None:
            marks.setdefault("loop" if msg.startswith("advisor: ") else "components", time.perf_counter())

        t0 = time.perf_counter()
        cal = calibrate(s, progress=progress, drift=False)
        t1 = time.perf_counter()
        adv = advise(cal)
        s.seed_costs(cal.costs)
        configs = parse_configs(args.configs or ",".join(cal.loop.configs) + f",{cal.draft_source}:auto")
        print(f"calibration: {t1 - t0:.1f} s in all, of which the loop {t1 - marks.get('loop', t1):.1f} s "
              f"({cal.loop.runs} runs of {cal.loop.max_tokens} tokens, {cal.loop.repeats} repeats, stopped: "
              f"{cal.loop.reason}); kernel drift not measured", flush=True)
        print(f"advisor: {adv.text}\n", flush=True)
        res = run_bench(SessionTarget(s), [held_out], configs,
                        BenchOptions(repeats=args.repeats, max_tokens=args.max_tokens))
    load1 = os.getloadavg()
    rows = validate(cal, res)
    print(f"held-out: {', '.join(f'{p.id} ({kind})' for p, (_, kind) in zip(prompts, HELD_OUT))}; "
          f"{args.repeats} interleaved repeats of {args.max_tokens} tokens, --threads {args.threads}")
    head = (f"{'config':<12} {'predicted (95%)':<20} {'says':<13} {'measured (95%)':<20} {'error':>7}   "
            f"{'components (before)':>19} {'error':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        meas = f"{r['measured_speedup']:.2f}× ({interval_text(r['measured_ci'])})"
        said = {"predicted_speedup": r["predicted_speedup"], "predicted_ci": r["predicted_ci"],
                "verdict": r["predicted_verdict"]}
        comp = r["component_predicted_speedup"]
        comp_err = (comp - r["measured_speedup"]) / r["measured_speedup"] if comp else None
        print(f"{r['config']:<12} {predicted_cell(r):<20} {prediction_verdict_label(said):<13} {meas:<20} "
              f"{100 * r['error']:>+6.1f}%   {comp:>18.2f}× {100 * comp_err:>+6.1f}%")
    predicted = {r["config"] for r in rows}
    for row in res["summary"]["overall"]:
        if row["config"] not in predicted and row["config"] != "none":
            print(f"{row['config']:<12} {'not predicted':<20} {'':<13} {row['speedup']:.2f}× ({interval_text(row['speedup_ci'])})")
    print(f"\nadvisor best: {adv.best}; the old (component) advisor's best: "
          f"{max(adv.components, key=lambda r: r['predicted_speedup'])['config']} at "
          f"{max(r['predicted_speedup'] for r in adv.components):.2f}×")
    bad = [r["config"] for r in rows if r["pays"] and r["measured_speedup"] < 0.97]
    print(f"'pays' said for a configuration measured below 0.97×: {', '.join(bad) if bad else 'none'}")
    print(f"load average before {load0[0]:.2f}, after {load1[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
