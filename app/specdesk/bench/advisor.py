"""Does speculation pay on this machine, and with which settings?

Speculation pays when the tokens a step emits outweigh what drafting and verifying
cost. Leviathan et al. give the expected tokens per step; the costs are measured
here, on the loaded pair, because they decide everything: on a 2-core CPU verifying
b tokens costs about b single steps, on a GPU about one.

``calibrate`` measures, in well under 30 s on a 2-core CPU:
- one target step (a verify batch of 1) at a realistic context length;
- a verify batch of b tokens, b = 2..9;
- a draft-model call that drafts k tokens, k = 1..8 (the draft's own steps plus
  the Python around them);
- the draft's acceptance per position, from a short greedy calibration run;
- the target's kernel drift: how far a verify batch of b tokens moves its
  distribution from a single-token step (:mod:`specdesk.speculative.drift`), sized
  to a few seconds from the costs just measured and cached per target setup,
  machine and llama.cpp build (:mod:`specdesk.session.drift`).

From these it predicts the speedup of every draft length and proposer, recommends
one or says plainly that speculation slows this machine down, and then what the
draft's memory would buy instead. The core's ``auto`` uses the same cost model
(:mod:`specdesk.speculative.costmodel`), seeded with this calibration.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import Cancelled, SpecDeskError
from ..fmt import format_bytes
from ..library.quants import QuantUpgrade, upgrade_for
from ..session import GenerationConfig
from ..speculative.controller import FixedK
from ..speculative.costmodel import CostModel, PositionAcceptance, expected_tokens
from ..speculative.decoder import speculate
from ..speculative.drift import Drift
from ..speculative.proposers import DraftModelProposer
from ..speculative.sampling import SamplingParams
from ..session.drift import PROBE_PROMPT, pair_drift
from ..session.text import claim_text, measured_best_text

CALIBRATION_PROMPT = PROBE_PROMPT  # the drift probe reads the same text

log = logging.getLogger(__name__)

Progress = Callable[[str, float], None]

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
    # vocabulary, its text re-tokenized): its costs and acceptance are that proposer's
    draft_source: str = "draft"
    # the RPC servers the target's layers are on: every target step pays their round trip
    remote: tuple[str, ...] = ()

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
            "remote": list(self.remote),
            "verify_per_token": {str(b): self.verify_per_token(b) for b in range(1, self.k_max + 2)},
        }

    def verify_per_token(self, b: int) -> float:
        """What each token of a verify batch of ``b`` costs, in target steps: below 1
        when the batch shares a fixed cost (a network round trip, a GPU launch)."""
        return self.verify_ratio(b) / b


def _median_time(fn: Callable[[], None], reps: int) -> float:
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def calibrate(
    session,
    progress: Progress | None = None,
    cancel: Callable[[], bool] | None = None,
    k_max: int = 8,
    reps: int = 3,
    acceptance_tokens: int = 48,
    drift: bool = True,
    drift_cache_path: Path | None = None,
) -> Calibration:
    """Measure the pair's costs, the draft's acceptance and the target's kernel drift
    (see the module docstring)."""
    t_start = time.perf_counter()

    def step(msg: str, frac: float) -> None:
        if cancel is not None and cancel():
            raise Cancelled("calibration was cancelled")
        if progress:
            progress(msg, frac)

    session.warm_up()
    session.reset()
    prompt = session.chat_prompt([{"role": "user", "content": CALIBRATION_PROMPT}])
    tctx = session.target.ctx
    base = len(prompt) - 1
    tctx.prefill(prompt[:-1], logits=False)
    # a plausible continuation to verify: the prompt's own tail
    batch_src = prompt[-(k_max + 2):]
    costs = CostModel()

    def verify(b: int) -> None:
        tctx.eval(batch_src[:b], all_rows=True)
        tctx.rollback(base)

    step("measuring a target step", 0.05)
    verify(1)  # discard the first (graph build)
    costs.set_verify(1, _median_time(lambda: verify(1), reps + 3))
    for b in range(2, k_max + 2):
        step(f"measuring a verify batch of {b} tokens", 0.05 + 0.35 * b / (k_max + 1))
        verify(b)
        costs.set_verify(b, _median_time(lambda b=b: verify(b), reps))

    kernel_drift = None
    if drift:
        step("measuring the kernel drift of verify batches", 0.4)
        try:
            kernel_drift = pair_drift(
                session, costs, batch_sizes=tuple(range(2, k_max + 2)),
                progress=lambda f: step("measuring the kernel drift of verify batches", 0.4 + 0.1 * f),
                cache_path=drift_cache_path,
            )
        except ValueError as e:  # a context too small for the probe: calibrate without it
            log.info("kernel drift not measured: %s", e)

    acceptance = None
    translated = bool(getattr(session, "translated", False))
    if session.draft is not None:
        dctx = session.draft.ctx
        greedy = SamplingParams()
        rng = np.random.default_rng(0)
        if translated:
            # The draft speaks another vocabulary: time (and below, score) the proposer
            # that runs it, translation included. Proposing again from the same
            # sequence rolls the draft back to the prompt's text by itself.
            def make_proposer():
                return session.make_proposer(GenerationConfig(proposer="draft", p_min=0.0))

            proposer = make_proposer()
            dctx.rollback(0)
            proposer.prepare(prompt, lambda source, m: 1)

            def draft(k: int) -> None:
                proposer.propose(prompt, lambda source, m: k, greedy, rng)
        else:
            def make_proposer():
                return DraftModelProposer(dctx, session.target.model.n_vocab, p_min=0.0)

            dctx.prefill(prompt[:-1], logits=False)
            proposer = make_proposer()

            def draft(k: int) -> None:
                dctx.rollback(base)
                proposer.propose(prompt, lambda source, m: k, greedy, rng)

        draft(1)
        for k in range(1, k_max + 1):
            step(f"measuring a draft of {k} tokens", 0.5 + 0.25 * k / k_max)
            costs.set_draft(k, _median_time(lambda k=k: draft(k), max(2, reps - 1)))

        step("measuring the draft's acceptance", 0.75)
        session.reset()
        acceptance = PositionAcceptance(decay=1.0)  # a fixed measurement, not a moving one
        steps = speculate(
            tctx,
            make_proposer(),
            FixedK(k_max),
            prompt,
            params=greedy,
            max_tokens=acceptance_tokens,
            rng=rng,
            cancel=cancel,
        )
        for s in steps:
            if s.drafted:
                acceptance.record(s.drafted, s.accepted)
            step("measuring the draft's acceptance", 0.75 + 0.25 * min(1.0, s.stats.generated / acceptance_tokens))
    session.reset()
    mem = session.memory()
    d = mem.model("draft")
    return Calibration(
        costs=costs,
        context_tokens=len(prompt),
        seconds=time.perf_counter() - t_start,
        draft_acceptance=acceptance,
        draft_bytes=d.total_bytes if d else 0,
        kv_bytes_per_token=session.target.model.kv_bytes_per_token(),
        k_max=k_max,
        drift=kernel_drift,
        quant_upgrade=_quant_upgrade(session.target.spec.path, d.total_bytes if d else 0),
        draft_source="translated" if translated else "draft",
        remote=tuple(getattr(session.target.spec, "rpc", ()) or ()),
    )


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
    total = 0.0
    for k, n in hist.items():
        if n <= 0:
            continue
        d = cal.draft_ratio(k) if proposer in ("draft", "translated") and k > 0 else 0.0
        total += n * (cal.verify_ratio(k + 1) + d)
    if proposer == "hybrid":
        # only the steps the draft model drafted cost draft time; lookups are free
        model = stats.get("model_draft_lengths")
        if model is None:  # a report from before the counter: charge every draft
            model = [hist.get(k, 0) for k in range(1, max(hist) + 1)]
        total += sum(n * cal.draft_ratio(k) for k, n in enumerate(model, start=1) if n > 0)
    if total <= 0:
        return None
    return stats["generated"] / total


def validate(cal: Calibration, result: dict) -> list[dict]:
    """Predicted vs measured speedup for every (suite, config) of a benchmark result,
    and for every (suite, turn, config) of its multi-turn suites, with the measured
    speedup's 95% interval and verdict."""
    out = []
    rows = [(row, None) for row in result["summary"]["per_suite"]]
    rows += [(row, row.get("turn")) for row in result["summary"].get("per_turn") or []]
    for row, turn in rows:
        c = row["config"]
        if c == "none" or row["speedup"] is None:
            continue
        proposer = c.split(":")[0]
        per_prompt: dict[str, list[float]] = {}
        for r in result["runs"]:
            if r["suite"] == row["suite"] and r["config"] == c and (turn is None or r.get("turn", 1) == turn):
                p = predict_run(cal, r["stats"], proposer)
                if p is not None:
                    per_prompt.setdefault(r["prompt_id"], []).append(p)
        if not per_prompt:
            continue
        pred = statistics.median(statistics.median(v) for v in per_prompt.values())
        meas, ci = row["speedup"], row.get("speedup_ci")
        rec = {
            "suite": row["suite"],
            "config": c,
            "predicted_speedup": pred,
            "measured_speedup": meas,
            # how sure the measurement is: a prediction inside the interval is as good as the run can tell
            "measured_ci": ci,
            "measured_verdict": row.get("verdict"),
            "measured_pairs": row.get("pairs"),
            "within_interval": (ci[0] <= pred <= ci[1]) if ci else None,
            "error": (pred - meas) / meas if meas else None,
        }
        if turn is not None:
            rec["turn"] = turn
        out.append(rec)
    return out


