"""Write a synthetic GLM-4.5-shaped GGUF (llama.cpp's glm4moe) with one MTP head, for
benchmarks of the mtp proposer where no real MTP model can be downloaded.

The trunk is a bigram table (every attention and feed-forward output zero: the next
token depends on the last one alone) and the head either agrees with it (acceptance
near 1) or is random (near 0); every matrix is still multiplied, so a step costs what
the shape costs. tools/synth/mtp.py writes it (the tests make tiny ones of the same kind).

usage:
  python tools/make_mtp_model.py OUT.gguf [--heads agree|random|none] [--width 1024] [--layers 8]
      [--ff 4096] [--heads-n 8] [--kv-heads 2] [--experts 1] [--tokenizer TOK.json.gz] [--f32]

--width, --layers, --ff: the trunk's embedding width, trunk layers and feed-forward size;
every trunk layer is dense (GLM's MoE layers only where --moe-layers says), and the head
is one MoE block of --experts experts whose feed-forward (each expert's, and the shared
one's) is half of --ff, so that it costs about what one trunk layer costs. A 7B-like
trunk: --width 3584 --layers 28 --ff 18944 --heads-n 28 --kv-heads 4 (about 7 GB at f16).
--tokenizer: a tokenizer dumped by /work/shared/gpu/make_synthetic.py (Qwen2.5's, 152k
tokens) instead of the tiny byte-level one (about 400 tokens).

Example (the CPU figures of issue 43):
  python tools/make_mtp_model.py /tmp/mtp-agree.gguf --width 1024 --layers 8 --ff 4096
  PYTHONPATH=app python -m specdesk bench --target /tmp/mtp-agree.gguf --configs none,mtp:k=2,mtp:k=4 ...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from synth.mtp import MtpSpec, write_mtp_model  # tools/synth/: this script's folder is on sys.path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--heads", choices=("agree", "random", "none"), default="agree")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8, help="trunk layers")
    p.add_argument("--moe-layers", type=int, default=0, help="of the trunk layers, how many (the last) are MoE")
    p.add_argument("--ff", type=int, default=4096)
    p.add_argument("--heads-n", type=int, default=8, help="attention heads")
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--experts", type=int, default=1, help="experts in each MoE block (the head's too); 1 used")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--tokenizer", type=Path, default=None)
    p.add_argument("--f32", action="store_true", help="f32 matrices (default f16)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    spec = MtpSpec(heads=a.heads, n_layer=a.layers, n_dense=a.layers - a.moe_layers, n_embd=a.width,
                   n_head=a.heads_n, n_head_kv=a.kv_heads, n_ff=a.ff, n_expert=a.experts, n_expert_used=1,
                   n_ff_exp=a.ff // 2, n_ctx=a.ctx, seed=a.seed, dtype="f32" if a.f32 else "f16",
                   tokenizer=str(a.tokenizer) if a.tokenizer else None)
    write_mtp_model(a.out, spec)
    print(f"{a.out}: {a.out.stat().st_size / 2**20:.1f} MiB, glm4moe, {a.layers} trunk layers of width {a.width}, "
          f"heads: {a.heads}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
