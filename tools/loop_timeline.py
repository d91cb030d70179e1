#!/usr/bin/env python3
"""Where the decode loop's time goes, per configuration, on a CPU or a GPU alike.

    .venv/bin/python tools/loop_timeline.py                                   # SmolLM2 drafting for itself
    .venv/bin/python tools/loop_timeline.py --target T.gguf --draft D.gguf --gpu-layers 99 \
        --configs none,none@0.7,draft:k=8,draft:k=16,draft:k=8@0.7 --tokens 512
    .venv/bin/python tools/loop_timeline.py --sampling                         # host sampling cost, 152k vocab

Every ``llama_decode`` is wrapped here, outside the code under test: the call is
timed (``launch``: on a GPU the host's part, the graph's build and the kernels'
launch), then ``llama_synchronize`` is called and timed (``wait``: the device's work
still running; 0 on a CPU, where a decode returns when it is done). The rest of the
loop's wall time is the host's (``host``: Python, NumPy, the ctypes calls). Per
context it also counts the batch shapes the loop's decodes used, as llama.cpp sees
them (tokens, rows of logits asked for), and how often the shape changed from one
decode to the next: every change makes llama.cpp build its graph again (and on CUDA
re-capture its CUDA graph), a cost of milliseconds on a GPU. Only the loop is timed;
the prompt's prefill is not.

A configuration is a proposer config as ``specdesk bench`` writes it (``none``,
``draft:k=8``, ``draft:auto``, ``ngram:auto``), optionally with ``@T`` for a
temperature (top-p ``--top-p``, 0.95 by default) and ``/pmin=X`` for the draft's
p-min (0 by default: a fixed k drafts k). The answers of all configurations are
interleaved, round by round, so that every ratio comes from one run; each figure is
the median over ``--rounds`` answers with its spread (min-max).

The last table gives, for each configuration run at T>0 and at T=0, the host's
milliseconds per token and per verified row at that temperature less the same at
T=0: what sampling costs the host (target alone: per token; a draft: per row the
verifier reached, the drafted rows' own sampling included).

``--sampling`` times the samplers alone on rows of the default draft's vocabulary
(Qwen2.5-Coder 0.5B, 152k tokens) taken from a real answer: target alone's draw
and the rejection sampler's verdict, at T=0.7 and top-p 0.95 against the argmax.
Then the same calls inside the loop, right after a decode and made again at once:
on a CPU the decode streams the model through the caches, so every NumPy call after
it starts cold, and the draw's few dozen calls pay for it each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

PROMPTS = (
    "Write a Python function that merges two sorted lists into one sorted list, with a docstring and two tests.",
    "Explain what a hash map is to a new programmer, then show a tiny example in JavaScript.",
    "Write a SQL query that lists each customer's total order value for 2024, highest first, and explain it.",
)


class Timeline:
    """llama_decode and llama_synchronize wrapped: launch and wait per context, shapes."""

    def __init__(self) -> None:
        import llama_cpp

        self.on = False
        self.launch: dict[int, float] = {}
        self.wait: dict[int, float] = {}
        self.calls: dict[int, int] = {}
        self.shapes: dict[int, dict[tuple[int, int], int]] = {}
        self.changes: dict[int, int] = {}
        self.last: dict[int, tuple[int, int]] = {}
        decode, sync = llama_cpp.llama_decode, llama_cpp.llama_synchronize

        def timed(ctx, batch):
            if not self.on:
                return decode(ctx, batch)
            key = int(ctx or 0)
            n = batch.n_tokens
            outs = batch.logits[0] if n == 1 else sum(batch.logits[i] != 0 for i in range(n))
            shape = (n, int(outs))
            t0 = time.perf_counter()
            rc = decode(ctx, batch)
            t1 = time.perf_counter()
            sync(ctx)
            t2 = time.perf_counter()
            self.launch[key] = self.launch.get(key, 0.0) + t1 - t0
            self.wait[key] = self.wait.get(key, 0.0) + t2 - t1
            self.calls[key] = self.calls.get(key, 0) + 1
            seen = self.shapes.setdefault(key, {})
            seen[shape] = seen.get(shape, 0) + 1
            last = self.last.get(key)
            if last is not None and last != shape:
                self.changes[key] = self.changes.get(key, 0) + 1
            self.last[key] = shape
            return rc

        llama_cpp.llama_decode = timed

    def reset(self) -> None:
        for d in (self.launch, self.wait, self.calls, self.shapes, self.changes, self.last):
            d.clear()


def parse_config(text: str):
    """``draft:k=8@0.7/pmin=0.5`` -> (proposer, k, temperature, p_min)."""
    name, _, pmin = text.partition("/pmin=")
    name, _, temp = name.partition("@")
    proposer, _, k = name.partition(":k=")
    if proposer == "none":
        k = "auto"
    return proposer, (k if k in ("", "auto") else int(k)) or "auto", float(temp or 0.0), float(pmin or 0.0)


def one_answer(session, config, prompt, tl: Timeline) -> dict:
    from specdesk.speculative import decoder

    orig = decoder._Loop.read_prompt

    def read_prompt(self, cancel):
        orig(self, cancel)
        tl.reset()
        tl.on = True  # the loop only: the prompt's prefill is not timed

    decoder._Loop.read_prompt = read_prompt
    last = None
    try:
        for step in session.generate(prompt, config):
            last = step
    finally:
        tl.on = False
        decoder._Loop.read_prompt = orig
    st = last.stats
    steps = max(1, st.steps)
    ctxs = {"target": int(session.target.ctx._ctx)}
    if session.draft is not None:
        ctxs["draft"] = int(session.draft.ctx._ctx)
    launch = sum(tl.launch.values())
    wait = sum(tl.wait.values())
    rows = st.steps + st.drafted  # rows the verifier could reach (an upper bound of those it read)
    out = {
        "tokens": st.generated, "steps": st.steps, "drafted": st.drafted, "accepted": st.accepted,
        "tok_s": st.generated / st.decode_seconds if st.decode_seconds > 0 else 0.0,
        "launch_ms": 1e3 * launch / steps, "wait_ms": 1e3 * wait / steps,
        "host_ms": 1e3 * (st.decode_seconds - launch - wait) / steps,
        "host_ms_token": 1e3 * (st.decode_seconds - launch - wait) / max(1, st.generated),
        "host_ms_row": 1e3 * (st.decode_seconds - launch - wait) / max(1, rows),
        "reported_overhead": st.overhead_share or 0.0,
        "true_overhead": (st.decode_seconds - launch - wait) / st.decode_seconds if st.decode_seconds > 0 else 0.0,
    }
    for role, key in ctxs.items():
        out[f"{role}_shapes"] = len(tl.shapes.get(key, {}))
        out[f"{role}_changes_per_step"] = tl.changes.get(key, 0) / steps
        out[f"{role}_calls_per_step"] = tl.calls.get(key, 0) / steps
        # steady state: the second half of the answer's decodes is not split out here;
        # the changes per step over the whole loop is an upper bound of it
    return out


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def run(args) -> dict:
    from specdesk.session import GenerationConfig, ModelSpec, Session
    from specdesk.speculative.sampling import SamplingParams

    tl = Timeline()
    gl = args.gpu_layers
    target = ModelSpec(Path(args.target), n_ctx=args.ctx, n_gpu_layers=gl)
    draft = ModelSpec(Path(args.draft), n_ctx=args.ctx, n_gpu_layers=gl) if args.draft else None
    session = Session.load(target, draft, remember_costs=False)
    configs = args.configs.split(",")
    results: dict[str, list[dict]] = {c: [] for c in configs}
    prompts = [session.chat_prompt([{"role": "user", "content": p}]) for p in PROMPTS]
    for r in range(args.rounds + 1):  # round 0 warms up every shape and is not counted
        for c in (configs if r % 2 else configs[::-1]):
            proposer, k, temp, pmin = parse_config(c)
            sampling = SamplingParams(temperature=temp, top_p=args.top_p if temp > 0 else 1.0)
            cfg = GenerationConfig(proposer=proposer, k=k, p_min=pmin, sampling=sampling, seed=r,
                                   max_tokens=args.tokens)
            session.reset()
            a = one_answer(session, cfg, prompts[r % len(prompts)], tl)
            if r:
                results[c].append(a)
    return results


def report(results: dict, out=sys.stdout) -> None:
    cols = ("tok_s", "launch_ms", "wait_ms", "host_ms", "host_ms_token")
    base = results.get("none")
    print("per step, median [min-max] over the rounds (ms; tok/s and the ratio to target alone, same run)", file=out)
    for c, rows in results.items():
        line = [f"{c:<22}"]
        for col in cols:
            line.append(f"{col} {med([r[col] for r in rows])}")
        if base and c != "none":
            ratios = [r["tok_s"] / b["tok_s"] for r, b in zip(rows, base) if b["tok_s"] > 0]
            if ratios:
                line.append(f"vs none {med(ratios)}")
        print("  " + ", ".join(line), file=out)
    print("batch shapes per context (distinct shapes; shape changes per step; decodes per step)", file=out)
    for c, rows in results.items():
        parts = []
        for role in ("target", "draft"):
            if f"{role}_shapes" in rows[0]:
                parts.append(f"{role}: {max(r[f'{role}_shapes'] for r in rows)} shapes, "
                             f"{med([r[f'{role}_changes_per_step'] for r in rows])} changes/step, "
                             f"{med([r[f'{role}_calls_per_step'] for r in rows])} decodes/step")
        print(f"  {c:<22} " + "; ".join(parts), file=out)
    print("Python overhead share: as the statistics report it, and as the timeline measures it", file=out)
    for c, rows in results.items():
        print(f"  {c:<22} reported {med([r['reported_overhead'] for r in rows])}, "
              f"timeline {med([r['true_overhead'] for r in rows])}", file=out)
    hot = [c for c in results if "@" in c and c.split("@")[0] in results]
    if hot:
        print("host sampling cost at T>0 against the same configuration at T=0, same run (ms)", file=out)
        for c in hot:
            cold = results[c.split("@")[0]]
            tok = [a["host_ms_token"] - b["host_ms_token"] for a, b in zip(results[c], cold)]
            row = [a["host_ms_row"] - b["host_ms_row"] for a, b in zip(results[c], cold)]
            print(f"  {c:<22} per token {med(tok)}, per verified row {med(row)}", file=out)


def sampling_bench(args) -> None:
    """The samplers alone, on real rows of a 152k vocabulary: the rows a T=0.7 answer
    of the default draft read, per prompt. Thread CPU time, which a loaded machine
    disturbs far less than wall time (each figure the median of 5 passes)."""
    import numpy as np

    from specdesk.session import GenerationConfig, ModelSpec, Session
    from specdesk.speculative.sampling import SamplingParams, WarpedRows, warp_support
    from specdesk.speculative.verify import verify_stochastic

    session = Session.load(ModelSpec(Path(args.target), n_ctx=args.ctx), remember_costs=False)
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

    def argmaxes():
        for r in rows:
            int(r.argmax())

    def draws():
        for r in rows:
            warp_support(r, params).sample(rng)

    blocks = [rows[i: i + k + 1] for i in range(0, n - k - 1, k)]
    drafts = [[int(r.argmax()) for r in b[:k]] for b in blocks]  # a greedy draft: the argmax of each row
    reached = [0]

    def verdicts():
        for b, draft in zip(blocks, drafts):
            reached[0] += verify_stochastic(draft, WarpedRows(b, params), None, rng).n_accepted + 1

    def argmax_verdicts():  # what T=0 does with the same rows
        for b in blocks:
            b.argmax(axis=-1)

    a = per_call(argmaxes, n)
    d = per_call(draws, n)
    v = per_call(verdicts, 1)
    rows_read = reached[0] / 5
    g = per_call(argmax_verdicts, 1)
    print(f"{n} rows of {rows.shape[1]} logits from T=0.7 answers (top-p {args.top_p}); ms of thread CPU time, "
          "median of 5 passes:")
    print(f"  target alone: the argmax (T=0) {a:.3f} a row; the draw {d:.3f} a row, {d - a:+.3f} over the argmax")
    print(f"  the rejection sampler over {len(blocks)} drafts of {k} (one-hot q): {1e3 * 0 + v / rows_read:.3f} "
          f"a row it read ({rows_read / len(blocks):.1f} rows a draft), against {g / (len(blocks) * (k + 1)):.3f} "
          "a row for the argmax of every row at T=0")
    in_the_loop(session, params, rng)


def in_the_loop(session, params, rng, steps: int = 48) -> None:
    """The same calls on the row llama.cpp has just written, inside the decode's logits
    callback, as the loop makes them: each NumPy call right after a decode, which has
    just streamed the model through the CPU's caches, against the same call made again
    at once (the caches warm)."""

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
    med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    print(f"  in the loop ({steps} T=0.7 steps of target alone, the row read where llama.cpp wrote it): the max over "
          f"the row {med['max, first']:.3f} right after the decode, {med['max, again']:.3f} again; the draw "
          f"{med['draw, first']:.3f} after the max, {med['draw, again']:.3f} again")


def main() -> int:
    from specdesk.library.defaults import default_models

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=None, help="target GGUF (default: SmolLM2-135M, the test model)")
    ap.add_argument("--draft", default=None, help="draft GGUF (default: the target itself)")
    ap.add_argument("--configs", default="none,none@0.7,draft:k=8,draft:k=8@0.7")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--gpu-layers", type=int, default=None, help="GPU layers per model (default: auto where offload fits)")
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--sampling", action="store_true",
                    help="time the samplers alone on the default draft's 152k vocabulary (--target to change)")
    ap.add_argument("--json", default=None, help="also write every answer's figures here")
    args = ap.parse_args()
    if args.sampling:
        args.target = args.target or str(default_models(["draft"])[0].path)
        sampling_bench(args)
        return 0
    args.target = args.target or str(default_models(["test"])[0].path)
    if args.draft is None and any(not c.startswith("none") for c in args.configs.split(",")):
        args.draft = args.target
    results = run(args)
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
