"""Write a synthetic draft head and the small target it reads: DIR/target.gguf and
DIR/head.gguf, for the tests and benchmarks of the head proposers where no real pair
can be downloaded.

usage:
  python tools/make_head_model.py DIR --kind eagle3|dflash|gemma4-assistant [--random]
      [--width 64] [--layers 4] [--ff 128] [--heads-n 4]

Without --random the head agrees with its target (acceptance near 1), with it the head's
matrices are random (acceptance near 0). Each kind's writer is a function
``write_pair(dir, random)`` in a module of tools/synth/ (imported only when asked for:
a kind whose module is not there yet is refused in one line).

Example (a speedup on this CPU, as the closing note of issue 49 measured it):
  python tools/make_head_model.py /tmp/eagle3 --kind eagle3 --width 1024 --layers 8 --ff 4096 --heads-n 16
  PYTHONPATH=app python -m specdesk bench --target /tmp/eagle3/target.gguf --draft /tmp/eagle3/head.gguf \\
      --configs none,eagle3:k=3,eagle3:auto
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: kind -> (module under tools/synth/, its function writing (target, head) into a folder)
KINDS: dict[str, tuple[str, str]] = {
    "eagle3": ("synth.heads", "write_eagle3_pair"),
    "dflash": ("synth.heads", "write_dflash_pair"),
    "gemma4-assistant": ("synth.gemma4_assistant", "write_pair"),
}


def writer(kind: str):
    """The function writing ``kind``'s pair; SystemExit(2), with one line, where its module is missing."""
    module, name = KINDS[kind]
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as e:
        if e.name not in (module, module.split(".")[0]):
            raise
        print(f"make_head_model: no writer for {kind} yet (tools/{module.replace('.', '/')}.py is missing)",
              file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--kind", choices=tuple(KINDS), required=True)
    p.add_argument("--random", action="store_true", help="random head matrices (acceptance near 0)")
    p.add_argument("--width", type=int, help="the target's (and a DFlash head's) width (default 64)")
    p.add_argument("--layers", type=int, help="the target's layers (default 4)")
    p.add_argument("--ff", type=int, help="feed-forward size (default 128)")
    p.add_argument("--heads-n", type=int, help="the target's attention heads (default 4)")
    a = p.parse_args(argv)
    sizes = {k: v for k, v in (("n_embd", a.width), ("n_layer", a.layers), ("n_ff", a.ff), ("n_head", a.heads_n))
             if v is not None}  # (only those given: another kind's writer may not take them)
    target, head = writer(a.kind)(a.dir, random=a.random, **sizes)
    print(f"{target}: {Path(target).stat().st_size / 2**10:.0f} KiB; {head}: {Path(head).stat().st_size / 2**10:.0f} KiB "
          f"({a.kind}, {'random' if a.random else 'agreeing with its target'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
