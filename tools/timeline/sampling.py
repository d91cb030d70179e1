"""``--sampling``: what sampling costs the host, on a real vocabulary.

1. The samplers alone, on rows of logits a T=0.7 answer read (thread CPU time, the
   median of 5 passes): target alone's draw against the argmax, and the rejection
   sampler's verdict over greedy drafts against the argmax of every row at T=0.
2. The same calls inside the loop, right after a decode and made again at once: on a
   CPU the decode streams the model through the caches, so every NumPy call after it
   starts cold, and the draw's few dozen calls pay for it each.
3. With ``--pairs N``: the two ways to verify greedily without copying rows, interleaved
   N times a size: the argmax in NumPy over the ctypes buffer (what the engine does)
   against llama.cpp's greedy backend sampler (an argmax in the graph, read with
   ``llama_get_sampled_token_ith``); then a greedy draft step with p-min, the argmax and
   its softmax probability in NumPy against a backend ``dist`` chain's probabilities.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from .answers import PROMPTS


def sampling_bench(args) -> None:
    import numpy as np

    from specdesk.session import GenerationConfig, ModelSpec, Session
    from specdesk.speculative.sampling import SamplingParams, WarpedRows, warp_support
    from specdesk.speculative.verify import verify_stochastic

    session = Session.load(ModelSpec(Path(args.target), n_ctx=args.ctx, threads=args.threads), remember_costs=False)
    ctx = session.target.ctx
    params = SamplingParams(temperature=0.7, top_p=args.top_p)
    rows = []
    for text in PROMPTS:
        prompt = session.chat_prompt([{"role": "user", "content": text}])
        seq = list(prompt)
        for step in session.generate(prompt, GenerationConfig(proposer="none", max_tokens=args.tokens // 4,
                                                              sampling=params, seed=1)):
            seq.extend(t.token for t in step.tokens)
        ctx.reset()
        ctx.prefill(seq[: len(prompt) - 1], logits=False)
        rows.append(ctx.eval(seq[len(prompt) - 1: -1], all_rows=True))
    rows = np.concatenate(rows).astype(np.float32)
    rng = np.random.default_rng(0)
    n, k = rows.shape[0], 8

    def per_call(fn, count):
        best = []
        for _ in range(5):
            t0 = time.thread_time()
            fn()
            best.append((time.thread_time() - t0) / count)
        return 1e3 * statistics.median(best)

    blocks = [rows[i: i + k + 1] for i in range(0, n - k - 1, k)]
    drafts = [[int(r.argmax()) for r in b[:k]] for b in blocks]  # a greedy draft: the argmax of each row
    reached = [0]

    def verdicts():
        for b, draft in zip(blocks, drafts):
            reached[0] += verify_stochastic(draft, WarpedRows(b, params), None, rng).n_accepted + 1

    a = per_call(lambda: [int(r.argmax()) for r in rows], n)
    d = per_call(lambda: [warp_support(r, params).sample(rng) for r in rows], n)
    v = per_call(verdicts, 1)
    rows_read = reached[0] / 5
    g = per_call(lambda: [b.argmax(axis=-1) for b in blocks], 1)  # what T=0 does with the same rows
    print(f"{n} rows of {rows.shape[1]} logits from T=0.7 answers (top-p {args.top_p}); ms of thread CPU time, "
          "median of 5 passes:")
    print(f"  target alone: the argmax (T=0) {a:.3f} a row; the draw {d:.3f} a row, {d - a:+.3f} over the argmax")
    print(f"  the rejection sampler over {len(blocks)} drafts of {k} (one-hot q): {v / rows_read:.3f} a row it read "
          f"({rows_read / len(blocks):.1f} rows a draft), against {g / (len(blocks) * (k + 1)):.3f} a row for the argmax "
          "of every row at T=0")
    in_the_loop(session, params, rng)
    session.close()
    if args.pairs:
        backend_samplers(args)


def in_the_loop(session, params, rng, steps: int = 48) -> None:
    """The calls on the row llama.cpp has just written, inside the decode's logits
    callback, as the loop makes them: each NumPy call right after a decode, against the
    same call made again at once (the caches warm)."""
    from specdesk.speculative.sampling import warp_support

    ctx = session.target.ctx
    prompt = list(session.chat_prompt([{"role": "user", "content": PROMPTS[0]}]))
    ctx.reset()
    ctx.prefill(prompt[:-1], logits=False)
    times: dict[str, list[float]] = {}

    def timed(name, fn):
        t0 = time.thread_time()
        out = fn()
        times.setdefault(name, []).append(time.thread_time() - t0)
        return out

    def draw(rows):
        row = rows[0]
        timed("max, first", row.max)
        timed("max, again", row.max)
        timed("draw, first", lambda: warp_support(row, params))
        return timed("draw, again", lambda: warp_support(row, params)).sample(rng)

    token = prompt[-1]
    for _ in range(steps):
        token = ctx.eval([token], all_rows=False, fn=draw)
    m = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    print(f"  in the loop ({steps} T=0.7 steps of target alone, the row read where llama.cpp wrote it): the max over "
          f"the row {m['max, first']:.3f} right after the decode, {m['max, again']:.3f} again; the draw "
          f"{m['draw, first']:.3f} after the max, {m['draw, again']:.3f} again")


def _context(model, threads: int, backend: bool | str, keep: list):
    """A raw llama.cpp context on ``model`` (with a greedy or ``dist`` backend sampler
    chain), a batch of 512 and its memory."""
    import ctypes

    import llama_cpp

    p = llama_cpp.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = 1024, 512, 512, 1
    p.n_threads = p.n_threads_batch = threads
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


def _decode(c, tokens, p0, every) -> None:
    import llama_cpp

    ctx, batch, _ = c
    for i, t in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.logits[i] = t, p0 + i, int(every or i == len(tokens) - 1)
    batch.n_tokens = len(tokens)
    if llama_cpp.llama_decode(ctx, batch) != 0:
        raise SystemExit("llama_decode failed")


def _paired(pairs: int, in_place_call, backend_call) -> tuple[str, str, str]:
    """Thread CPU ms of each, alternating which goes first, and the paired ratio: medians [IQR]."""
    import numpy as np

    def q(xs):
        lo, mid, hi = np.percentile(xs, [25, 50, 75])
        return f"{mid:.3f} [{lo:.3f}-{hi:.3f}]"

    cpu: dict[str, list[float]] = {"in place": [], "backend": []}
    for r in range(pairs):
        pair = (("in place", in_place_call), ("backend", backend_call))
        for name, f in pair if r % 2 else pair[::-1]:
            c0 = time.thread_time()
            f()
            cpu[name].append(1e3 * (time.thread_time() - c0))
    return q(cpu["in place"]), q(cpu["backend"]), q([b / a for a, b in zip(cpu["in place"], cpu["backend"])])


def backend_samplers(args) -> None:
    import ctypes

    import llama_cpp
    import numpy as np

    from specdesk.engine.model import Model
    from specdesk.speculative.sampling import top_probability

    model, keep = Model(args.target), []
    n_vocab = model.n_vocab
    toks = model.tokenize("def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fib")
    start = len(toks) - 5
    in_place, backend, dist = (_context(model, args.threads or 1, b, keep) for b in (False, True, "dist"))
    for c in (in_place, backend, dist):
        _decode(c, toks[:start], 0, False)

    def verify_in_place(n):
        llama_cpp.llama_memory_seq_rm(in_place[2], 0, start, -1)
        _decode(in_place, toks[start: start + n], start, True)
        addr = ctypes.addressof(llama_cpp.llama_get_logits(in_place[0]).contents)
        rows = np.frombuffer((ctypes.c_float * (n * n_vocab)).from_address(addr), dtype=np.float32)
        return rows.reshape(n, n_vocab).argmax(axis=-1).tolist()

    def verify_backend(n):
        llama_cpp.llama_memory_seq_rm(backend[2], 0, start, -1)
        _decode(backend, toks[start: start + n], start, True)
        return [llama_cpp.llama_get_sampled_token_ith(backend[0], i) for i in range(n)]

    print(f"greedy verification on {Path(args.target).name}, {args.threads or 1} thread(s), {args.pairs} pairs a size: "
          "thread CPU ms per verify, median [IQR]")
    for n in (1, 5):
        if verify_in_place(n) != verify_backend(n):
            raise SystemExit("the two argmaxes differ")
        a, b, ratio = _paired(args.pairs, lambda n=n: verify_in_place(n), lambda n=n: verify_backend(n))
        print(f"  {n} row(s): argmax in place {a}, backend sampler {b}; backend / in place, paired: {ratio}")

    def pmin_in_place():
        llama_cpp.llama_memory_seq_rm(in_place[2], 0, start, -1)
        _decode(in_place, toks[start: start + 1], start, True)
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(in_place[0], 0), shape=(n_vocab,))
        return int(row.argmax()), top_probability(row)

    def pmin_backend():
        llama_cpp.llama_memory_seq_rm(dist[2], 0, start, -1)
        _decode(dist, toks[start: start + 1], start, True)
        n = llama_cpp.llama_get_sampled_probs_count_ith(dist[0], 0)
        probs = np.ctypeslib.as_array(llama_cpp.llama_get_sampled_probs_ith(dist[0], 0), shape=(n,))
        cand = llama_cpp.llama_get_sampled_candidates_ith(dist[0], 0)
        i = int(probs.argmax())
        return (int(cand[i]) if cand else i), float(probs[i])

    (ta, pa), (tb, pb) = pmin_in_place(), pmin_backend()
    if ta != tb or abs(pa - pb) > 1e-4:
        raise SystemExit(f"the two p-min readings differ: {ta} {pa} against {tb} {pb}")
    a, b, ratio = _paired(args.pairs, pmin_in_place, pmin_backend)
    print(f"  a greedy draft step with p-min (the argmax and its softmax probability): in NumPy over the row {a}, "
          f"from a backend dist chain's probabilities {b}; backend / in place, paired: {ratio}")
