#!/usr/bin/env python3
"""An A/A comparison on real models: how noisy this machine is, and whether the
comparison's intervals and verdicts respect that noise.

    .venv/bin/python tools/aa_check.py [--target GGUF] [--suite code_editing] [--until-sure 3] [--max-repeats 10]
        [--time-budget MINUTES] [--max-tokens 64] [--trials 1]

Target alone runs against a configuration that cannot draft (``ngram`` with its
lookups turned off: target alone's computation under another name), through the same
runner as ``specdesk bench``: a warm-up, interleaved repeats rotated from one repeat
to the next, run until every interval is within +-PCT% (or ``--max-repeats``). Both
do the same computation, so a correct 95% interval holds 1x and the verdict is
*within noise* in 95% of trials. Prints, per trial, the speedup with its interval,
the verdict, the smallest detectable difference and how many repeats it needed; then
the machine's noise floor (target alone's own repeat-to-repeat spread), the load
average before and after, and the share of trials within noise.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from scratch import scratch_dir  # tools/scratch.py: removed when the tool ends

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "app"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=Path, default=ROOT / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--suite", default="code_editing")
    ap.add_argument("--until-sure", type=float, default=3.0, metavar="PCT")
    ap.add_argument("--max-repeats", type=int, default=10)
    ap.add_argument("--time-budget", type=float, default=None, metavar="MINUTES", help="per trial")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--trials", type=int, default=1)
    args = ap.parse_args()
    os.environ.setdefault("SPECDESK_CACHE_DIR", scratch_dir("specdesk-aa-cache-"))
    os.environ.setdefault("SPECDESK_DATA_DIR", scratch_dir("specdesk-aa-data-"))

    from specdesk.bench.rows import rows_of
    from specdesk.bench.configs import parse_configs
    from specdesk.bench.runner import BenchOptions, SessionTarget, UntilSure, run_bench
    from specdesk.bench.suites import load_suite
    from specdesk.session import ModelSpec, Session
    from specdesk.session.text import noise_text, speed_verdict_text, stopping_text

    class CannotDraft(SessionTarget):
        def run(self, prompt, config):
            if config.proposer == "ngram":
                config = replace(config, proposer="none")
            return super().run(prompt, config)

    suites = load_suite(args.suite)
    configs = parse_configs("none,ngram")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    verdicts = []
    with Session.load(ModelSpec(args.target, n_ctx=args.ctx, threads=args.threads), None, remember_costs=False) as s:
        for trial in range(args.trials):
            options = BenchOptions(max_tokens=args.max_tokens, seed=trial,
                                   until_sure=UntilSure(half_width=args.until_sure / 100, max_repeats=args.max_repeats,
                                                        seconds=60 * args.time_budget if args.time_budget else None))
            res = run_bench(CannotDraft(s), suites, configs, options,
                            progress=lambda d, n, w: print(f"  {w}", flush=True) if w.startswith("repeat ") else None)
            row = next(r for r in rows_of(res["summary"]["overall"]) if r.config == "ngram:auto")
            verdicts.append(row.verdict)
            print(f"trial {trial + 1}: A/A {speed_verdict_text(row)}")
            print(f"  {stopping_text(res['stopping'], [row])}")
            print(f"  {noise_text(res['summary']['noise'])}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"within noise in {verdicts.count('within-noise')} of {len(verdicts)} trials")
    return 0


if __name__ == "__main__":
    sys.exit(main())
