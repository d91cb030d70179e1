#!/usr/bin/env python3
"""Kernel drift of llama.cpp verify batches against single-token steps, by batch size.

    .venv/bin/python tools/drift_report.py [MODEL.gguf ...] [--windows 6] [--batches 2-9] [--json]

Default models: SmolLM2 (the test model) and the default target. For each, the
advisor's probe (specdesk.speculative.drift) over the calibration text: mean and
worst total variation at T=1, the largest logit difference, and at T=0 the share of
positions whose argmax flips and the share of near-ties; plus a control that repeats
the single-token steps (it must show no drift). Measured fresh unless --cached.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdesk.bench.advisor import pair_drift
from specdesk.library.defaults import default_models
from specdesk.session import ModelSpec, Session
from specdesk.session.text import claim_text


def parse_batches(text: str) -> tuple[int, ...]:
    if "-" in text:
        lo, hi = (int(x) for x in text.split("-", 1))
        return tuple(range(lo, hi + 1))
    return tuple(int(x) for x in text.split(","))


def table(d: dict) -> str:
    lines = [
        f"{'batch':>5}  {'positions':>9}  {'mean TV':>8}  {'worst TV':>8}  {'max |dlogit|':>12}  {'flips T=0':>10}",
    ]
    for b in d["by_batch"]:
        name = "1*" if b["batch"] == 1 else str(b["batch"])
        lines.append(
            f"{name:>5}  {b['positions']:>9}  {100 * b['tv_mean']:>7.3f}%  {100 * b['tv_max']:>7.2f}%  "
            f"{b['logit_diff_max']:>12.4f}  {b['flips']:>3} ({100 * b['flip_share']:.1f}%)"
        )
    lines.append("  (1* = the control: single-token steps repeated)")
    margin = d["flip_margin_max"]
    lines.append(
        f"overall: mean TV {100 * d['tv_mean']:.3f}%, worst {100 * d['tv_max']:.2f}%"
        + (f" (batch {d['worst_batch']})" if d["worst_batch"] else "")
        + "; "
        f"argmax flips {d['flips']} ({100 * d['flip_share']:.2f}% of position x batch pairs)"
        + (f", largest flipped margin {margin:.3f}" if margin is not None else "")
        + f"; near-ties (top two within {d['near_tie_logits']:g}): {100 * d['near_tie_share']:.1f}% of positions; "
        f"{d['seconds']:.1f} s"
    )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--windows", type=int, default=6, help="windows of 16 positions (default 6)")
    ap.add_argument("--batches", default="2-9", help="batch sizes, e.g. 2-9 or 2,4,8")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--cached", action="store_true", help="reuse a cached measurement of the same setup")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    models = args.models or [m.path for m in default_models(["test", "target"])]
    out = {}
    for path in models:
        if not Path(path).is_file():
            print(f"{path}: missing, skipped", file=sys.stderr)
            continue
        with Session.load(ModelSpec(path, threads=args.threads, n_ctx=1024), remember_costs=False) as s:
            s.warm_up()
            d = pair_drift(s, batch_sizes=parse_batches(args.batches), windows=args.windows,
                           use_cache=args.cached, control=True).to_dict()
        out[Path(path).name] = d
        if not args.json:
            print(f"== {Path(path).name} (threads {args.threads or 'auto'}; {d['measured_on'].get('build')})")
            print(table(d))
            print(claim_text(d))
            print()
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
