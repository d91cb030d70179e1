#!/usr/bin/env python3
"""The real CLI in real time on a measured device's costs: `specdesk generate --json`
runs in this process on a real GGUF (SmolLM2-135M by default: tokenization, loading,
the session, the loop and its Python are all real), while llama.cpp's decode sleeps what
the profile says each batch costs and leaves logits that make every draft right
(:class:`ReplayedDevice`). Each run is a new session with an empty cost cache
(nothing learnt before, as a fresh process on a new machine), the configurations
interleaved round by round.

    .venv/bin/python tools/realtime_replay.py                          # both H200 profiles, first call +300 ms
    .venv/bin/python tools/realtime_replay.py --profiles h200-7b-d1l --first-call-ms 0 --tokens 256
    .venv/bin/python tools/realtime_replay.py --configs none,k=16,auto,auto@no-warmup --json out.json

A configuration is ``none`` (target alone), ``k=N`` (the draft model, a fixed k),
``auto`` (the default: `generate` with no option but the models), each optionally
``@no-warmup`` (the CLI's --no-warmup). ``--first-call-ms`` adds that much to each
context's first decode, ``--spikes SHARE:TIMES`` makes that share of the calls that
many times slower, ``--scale`` multiplies every batch's cost (a slower device: the host's
Python and a busy machine's late wake-ups from sleep weigh less). It reports decode tokens/s per configuration, each as a ratio to target
alone's and to the best fixed k's of the same round, and auto's decisions: how many
steps drafted, the longest k, the reasons. A tool, not a test: its ratios hold only on
a quiet machine (``tests/integration/test_realtime_replay.py`` asserts on the decisions).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

import llama_cpp  # noqa: E402
import numpy as np  # noqa: E402

from specdesk import cli  # noqa: E402
from specdesk.bench.replay import load_profile, scaled, with_one_offs  # noqa: E402
from specdesk.speculative.replay import Device, ModelCosts  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "Write a short note to a new colleague about where the coffee machine is and how to clean it."
_K = re.compile(r"k=(\d+)")


# -- llama.cpp's decode, replayed -------------------------------------------------------
#
# The whole program runs (the CLI, the session, loading, tokenization, the loop and its
# Python) on real GGUF files, but llama_decode sleeps what the profile says the batch
# costs. The simulated clock of specdesk.speculative.replay counts only what the loop
# measures around a decode; a cost paid anywhere else (the draft's prompt prefill taken as
# a catch-up's price, a context's first decode in a warm-up or in the loop) hides from it.
# This one is the wall clock. Which profile a context gets: the first context made is the
# target's (a session loads the target first), every later one the draft's. Each is a
# speculative.replay.Device: its first decode, a shape's first use, its changes of shape
# and the spikes cost what the profile says. The right token after position p is drawn
# from ordinary tokens of the vocabulary (no end or control token), the same for every
# context, so that every draft is accepted.

_PATCHED = ("llama_init_from_model", "llama_decode", "llama_get_logits")


class ReplayedDevice:
    """A context manager: while it is open, llama.cpp's decodes cost ``target``'s and
    ``draft``'s profiles on the wall clock; ``decodes`` counts them per context role, and
    ``shapes`` lists each context's decodes (tokens, rows of logits), by role."""

    def __init__(self, target: ModelCosts, draft: ModelCosts, *, seed: int = 0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.profiles = (target, draft)
        self.seed, self._sleep = seed, sleep
        self.contexts: dict[int, _Replayed] = {}
        self.decodes = {"target": 0, "draft": 0}
        self.shapes: dict[str, list[tuple[int, int]]] = {"target": [], "draft": []}
        self._saved: dict[str, object] = {}
        self._right: np.ndarray | None = None

    def __enter__(self) -> "ReplayedDevice":
        self._saved = {name: getattr(llama_cpp, name) for name in _PATCHED}
        llama_cpp.llama_init_from_model = self._init
        llama_cpp.llama_decode = self._decode
        llama_cpp.llama_get_logits = self._logits
        return self

    def __exit__(self, *exc) -> None:
        for name, fn in self._saved.items():
            setattr(llama_cpp, name, fn)

    # -- the patched calls ---------------------------------------------------------------

    def _init(self, model, params):
        ctx = self._saved["llama_init_from_model"](model, params)
        if ctx:
            role = "target" if not self.contexts else "draft"
            costs = self.profiles[0 if role == "target" else 1]
            n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
            self.contexts[int(ctx)] = _Replayed(role, Device(costs, seed=self.seed + len(self.contexts)), n_vocab)
        return ctx

    def _decode(self, ctx, batch) -> int:
        t0 = time.perf_counter()
        c = self.contexts[int(ctx)]
        n = int(batch.n_tokens)
        pos = np.ctypeslib.as_array(batch.pos, shape=(n,))
        out = np.flatnonzero(np.ctypeslib.as_array(ctypes.cast(batch.logits, ctypes.POINTER(ctypes.c_int8)),
                                                   shape=(n,)))
        seconds, _ = c.device.decode((n, len(out)))
        self.decodes[c.role] += 1
        self.shapes[c.role].append((n, len(out)))
        if len(out):
            c.fill(self._right_tokens(ctx), pos[out])
        left = seconds - (time.perf_counter() - t0)
        if left > 0:
            self._sleep(left)
        return 0

    def _logits(self, ctx):
        return self.contexts[int(ctx)].pointer

    # -- the right tokens ----------------------------------------------------------------

    def _right_tokens(self, ctx) -> np.ndarray:
        """Ordinary tokens of the model's vocabulary, the right one after position p
        being ``right[hash(p) % len(right)]``."""
        if self._right is None:
            vocab = llama_cpp.llama_model_get_vocab(llama_cpp.llama_get_model(ctx))
            n = llama_cpp.llama_vocab_n_tokens(vocab)
            ids = [t for t in range(n // 8, min(n, n // 8 + 2048))
                   if not llama_cpp.llama_vocab_is_eog(vocab, t) and not llama_cpp.llama_vocab_is_control(vocab, t)]
            self._right = np.asarray(ids or [0], dtype=np.int64)
        return self._right


class _Replayed:
    """One context: its role, its device, and the logits rows of its last decode."""

    def __init__(self, role: str, device: Device, n_vocab: int) -> None:
        self.role, self.device, self.n_vocab = role, device, n_vocab
        self._rows = np.zeros(0, dtype=np.float32)
        self._set: np.ndarray = np.zeros(0, dtype=np.int64)
        self.pointer = None

    def fill(self, right: np.ndarray, positions: np.ndarray) -> None:
        m, v = len(positions), self.n_vocab
        if self._rows.size < m * v:
            self._rows = np.zeros(max(m, 64) * v, dtype=np.float32)
            self._set = np.zeros(0, dtype=np.int64)
            self.pointer = None
        self._rows[self._set] = 0.0
        picks = right[(positions.astype(np.int64) * 2654435761 + 12345) % len(right)]
        self._set = np.arange(m, dtype=np.int64) * v + picks
        self._rows[self._set] = 12.0
        if self.pointer is None:
            self.pointer = self._rows.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def config_args(config: str) -> list[str]:
    """The `generate` options of a configuration (see the module's docstring)."""
    name, _, flag = config.partition("@")
    extra = ["--no-warmup"] if flag == "no-warmup" else []
    if flag not in ("", "no-warmup"):
        raise SystemExit(f"unknown flag @{flag} in {config!r}")
    if name == "none":
        return ["--proposer", "none"] + extra
    if name == "auto":
        return extra
    m = re.fullmatch(r"k=(\d+)", name)
    if not m:
        raise SystemExit(f"unknown configuration {config!r}: none, k=N or auto (optionally @no-warmup)")
    return ["--k", m.group(1)] + extra


def run_one(profile, config: str, *, model: Path = MODEL, tokens: int = 128, prompt: str = PROMPT,
            seed: int = 0) -> dict:
    """One `specdesk generate --json` of ``config`` on the replayed ``profile``, with an
    empty cost cache: its JSON, and the decodes each context made."""
    argv = ["generate", "--target", str(model), "--draft", str(model), "--raw", "--prompt", prompt, "--json",
            "--max-tokens", str(tokens), "--ctx", "1024", *config_args(config)]
    out = io.StringIO()
    old = os.environ.get("SPECDESK_CACHE_DIR")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["SPECDESK_CACHE_DIR"] = cache
        try:
            with ReplayedDevice(profile.target, profile.draft, seed=seed) as dev, \
                    contextlib.redirect_stdout(out):
                rc = cli.main(argv)
        finally:
            if old is None:
                os.environ.pop("SPECDESK_CACHE_DIR", None)
            else:
                os.environ["SPECDESK_CACHE_DIR"] = old
    if rc != 0:
        raise RuntimeError(f"specdesk generate {config} exited {rc}")
    res = json.loads(out.getvalue())
    res["decodes"] = dict(dev.decodes)
    res["shapes"] = {role: list(shapes) for role, shapes in dev.shapes.items()}
    return res


def drafted_ks(res: dict) -> list[int]:
    """The k of each step of a run that drafted, in order."""
    return [int(m.group(1)) for s in res["steps"] if s["drafted"] for m in [_K.search(s["decision"])] if m]


def decisions(res: dict) -> dict:
    """auto's decisions in a run: steps that drafted, the longest k, the reasons."""
    steps = res["steps"]
    return {"steps": len(steps), "drafting": sum(1 for s in steps if s["drafted"]),
            "longest_k": max(drafted_ks(res), default=0), "reasons": res["stats"]["decisions"]}


def run(profile, configs: list[str], *, rounds: int = 1, **kw) -> dict[str, list[dict]]:
    """Every configuration once per round, in turn (reversed every other round)."""
    out: dict[str, list[dict]] = {c: [] for c in configs}
    for r in range(rounds):
        for c in (configs if r % 2 == 0 else configs[::-1]):
            out[c].append(run_one(profile, c, seed=r, **kw))
    return out


def speed(res: dict) -> float:
    return float(res["stats"]["tokens_per_second"] or 0.0)


def report(name: str, runs: dict[str, list[dict]]) -> str:
    fixed = [c for c in runs if c.startswith("k=")]
    rounds = len(next(iter(runs.values())))
    lines = [f"{name}: decode tokens/s, and per round as a ratio (median [min-max] over {rounds} rounds)"]
    for c, rs in runs.items():
        line = f"  {c:<16} {statistics.median(speed(x) for x in rs):7.1f} tok/s"
        for ref in ["none"] + (["best fixed k"] if fixed else []):
            if ref == "none" and "none" not in runs:
                continue
            ratios = []
            for i, x in enumerate(rs):
                base = speed(runs["none"][i]) if ref == "none" else max(speed(runs[f][i]) for f in fixed)
                ratios.append(speed(x) / base if base else float("nan"))
            line += f"   / {ref}: {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
        if not c.startswith(("k=", "none")):
            d = decisions(rs[0])
            line += f"   drafted {d['drafting']}/{d['steps']} steps, longest k {d['longest_k']}"
            top = sorted(d["reasons"].items(), key=lambda kv: -kv[1])[:3]
            line += " (" + ", ".join(f"{n} {why}" for why, n in top) + ")"
        lines.append(line)
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", default="h200-7b-d0.5,h200-7b-d1l")
    ap.add_argument("--configs", default="none,k=8,k=16,k=32,auto,auto@no-warmup")
    ap.add_argument("--first-call-ms", type=float, default=300.0)
    ap.add_argument("--spikes", default="", metavar="SHARE:TIMES", help="e.g. 0.01:20")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--json", type=Path, default=None, help="write every run's figures here")
    args = ap.parse_args()
    share, _, times = args.spikes.partition(":")
    configs = [c for c in args.configs.split(",") if c]
    everything = {}
    for name in args.profiles.split(","):
        p = with_one_offs(scaled(load_profile(name), args.scale), first_call_ms=args.first_call_ms,
                          spike_share=float(share or 0), spike_times=float(times or 1))
        runs = run(p, configs, rounds=args.rounds, model=args.model, tokens=args.tokens)
        print(report(p.name, runs), flush=True)
        everything[p.name] = {c: [{"tokens_per_second": speed(x), **decisions(x)} for x in rs] for c, rs in runs.items()}
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
