"""argparse for every command: one-line errors, typed values, the shared option groups,
and turning parsed options into the session's specs and configs."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from ..errors import ModelFileError, SpecDeskError
from ..library.defaults import default_models
from ..session import GenerationConfig, ModelSpec, Session, gpu_layers_note
from ..session.core import plan_target
from ..session.offload import Offload, margin_text, resolve_offload
from ..session.remote import parse_endpoints, parse_split, require_rpc, set_lost_handler
from ..session.text import NO_WARMUP_COST
from ..speculative.proposers import registry
from ..speculative.sampling import SamplingParams
from .output import EXIT_USAGE


class Parser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage dump) and exit 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def int_at_least(name: str, lo: int, what: str):
    """An argparse type: an integer >= ``lo``; ``what`` names the range in the error."""

    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {what}, got {v!r}") from None
        if n < lo:
            raise argparse.ArgumentTypeError(f"{name} must be {what}, got {n}")
        return n

    return parse


def positive_int(name: str):
    return int_at_least(name, 1, "a positive integer")


def non_negative_int(name: str):
    return int_at_least(name, 0, "an integer >= 0")


def gpu_layers(name: str):
    """An argparse type: ``auto`` (as many layers as fit, the target first) or a count >= 0."""

    def parse(v: str) -> int | str:
        if v == "auto":
            return "auto"
        try:
            n = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be 'auto' or an integer >= 0, got {v!r}") from None
        if n < 0:
            raise argparse.ArgumentTypeError(f"{name} must be 'auto' or an integer >= 0, got {n}")
        return n

    return parse


def layers_of(v: int | str) -> int | None:
    """A --gpu-layers value as ModelSpec takes it: None for auto."""
    return None if v == "auto" else int(v)


def draft_length(v: str) -> int | str:
    if v == "auto":
        return "auto"
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"k must be a positive integer or 'auto', got {v!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"k must be a positive integer or 'auto', got {n}")
    return n


def utf8_text(name: str):
    """Text from the command line, which must be UTF-8: bytes that are not reach Python as
    lone surrogates (U+DC80-U+DCFF), which no tokenizer takes."""
    def parse(v: str) -> str:
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            bad = v[e.start]
            try:
                what = f"the byte {os.fsencode(bad).hex()}"  # a byte the locale could not decode
            except UnicodeEncodeError:
                what = f"a lone surrogate \\u{ord(bad):04x}"
            raise argparse.ArgumentTypeError(f"{name} is not UTF-8 text: character {e.start} is {what}") from None
        return v

    return parse


def float_in(name: str, lo: float, hi: float | None, lo_open: bool = False, hi_open: bool = False):
    def parse(v: str) -> float:
        try:
            x = float(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {v!r}") from None
        if x in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"{name} must be a finite number, got {v}")
        bad = x != x or (x <= lo if lo_open else x < lo) or (hi is not None and (x >= hi if hi_open else x > hi))
        if bad:
            rng = f"{'(' if lo_open else '['}{lo}, {hi if hi is not None else 'inf'}{')' if hi_open or hi is None else ']'}"
            raise argparse.ArgumentTypeError(f"{name} must be in {rng}, got {v}")
        return x

    return parse


def rpc_endpoints(v: str) -> tuple[str, ...]:
    try:
        eps = parse_endpoints(v)
    except SpecDeskError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not eps:
        raise argparse.ArgumentTypeError("--rpc needs at least one host:port")
    return eps


def tensor_split(v: str) -> tuple[float, ...]:
    try:
        return parse_split(v)
    except SpecDeskError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def use_rpc(endpoints) -> None:
    """Before anything talks to an RPC server: the build must have the backend, and a
    server lost mid-step ends the command with one line (llama.cpp would abort)."""
    if not endpoints:
        return
    require_rpc()

    def lost(message: str) -> None:
        print(f"specdesk: error: {message}", file=sys.stderr, flush=True)
        os._exit(EXIT_USAGE)

    set_lost_handler(lost)


def add_model_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("models")
    g.add_argument("--target", type=Path, help="target GGUF (default: the default pair's target in models/)")
    g.add_argument("--draft", type=Path, help="draft GGUF (default: the default pair's draft in models/)")
    g.add_argument("--ctx", type=positive_int("context size"), default=4096, help="context size in tokens (default 4096)")
    g.add_argument("--threads", type=positive_int("threads"), default=None, help="CPU threads (default: physical cores)")
    g.add_argument("--gpu-layers", type=gpu_layers("GPU layers"), default="auto", metavar="auto|N",
                   help="target layers to offload to the GPU (default auto: on a GPU build as many as its free memory "
                        "holds, the target first; none on a CPU-only build)")
    g.add_argument("--draft-gpu-layers", type=gpu_layers("draft GPU layers"), default=None, metavar="auto|N",
                   help="draft layers to offload (default: same as --gpu-layers)")
    g.add_argument("--rpc", type=rpc_endpoints, default=(), metavar="HOST:PORT[,HOST:PORT...]",
                   help="place the target's layers on these RPC servers (`specdesk rpc-server` on each) and the local "
                        "devices; the draft stays local")
    g.add_argument("--tensor-split", type=tensor_split, default=None, metavar="SHARES",
                   help="the target's share per device, remote ones first, then local GPUs, and optionally the local CPU "
                        "last, e.g. 3,1 (default: llama.cpp splits by free memory)")
    g.add_argument("--same-vocab-only", action="store_true",
                   help="refuse a draft with another vocabulary instead of drafting translated (re-tokenized) text")


def add_warmup_option(g) -> None:
    """``--no-warmup``: no untimed decodes before the first answer (llama.cpp's own flag)."""
    g.add_argument("--no-warmup", action="store_true",
                   help="skip the warm-up: each model decodes the batch shapes the loop will use once, untimed, "
                        f"before anything is timed (as llama.cpp does); without it {NO_WARMUP_COST}")


def add_generation_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("generation")
    g.add_argument("--prompt", required=True, type=utf8_text("--prompt"), help="the prompt (chat-formatted with the target's template unless --raw)")
    g.add_argument("--raw", action="store_true",
                   help="plain completion: no chat template; special tokens written in the prompt (<|im_start|>) are "
                        "parsed as llama.cpp's tools do")
    g.add_argument("--no-parse-special", dest="parse_special", action="store_false",
                   help="with --raw: tokenize special-token text such as <|im_start|> as plain text")
    add_sampling_options(g)
    g.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    add_warmup_option(g)


def add_sampling_options(g, max_tokens_default: int | None = 256) -> None:
    """The speculation and sampling options of generate, compare and serve (the
    defaults a served request's own fields override)."""
    g.add_argument("--proposer", choices=list(registry.NAMES), default=registry.DEFAULT, metavar="PROPOSER",
                   help="where drafts come from: " + "; ".join(f"{k.name}: {k.label}" for k in registry.KINDS)
                   + f" (default {registry.DEFAULT})")
    g.add_argument("--k", type=draft_length, default="auto", help="draft length: a positive integer or 'auto' (default)")
    g.add_argument("--p-min", type=float_in("p-min", 0.0, 1.0, hi_open=True), default=0.0,
                   help="stop drafting when the draft's top probability is below this (default 0: off; "
                        "llama.cpp's 0.75 cuts long drafts short, and a GPU pays for that)")
    g.add_argument("--temp", type=float_in("temperature", 0.0, None), default=0.0, help="temperature, 0 = greedy (default)")
    g.add_argument("--top-k", type=non_negative_int("top-k"), default=0, help="top-k, 0 = off")
    g.add_argument("--top-p", type=float_in("top-p", 0.0, 1.0, lo_open=True), default=1.0, help="top-p, 1 = off")
    g.add_argument("--min-p", type=float_in("min-p", 0.0, 1.0, hi_open=True), default=0.0, help="min-p, 0 = off")
    g.add_argument("--seed", type=non_negative_int("seed"), default=0)
    g.add_argument("--max-tokens", type=positive_int("max tokens"), default=max_tokens_default,
                   help=f"default {max_tokens_default}" if max_tokens_default else "default: the rest of the context")


def default_model_path(role: str) -> Path:
    m = default_models([role])[0]
    if not m.path.is_file():
        raise ModelFileError(
            f"the default {role} ({m.file}) is not in {m.path.parent}; run `specdesk models fetch-default` or pass --{role}"
        )
    return m.path


def warn_gpu_layers(n_gpu_layers: int | None, who: str = "") -> None:
    """GPU layers on a build that cannot offload are said to do nothing, not silently ignored."""
    note = gpu_layers_note(n_gpu_layers, who)
    if note:
        print(f"specdesk: warning: {note}", file=sys.stderr)


def specs_from_args(args, need_draft: bool) -> tuple[ModelSpec, ModelSpec | None]:
    target = args.target or default_model_path("target")
    rpc = tuple(getattr(args, "rpc", ()) or ())
    tgl = layers_of(args.gpu_layers)
    dgl = tgl if args.draft_gpu_layers is None else layers_of(args.draft_gpu_layers)
    if rpc:  # the target's layers go to the RPC servers' devices; only the draft's stay here
        warn_gpu_layers(dgl if need_draft else 0, "the draft's")
    else:
        warn_gpu_layers(max(tgl or 0, (dgl or 0) if need_draft else 0))
    split = getattr(args, "tensor_split", None)
    cpus = os.cpu_count() or 1
    if args.threads and args.threads > cpus:
        # llama.cpp's threads meet at a barrier after every operation: more threads than
        # CPUs wait for each other (1000 on 2 CPUs ran at a seven-hundredth of the speed)
        print(f"specdesk: note: --threads {args.threads} is more than this machine's {cpus} CPUs: its threads will "
              f"wait for each other; {cpus} or fewer is faster", file=sys.stderr)
    use_rpc(rpc)
    t = ModelSpec(target, n_gpu_layers=tgl, threads=args.threads, n_ctx=args.ctx, rpc=rpc, tensor_split=split)
    if not need_draft:
        return t, None
    draft = args.draft or default_model_path("draft")
    return t, ModelSpec(draft, n_gpu_layers=dgl, threads=args.threads, n_ctx=args.ctx)


def offload_note(off: Offload) -> str | None:
    """Where the local models' layers go, on a build that offloads (a CPU-only build
    says nothing: nothing changed there); a target placed on RPC servers has its own note."""
    if not off.offloads:
        return None
    said = "; ".join(w.describe() for w in off.roles if not w.plan)
    if not said:
        return None
    if off.limited:
        said += f" — {margin_text(off)}; --gpu-layers N and --draft-gpu-layers N choose"
    return said


def resolve_specs(args, need_draft: bool):
    """The specs, the target's RPC plan and where the layers go, as a load takes them,
    with the notes that say so on stderr."""
    t, d = specs_from_args(args, need_draft=need_draft)
    where = plan_target(t)  # each RPC server checked and registered once, for the note and the load
    if where is not None:
        print(f"specdesk: note: target {t.path.name}: {where.describe()}; the draft stays local", file=sys.stderr)
    off = resolve_offload(t, d, where)
    note = offload_note(off)
    if note:
        print(f"specdesk: note: {note}", file=sys.stderr)
    return t, d, where, off


def load_session(args, need_draft: bool) -> Session:
    """The models the options name; a draft with another vocabulary drafts translated
    unless ``--same-vocab-only``."""
    t, d, where, off = resolve_specs(args, need_draft)
    s = Session.load(t, d, translate=not getattr(args, "same_vocab_only", False), placement=where, offload=off)
    s.warmup = not getattr(args, "no_warmup", False)
    if s.translated:
        print(f"specdesk: note: {d.path.name} has another vocabulary than {t.path.name} "
              f"({s.compat.reason}): it drafts text that is re-tokenized for the target "
              "(exact all the same; --same-vocab-only refuses such a pair)", file=sys.stderr)
    return s


def config_from_args(args, **over) -> GenerationConfig:
    try:
        sampling = SamplingParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p)
    except ValueError as e:
        raise SpecDeskError(str(e)) from None
    cfg = GenerationConfig(
        proposer=args.proposer,
        k=args.k,
        p_min=args.p_min,
        sampling=sampling,
        seed=args.seed,
        max_tokens=over.pop("max_tokens", args.max_tokens),
    )
    return replace(cfg, **over) if over else cfg


def prompt_tokens(session: Session, args) -> list[int]:
    if not args.prompt.strip():
        raise SpecDeskError("the prompt is empty")
    if args.raw:
        return session.raw_prompt(args.prompt, parse_special=args.parse_special)
    return session.chat_prompt([{"role": "user", "content": args.prompt}])
