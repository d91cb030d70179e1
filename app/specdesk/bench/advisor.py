"""Does speculation pay on this machine, and with which settings?

Speculation pays when the tokens a step emits outweigh what drafting and verifying
cost. The isolated costs of the parts (a target step, a verify batch, a draft call)
do not add up to the loop, though: the draft's catch-up after each correction, the
caches the two models evict from each other, the Python around every step and
whatever else shares the cores are in no single call. On a 2-core CPU the parts
predicted 1.10-1.19x for draft lengths the loop ran at 0.88-0.90x. So the advisor
predicts from the loop.

``calibrate`` measures, on the loaded pair:
- the components, in seconds: one target step at a realistic context length, a verify
  batch of b tokens (b = 2..9), a draft-model call that drafts k tokens (k = 1..8),
  and the draft's acceptance per position from a short greedy run;
- the target's kernel drift: how far a verify batch of b tokens moves its
  distribution from a single-token step (:mod:`specdesk.speculative.drift`), sized
  to a few seconds from the costs just measured and cached per target setup,
  machine and llama.cpp build (:mod:`specdesk.session.drift`);
- the loop (:mod:`specdesk.bench.loop_calibration`): target alone and the candidate
  configurations, short greedy answers through the real decode loop, interleaved,
  repeated until their intervals are narrow or the time budget is spent. The
  components only choose the candidates (k=1 and the two k they rate best).

A configuration's prediction is its measured paired speedup over target alone, with
its 95% interval; "pays" only when the whole interval is above 1. The components'
own figure is kept next to it (``component_predictions``) to show how far the parts
are from the loop. The core's ``auto`` starts from the component costs
(:meth:`Session.seed_costs`) and judges by its own outcomes.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import Cancelled, SpecDeskError
from ..fmt import format_bytes
from ..library.quants import QuantUpgrade, upgrade_for
from ..session import GenerationConfig
from ..session.drift import PROBE_PROMPT, pair_drift
from ..session.text import advice_verdict_text, claim_text, components_why_text, measured_best_text, memory_buys_text
from ..speculative.controller import FixedK
from ..speculative.costmodel import CostModel, PositionAcceptance, expected_tokens
from ..speculative.decoder import speculate
from ..speculative.drift import Drift
from ..speculative.proposers import registry
from ..speculative.proposers.base import DRAFT
from ..speculative.proposers.registry import Need
from ..speculative.proposers.registry import BASELINE
from ..speculative.sampling import SamplingParams
from .configs import BenchConfig, proposer_of
from .loop_calibration import LoopCalibration, LoopOptions, run_loop
from .rows import ConfigRow, rows_of
from .runner import SessionTarget

CALIBRATION_PROMPT = PROBE_PROMPT  # the drift probe reads the same text

log = logging.getLogger(__name__)

Progress = Callable[[str, float], None]

# Shares of the calibration's progress: the components (verify, drift, draft calls,
# acceptance), then the loop's runs.
VERIFY_SHARE = 0.12
DRIFT_SHARE = 0.05
DRAFT_SHARE = 0.08
ACCEPTANCE_SHARE = 0.08
COMPONENTS_SHARE = 0.02 + VERIFY_SHARE + DRIFT_SHARE + DRAFT_SHARE + ACCEPTANCE_SHARE

BEST_KS = 2  # the draft lengths the component costs rate best, tried in the loop (with k=1)
# Where a verify batch's tokens beyond 5 cost less than this share of a target step each
# (a GPU: 0.14 on an H200, against 0.6-0.8 on a 2-core CPU), long drafts may pay: the
# calibration then measures batches and drafts up to LONG_K as well, and rates them.
LONG_SLOPE = 0.5
LONG_K = 32
LONG_SIZES = (12, 16, 24, 32)
MAX_LOOP_CONFIGS = 5  # configurations the loop calibration runs besides target alone


@dataclass
class Calibration:
    costs: CostModel
    context_tokens: int
    seconds: float
    draft_acceptance: PositionAcceptance | None = None
    draft_bytes: int = 0
    kv_bytes_per_token: float = 0.0
    k_max: int = 8
    drift: Drift | None = None
    # the best higher quantization of the target the draft's memory would buy instead
    quant_upgrade: QuantUpgrade | None = None
    # how the draft model drafts: "draft" (same vocabulary) or "translated" (another
    # vocabulary, its text re-tokenized), or "mtp" where the target's own MTP heads are
    # the draft (no draft model): its costs and acceptance are that proposer's
    draft_source: str = DRAFT
    # the proposer that drafts with that source on this pair (its configurations are the loop's candidates)
    proposer: str = registry.DEFAULT
    # the RPC servers the target's layers are on: every target step pays their round trip
    remote: tuple[str, ...] = ()
    # the loop's runs, which the predictions come from (None: the components alone, no verdict)
    loop: LoopCalibration | None = None

    @property
    def step(self) -> float:
        return self.costs.verify_cost(1) or float("nan")

    def verify_ratio(self, b: int) -> float:
        return (self.costs.verify_cost(b) or float("nan")) / self.step

    def draft_ratio(self, k: int) -> float:
        return self.costs.draft_cost(k) / self.step if k else 0.0

    def to_dict(self) -> dict:
        return {
            "costs": self.costs.to_dict(),
            "step_seconds": self.step,
            "verify_ratio": {str(b): self.verify_ratio(b) for b in range(1, self.k_max + 2)},
            "draft_ratio": {str(k): self.draft_ratio(k) for k in range(1, self.k_max + 1)},
            "draft_acceptance": self.draft_acceptance.alphas(self.k_max) if self.draft_acceptance else None,
            "context_tokens": self.context_tokens,
            "seconds": self.seconds,
            "drift": self.drift.to_dict() if self.drift is not None else None,
            "quant_upgrade": self.quant_upgrade.to_dict() if self.quant_upgrade is not None else None,
            "draft_source": self.draft_source,
            "proposer": self.proposer,
            "remote": list(self.remote),
            "verify_per_token": {str(b): self.verify_per_token(b) for b in range(1, self.k_max + 2)},
            "loop": self.loop.to_dict() if self.loop is not None else None,
        }

    def verify_per_token(self, b: int) -> float:
        """What each token of a verify batch of ``b`` costs, in target steps: below 1
        when the batch shares a fixed cost (a network round trip, a GPU launch)."""
        return self.verify_ratio(b) / b


def _median_time(fn: Callable[[], None], reps: int, clock: Callable[[], float] = time.perf_counter) -> float:
    ts = []
    for _ in range(reps):
        t0 = clock()
        fn()
        ts.append(clock() - t0)
    return statistics.median(ts)


class _Run:
    """One calibration's shared state: the session, the prompt, the clock and the
    progress callback that also checks for a cancel."""

    def __init__(self, session, progress: Progress | None, cancel: Callable[[], bool] | None, k_max: int, reps: int,
                 clock: Callable[[], float]) -> None:
        self.session, self.progress, self.cancel = session, progress, cancel
        self.k_max, self.reps, self.clock = k_max, reps, clock
        self.costs = CostModel()
        self.ks = tuple(range(1, k_max + 1))  # the draft lengths whose costs are measured

    def step(self, msg: str, frac: float) -> None:
        if self.cancel is not None and self.cancel():
            raise Cancelled("calibration was cancelled")
        if self.progress:
            self.progress(msg, frac)

    def time(self, fn: Callable[[], None], reps: int) -> float:
        return _median_time(fn, reps, self.clock)


def _measure_verify(run: _Run, prompt: list[int]) -> None:
    """One target step and a verify batch of 2..k_max + 1 tokens, at the prompt's context."""
    tctx = run.session.target.ctx
    base = len(prompt) - 1
    tctx.prefill(prompt[:-1], logits=False)
    batch_src = prompt[-(run.k_max + 2):]  # a plausible continuation to verify: the prompt's own tail

    def verify(b: int) -> None:
        tctx.eval(batch_src[:b], all_rows=True)
        tctx.rollback(base)

    run.step("measuring a target step", 0.02)
    verify(1)  # discard the first (graph build)
    run.costs.set_verify(1, run.time(lambda: verify(1), run.reps + 3))
    sizes = list(range(2, run.k_max + 2))
    for b in sizes:
        run.step(f"measuring a verify batch of {b} tokens", 0.02 + VERIFY_SHARE * b / (run.k_max + 1))
        verify(b)
        run.costs.set_verify(b, run.time(lambda b=b: verify(b), run.reps))
    if run.k_max < LONG_K and 5 < sizes[-1] and len(prompt) > LONG_K + 1:
        v = run.costs.verify_cost
        if (v(sizes[-1]) - v(5)) / (sizes[-1] - 5) < LONG_SLOPE * v(1):  # cheap batches: long drafts may pay
            batch_src = prompt[-(LONG_K + 2):]
            for k in LONG_SIZES:
                run.step(f"measuring a verify batch of {k + 1} tokens", 0.02 + VERIFY_SHARE)
                verify(k + 1)
                run.costs.set_verify(k + 1, run.time(lambda b=k + 1: verify(b), run.reps))
            run.ks = tuple(range(1, run.k_max + 1)) + LONG_SIZES
            run.k_max = LONG_K


