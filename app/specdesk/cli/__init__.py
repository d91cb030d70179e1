"""``specdesk`` command line. Never imports Qt.

Every user error prints one line on stderr and exits with code 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Sequence

from . import __version__
from .errors import SpecDeskError

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage dump) and exit 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _positive_int(name: str):
    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a positive integer, got {v!r}") from None
        if n <= 0:
            raise argparse.ArgumentTypeError(f"{name} must be a positive integer, got {n}")
        return n

    return parse


def _non_negative_int(name: str):
    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer >= 0, got {v!r}") from None
        if n < 0:
            raise argparse.ArgumentTypeError(f"{name} must be an integer >= 0, got {n}")
        return n

    return parse


def _k(v: str):
    if v == "auto":
        return "auto"
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"k must be a positive integer or 'auto', got {v!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"k must be a positive integer or 'auto', got {n}")
    return n


def _float_in(name: str, lo: float, hi: float | None, lo_open: bool = False, hi_open: bool = False):
    def parse(v: str) -> float:
        try:
            x = float(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {v!r}") from None
        bad = x != x or (x <= lo if lo_open else x < lo) or (hi is not None and (x >= hi if hi_open else x > hi))
        if bad:
            rng = f"{'(' if lo_open else '['}{lo}, {hi if hi is not None else 'inf'}{')' if hi_open or hi is None else ']'}"
            raise argparse.ArgumentTypeError(f"{name} must be in {rng}, got {v}")
        return x

    return parse


def add_model_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("models")
    g.add_argument("--target", type=Path, help="target GGUF (default: the default pair's target in models/)")
    g.add_argument("--draft", type=Path, help="draft GGUF (default: the default pair's draft in models/)")
    g.add_argument("--ctx", type=_positive_int("context size"), default=4096, help="context size in tokens (default 4096)")
    g.add_argument("--threads", type=_positive_int("threads"), default=None, help="CPU threads (default: physical cores)")
    g.add_argument("--gpu-layers", type=_non_negative_int("GPU layers"), default=0, help="target layers to offload to the GPU")
    g.add_argument("--draft-gpu-layers", type=_non_negative_int("draft GPU layers"), default=None,
                   help="draft layers to offload (default: same as --gpu-layers)")


def add_generation_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("generation")
    g.add_argument("--prompt", required=True, help="the prompt (chat-formatted with the target's template unless --raw)")
    g.add_argument("--raw", action="store_true", help="plain completion: no chat template")
    g.add_argument("--proposer", choices=["draft", "ngram", "hybrid", "none"], default="draft")
    g.add_argument("--k", type=_k, default="auto", help="draft length: a positive integer or 'auto' (default)")
    g.add_argument("--p-min", type=_float_in("p-min", 0.0, 1.0, hi_open=True), default=0.75,
                   help="stop drafting when the draft's top probability is below this (default 0.75)")
    g.add_argument("--temp", type=_float_in("temperature", 0.0, None), default=0.0, help="temperature, 0 = greedy (default)")
    g.add_argument("--top-k", type=_non_negative_int("top-k"), default=0, help="top-k, 0 = off")
    g.add_argument("--top-p", type=_float_in("top-p", 0.0, 1.0, lo_open=True), default=1.0, help="top-p, 1 = off")
    g.add_argument("--min-p", type=_float_in("min-p", 0.0, 1.0, hi_open=True), default=0.0, help="min-p, 0 = off")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--max-tokens", type=_positive_int("max tokens"), default=256)
    g.add_argument("--json", action="store_true", help="print one JSON document instead of text")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="specdesk", description="Speculative decoding on local GGUF models. With no command, opens the app.")
    p.add_argument("--version", action="version", version=f"specdesk {__version__}")
    p.add_argument("--verbose", "-v", action="store_true", help="show llama.cpp's log")
    p.add_argument("--self-test", nargs="?", const="", default=None, metavar="MODEL",
                   help="start the app offscreen, load MODEL as target and draft (default: the SmolLM2 test model, "
                        "else the default pair), generate 8 tokens and check what the window shows; exit 0 if all checks pass")
    p.add_argument("--self-test-draft", type=Path, metavar="PATH", help="the draft model for --self-test (default: MODEL itself)")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    g = sub.add_parser("generate", help="generate from a prompt, with speculation")
    add_model_options(g)
    add_generation_options(g)

    c = sub.add_parser("compare", help="target alone vs speculative on the same prompt")
    add_model_options(c)
    add_generation_options(c)

    m = sub.add_parser("models", help="the default models and local GGUF files")
    msub = m.add_subparsers(dest="models_command", parser_class=_Parser, required=True)
    f = msub.add_parser("fetch-default", help="download and verify the default pair into models/")
    f.add_argument("--test-model", action="store_true", help="also fetch the tiny test model (SmolLM2-135M)")
    ls = msub.add_parser("list", help="list the GGUF files on this computer (models/, your folders, HF cache, LM Studio, Ollama)")
    ls.add_argument("--json", action="store_true")
    ls.add_argument("--no-cache", action="store_true", help="re-read every file instead of using the scan cache")
    ins = msub.add_parser("inspect", help="read a GGUF's metadata without loading the weights")
    ins.add_argument("file", type=Path)
    ins.add_argument("--json", action="store_true")
    ins.add_argument("--ctx", type=_positive_int("context size"), default=4096)
    ins.add_argument("--gpu-layers", type=_non_negative_int("GPU layers"), default=0)
    from .library.hub_cli import add_download_parser

    add_download_parser(msub)
    cp = msub.add_parser("check-pair", help="can DRAFT speculate for TARGET? exit 0 if so, 2 with the reason if not")
    cp.add_argument("target", type=Path)
    cp.add_argument("draft", type=Path)
    cp.add_argument("--json", action="store_true")
    dr = msub.add_parser("drafts", help="which models in the library can draft for TARGET (compatible first, smallest first; the others with their reason)")
    dr.add_argument("target", type=Path)
    dr.add_argument("--json", action="store_true")

    from .bench.cli import add_bench_parsers

    add_bench_parsers(sub, add_model_options)

    sub.add_parser("gui", help="open the app (the same as no command)")
    return p


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("llama.cpp").setLevel(logging.INFO if verbose else logging.CRITICAL)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    if args.self_test is not None:
        from .selftest import run_self_test

        return run_self_test(Path(args.self_test) if args.self_test else None, args.self_test_draft)
    if args.command in (None, "gui"):
        from .launcher import launch_gui

        return launch_gui()
    try:
        return _dispatch(args)
    except SpecDeskError as e:
        print(f"specdesk: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("specdesk: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (e.g. piped into head): not an error worth a traceback.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


def _dispatch(args) -> int:
    if args.command == "generate":
        from .commands import cmd_generate

        return cmd_generate(args)
    if args.command == "compare":
        from .commands import cmd_compare

        return cmd_compare(args)
    if args.command == "models":
        from .commands import cmd_models

        return cmd_models(args)
    if args.command == "bench":
        from .bench.cli import cmd_bench

        return cmd_bench(args)
    if args.command == "advise":
        from .bench.cli import cmd_advise

        return cmd_advise(args)
    raise SpecDeskError(f"unknown command {args.command!r}")


def dump_json(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False, default=_json_default)


def _json_default(o):
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, Path):
        return str(o)
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"cannot serialise {type(o).__name__}")
