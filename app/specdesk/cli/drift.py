"""``specdesk drift``: how far llama.cpp's verify batches move a target's distribution
from its single-token steps on this machine, by batch size, with a control that must
show none (what "the same output as target alone" means here)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import SpecDeskError
from ..session import ModelSpec, Session
from ..session.drift import DRIFT_MAX_WINDOWS, DRIFT_WINDOW, pair_drift
from ..session.text import claim_text, drift_report_text
from .args import default_model_path, gpu_layers, layers_of, positive_int, warn_gpu_layers
from .output import dump_json

#: The largest verify batch the probe takes (a draft of 32 tokens and its bonus row).
MAX_BATCH = 33


def add_parser(sub) -> None:
    d = sub.add_parser("drift", help="llama.cpp's kernel drift on this machine: verify batches against single-token "
                                     "steps of the target, by batch size, with a control")
    d.add_argument("--target", type=Path, help="the model to measure (default: the default pair's target)")
    d.add_argument("--threads", type=positive_int("threads"), default=None, help="CPU threads (default: physical cores)")
    d.add_argument("--gpu-layers", type=gpu_layers("GPU layers"), default="auto", metavar="auto|N",
                   help="layers to offload to the GPU (default auto: as many as fit; none on a CPU-only build)")
    d.add_argument("--windows", type=windows, default=DRIFT_MAX_WINDOWS,
                   help=f"windows of {DRIFT_WINDOW} positions over the probe text, 1 to {DRIFT_MAX_WINDOWS} "
                        f"(default {DRIFT_MAX_WINDOWS})")
    d.add_argument("--batches", type=batch_sizes, default=tuple(range(2, 10)), metavar="LO-HI|B,B,...",
                   help=f"verify batch sizes, e.g. 2-9 (default) or 2,4,8 (each from 2 to {MAX_BATCH})")
    d.add_argument("--cached", action="store_true",
                   help="reuse this command's saved measurement of the same setup (model, threads, GPU layers, "
                        "machine, llama.cpp build and batches) instead of measuring again")
    d.add_argument("--json", action="store_true", help="print the measurement as one JSON document")


def windows(text: str) -> int:
    """1 to DRIFT_MAX_WINDOWS windows (the probe text holds no more)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= DRIFT_MAX_WINDOWS:
        raise argparse.ArgumentTypeError(f"windows must be an integer from 1 to {DRIFT_MAX_WINDOWS}, got {text!r}")
    return n


def batch_sizes(text: str) -> tuple[int, ...]:
    """``2-9`` or ``2,4,8``: verify batch sizes from 2 to MAX_BATCH."""
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            sizes = tuple(range(lo, hi + 1))
        else:
            sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"batches must be LO-HI or a comma-separated list of integers, got {text!r}") from None
    if not sizes:
        raise argparse.ArgumentTypeError(f"batches name no batch size: {text!r}")
    bad = [b for b in sizes if not 2 <= b <= MAX_BATCH]
    if bad:
        raise argparse.ArgumentTypeError(f"a verify batch is 2 to {MAX_BATCH} tokens, got {bad[0]}")
    return sizes


def cmd_drift(args) -> int:
    path = args.target or default_model_path("target")
    n_gpu = layers_of(args.gpu_layers)
    warn_gpu_layers(n_gpu)
    with Session.load(ModelSpec(path, threads=args.threads, n_ctx=1024, n_gpu_layers=n_gpu), remember_costs=False) as s:
        s.warm_up()
        threads = s.target.ctx.threads
        try:
            d = pair_drift(s, batch_sizes=args.batches, windows=args.windows, use_cache=args.cached, control=True).to_dict()
        except ValueError as e:  # a batch too long for the probe text of this model's tokenizer
            raise SpecDeskError(f"cannot measure the drift of {path.name}: {e}") from None
    if args.json:
        print(dump_json(d))
        return 0
    on = d.get("measured_on") or {}
    print(f"{path.name}: {threads} threads, {on.get('build') or 'llama.cpp'}"
          + (" (a saved measurement)" if on.get("cached") else ""))
    print(drift_report_text(d))
    print(claim_text(d))
    return 0
