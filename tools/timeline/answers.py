"""Answers of the real decode loop under the clock, per configuration, interleaved.

A configuration is one as ``specdesk bench`` writes it (``none``, ``draft:k=8``,
``draft:auto:p_min=0.75``, ``ngram:auto``, ``hybrid:k=4``), optionally with ``@T`` for a
temperature (top-p ``--top-p``). Only the loop is timed, from the end of the prompt's
prefill to the last token. Per answer, per step of the loop: native time (launch and
wait, see clock.py), the host's time (the rest of the loop's wall time: Python, NumPy,
the ctypes calls) and the host's thread CPU time (which a loaded machine disturbs far
less than wall time), the logits bytes copied out of llama.cpp, the batch shapes; and
for a draft, what a drafted token costs in the draft model's own single-token steps
(its proposer's seconds per drafted token over the median single-token call of the
draft context in the same answer), and how much of that is the draft's compute.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from .clock import Timeline

PROMPTS = (
    "Write a Python function that merges two sorted lists into one sorted list, with a docstring and two tests.",
    "Explain what a hash map is to a new programmer, then show a tiny example in JavaScript.",
    "Write a SQL query that lists each customer's total order value for 2024, highest first, and explain it.",
)


def parse(text: str):
    """``draft:k=8@0.7`` -> (the bench's configuration, temperature)."""
    from specdesk.bench.configs import parse_config

    name, _, temp = text.partition("@")
    return parse_config(name), float(temp or 0.0)


def _contexts(session) -> dict[str, int]:
    out = {"target": int(session.target.ctx._ctx)}
    if session.draft is not None:
        out["draft"] = int(session.draft.ctx._ctx)
    return out


def _copied(session) -> int:
    ctxs = [session.target.ctx] + ([session.draft.ctx] if session.draft is not None else [])
    return sum(getattr(c, "logits_bytes_copied", 0) for c in ctxs)


def one_answer(session, config, prompt, tl: Timeline) -> dict:
    """One answer of ``config`` (a GenerationConfig) to ``prompt``, the loop timed."""
    from specdesk.speculative import decoder

    orig = decoder._Loop.read_prompt
    marks: dict[str, float] = {}

    def read_prompt(self, cancel):
        orig(self, cancel)
        tl.reset()
        marks["cpu"], marks["bytes"] = time.thread_time(), _copied(session)
        tl.on = True  # the loop only: the prompt's prefill is not timed

    decoder._Loop.read_prompt = read_prompt
    last = None
    try:
        for step in session.generate(prompt, config):
            last = step
        cpu = time.thread_time() - marks["cpu"]
    finally:
        tl.on = False
        decoder._Loop.read_prompt = orig
    return _figures(session, last.stats, tl, cpu, _copied(session) - marks["bytes"])


def _figures(session, st, tl: Timeline, cpu: float, copied: int) -> dict:
    steps = max(1, st.steps)
    wall, native = st.decode_seconds, tl.native()
    host = wall - native
    rows = st.steps + st.drafted  # rows the verifier could reach (an upper bound of those it read)
    out = {
        "tokens": st.generated, "steps": st.steps, "drafted": st.drafted, "accepted": st.accepted,
        "tok_s": st.generated / wall if wall > 0 else 0.0,
        "launch_ms": 1e3 * sum(tl.launch.values()) / steps, "wait_ms": 1e3 * sum(tl.wait.values()) / steps,
        "host_ms": 1e3 * host / steps, "host_cpu_ms": 1e3 * (cpu - tl.native_cpu()) / steps,
        "host_ms_token": 1e3 * host / max(1, st.generated), "host_ms_row": 1e3 * host / max(1, rows),
        "reported_overhead": st.overhead_share or 0.0, "true_overhead": host / wall if wall > 0 else 0.0,
        "bytes_per_step": copied / steps,
    }
    for role, key in _contexts(session).items():
        out[f"{role}_shapes"] = len(tl.shapes.get(key, {}))
        out[f"{role}_changes_per_step"] = tl.changes.get(key, 0) / steps
        out[f"{role}_calls_per_step"] = tl.calls.get(key, 0) / steps
        if role == "draft" and st.drafted and tl.singles.get(key):
            step_s = statistics.median(tl.singles[key])  # the draft model's own step, in this answer
            out["draft_step_ms"] = 1e3 * step_s
            out["drafted_cost"] = st.draft_seconds / st.drafted / step_s
            out["drafted_compute"] = tl.native(key) / st.drafted / step_s
            out["draft_calls_per_drafted"] = tl.calls[key] / st.drafted
    return out


def run(args) -> dict[str, list[dict]]:
    """``args.rounds`` answers per configuration after a round that warms up every shape
    and is not counted, the configurations' order reversed every round, so that every
    ratio comes from one run."""
    from specdesk.session import GenerationConfig, ModelSpec, Session
    from specdesk.speculative.proposers import registry
    from specdesk.speculative.sampling import SamplingParams

    tl = Timeline()
    gl = args.gpu_layers
    target = ModelSpec(Path(args.target), n_ctx=args.ctx, n_gpu_layers=gl, threads=args.threads)
    draft = ModelSpec(Path(args.draft), n_ctx=args.ctx, n_gpu_layers=gl, threads=args.threads) if args.draft else None
    session = Session.load(target, draft, remember_costs=False, translate=True)
    configs = args.configs.split(",")
    results: dict[str, list[dict]] = {c: [] for c in configs}
    prompts = [session.chat_prompt([{"role": "user", "content": p}]) for p in PROMPTS]
    try:
        for r in range(args.rounds + 1):
            for c in (configs if r % 2 else configs[::-1]):
                bench, temp = parse(c)
                proposer = registry.resolve(bench.proposer, session.translated)  # draft on two vocabularies: translated
                sampling = SamplingParams(temperature=temp, top_p=args.top_p if temp > 0 else 1.0)
                cfg = GenerationConfig(proposer=proposer, k=bench.k, p_min=bench.p_min, sampling=sampling, seed=r,
                                       max_tokens=args.tokens)
                session.reset()
                a = one_answer(session, cfg, prompts[r % len(prompts)], tl)
                if r:
                    results[c].append(a)
    finally:
        session.close()
    return results