def _measure_source(run: _Run, prompt: list[int], need: Need) -> Callable[[], object]:
    """A draft of 1..k_max tokens by the session's source for ``need`` (translation
    included for a translated draft), each from where a fully accepted step leaves it;
    returns how to make the proposer that was timed."""
    session = run.session
    src = session.source(need)
    greedy, rng = SamplingParams(), np.random.default_rng(0)
    config = GenerationConfig(proposer=registry.drafting_with(need), p_min=0.0)

    def make_proposer():
        return session.make_proposer(config)

    proposer = make_proposer()  # a source that reads the target's states has them from here on
    session.target.ctx.prefill(prompt[:-1], logits=False)
    src.reset()
    proposer.prepare(prompt, lambda source, m: 1)

    def draft(k: int) -> None:
        src.rewind(len(prompt), k)
        proposer.propose(prompt, lambda source, m: k, greedy, rng)

    draft(1)
    lo = COMPONENTS_SHARE - ACCEPTANCE_SHARE - DRAFT_SHARE
    for k in run.ks:
        run.step(f"measuring a draft of {k} tokens by the {need}", lo + DRAFT_SHARE * k / run.k_max)
        run.costs.set_draft(k, run.time(lambda k=k: draft(k), max(2, run.reps - 1)))
    return make_proposer


