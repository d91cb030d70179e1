"""``--floor N``: where target alone's host time per step goes, depth by depth, in one
process: the same answer (``--tokens`` tokens, greedy) decoded at six depths of the loop,
interleaved N times, each timed as the main table does (the loop's wall time less the
time inside llama.cpp, per step), but the first:

- raw, timed inline: as raw below, with llama_decode and llama_synchronize called
  unwrapped and timed by two clock reads around them. Raw less this is what the tool's
  own wrapper costs per step (its clock reads and counters), which every figure of the
  tool includes, in both checkouts of a comparison alike;
- raw: the ctypes batch, llama_decode, a view of the row and its argmax (the least any
  Python loop over llama.cpp pays per step, here);
- raw + text: the token's bytes through the incremental UTF-8 decoder, the end check;
- engine: ``Context.eval`` with the argmax as its ``fn`` (the engine's bookkeeping), and
  the text;
- loop: ``Session.generate`` with target alone and auto (the decode loop's records,
  statistics, controller and Step: what the main table measures as target alone);
- loop, bookkeeping stubbed: the same with the controller's ``observe``, the statistics'
  snapshot per Step (``Stats.copy``) and the decision's counting made no-ops (the answer
  is the same): loop less this is what that bookkeeping costs, and this less engine what
  the loop's shape costs (the generator, the records, the Step, the session around it).
"""

from __future__ import annotations

import codecs
import os
import statistics
import time
from pathlib import Path

from .answers import PROMPTS
from .clock import Timeline
from .report import med


def _by_hand(session, prompt, n: int, tl: Timeline, depth: str) -> float:
    import llama_cpp
    import numpy as np

    ctx, model = session.target.ctx, session.target.model
    session.reset()
    ctx.prefill(prompt[:-1], logits=False)
    tok, pos, n_vocab = prompt[-1], len(prompt) - 1, ctx.n_vocab
    dec = codecs.getincrementaldecoder("utf-8")("replace")
    b = ctx._batch
    ptok, ppos, plog = b.token, b.pos, b.logits
    text = []
    if depth == "inline":  # raw, with the unwrapped calls timed inline: what the wrapper itself costs
        decode, sync, now = tl.plain_decode, tl.plain_sync, time.perf_counter
        inside = 0.0
        t0 = now()
        for _ in range(n):
            ptok[0], ppos[0], plog[0] = tok, pos, 1
            b.n_tokens = 1
            t1 = now()
            decode(ctx._ctx, b)
            sync(ctx._ctx)
            inside += now() - t1
            tok = int(np.ctypeslib.as_array(llama_cpp.llama_get_logits(ctx._ctx), shape=(n_vocab,)).argmax())
            pos += 1
        return 1e3 * (now() - t0 - inside) / n
    n0, t0 = tl.native(), time.perf_counter()
    for _ in range(n):
        if depth == "engine":
            tok = ctx.eval([tok], fn=lambda rows: int(rows.argmax()))
        else:
            ptok[0], ppos[0], plog[0] = tok, pos, 1
            b.n_tokens = 1
            llama_cpp.llama_decode(ctx._ctx, b)
            tok = int(np.ctypeslib.as_array(llama_cpp.llama_get_logits(ctx._ctx), shape=(n_vocab,)).argmax())
            pos += 1
            if depth == "raw":
                continue
        if not model.is_eog(tok):
            text.append(dec.decode(model.token_bytes(tok)))
    return 1e3 * (time.perf_counter() - t0 - (tl.native() - n0)) / n


def _loop(session, prompt, n: int, tl: Timeline, stubbed: bool = False) -> float:
    from specdesk.session import GenerationConfig

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
            return _loop(session, prompt, n, tl)
        finally:
            for cls, name, f in saved:
                setattr(cls, name, f)
    session.reset()
    steps, t0, n0 = 0, 0.0, 0.0
    for i, _ in enumerate(session.generate(prompt, GenerationConfig(proposer="none", k="auto", max_tokens=n + 1))):
        if i == 0:  # the first step follows the prompt: timed from its end
            t0, n0 = time.perf_counter(), tl.native()
        else:
            steps += 1
    return 1e3 * (time.perf_counter() - t0 - (tl.native() - n0)) / max(1, steps)


def floor_check(args) -> None:
    from specdesk.session import ModelSpec, Session

    tl = Timeline()
    tl.on = True
    session = Session.load(ModelSpec(Path(args.target), n_ctx=args.ctx, threads=args.threads), remember_costs=False)
    prompt = session.chat_prompt([{"role": "user", "content": PROMPTS[0]}])
    n = args.tokens
    depths = {"raw, timed inline": "inline", "raw": "raw", "raw + text": "text", "engine": "engine"}
    runs = {name: (lambda d=d: _by_hand(session, prompt, n, tl, d)) for name, d in depths.items()}
    runs["loop"] = lambda: _loop(session, prompt, n, tl)
    runs["loop, bookkeeping stubbed"] = lambda: _loop(session, prompt, n, tl, stubbed=True)
    out: dict[str, list[float]] = {name: [] for name in runs}
    for f in runs.values():  # a warm-up of each, not counted
        f()
    for r in range(args.floor):
        for name in (list(runs) if r % 2 == 0 else list(reversed(runs))):
            out[name].append(runs[name]())
    session.close()
    print(f"target alone on {Path(args.target).name}, {args.threads or 'auto'} thread(s), {n} tokens, {args.floor} "
          f"answers a depth, interleaved (load {os.getloadavg()[0]:.1f}): the host's ms per step, median [min-max]")
    for name, xs in out.items():
        print(f"  {name:<26} {med(xs)}")
    m = {name: statistics.median(xs) for name, xs in out.items()}
    print(f"  the tool's own wrapper around llama_decode, per step (raw less timed inline): "
          f"{m['raw'] - m['raw, timed inline']:.3f} ms, in every host figure of the main table")
    print(f"  the loop's bookkeeping (controller observe, statistics snapshot, decision counts), per step (loop less "
          f"stubbed): {m['loop'] - m['loop, bookkeeping stubbed']:.3f} ms; the loop's shape beyond the engine "
          f"(stubbed less engine): {m['loop, bookkeeping stubbed'] - m['engine']:.3f} ms")
