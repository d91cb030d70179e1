#!/usr/bin/env python3
"""Where the decode loop's time goes, per configuration, on a CPU or a GPU alike, and
what this checkout's host code costs per step against another checkout's.

    .venv/bin/python tools/loop_timeline.py                                   # SmolLM2 drafting for itself
    .venv/bin/python tools/loop_timeline.py --target T.gguf --draft D.gguf --gpu-layers 99 \\
        --configs none,none@0.7,draft:k=8,draft:k=16,draft:k=8@0.7 --tokens 512
    .venv/bin/python tools/loop_timeline.py --before /tmp/main --configs none,ngram:auto,draft:k=4,hybrid:k=4
    .venv/bin/python tools/loop_timeline.py --sampling [--pairs 150]          # host sampling cost, 152k vocab
    .venv/bin/python tools/loop_timeline.py --floor 7                         # target alone's host time, depth by depth

Every ``llama_decode`` is wrapped here, outside the code under test (timeline/clock.py):
``launch`` (the call; on a GPU the graph's build and the kernels' launch), ``wait``
(``llama_synchronize`` after it: the device's work still running; 0 on a CPU), and the
rest of the loop's wall time, the ``host``'s (Python, NumPy, the ctypes calls), also in
the thread's CPU time, which a loaded machine disturbs far less. Per context it counts
the batch shapes the loop's decodes used and how often the shape changed from one decode
to the next (each change makes llama.cpp build its graph again, and on CUDA re-capture
its CUDA graph). Only the loop is timed, not the prompt's prefill.

A configuration is one as ``specdesk bench`` writes it (``none``, ``draft:k=8``,
``draft:auto:p_min=0.75``, ``ngram:auto``), optionally with ``@T`` for a temperature
(top-p ``--top-p``). A draft of another vocabulary than the target's drafts translated.
The configurations' answers are interleaved, round by round, after a round that warms
up every shape, so that every ratio comes from one run; each figure is the median over
``--rounds`` answers with its spread (min-max). The tables (timeline/report.py): per
step, batch shapes and logits bytes copied, the Python overhead share as the statistics
report it and as the timeline measures it, a drafted token's cost in the draft model's
own steps, and for each configuration run at T>0 and at T=0 what sampling costs the host.

``--before DIR`` names another checkout (a folder holding ``app/``, e.g. made with
``git archive main app | tar -x -C DIR``): the same answers run in fresh processes, one
per checkout and round (``--processes``), the order swapped every round, so both see the
same load; the table gives each side's host time per step (wall and CPU) and the ratio.
Run it before and after a change to the decode loop, the engine's hot path or a proposer.

``--sampling`` and ``--floor`` are described in timeline/sampling.py and timeline/floor.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=None, help="target GGUF (default: SmolLM2-135M, the test model; --sampling: "
                                                   "the default draft, a 152k vocabulary)")
    ap.add_argument("--draft", default=None, help="draft GGUF (default: the target itself)")
    ap.add_argument("--configs", default="none,none@0.7,draft:k=8,draft:k=8@0.7")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3, help="answers per configuration (per process with --before)")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: physical cores)")
    ap.add_argument("--gpu-layers", type=int, default=None, help="GPU layers per model (default: auto where offload fits)")
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--before", type=Path, help="another checkout (a folder with app/) to compare this one with")
    ap.add_argument("--processes", type=int, default=3, help="with --before: fresh processes per checkout, alternating")
    ap.add_argument("--sampling", action="store_true", help="instead: the samplers alone on a real vocabulary")
    ap.add_argument("--pairs", type=int, default=0,
                    help="with --sampling: also llama.cpp's backend samplers against the in-place argmax, PAIRS pairs")
    ap.add_argument("--floor", type=int, default=0, metavar="ANSWERS",
                    help="instead: target alone's host time per step at six depths of the loop, ANSWERS answers each")
    ap.add_argument("--json", default=None, help="also write every answer's figures here")
    ap.add_argument("--app", type=Path, default=ROOT / "app", help=argparse.SUPPRESS)  # the checkout a worker runs
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.before and not (args.before / "app" / "specdesk").is_dir():
        ap.error(f"{args.before} holds no app/specdesk")
    return args


def _defaults(args) -> None:
    from specdesk.library.defaults import default_models

    if args.sampling:
        args.target = args.target or str(default_models(["draft"])[0].path)
        return
    args.target = str(Path(args.target or default_models(["test"])[0].path).resolve())
    if args.draft is None and any(not c.startswith("none") for c in args.configs.split(",")):
        args.draft = args.target
    if args.draft:
        args.draft = str(Path(args.draft).resolve())


def _worker(tree: Path, args) -> dict:
    """One fresh process running the answers on ``tree``'s app/, with its own scratch
    data and cache folders (tools/scratch.py)."""
    from scratch import scratch_dir

    tmp = scratch_dir("loop-timeline-")
    env = dict(os.environ, PYTHONPATH=str(tree / "app"), SPECDESK_DATA_DIR=os.path.join(tmp, "data"),
               SPECDESK_CACHE_DIR=os.path.join(tmp, "cache"))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--app", str(tree / "app"),
           "--configs", args.configs, "--tokens", str(args.tokens), "--rounds", str(args.rounds), "--ctx", str(args.ctx),
           "--top-p", str(args.top_p), "--target", args.target] + (["--draft", args.draft] if args.draft else [])
    cmd += [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in ("threads", "gpu_layers") if getattr(args, k) is not None]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(tree))
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"the worker for {tree} failed ({p.returncode})")
    return json.loads(p.stdout.splitlines()[-1])


def compare_checkouts(args) -> dict:
    from timeline.report import compare

    trees = {"before": args.before.resolve(), "after": ROOT}
    results: dict[str, list[dict]] = {lab: [] for lab in trees}
    load = os.getloadavg()[0]
    for r in range(args.processes):
        for lab in (list(trees) if r % 2 == 0 else list(reversed(trees))):
            results[lab].append(_worker(trees[lab], args))
        print(f"round {r + 1}/{args.processes} done (load {os.getloadavg()[0]:.1f})", file=sys.stderr)
    print(f"load average at the start {load:.1f}, at the end {os.getloadavg()[0]:.1f}; {args.tokens} tokens an answer, "
          f"{args.processes} processes x {args.rounds} answers a checkout and configuration\n")
    compare(results, args.configs.split(","))
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(args.app))
    _defaults(args)
    if args.sampling:
        from timeline.sampling import sampling_bench

        sampling_bench(args)
        return 0
    if args.floor:
        from timeline.floor import floor_check

        floor_check(args)
        return 0
    if args.before:
        results = compare_checkouts(args)
    else:
        from timeline.answers import run
        from timeline.report import report

        results = run(args)
        if args.worker:
            print(json.dumps(results))
            return 0
        report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