def _measure_acceptance(run: _Run, prompt: list[int], make_proposer, tokens: int) -> PositionAcceptance:
    """The draft's acceptance per position, from a short greedy run drafting k_max."""
    lo = COMPONENTS_SHARE - ACCEPTANCE_SHARE
    run.step("measuring the draft's acceptance", lo)
    run.session.reset()
    acceptance = PositionAcceptance(decay=1.0)  # a fixed measurement, not a moving one
    for s in speculate(run.session.target.ctx, make_proposer(), FixedK(run.k_max), prompt, params=SamplingParams(),
                       max_tokens=tokens, rng=np.random.default_rng(0), cancel=run.cancel, clock=run.clock):
        if s.drafted:
            acceptance.record(s.drafted, s.accepted)
        run.step("measuring the draft's acceptance", lo + ACCEPTANCE_SHARE * min(1.0, s.stats.generated / tokens))
    return acceptance


def calibrate(
    session,
    progress: Progress | None = None,
    cancel: Callable[[], bool] | None = None,
    k_max: int = 8,
    reps: int = 3,
    acceptance_tokens: int = 48,
    drift: bool = True,
    drift_cache_path: Path | None = None,
    loop: bool = True,
    loop_configs: Sequence[BenchConfig] = (),
    loop_options: LoopOptions | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Calibration:
    """Measure the pair's costs, the draft's acceptance and the target's kernel drift
    (see the module docstring), then, with ``loop``, run the candidate configurations
    end to end (:mod:`specdesk.bench.loop_calibration`): the costs choose which k to
    try, the runs predict. ``loop_configs`` are tried too (a comparison's own fixed-k
    configurations), up to :data:`MAX_LOOP_CONFIGS` in all; ``clock`` times it all."""
    t_start = clock()
    run = _Run(session, progress, cancel, k_max, reps, clock)
    session.warm_up()
    session.reset()
    prompt = session.chat_prompt([{"role": "user", "content": CALIBRATION_PROMPT}])
    _measure_verify(run, prompt)

    kernel_drift = None
    if drift:
        run.step("measuring the kernel drift of verify batches", 0.02 + VERIFY_SHARE)
        try:
            kernel_drift = pair_drift(
                session, run.costs, batch_sizes=tuple(range(2, k_max + 2)),
                progress=lambda f: run.step("measuring the kernel drift of verify batches",
                                            0.02 + VERIFY_SHARE + DRIFT_SHARE * f),
                cache_path=drift_cache_path,
            )
        except ValueError as e:  # a context too small for the probe: calibrate without it
            log.info("kernel drift not measured: %s", e)

    acceptance = None
    need = session.drafting_need()  # the draft file's source, else the target's own heads
    source = str(session.source(need).source) if need is not None else str(DRAFT)
    proposer = session.proposer_name(GenerationConfig(proposer=registry.drafting_with(need))) if need else registry.DEFAULT
    if need is not None:
        make_proposer = _measure_source(run, prompt, need)
        acceptance = _measure_acceptance(run, prompt, make_proposer, acceptance_tokens)
    session.reset()
    mem = session.memory()
    d = mem.model("draft")
    cal = Calibration(
        costs=run.costs,
        context_tokens=len(prompt),
        seconds=0.0,
        draft_acceptance=acceptance,
        draft_bytes=d.total_bytes if d else 0,
        kv_bytes_per_token=session.target.model.kv_bytes_per_token(),
        k_max=run.k_max,
        drift=kernel_drift,
        quant_upgrade=_quant_upgrade(session.target.spec.path, d.total_bytes if d else 0),
        draft_source=source,
        proposer=proposer,
        remote=tuple(getattr(session.target.spec, "rpc", ()) or ()),
    )
    if loop:
        candidates = loop_candidates(cal, loop_configs)
        cal.loop = run_loop(SessionTarget(session), candidates, loop_options or LoopOptions(),
                            progress=lambda m, f: run.step(m, COMPONENTS_SHARE + (1 - COMPONENTS_SHARE) * f),
                            cancel=cancel, clock=clock)
        history = getattr(session, "history", None)
        if history is not None:  # the calibration's answers are no earlier turns of anyone's chat
            history.index.clear()
    cal.seconds = clock() - t_start
    return cal


def loop_candidates(cal: Calibration, also: Sequence[BenchConfig] = ()) -> list[BenchConfig]:
    """Target alone and the configurations the loop calibration runs: k=1 and the
    :data:`BEST_KS` draft lengths the component costs rate best (they choose what to
    try, never the verdict), then ``also``'s fixed-k configurations, at most
    :data:`MAX_LOOP_CONFIGS` besides target alone."""
    out = [BenchConfig(BASELINE)]
    if cal.draft_acceptance is not None:
        alphas = cal.draft_acceptance.alphas(cal.k_max)
        rated = sorted(range(1, cal.k_max + 1), key=lambda k: -predict_fixed(cal, k, alphas))
        for k in sorted({1, *rated[:BEST_KS]}):
            out.append(BenchConfig(cal.proposer, k))
    for c in also:
        if len(out) > MAX_LOOP_CONFIGS:
            break
        if not c.baseline and c.k != "auto" and c.name not in {o.name for o in out}:
            out.append(c)
    return out


def _quant_upgrade(target: Path, budget_bytes: int) -> QuantUpgrade | None:
    try:
        return upgrade_for(target, budget_bytes)
    except (OSError, SpecDeskError) as e:  # the target's metadata cannot tell: no suggestion
        log.info("no quantization suggestion for %s: %s", target, e)
        return None


# -- predictions ------------------------------------------------------------------------

def predict_fixed(cal: Calibration, k: int, alphas: list[float], draft_cost: bool = True) -> float:
    """Predicted speedup over target alone of drafting exactly k tokens every step."""
    if k == 0:
        return 1.0
    e = expected_tokens(alphas[:k])[k]
    cost = cal.verify_ratio(k + 1) + (cal.draft_ratio(k) if draft_cost else 0.0)
    return e / cost


def draft_length_histogram(stats: dict) -> dict[int, int]:
    """Steps by how many tokens they drafted, from the per-position counters."""
    dpp = list(stats.get("drafted_per_position") or [])
    steps = int(stats["steps"])
    hist = {0: steps - (dpp[0] if dpp else 0)}
    for k in range(1, len(dpp) + 1):
        nxt = dpp[k] if k < len(dpp) else 0
        hist[k] = dpp[k - 1] - nxt
    return hist


def predict_run(cal: Calibration, stats: dict, proposer: str) -> float | None:
    """Predicted speedup of a finished run from its draft lengths and the measured
    costs: the tokens it emitted over the steps-worth of time its batches cost."""
    hist = draft_length_histogram(stats)
    kind = registry.REGISTRY.get(proposer)
    # a draft model's (or the MTP heads') every draft costs draft time; a kind that also looks up pays only
    # for the model's
    every_draft_pays = kind is not None and kind.needs is not None and not kind.looks_up
    total = 0.0
    for k, n in hist.items():
        if n <= 0:
            continue
        d = cal.draft_ratio(k) if every_draft_pays and k > 0 else 0.0
        total += n * (cal.verify_ratio(k + 1) + d)
    if kind is not None and kind.needs is not None and kind.looks_up:
        # only the steps the draft model drafted cost draft time; lookups are free
        model = stats.get("model_draft_lengths")
        if model is None:  # a report from before the counter: charge every draft
            model = [hist.get(k, 0) for k in range(1, max(hist) + 1)]
        total += sum(n * cal.draft_ratio(k) for k, n in enumerate(model, start=1) if n > 0)
    if total <= 0:
        return None
    return stats["generated"] / total


def _component_prediction(cal: Calibration, result: dict, row: ConfigRow, turn: int | None) -> float | None:
    """What the isolated component costs predict for a (suite, config) row of a
    benchmark: the median over prompts of :func:`predict_run` on its runs."""
    c = row.config
    proposer = proposer_of(c)
    per_prompt: dict[str, list[float]] = {}
    for r in result["runs"]:
        if r["suite"] == row.suite and r["config"] == c and (turn is None or r.get("turn", 1) == turn):
            p = predict_run(cal, r["stats"], proposer)
            if p is not None:
                per_prompt.setdefault(r["prompt_id"], []).append(p)
    if not per_prompt:
        return None
    return statistics.median(statistics.median(v) for v in per_prompt.values())


def validate(cal: Calibration, result: dict) -> list[dict]:
    """Predicted vs measured speedup for every (suite, config) of a benchmark result,
    and for every (suite, turn, config) of its multi-turn suites, with the measured
    speedup's 95% interval and verdict. The prediction is the loop calibration's
    (with ``predicted_ci`` and ``predicted_verdict``; a configuration the loop did not
    try has none), or, from a calibration without the loop, the components' (no
    interval, no verdict); ``component_predicted_speedup`` is the components' either way."""
    out = []
    rows = [(row, None) for row in rows_of(result["summary"]["per_suite"])]
    rows += [(row, row.turn) for row in rows_of(result["summary"].get("per_turn"))]
    for row, turn in rows:
        c = row.config
        if row.baseline or row.speedup is None:
            continue
        component = _component_prediction(cal, result, row, turn)
        loop = cal.loop.predict(c) if cal.loop is not None else None
        if loop is not None:
            pred, pred_ci, pred_verdict, basis = loop.speedup, list(loop.ci) if loop.ci else None, loop.verdict, loop.basis
        elif cal.loop is None and component is not None:
            pred, pred_ci, pred_verdict, basis = component, None, None, "components"
        else:
            continue
        meas, ci = row.speedup, (list(row.ci) if row.ci else None)
        rec = {
            "suite": row.suite,
            "config": c,
            "predicted_speedup": pred,
            "predicted_ci": pred_ci,
            "predicted_verdict": pred_verdict,
            "pays": bool(pred_ci and pred_ci[0] > 1.0),
            "basis": basis,
            "component_predicted_speedup": component,
            "measured_speedup": meas,
            # how sure the measurement is: a prediction inside the interval is as good as the run can tell
            "measured_ci": ci,
            "measured_verdict": row.verdict,
            "measured_pairs": row.pairs,
            "within_interval": (ci[0] <= pred <= ci[1]) if ci else None,
            "error": (pred - meas) / meas if meas else None,
        }
        if turn is not None:
            rec["turn"] = turn
        out.append(rec)
    return out


@dataclass
class Advice:
    best: str  # a config name, the baseline's when nothing is sure to pay
    best_speedup: float
    text: str
    # config, predicted_speedup, predicted_ci, verdict, pays, basis: the loop's predictions
    # (from a calibration without the loop, the components', with no interval)
    table: list[dict] = field(default_factory=list)
    memory_alternative: str | None = None
    exactness: str = ""  # what "the same output" means here, with the measured drift
    components: list[dict] = field(default_factory=list)  # config, predicted_speedup: the isolated costs' figure

    def to_dict(self) -> dict:
        return {
            "best": self.best,
            "best_speedup": self.best_speedup,
            "recommendation": self.text,
            "predictions": self.table,
            "component_predictions": self.components,
            "memory_alternative": self.memory_alternative,
            "exactness": self.exactness,
        }


def component_table(cal: Calibration) -> list[dict]:
    """What the isolated costs predict for every draft length (the old advisor's figure)."""
    if cal.draft_acceptance is None:
        return []
    alphas = cal.draft_acceptance.alphas(cal.k_max)
    return [{"config": f"{cal.proposer}:k={k}", "predicted_speedup": predict_fixed(cal, k, alphas)}
            for k in range(1, cal.k_max + 1)]


def predictions(cal: Calibration) -> list[dict]:
    """The predictions the advice rests on: every configuration the loop ran and each
    proposer's auto; without the loop, the components' figures, with no interval."""
    if cal.loop is None:
        return [dict(row, predicted_ci=None, verdict=None, pays=False, basis="components")
                for row in component_table(cal)]
    names = list(cal.loop.configs)
    for c in cal.loop.configs:
        auto = BenchConfig(proposer_of(c)).name  # the proposer's auto
        if c != BASELINE and auto not in names:
            names.append(auto)
    return [p.to_dict() for c in names if (p := cal.loop.predict(c)) is not None]


def advise(cal: Calibration, measured: dict | None = None) -> Advice:
    """Recommend a configuration from the calibration (and a benchmark summary, when
    there is one: n-gram acceptance depends on the text, so only runs can tell it).
    A configuration is recommended only when all of its predicted interval is above 1."""
    table = predictions(cal)
    paying = [p for p in table if p["pays"]]
    top = max(paying, key=lambda p: p["predicted_speedup"], default=None)
    best, best_x = (top["config"], top["predicted_speedup"]) if top else (BASELINE, 1.0)
    ceiling_ngram = max(predict_fixed(cal, k, [1.0] * k, draft_cost=False) for k in range(1, cal.k_max + 1))
    ceiling = None
    if cal.draft_acceptance is not None:  # even a perfect draft: the most this machine's costs allow
        ceiling = max(predict_fixed(cal, k, [1.0] * k) for k in range(1, cal.k_max + 1))
    measured_best = None
    if measured:
        for row in rows_of(measured["summary"]["overall"]):
            if not row.baseline and row.speedup and (measured_best is None or row.speedup > measured_best.speedup):
                measured_best = row
    why = components_why_text(cal.verify_ratio(4), cal.draft_ratio(1) if cal.draft_acceptance is not None else None)
    parts = []
    if cal.remote:
        per = min(range(2, cal.k_max + 2), key=cal.verify_per_token)
        parts.append(
            f"The target runs on {', '.join(cal.remote)} over RPC: a single step pays the network's round trip for one "
            f"token, a verify batch pays it once for all of them, so per token a batch of {per} costs "
            f"{cal.verify_per_token(per):.2f} of a step ({cal.verify_ratio(per):.2f} steps for {per} tokens)."
        )
    parts.append(advice_verdict_text(top, table, cal.loop.runs if cal.loop is not None else None, why))
    if best == BASELINE:
        if ceiling is not None and ceiling < 1.0:
            parts.append(f"Even a draft that is always right would reach only {ceiling:.2f}×.")
        parts.append(
            f"N-gram lookups draft for free: where the answer repeats the prompt (code edits) they can reach up to "
            f"{ceiling_ngram:.2f}× here."
        )
    if measured_best is not None:
        parts.append(measured_best_text(measured_best))
    memory_alternative = None
    if best == BASELINE and cal.draft_bytes and cal.kv_bytes_per_token:
        n = int(cal.draft_bytes / cal.kv_bytes_per_token)
        memory_alternative = (
            f"The draft's {format_bytes(cal.draft_bytes)} would instead hold about {n:,} more tokens of context for the "
            f"target ({cal.kv_bytes_per_token / 1024:.0f} KiB per token)."
            + (" " + memory_buys_text(cal.quant_upgrade.to_dict()) if cal.quant_upgrade else "")
        )
        parts.append(memory_alternative)
    exactness = claim_text(cal.drift.to_dict() if cal.drift is not None else None)
    return Advice(best=best, best_speedup=best_x, text=" ".join(parts), table=table,
                  memory_alternative=memory_alternative, exactness=exactness, components=component_table(cal))


def advisor_section(cal: Calibration, result: dict) -> dict:
    """The ``advisor`` part of a benchmark result: costs, predictions next to what was
    measured, and the recommendation."""
    adv = advise(cal, result)
    return {
        "costs": cal.costs.to_dict(),
        "calibration": cal.to_dict(),
        "predictions": validate(cal, result),
        "recommendation": adv.text,
        "best": adv.best,
        "memory_alternative": adv.memory_alternative,
        "what_if": adv.table,
        "component_predictions": adv.components,
        "drift": cal.drift.to_dict() if cal.drift is not None else None,
        "exactness": claim_text(
            cal.drift.to_dict() if cal.drift is not None else None,
            (result.get("meta") or {}).get("settings", {}).get("temperature"),
        ),
    }
