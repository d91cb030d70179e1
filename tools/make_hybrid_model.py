"""Write a synthetic Qwen3.5-shaped GGUF (llama.cpp's qwen35: gated delta-net layers with
convolution and recurrent state, and full-attention layers), optionally with one MTP
head, or with --swa a Gemma-3-shaped one with a sliding-window layer: for the tests and
benchmarks of hybrid targets, their MTP heads and rollbacks near a window's edge.

The writers are tools/synth/hybrid.py and tools/synth/swa.py (their docstrings say how
the models compute their text: the next token depends on the recurrent state or the
window, so a wrong rollback changes it). A target and its drafts share --world; a draft
that disagrees after some tokens gets --flip.

usage:
  python tools/make_hybrid_model.py OUT.gguf [--mtp | --random-mtp] [--swa] [--layers 4]
      [--width 512] [--ff 64] [--state 16] [--flip 0.0] [--world 0] [--f16]

A pair for `specdesk bench` (a 320 MiB target with an agreeing head, a fast draft that
disagrees after 5% of the tokens; issue 48's figures):
  python tools/make_hybrid_model.py /tmp/bt.gguf --mtp --layers 24 --width 1024 --ff 2048 --state 64 --f16
  python tools/make_hybrid_model.py /tmp/bd.gguf --layers 2 --flip 0.05 --seed 5 --f16
  PYTHONPATH=app python -m specdesk bench --target /tmp/bt.gguf --draft /tmp/bd.gguf --threads 1 --ctx 2048 \
      --suite chat_qa --configs none,mtp:k=4,draft:k=4,ngram:k=4 --repeats 3 --max-tokens 48 --temp 0 --no-advisor
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synth.hybrid import HybridSpec, write_hybrid_model  # noqa: E402
from synth.swa import SwaSpec, write_swa_model  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    heads = p.add_mutually_exclusive_group()
    heads.add_argument("--mtp", action="store_true", help="one MTP head that agrees with the trunk")
    heads.add_argument("--random-mtp", action="store_true", help="one MTP head of random weights (a control)")
    p.add_argument("--swa", action="store_true", help="a gemma3 model with a sliding-window layer instead")
    p.add_argument("--window", type=int, default=7, help="--swa: the window")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=512, help="at least 408 (one axis per token and three more)")
    p.add_argument("--ff", type=int, default=64)
    p.add_argument("--state", type=int, default=16, help="the delta net's head size")
    p.add_argument("--attn-every", type=int, default=2, help="every N-th layer is full attention")
    p.add_argument("--flip", type=float, default=0.0, help="share of tokens whose sign this model gets wrong")
    p.add_argument("--world", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--f16", action="store_true", help="f16 matrices (default f32)")
    a = p.parse_args(argv)
    if a.swa:
        if a.mtp or a.random_mtp:
            p.error("--swa models have no MTP head")
        write_swa_model(a.out, SwaSpec(n_layer=a.layers, window=a.window, n_embd=a.width, n_ff=a.ff, n_ctx=a.ctx,
                                       world=a.world, seed=a.seed, flip=a.flip))
        what = f"gemma3, window {a.window}"
    else:
        heads_kind = "agree" if a.mtp else "random" if a.random_mtp else "none"
        write_hybrid_model(a.out, HybridSpec(heads=heads_kind, n_layer=a.layers, attn_every=a.attn_every, n_embd=a.width,
                                             n_ff=a.ff, d_state=a.state, n_ctx=a.ctx, world=a.world, seed=a.seed,
                                             flip=a.flip, dtype="f16" if a.f16 else "f32"))
        what = f"qwen35, MTP head: {heads_kind}"
    print(f"{a.out}: {a.out.stat().st_size / 2**20:.1f} MiB, {what}, {a.layers} layers of width {a.width}, flip {a.flip}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