@dataclass
class Advice:
    best: str  # a config name, "none" when nothing pays
    best_speedup: float
    text: str
    table: list[dict] = field(default_factory=list)  # config, predicted_speedup
    memory_alternative: str | None = None
    exactness: str = ""  # what "the same output" means here, with the measured drift

    def to_dict(self) -> dict:
        return {
            "best": self.best,
            "best_speedup": self.best_speedup,
            "recommendation": self.text,
            "predictions": self.table,
            "memory_alternative": self.memory_alternative,
            "exactness": self.exactness,
        }


def advise(cal: Calibration, measured: dict | None = None) -> Advice:
    """Recommend a configuration from the calibration (and a benchmark summary, when
    there is one: n-gram acceptance depends on the text, so only runs can tell it)."""
    table: list[dict] = []
    best, best_x = "none", 1.0
    if cal.draft_acceptance is not None:
        alphas = cal.draft_acceptance.alphas(cal.k_max)
        for k in range(1, cal.k_max + 1):
            x = predict_fixed(cal, k, alphas)
            table.append({"config": f"{cal.draft_source}:k={k}", "predicted_speedup": x})
            if x > best_x:
                best, best_x = f"{cal.draft_source}:k={k}", x
        # even a perfect draft: the most this machine's costs allow
        ceiling = max(predict_fixed(cal, k, [1.0] * k) for k in range(1, cal.k_max + 1))
        ceiling_ngram = max(predict_fixed(cal, k, [1.0] * k, draft_cost=False) for k in range(1, cal.k_max + 1))
    else:
        ceiling = None
        ceiling_ngram = max(predict_fixed(cal, k, [1.0] * k, draft_cost=False) for k in range(1, cal.k_max + 1))
    measured_best = None
    if measured:
        for row in measured["summary"]["overall"]:
            if row["config"] != "none" and row["speedup"] and (measured_best is None or row["speedup"] > measured_best["speedup"]):
                measured_best = row
    v4 = cal.verify_ratio(4)
    d1 = cal.draft_ratio(1)
    why = f"here a verify batch of 4 tokens costs {v4:.1f} target steps"
    if cal.draft_acceptance is not None:
        why += f" and one draft step {d1:.2f} of a step"
    parts = []
    if cal.remote:
        per = min(range(2, cal.k_max + 2), key=cal.verify_per_token)
        parts.append(
            f"The target runs on {', '.join(cal.remote)} over RPC: a single step pays the network's round trip for one "
            f"token, a verify batch pays it once for all of them, so per token a batch of {per} costs "
            f"{cal.verify_per_token(per):.2f} of a step ({cal.verify_ratio(per):.2f} steps for {per} tokens)."
        )
    if best != "none":
        parts.append(f"Speculation pays on this machine: {best} is predicted at {best_x:.2f}× target alone ({why}).")
    else:
        worst = min((r["predicted_speedup"] for r in table), default=None)
        best_k = max(table, key=lambda r: r["predicted_speedup"]) if table else None
        if best_k is not None:
            parts.append(
                f"The draft model slows this machine down: its best draft length ({best_k['config']}) is predicted at "
                f"{best_k['predicted_speedup']:.2f}× target alone, {worst:.2f}× at worst ({why})."
            )
            if ceiling is not None and ceiling < 1.0:
                parts.append(f"Even a draft that is always right would reach only {ceiling:.2f}×.")
        parts.append(
            f"N-gram lookups draft for free: where the answer repeats the prompt (code edits) they can reach up to "
            f"{ceiling_ngram:.2f}× here."
        )
    if measured_best is not None:
        parts.append(measured_best_text(measured_best))
    memory_alternative = None
    if best == "none" and cal.draft_bytes and cal.kv_bytes_per_token:
        n = int(cal.draft_bytes / cal.kv_bytes_per_token)
        memory_alternative = (
            f"The draft's {format_bytes(cal.draft_bytes)} would instead hold about {n:,} more tokens of context for the "
            f"target ({cal.kv_bytes_per_token / 1024:.0f} KiB per token)"
            + (f", or a better quantization of the target: {cal.quant_upgrade.describe()}." if cal.quant_upgrade else ".")
        )
        parts.append(memory_alternative)
    exactness = claim_text(cal.drift.to_dict() if cal.drift is not None else None)
    return Advice(best=best, best_speedup=best_x, text=" ".join(parts), table=table,
                  memory_alternative=memory_alternative, exactness=exactness)


def advisor_section(cal: Calibration, result: dict) -> dict:
    """The ``advisor`` part of a benchmark result: costs, predictions next to what was
    measured, and the recommendation."""
    adv = advise(cal, result)
    return {
        "costs": cal.costs.to_dict(),
        "calibration": cal.to_dict(),
        "predictions": validate(cal, result),
        "recommendation": adv.text,
        "memory_alternative": adv.memory_alternative,
        "what_if": adv.table,
        "drift": cal.drift.to_dict() if cal.drift is not None else None,
        "exactness": claim_text(
            cal.drift.to_dict() if cal.drift is not None else None,
            (result.get("meta") or {}).get("settings", {}).get("temperature"),
        ),
    }
