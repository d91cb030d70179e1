#!/usr/bin/env python3
"""The fast-step benchmark: what Python costs per step of the speculative loop, with
SmolLM2-135M as the target (a ~10 ms step here, GPU-like), before and after a change,
in one run. A benchmark tool, not a timed test.

    .venv/bin/python tools/hotpath_bench.py                          # this checkout only
    .venv/bin/python tools/hotpath_bench.py --before /tmp/hotpath-before --rounds 5
    .venv/bin/python tools/hotpath_bench.py --configs none,ngram --tokens 160 --json out.json
    .venv/bin/python tools/hotpath_bench.py --warm             # also Python alone, compute skipped
    .venv/bin/python tools/hotpath_bench.py --warm --evict 64  # ... with 64 MiB streamed per skipped step
    .venv/bin/python tools/hotpath_bench.py --sampling 150    # in place vs llama.cpp's backend samplers
    .venv/bin/python tools/hotpath_bench.py --floor 7         # target alone's overhead, depth by depth

``--before DIR`` names another checkout (a folder holding ``app/``, e.g. made with
``git archive main app | tar -x -C DIR``); its runs alternate with this checkout's,
round by round, in fresh processes (one per checkout and round, the order swapped
every round), so both see the same load and the ratios come from one run.

Per configuration (none, ngram auto, draft k=4 and hybrid k=4 with SmolLM2 drafting
for itself, the same draft with p-min 0 (no softmax per drafted token), translated k=4
with SmolLM2 drafting for Qwen2.5-Coder-0.5B, and the same with p-min 0; p-min 0.75
elsewhere, T = 0) and per
answer of ``--tokens`` tokens it measures, independently of the code under test:

- the Python overhead per step: the decode loop's wall time minus the time spent
  inside ``llama_decode`` and ``llama_get_logits`` (wrapped here, the same way for both
  checkouts, so a logits copy or an argmax in numpy counts as Python, as it is), in ms
  and as a share of the loop; the same in thread CPU time (Python runs on the calling thread, and so does
  llama.cpp with one thread), which a loaded machine disturbs far less than wall time;
- the logits bytes copied out of llama.cpp per step (the engine's own counter, or the
  size of the rows its ``_decode`` returned, for a checkout without one);
- the cost of a drafted token in draft steps: the proposer's seconds per drafted
  (target) token over the draft model's own single-token step, measured in the same
  answers (the median of its one-token ``llama_decode`` calls); for translated also
  per token the draft model generated in its own vocabulary.

With ``--warm`` each configuration also runs with ``llama_decode`` skipped and
``llama_get_logits`` handing out fixed rows (whose argmax is a common word, so drafts
are accepted): Python's own cost per step with the CPU's caches to itself, as on a
GPU host. On a CPU the Python after a step runs cold, since the step streamed the
model's weights through the caches; ``--evict MIB`` streams that much memory in place
of each skipped step (timed as native), to show how much of the overhead measured
here is that effect rather than Python's work.

Every figure is the median over the answers with its spread (min-max); each
checkout's first answer per configuration warms up and is not counted. The last
table projects the overhead onto a GPU whose target step takes 3 ms: the native time
of a step scaled by 3 ms over the target's measured step, with Python's time as
measured warm (with ``--warm``) and as measured here (an upper bound).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scratch import scratch_dir  # tools/scratch.py: removed when the tool ends

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("none", "ngram", "draft", "draft-pmin0", "hybrid", "translated", "translated-pmin0")
GPU_STEP_MS = 3.0

# An answer of 160 tokens or more from SmolLM2, with the repetition code has (what n-gram lookups are for).
PROMPT = "Write a Python class for a bank account with deposit, withdraw and a transaction history, with docstrings."


# -- the worker: one checkout, in its own process ----------------------------------------------


class NativeClock:
    """Wall and thread CPU seconds inside llama_decode, per context, and the single-token
    calls' wall seconds (a model's own step)."""

    def __init__(self) -> None:
        import ctypes

        import llama_cpp

        self.wall = 0.0
        self.cpu = 0.0
        self.calls: dict[int, int] = {}
        self.singles: dict[int, list[float]] = {}
        # per context: wall seconds inside llama_decode and llama_get_logits, and tokens evaluated
        self.native_by: dict[int, float] = {}
        self.tokens: dict[int, int] = {}
        # --warm: llama_decode does nothing and llama_get_logits hands out fixed rows, so
        # the loop's Python runs with the CPU's caches to itself, as on a GPU host (here
        # a CPU target step streams the weights through the caches, and the Python after
        # it runs cold)
        self.skip = False
        self.fakes: dict[int, object] = {}
        self.evict = None  # --evict: an array streamed through the caches at each skipped decode
        orig = llama_cpp.llama_decode
        self.plain_decode = orig  # unwrapped, for --floor's measure of this wrapper's own cost

        def timed(ctx, batch):
            if self.skip:
                key = int(ctx or 0)
                self.calls[key] = self.calls.get(key, 0) + 1
                if self.evict is not None:  # what a CPU step does to the caches: the weights stream through
                    c0, t0 = time.thread_time(), time.perf_counter()
                    self.evict.sum()
                    self.wall += time.perf_counter() - t0  # native time: it stands for the step
                    self.cpu += time.thread_time() - c0
                return 0
            c0 = time.thread_time()
            t0 = time.perf_counter()
            rc = orig(ctx, batch)
            dt = time.perf_counter() - t0
            self.wall += dt
            self.cpu += time.thread_time() - c0
            key = int(ctx or 0)
            self.calls[key] = self.calls.get(key, 0) + 1
            self.native_by[key] = self.native_by.get(key, 0.0) + dt
            self.tokens[key] = self.tokens.get(key, 0) + batch.n_tokens
            if batch.n_tokens == 1:
                self.singles.setdefault(key, []).append(dt)
            return rc

        llama_cpp.llama_decode = timed
        # Reading the rows starts with llama_get_logits, which waits for the decode to
        # finish (on a GPU it is asynchronous): native time too, in both checkouts.
        get = llama_cpp.llama_get_logits
        self.plain_get_logits = get

        def timed_get(ctx):
            if self.skip:
                return self.fakes[int(ctx or 0)].ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            c0 = time.thread_time()
            t0 = time.perf_counter()
            out = get(ctx)
            dt = time.perf_counter() - t0
            self.wall += dt
            self.cpu += time.thread_time() - c0
            key = int(ctx or 0)
            self.native_by[key] = self.native_by.get(key, 0.0) + dt
            return out

        llama_cpp.llama_get_logits = timed_get

    def fake(self, ctx, n_vocab: int, token: int, rows: int = 64) -> None:
        """What ``ctx`` reads while compute is skipped: ``rows`` logits rows of random
        values whose argmax is ``token`` (a common word, never an end token), so that
        drafts are accepted and the answer runs its full length. The argmax stands
        ln(n_vocab) + 8 above the rest, so its softmax probability is above 0.999 and
        p-min lets the draft run on (a margin of 4, as before 2026-12-03, gave it about 0.09:
        p-min stopped every draft, and the warm figures of the draft configurations
        measured steps that drafted nothing)."""
        import numpy as np

        buf = np.random.default_rng(0).standard_normal((rows, n_vocab)).astype(np.float32)
        buf[:, token] = buf.max() + float(np.log(n_vocab)) + 8.0
        self.fakes[int(ctx)] = buf

    def snapshot(self) -> tuple[float, float, float, float]:
        return time.perf_counter(), time.thread_time(), self.wall, self.cpu


def _copied_bytes_counter():
    """Bytes of logits copied out of llama.cpp: the contexts' own counter where they
    have one, else the size of every row array Context._decode returns (a checkout
    from before the counter, whose _decode copied every row it asked for)."""
    import numpy as np

    from specdesk.engine import context as context_mod

    total = [0]
    orig = context_mod.Context._decode

    def counted(self, *args):
        rows = orig(self, *args)
        if isinstance(rows, np.ndarray):
            total[0] += rows.nbytes
        return rows

    context_mod.Context._decode = counted

    def copied(ctxs) -> int:
        own = [getattr(c, "logits_bytes_copied", None) for c in ctxs]
        return sum(own) if None not in own else total[0]

    return copied


def _generated_counter():
    """Draft-vocabulary tokens the translated proposer generated (its last_generated)."""
    from specdesk.speculative.proposers import translated

    total = [0]
    orig = translated.TranslatedDraftProposer.propose

    def counted(self, *a, **kw):
        d = orig(self, *a, **kw)
        total[0] += self.last_generated
        return d

    translated.TranslatedDraftProposer.propose = counted
    return total


def _sessions(args):
    from specdesk.session import ModelSpec, Session

    def spec(p):
        return ModelSpec(Path(p), n_ctx=args.ctx, threads=args.threads)

    out = {}
    want = set(args.configs)
    if want & {"none", "ngram"}:
        out["alone"] = Session.load(spec(args.target), remember_costs=False)
    if want & {"draft", "draft-pmin0", "hybrid"}:
        out["self"] = Session.load(spec(args.target), spec(args.target), remember_costs=False)
    if want & {"translated", "translated-pmin0"}:
        out["translated"] = Session.load(spec(args.translated_target), spec(args.target), remember_costs=False,
                                         translate=True)
    return out


def _config(name: str, tokens: int):
    from specdesk.session import GenerationConfig

    k = "auto" if name in ("none", "ngram") else 4
    proposer = {"translated": "draft", "translated-pmin0": "draft", "draft-pmin0": "draft"}.get(name, name)
    return GenerationConfig(proposer=proposer, k=k, max_tokens=tokens, p_min=0.0 if name.endswith("-pmin0") else 0.75)


def _one_answer(session, config, prompt, clock, copied, generated) -> dict:
    from specdesk.speculative import decoder

    ctxs = [session.target.ctx] + ([session.draft.ctx] if session.draft is not None else [])
    marks = {}
    orig = decoder._Loop.read_prompt

    def read_prompt(self, cancel):
        orig(self, cancel)
        marks["start"] = clock.snapshot()
        # the draft's prompt prefill is not drafting (nor is it in the statistics' draft seconds)
        marks["draft"] = clock.native_by.get(draft_key, 0.0), clock.tokens.get(draft_key, 0), clock.calls.get(draft_key, 0)

    decoder._Loop.read_prompt = read_prompt
    try:
        b0, g0 = copied(ctxs), generated[0]
        draft_key = int(session.draft.ctx._ctx) if session.draft is not None else None
        last = None
        tokens = []
        for step in session.generate(prompt, config):
            tokens.extend(t.token for t in step.tokens)
            last = step
        end = clock.snapshot()
    finally:
        decoder._Loop.read_prompt = orig
    st = last.stats
    t0, c0, nw0, nc0 = marks["start"]
    dnative0, dtokens0, calls0 = marks["draft"]
    t1, c1, nw1, nc1 = end
    steps = max(1, st.steps)
    wall, native = t1 - t0, nw1 - nw0
    return {
        "steps": st.steps,
        "generated": st.generated,
        "drafted": st.drafted,
        "accepted": st.accepted,
        "loop_ms": 1e3 * wall / steps,
        "native_ms": 1e3 * native / steps,
        "overhead_ms": 1e3 * (wall - native) / steps,
        "overhead_share": (wall - native) / wall if wall > 0 else 0.0,
        "overhead_cpu_ms": 1e3 * ((c1 - c0) - (nc1 - nc0)) / steps,
        "bytes_per_step": (copied(ctxs) - b0) / steps,
        "draft_seconds": st.draft_seconds,
        "draft_generated": generated[0] - g0,
        "draft_calls": clock.calls.get(draft_key, 0) - calls0,
        "draft_native": clock.native_by.get(draft_key, 0.0) - dnative0,
        "draft_evaluated": clock.tokens.get(draft_key, 0) - dtokens0,
        "tokens": tokens,
    }


def _common_token(model) -> int:
    """A common word's token in ``model``'s vocabulary (what the fixed rows of --warm pick)."""
    return model.tokenize(" the", add_special=False, parse_special=False)[0]


def _answers(session, config, prompt, clock, copied, generated, n: int) -> list[dict]:
    """``n`` answers after one that warms up and is not counted, each reading its prompt
    the same way."""
    out = []
    for i in range(n + 1):
        session.reset()
        a = _one_answer(session, config, prompt, clock, copied, generated)
        if i:
            out.append(a)
    return out


def worker(args) -> int:
    clock = NativeClock()
    if args.evict:
        import numpy as np

        clock.evict = np.ones(args.evict * (1 << 18), dtype=np.float32)
    copied = _copied_bytes_counter()
    generated = _generated_counter()
    sessions = _sessions(args)
    for session in sessions.values():
        for lm in (session.target, session.draft):
            if lm is not None:
                clock.fake(lm.ctx._ctx, lm.model.n_vocab, _common_token(lm.model))
    out = {"configs": {}}
    for name in args.configs:
        session = sessions["alone" if name in ("none", "ngram") else "translated" if name.startswith("translated") else "self"]
        prompt = session.chat_prompt([{"role": "user", "content": PROMPT}])
        config = _config(name, args.tokens)
        answers = _answers(session, config, prompt, clock, copied, generated, args.answers)
        warm = []
        if args.warm:
            clock.skip = True
            try:
                warm = _answers(session, config, prompt, clock, copied, generated, args.answers)
            finally:
                clock.skip = False
        tkey = int(session.target.ctx._ctx)
        dkey = int(session.draft.ctx._ctx) if session.draft is not None else None
        t_singles = clock.singles.get(tkey)
        if not t_singles and dkey is not None and session.draft.spec.path == session.target.spec.path:
            t_singles = clock.singles.get(dkey)  # the same model drafting for itself: its own step
        out["configs"][name] = {
            "answers": answers,
            "warm": warm,
            "target_step_ms": 1e3 * statistics.median(t_singles) if t_singles else None,
            "draft_step_ms": 1e3 * statistics.median(clock.singles[dkey]) if dkey in clock.singles else None,
        }
    for s in sessions.values():
        s.close()
    json.dump(out, sys.stdout)
    return 0


# -- in place or llama.cpp's backend samplers: greedy verification, p-min's probability -------


def sampling_check(args) -> int:
    """The two ways to verify greedily without copying rows, on one model, interleaved:
    the argmax computed in NumPy over the ctypes buffer (what the engine does), and
    llama.cpp's greedy backend sampler (an argmax in the graph, read with
    llama_get_sampled_token_ith; it also spares llama.cpp the copy of the rows to its
    output buffer). Each pair of verifies of ``rows`` tokens is timed in thread CPU
    (decode and reading the argmax together); the paired ratio's median and IQR. Then a
    greedy draft step with p-min, the same way: the argmax and its softmax probability in
    NumPy over the row, against a backend ``dist`` chain's probabilities (the softmax in
    the graph)."""
    import ctypes

    import llama_cpp
    import numpy as np

    from specdesk.engine.model import Model

    model = Model(args.target)
    n_vocab = model.n_vocab
    keep = []

    def context(backend: bool | str):
        p = llama_cpp.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = 1024, 512, 512, 1
        p.n_threads = p.n_threads_batch = args.threads
        p.no_perf = True
        p.n_outputs_max_per_seq = 16
        if backend:
            chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(1234) if backend == "dist"
                                              else llama_cpp.llama_sampler_init_greedy())
            cfg = (llama_cpp.llama_sampler_seq_config * 1)()
            cfg[0].seq_id, cfg[0].sampler = 0, ctypes.cast(chain, ctypes.c_void_p)
            p.samplers, p.n_samplers = ctypes.cast(cfg, ctypes.POINTER(llama_cpp.llama_sampler_seq_config)), 1
            keep.append((chain, cfg))
        ctx = llama_cpp.llama_init_from_model(model.ptr, p)
        batch = llama_cpp.llama_batch_init(512, 0, 1)
        for i in range(512):
            batch.seq_id[i][0], batch.n_seq_id[i] = 0, 1
        return ctx, batch, llama_cpp.llama_get_memory(ctx)

    toks = model.tokenize("def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fib")
    start = len(toks) - 5

    def decode(c, tokens, p0, every):
        ctx, batch, _ = c
        for i, t in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.logits[i] = t, p0 + i, int(every or i == len(tokens) - 1)
        batch.n_tokens = len(tokens)
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")

    in_place, backend = context(False), context(True)
    for c in (in_place, backend):
        decode(c, toks[:start], 0, False)

    def verify_in_place(n):
        llama_cpp.llama_memory_seq_rm(in_place[2], 0, start, -1)
        decode(in_place, toks[start : start + n], start, True)
        addr = ctypes.addressof(llama_cpp.llama_get_logits(in_place[0]).contents)
        rows = np.frombuffer((ctypes.c_float * (n * n_vocab)).from_address(addr), dtype=np.float32)
        return rows.reshape(n, n_vocab).argmax(axis=-1).tolist()

    def verify_backend(n):
        llama_cpp.llama_memory_seq_rm(backend[2], 0, start, -1)
        decode(backend, toks[start : start + n], start, True)
        return [llama_cpp.llama_get_sampled_token_ith(backend[0], i) for i in range(n)]

    print(f"greedy verification on {Path(args.target).name}, {args.threads} thread(s), {args.sampling} pairs a size "
          f"(load {os.getloadavg()[0]:.1f}): thread CPU ms per verify, median [IQR]")
    def q(xs):
        lo, mid, hi = np.percentile(xs, [25, 50, 75])
        return f"{mid:.3f} [{lo:.3f}-{hi:.3f}]"

    def paired(in_place_call, backend_call) -> tuple[str, str, str]:
        """Thread CPU ms of each, alternating which goes first, and the paired ratio."""
        cpu: dict[str, list[float]] = {"in place": [], "backend": []}
        for r in range(args.sampling):
            pair = (("in place", in_place_call), ("backend", backend_call))
            for name, f in pair if r % 2 else pair[::-1]:
                c0 = time.thread_time()
                f()
                cpu[name].append(1e3 * (time.thread_time() - c0))
        ratio = [b / a for a, b in zip(cpu["in place"], cpu["backend"])]
        return q(cpu["in place"]), q(cpu["backend"]), q(ratio)

    for n in (1, 5):
        if verify_in_place(n) != verify_backend(n):
            raise SystemExit("the two argmaxes differ")
        a, b, ratio = paired(lambda n=n: verify_in_place(n), lambda n=n: verify_backend(n))
        print(f"  {n} row(s): argmax in place {a}, backend sampler {b}; backend / in place, paired: {ratio}")

    # A greedy draft step with p-min: the argmax and its probability under the softmax,
    # in NumPy over the row (what the draft proposer does), or from a backend `dist`
    # chain's probabilities (the softmax computed in the graph; the logits stay readable).
    from specdesk.speculative.sampling import top_probability

    dist = context("dist")
    decode(dist, toks[:start], 0, False)

    def pmin_in_place():
        llama_cpp.llama_memory_seq_rm(in_place[2], 0, start, -1)
        decode(in_place, toks[start : start + 1], start, True)
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(in_place[0], 0), shape=(n_vocab,))
        return int(row.argmax()), top_probability(row)

    def pmin_backend():
        llama_cpp.llama_memory_seq_rm(dist[2], 0, start, -1)
        decode(dist, toks[start : start + 1], start, True)
        n = llama_cpp.llama_get_sampled_probs_count_ith(dist[0], 0)
        probs = np.ctypeslib.as_array(llama_cpp.llama_get_sampled_probs_ith(dist[0], 0), shape=(n,))
        cand = llama_cpp.llama_get_sampled_candidates_ith(dist[0], 0)
        i = int(probs.argmax())
        return (int(cand[i]) if cand else i), float(probs[i])

    (ta, pa), (tb, pb) = pmin_in_place(), pmin_backend()
    if ta != tb or abs(pa - pb) > 1e-4:
        raise SystemExit(f"the two p-min readings differ: {ta} {pa} against {tb} {pb}")
    a, b, ratio = paired(pmin_in_place, pmin_backend)
    print(f"  a greedy draft step with p-min (the argmax and its softmax probability): in NumPy over the row {a}, "
          f"from a backend dist chain's probabilities {b}; backend / in place, paired: {ratio}")
    return 0


# -- target alone's overhead, depth by depth ---------------------------------------------------


def floor_check(args) -> int:
    """Where target alone's overhead goes, on the target, in one process: the same
    answer (``--tokens`` tokens, greedy) decoded at five depths of the loop, interleaved
    ``args.floor`` times, each timed as the main tool does (wall time minus the time in
    llama_decode and llama_get_logits, per step), but the first:

    - raw, timed inline: as raw below, with llama_decode and llama_get_logits called
      unwrapped and timed by two clock reads around them. Raw less this is what the
      tool's own wrapper costs per step (its clock reads and counters run cold too),
      which every figure of the tool includes, before and after alike;
    - raw: the ctypes batch, llama_decode, a view of the row and its argmax (the least
      any Python loop over llama.cpp pays per step, here);
    - raw + text: the token's bytes through the incremental UTF-8 decoder, the end check;
    - engine: ``Context.eval`` with the argmax as its ``fn`` (the engine's bookkeeping),
      and the text;
    - loop: ``Session.generate`` with proposer none and auto (the decode loop's records,
      statistics, controller and Step: what the main table measures as target alone);
    - loop, bookkeeping stubbed: the same with the controller's ``observe``, the
      statistics' snapshot per Step (``Stats.copy``) and the decision's counting made
      no-ops (the answer is the same): loop less this is what that bookkeeping costs,
      and this less engine what the loop's shape costs (the generator, the records,
      the Step, the session around it)."""
    import codecs

    import llama_cpp
    import numpy as np

    from specdesk.session import GenerationConfig, ModelSpec, Session

    clock = NativeClock()
    session = Session.load(ModelSpec(args.target, n_ctx=args.ctx, threads=args.threads), remember_costs=False)
    prompt = session.chat_prompt([{"role": "user", "content": PROMPT}])
    ctx, model = session.target.ctx, session.target.model
    n, n_vocab = args.tokens, ctx.n_vocab

    def native() -> float:
        return clock.snapshot()[2]

    def by_hand(depth: str) -> float:
        session.reset()
        ctx.prefill(prompt[:-1], logits=False)
        tok, pos = prompt[-1], len(prompt) - 1
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        b = ctx._batch
        ptok, ppos, plog = b.token, b.pos, b.logits
        text = []
        if depth == "inline":  # raw, with the unwrapped calls timed inline: what the wrapper itself costs
            decode, get, now = clock.plain_decode, clock.plain_get_logits, time.perf_counter
            inside = 0.0
            t0 = now()
            for _ in range(n):
                ptok[0], ppos[0], plog[0] = tok, pos, 1
                b.n_tokens = 1
                t1 = now()
                decode(ctx._ctx, b)
                p = get(ctx._ctx)
                inside += now() - t1
                tok = int(np.ctypeslib.as_array(p, shape=(n_vocab,)).argmax())
                pos += 1
            return 1e3 * (now() - t0 - inside) / n
        n0, t0 = native(), time.perf_counter()
        for _ in range(n):
            if depth == "engine":
                tok = ctx.eval([tok], fn=lambda rows: int(rows.argmax()))
            else:
                ptok[0], ppos[0], plog[0] = tok, pos, 1
                b.n_tokens = 1
                llama_cpp.llama_decode(ctx._ctx, b)
                row = np.ctypeslib.as_array(llama_cpp.llama_get_logits(ctx._ctx), shape=(n_vocab,))
                tok = int(row.argmax())
                pos += 1
                if depth == "raw":
                    continue
            if not model.is_eog(tok):
                text.append(dec.decode(model.token_bytes(tok)))
        wall = time.perf_counter() - t0
        return 1e3 * (wall - (native() - n0)) / n

    def loop(stubbed: bool = False) -> float:
        if stubbed:
            from specdesk.speculative import auto as auto_mod, controller as controller_mod
            from specdesk.speculative import stats as stats_mod

            saved = [(auto_mod.AutoK, "observe"), (controller_mod.FixedK, "observe"),
                     (stats_mod.Stats, "copy"), (stats_mod.Stats, "record_decision")]
            saved = [(cls, name, cls.__dict__[name]) for cls, name in saved]
            auto_mod.AutoK.observe = controller_mod.FixedK.observe = lambda self, cost: None
            stats_mod.Stats.copy = lambda self: self
            stats_mod.Stats.record_decision = lambda self, key, text: None
            try:
                return loop()
            finally:
                for cls, name, f in saved:
                    setattr(cls, name, f)
        session.reset()
        config = GenerationConfig(proposer="none", k="auto", max_tokens=n + 1)
        steps, t0, n0 = 0, 0.0, 0.0
        for i, _ in enumerate(session.generate(prompt, config)):
            if i == 0:  # the first step follows the prompt: timed from its end
                t0, n0 = time.perf_counter(), native()
            else:
                steps += 1
        return 1e3 * (time.perf_counter() - t0 - (native() - n0)) / max(1, steps)

    depths = {"raw, timed inline": lambda: by_hand("inline"), "raw": lambda: by_hand("raw"),
              "raw + text": lambda: by_hand("text"),
              "engine": lambda: by_hand("engine"), "loop": loop,
              "loop, bookkeeping stubbed": lambda: loop(stubbed=True)}
    out: dict[str, list[float]] = {name: [] for name in depths}
    for f in depths.values():  # a warm-up of each, not counted
        f()
    for r in range(args.floor):
        for name in (list(depths) if r % 2 == 0 else list(reversed(depths))):
            out[name].append(depths[name]())
    print(f"target alone on {Path(args.target).name}, {args.threads} thread(s), {n} tokens, {args.floor} answers a depth, "
          f"interleaved (load {os.getloadavg()[0]:.1f}): Python per step, ms, median [min-max]")
    for name, xs in out.items():
        print(f"  {name:<26} {_med(xs)}")
    wrapper = statistics.median(out["raw"]) - statistics.median(out["raw, timed inline"])
    print(f"  the tool's own wrapper around llama_decode and llama_get_logits, per step (raw less timed inline): "
          f"{wrapper:.3f} ms, in every overhead figure of the main table")
    med = {name: statistics.median(xs) for name, xs in out.items()}
    print(f"  the loop's bookkeeping (controller observe, statistics snapshot, decision counts), per step (loop less "
          f"stubbed): {med['loop'] - med['loop, bookkeeping stubbed']:.3f} ms; the loop's shape beyond the engine "
          f"(stubbed less engine): {med['loop, bookkeeping stubbed'] - med['engine']:.3f} ms")
    return 0


# -- the parent: rounds of fresh workers, the tables ------------------------------------------


def _run_worker(tree: Path, args, configs: list[str]) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree / "app")
    tmp = scratch_dir("hotpath-bench-")
    env["SPECDESK_DATA_DIR"] = os.path.join(tmp, "data")
    env["SPECDESK_CACHE_DIR"] = os.path.join(tmp, "cache")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--configs", ",".join(configs),
           "--tokens", str(args.tokens), "--answers", str(args.answers), "--threads", str(args.threads),
           "--ctx", str(args.ctx), "--target", str(args.target), "--translated-target", str(args.translated_target)]
    if args.warm:
        cmd.append("--warm")
    if args.evict:
        cmd += ["--evict", str(args.evict)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(tree))
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"the worker for {tree} failed ({p.returncode})")
    return json.loads(p.stdout)


def _med(xs: list[float]) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    m = statistics.median(xs)
    return f"{m:.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def _collect(results: list[dict], name: str) -> dict[str, list[float]]:
    """Per answer figures over every round of one checkout."""
    out: dict[str, list] = {}
    for r in results:
        c = r["configs"].get(name)
        if c is None:
            continue
        for a in c["answers"]:
            for key in ("overhead_ms", "overhead_share", "overhead_cpu_ms", "bytes_per_step", "loop_ms", "native_ms"):
                out.setdefault(key, []).append(a[key])
            step = c["draft_step_ms"]
            if c["target_step_ms"] is not None:
                out.setdefault("target_step_ms", []).append(c["target_step_ms"])
            if step and a["drafted"]:
                out.setdefault("drafted_cost", []).append(1e3 * a["draft_seconds"] / a["drafted"] / step)
                if a["draft_generated"]:
                    out.setdefault("generated_cost", []).append(1e3 * a["draft_seconds"] / a["draft_generated"] / step)
                out.setdefault("calls_per_drafted", []).append(a["draft_calls"] / a["drafted"])
                if "draft_native" in a:  # the proposer's time, split: the draft model's compute, and Python
                    native = a["draft_native"]
                    out.setdefault("drafted_native", []).append(1e3 * native / a["drafted"] / step)
                    out.setdefault("drafted_python", []).append(1e3 * (a["draft_seconds"] - native) / a["drafted"] / step)
                    out.setdefault("evaluated_per_token", []).append(a["draft_evaluated"] / a["generated"])
                    out.setdefault("drafted_share", []).append(a["drafted"] / a["generated"])
            out.setdefault("accept", []).append(a["accepted"] / a["drafted"] if a["drafted"] else None)
            out.setdefault("drafted_per_step", []).append(a["drafted"] / a["steps"] if a["steps"] else 0.0)
            out.setdefault("calls_per_step", []).append(1.0 + a["draft_calls"] / a["steps"])
        for a in c.get("warm", []):
            out.setdefault("warm_ms", []).append(a["overhead_ms"])
            # per llama_decode call (the step's own verify and the draft's calls), for the projection
            out.setdefault("warm_ms_per_call", []).append(a["overhead_ms"] / (1.0 + a["draft_calls"] / a["steps"]))
            out.setdefault("warm_drafted_per_step", []).append(a["drafted"] / a["steps"] if a["steps"] else 0.0)
    return out


def report(trees: dict[str, list[dict]], configs: list[str], evict: int = 0) -> dict:
    rows = {}
    labels = list(trees)
    print("Python overhead per step (decode loop wall minus llama_decode), median [min-max] over answers")
    head = f"{'config':<11}" + "".join(f"{lab + ' ms':>27}{lab + ' share':>23}" for lab in labels)
    if len(labels) == 2:
        head += f"{'ratio':>8}"
    print(head)
    for name in configs:
        per = {lab: _collect(res, name) for lab, res in trees.items()}
        rows[name] = per
        line = f"{name:<11}"
        for lab in labels:
            line += f"{_med(per[lab].get('overhead_ms', [])):>27}"
            sh = [100 * x for x in per[lab].get("overhead_share", [])]
            line += f"{_med(sh) + '%':>23}"
        if len(labels) == 2:
            a = per[labels[0]].get("overhead_ms")
            b = per[labels[1]].get("overhead_ms")
            if a and b:
                line += f"{statistics.median(b) / statistics.median(a):8.2f}"
        print(line)
    sections = (
        ("overhead_cpu_ms", "Python overhead per step in thread CPU ms (less disturbed by load)"),
        ("warm_ms", "Python overhead per step, ms, with llama_decode skipped (--warm: the caches to Python alone, "
                    "as on a GPU host; the rows read are fixed)" if not evict else
                    f"Python overhead per step, ms, with llama_decode skipped and {evict} MiB streamed through the "
                    "caches in its place (--warm --evict: a CPU step's effect on the caches, without its compute)"),
        ("drafted_per_step", "draft tokens per step (each step's share of the work above)"),
        ("warm_drafted_per_step", "draft tokens per step with llama_decode skipped (--warm: the fixed rows are "
                                  "always accepted, so a warm step drafts its whole k)"),
        ("bytes_per_step", "logits bytes copied out of llama.cpp per step"),
        ("drafted_cost", "a drafted (target) token's proposer time, in the draft model's own steps"),
        ("generated_cost", "a token the draft generated (its own vocabulary), in the draft model's own steps"),
        ("drafted_native", "... of which the draft model's compute (its llama_decode calls), in its own steps"),
        ("drafted_python", "... and the proposer's Python (re-tokenizing included, for translated), in the draft "
                           "model's own steps"),
        ("calls_per_drafted", "draft llama_decode calls per drafted (target) token"),
        ("evaluated_per_token", "tokens the draft context evaluated per token of the answer (it reads the whole "
                                "answer, drafted or not: about 1 for a draft of the target's vocabulary, the pair's "
                                "tokens-per-token ratio for translated)"),
        ("drafted_share", "drafted tokens per token of the answer (the compute above is spread over these)"),
        ("accept", "acceptance"),
        ("target_step_ms", "the target's own step, ms (its one-token llama_decode calls)"),
    )
    for key, title in sections:
        print(f"\n{title}")
        for name in configs:
            vals = [(lab, rows[name][lab].get(key)) for lab in labels]
            if not any(v for _, v in vals):
                continue
            print(f"{name:<11}" + "".join(f"{lab}: {_med(v or []):<28}" for lab, v in vals))
    pairs = [(t, d) for t, d in (("translated", "draft"), ("translated-pmin0", "draft-pmin0")) if t in rows and d in rows]
    if pairs:
        print("\na translated drafted token against a drafted token of the same draft model in its own vocabulary "
              "(SmolLM2 drafting for itself), at the same p-min: the cost of translating, since neither kind of drafted "
              "token costs one draft step (p-min's stopping call and the catch-ups cost steps that draft nothing). "
              "Ratio of the medians above; the two answers are the two targets' own")
        for t, d in pairs:
            line = f"{t:<11}"
            for lab in labels:
                a, b = rows[t][lab].get("drafted_cost"), rows[d][lab].get("drafted_cost")
                if a and b:
                    line += f"{lab}: {statistics.median(a) / statistics.median(b):.3f}" + " " * 23
            print(line)
    print(f"\nAt a {GPU_STEP_MS:g} ms GPU target step (native time scaled by {GPU_STEP_MS:g} ms / the target's step here): "
          "the share of each step Python would take, with Python as measured warm (--warm) and as measured here "
          "(after a CPU step's cold caches: an upper bound). A warm step drafts its whole k (its fixed rows are "
          "always accepted) and so makes more decode calls than a real one: the warm figure is its Python per "
          "decode call times the real steps' calls per step")
    for name in configs:
        line = f"{name:<11}"
        for lab in labels:
            r = rows[name][lab]
            if not r.get("overhead_ms") or not r.get("target_step_ms"):
                continue
            cold = statistics.median(r["overhead_ms"])
            native = statistics.median(r["native_ms"]) * GPU_STEP_MS / statistics.median(r["target_step_ms"])
            line += f"{lab}: "
            if r.get("warm_ms_per_call"):
                warm = statistics.median(r["warm_ms_per_call"]) * statistics.median(r["calls_per_step"])
                line += f"warm {warm:.3f} ms of {native + warm:.2f} ms = {100 * warm / (native + warm):4.1f}%, "
            line += f"cold {cold:.3f} ms = {100 * cold / (native + cold):4.1f}%    "
        print(line)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, help="another checkout (a folder with app/) to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--answers", type=int, default=3, help="answers per configuration per round (after a warm-up)")
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--target", type=Path, default=ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--translated-target", type=Path, default=ROOT / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--warm", action="store_true",
                    help="also run each configuration with llama_decode skipped: Python's cost with warm caches")
    ap.add_argument("--evict", type=int, default=0, metavar="MIB",
                    help="with --warm: stream MIB MiB through the caches at each skipped decode (a CPU step's effect)")
    ap.add_argument("--json", type=Path, help="write every answer's figures here")
    ap.add_argument("--sampling", type=int, metavar="PAIRS", default=0,
                    help="instead: compare the in-place argmax with llama.cpp's backend greedy sampler, PAIRS pairs a size, "
                         "and p-min's softmax in NumPy with a backend dist chain's probabilities")
    ap.add_argument("--floor", type=int, metavar="ANSWERS", default=0,
                    help="instead: target alone's Python per step at several depths of the loop (raw llama_decode and "
                         "argmax, + the text, the engine, the whole loop, the loop with its bookkeeping stubbed), "
                         "ANSWERS answers each, interleaved")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.configs = [c for c in args.configs.split(",") if c]
    bad = [c for c in args.configs if c not in CONFIGS]
    if bad:
        ap.error(f"unknown configuration {bad[0]!r}: choose from {', '.join(CONFIGS)}")
    if args.sampling:
        return sampling_check(args)
    if args.floor:
        return floor_check(args)
    if args.evict and not args.warm:
        ap.error("--evict goes with --warm")
    if args.worker:
        return worker(args)
    args.target, args.translated_target = args.target.resolve(), args.translated_target.resolve()
    trees = {"after": ROOT}
    if args.before:
        if not (args.before / "app" / "specdesk").is_dir():
            ap.error(f"{args.before} holds no app/specdesk")
        trees = {"before": args.before.resolve(), "after": ROOT}
    results: dict[str, list[dict]] = {lab: [] for lab in trees}
    load = os.getloadavg()[0]
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(trees))
        for lab in order:
            results[lab].append(_run_worker(trees[lab], args, args.configs))
        print(f"round {r + 1}/{args.rounds} done (load {os.getloadavg()[0]:.1f})", file=sys.stderr)
    print(f"load average at the start {load:.1f}, at the end {os.getloadavg()[0]:.1f}; {args.threads} thread(s), "
          f"{args.tokens} tokens an answer, {args.rounds} rounds x {args.answers} answers\n")
    report(results, args.configs, args.evict)
    if args.json:
        args.json.write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
