"""SpecDesk's results in words: one module for the sentences the CLI, the app and the
reports show, over the typed results of the algorithm (which holds none).

- kernel drift (:class:`~specdesk.speculative.drift.Drift`): its summary and what
  "the same output" means on this machine (:func:`claim_text`);
- divergences at T=0 (``Divergence.to_dict()``): near-tie or mismatch, in a sentence;
- an answer slower than target alone: why, from its own statistics;
- auto's current estimate (:class:`~specdesk.speculative.controller.Estimate`): drafting
  against target alone, per token, and why it drafts or not.

A proposer's label is a name, not a sentence: it lives on its row of the registry
(:mod:`specdesk.speculative.proposers.registry`), with the rest of what makes the kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..chat.sandbox import HINT as TEMPLATE_HINT
from ..fmt import format_bytes
from ..speculative import controller as ctl
from ..speculative.drift import NEAR_TIE_LOGITS, Drift
from ..speculative.stats import Stats


def for_the_app(message: str) -> str:
    """An error line as the app shows it: the chat template's advice names what a
    window user can do (the CLI's --raw is not in the window)."""
    return message.replace(TEMPLATE_HINT, "load another model, or run it from the command line with --raw")


def instead_text(asked: str, runs: str, need: str) -> str:
    """Why an answer runs ``runs`` when its chat asks for ``asked``, which drafts with a
    ``need`` (a draft model, MTP heads) this session has not got, or cannot draft with."""
    return f"no {need} that can draft here: {runs} instead of {asked}"


def missing_source_text(need: str) -> str:
    """Why a session cannot draft with a ``need`` it has not loaded."""
    return f"no {need} is loaded"


def head_as_target_text(name: str, what: str) -> str:
    """Why a head of another model (``what``: "an EAGLE-3 head") cannot be loaded as a target."""
    return f"{name} is {what}, a head of another model: load it as the draft (--draft) of the target it belongs to"


def source_missing_text(proposer: str, need: str, in_draft_file: bool, without: Sequence[str]) -> str:
    """Why ``proposer`` cannot run: it drafts with a ``need`` that is not loaded (from a
    draft file, or from the target's own file)."""
    if in_draft_file:
        article = "an" if need[:1].lower() in "aeiou" else "a"  # an EAGLE-3 head, a draft model
        return f"the {proposer} proposer needs {article} {need}; load one or use {' or '.join(without)}"
    return f"the {proposer} proposer drafts with the target's own {need}, and this target has none; use {' or '.join(without)}"


def share_text(x: float) -> str:
    """A share as a percentage with the digits a small share needs: 0.40%, 5.3%, 0%."""
    if x == 0:
        return "0%"
    if x < 0.001:
        return f"{100 * x:.3f}%"
    return f"{100 * x:.2f}%" if x < 0.1 else f"{100 * x:.1f}%"


def claim_text(drift: dict | None, temperature: float | None = None) -> str:
    """What "the same output" means, stated exactly, with the measured drift
    (``Drift.to_dict()``) when there is one; at ``temperature`` > 0 also what exactness
    means for a sampled run."""
    text = (
        "The output follows the target's distribution as llama.cpp computes it in a verify batch: "
        "at T=0 each token is the argmax of the target's batched logits, at T>0 rejection sampling "
        "draws each token from the target's batched distribution."
    )
    if drift and drift.get("positions"):
        worst = drift.get("worst_batch")
        s = drift.get("sampling") or {}
        at = f"T={s.get('temperature', 1.0):g}"
        text += (
            f" On this machine that is {share_text(drift['tv_mean'])} in total variation from target alone's "
            f"single-token steps on average at {at}, {share_text(drift['tv_max'])} at worst"
            + (f" (a batch of {worst})" if worst else "")
            + "."
        )
        if drift.get("flips"):
            text += (
                f" At T=0 the difference shows only at near-ties: the argmax flipped at "
                f"{share_text(drift['flip_share'])} of positions, each within {drift['flip_margin_max']:.3f} logits."
            )
        else:
            text += (
                f" At T=0 the difference shows only at near-ties (top two logits within "
                f"{drift.get('near_tie_logits', NEAR_TIE_LOGITS):g}, {share_text(drift.get('near_tie_share', 0.0))} "
                f"of positions here); no argmax flipped in {drift['positions']} positions measured."
            )
    else:
        text += (
            " Single-token steps run other kernels, so at T=0 the output can differ from target alone's "
            "where the two best tokens nearly tie; the drift was not measured here."
        )
    if temperature is not None and temperature > 0:
        text += (
            f" At T={temperature:g} runs are not compared token for token (target alone with another seed "
            "differs too): exact means each token is drawn from the target's batched distribution, which "
            "a chi-square test on real models checks."
        )
    return text


def drift_settings_text(drift: Drift) -> str:
    """The sampling settings the drift was measured at: "T=1, top-k 5"."""
    s = f"T={drift.temperature:g}"
    if drift.top_k:
        s += f", top-k {drift.top_k}"
    if drift.top_p < 1.0:
        s += f", top-p {drift.top_p:g}"
    if drift.min_p > 0.0:
        s += f", min-p {drift.min_p:g}"
    return s


def drift_summary(drift: Drift) -> str:
    """One or two plain sentences, for the advisor, reports and the Compare tab."""
    if not drift.batches:
        return "Kernel drift was not measured."
    lo, hi = min(b.batch for b in drift.batches), max(b.batch for b in drift.batches)
    sizes = f"{lo}" if lo == hi else f"{lo}–{hi}"
    text = (
        f"On this machine a verify batch ({sizes} tokens) moves the target's {drift_settings_text(drift)} "
        f"distribution by {share_text(drift.tv_mean)} in total variation on average, {share_text(drift.tv_max)} at worst "
        f"(the logits by up to {drift.logit_diff_max:.3f}), measured at {drift.positions} positions."
    )
    if drift.flips:
        text += (
            f" At T=0 it flipped the argmax at {share_text(drift.flip_share)} of positions, all within a margin of "
            f"{drift.flip_margin_max:.3f} logits; {share_text(drift.near_tie_share)} of positions are near-ties "
            f"(top two within {drift.near_tie_logits:g})."
        )
    else:
        text += (
            f" At T=0 no argmax flipped; {share_text(drift.near_tie_share)} of positions are near-ties "
            f"(top two within {drift.near_tie_logits:g}), where a flip can happen."
        )
    return text


def verdict_text(divergence: dict, drift: dict | None = None) -> str:
    """A divergence (``Divergence.to_dict()``) in one sentence, pointing to the measured
    drift (``Drift.to_dict()``) for a near-tie, e.g. "near-tie at token 9: ' the' led
    ' a' by 0.050 logits in target alone; the batched verify moved the margin by 0.110
    and ' a' won by 0.060. This machine's drift flips 0.40% of positions (...)"."""
    d = divergence
    i = d.get("index")
    a, b = d.get("baseline_text", ""), d.get("speculative_text", "")
    m, mb = d.get("margin"), d.get("margin_batched")
    if d.get("verdict") != "near-tie":
        if not isinstance(m, (int, float)) or not isinstance(mb, (int, float)) or m != m or mb != mb:
            return f"mismatch at token {i}: {a!r} vs {b!r}, not explained by a replay; worth reporting"
        return (
            f"mismatch at token {i}: {a!r} vs {b!r} (margins {m:.3f} and {mb:.3f} logits), "
            f"more than kernel drift explains; worth reporting"
        )
    if isinstance(m, (int, float)) and isinstance(mb, (int, float)) and m == m and mb == mb:
        text = (
            f"near-tie at token {i}: {a!r} led {b!r} by {m:.3f} logits in target alone; the batched verify "
            f"moved the margin by {m + mb:.3f} and {b!r} won by {mb:.3f}"
        )
    else:
        text = f"near-tie at token {i}: {a!r} and {b!r} within {NEAR_TIE_LOGITS:g} logits; the batched verify flipped them"
    if drift:
        share = drift.get("flip_share")
        pos = drift.get("positions")
        limit = drift.get("logit_diff_max")
        if share is not None and pos:
            text += (
                f". This machine's kernel drift flips the argmax at {share_text(share)} of positions "
                f"(measured at {pos}; logits move by up to {limit:.3f})"
            )
    return text + "."


def slower_reason(st: Stats) -> str:
    """Why an answer ran slower than target alone, from its own statistics."""
    if not st.drafted or st.drafted < 0.1 * max(1, st.steps):
        return (f"though little was drafted ({st.drafted} tokens in {st.steps} steps): "
                "the machine was busier than when the reference was taken")
    if st.decode_seconds and st.draft_seconds / st.decode_seconds > 0.25:
        return f"draft cost: the draft model took {100 * st.draft_seconds / st.decode_seconds:.0f}% of the time"
    if st.acceptance_rate is not None and st.acceptance_rate < 0.5:
        return f"acceptance: only {100 * st.acceptance_rate:.0f}% of drafted tokens were kept"
    return "verify cost: checking a batch of drafted tokens costs nearly as much as generating them one by one here"


#: Why auto drafts or not, by the reason of its last decision (a Decision.reason).
_AUTO_WHY = {
    ctl.CHEAPER: "drafting was measured cheaper per token, so it drafts",
    ctl.LONGER: "its last draft was all kept, so it tries a longer one, within its exploring budget",
    ctl.DEARER: "drafting was measured dearer per token, so it does not draft",
    ctl.PROBE: "not decided yet: it tries drafting, within its exploring budget",
    ctl.EXPLORE: "no draft length is estimated to pay; it tries one the estimate is unsure of, within its budget",
    ctl.ESTIMATED: "no draft length is estimated to pay here now",
    ctl.BUDGET_SPENT: "not decided, and trying has used its budget",
    ctl.BOUND: "even a draft that is always right cannot pay at the costs measured here",
    ctl.CATCH_UP: "the draft would first have to catch up on more than drafting would win",
    ctl.FIRST_STEP: "measuring target alone first",
    ctl.REFERENCE: "measuring target alone again, to decide",
    ctl.LAST_TOKEN: "no room left to draft",
}


def _ms(x: float) -> str:
    ms = 1000 * x
    return f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


def auto_estimate_text(e: ctl.Estimate) -> str:
    """auto's current estimate (a ``speculative.controller.Estimate``) in a sentence:
    drafting against target alone, per emitted token, with their intervals, and why it
    drafts or not, e.g. "auto: drafting (k=2) 46.1 ms/token (39.0–53.2) vs target alone
    37.0 (36.1–37.9), over 3 recent steps: drafting was measured dearer per token, so it
    does not draft · trying drafting cost 0.21 s of the 0.47 s allowed"."""
    d = e.decision
    why = _AUTO_WHY.get(d.reason, d.reason)
    if e.target_alone is None:
        return f"auto: {why}."
    lo0, hi0 = e.target_alone_interval
    alone = f"target alone {_ms(e.target_alone)} ms/token ({_ms(max(0.0, lo0))}–{_ms(hi0)})"
    if e.drafting is None:
        text = f"auto: {alone}; drafting not measured yet: {why}"
    else:
        lo, hi = e.drafting_interval
        what = f"drafting (k={e.k})" if e.k else "drafting"
        n = max(1, round(e.steps))
        text = (f"auto: {what} {_ms(e.drafting)} ms/token ({_ms(max(0.0, lo))}–{_ms(hi)}) vs {alone}, "
                f"over {n} recent step{'s' if n > 1 else ''}: {why}")
    if e.spent > 0:
        text += f" · trying drafting cost {e.spent:.2f} s of the {e.allowance:.2f} s allowed"
    elif e.spent < 0:
        text += f" · drafting saved {-e.spent:.2f} s so far"
    return text + "."


# -- speedups and how sure they are (a paired speedup: specdesk.bench.stats.PairedSpeedup,
# or a row of the benchmark summary: specdesk.bench.rows.ConfigRow) -----------------------


class Speedup(Protocol):
    """A paired speedup against target alone, as the sentences below read it."""

    @property
    def speedup(self) -> float | None: ...

    @property
    def ci(self) -> tuple[float, float] | None: ...  # the 95% interval

    @property
    def pairs(self) -> int: ...

    @property
    def verdict(self) -> str | None: ...

    @property
    def detectable(self) -> float | None: ...  # the interval's half-width, a fraction


class SpeedRow(Speedup, Protocol):
    """A configuration's paired speedup (a summary row)."""

    @property
    def config(self) -> str: ...


#: How each verdict reads in a table.
VERDICT_LABELS = {"faster": "faster", "slower": "slower", "within-noise": "within noise", "baseline": "baseline"}


def _pm(fraction: float) -> str:
    return f"±{100 * fraction:.1f}%" if fraction < 0.1 else f"±{100 * fraction:.0f}%"


def verdict_label(row: Speedup) -> str:
    """A verdict for a table cell: "faster", "slower", "within noise ±4.0%"."""
    v = row.verdict
    label = VERDICT_LABELS.get(v or "", "–")
    if v == "within-noise" and row.detectable is not None:
        label += f" {_pm(row.detectable)}"
    return label


def interval_text(ci) -> str:
    """A 95% interval of a speedup: "0.97–1.20"."""
    if not ci:
        return "–"
    return f"{ci[0]:.2f}–{ci[1]:.2f}"


def speedup_text(row: Speedup) -> str:
    """A speedup with its interval: "1.08× (0.97–1.20)", or "1.08×" with one pair."""
    s = row.speedup
    if s is None:
        return "–"
    if row.verdict == "baseline":
        return f"{s:.2f}×"
    ci = row.ci
    return f"{s:.2f}× ({interval_text(ci)})" if ci else f"{s:.2f}×"


def detectable_text(row: Speedup) -> str:
    """The smallest difference the run could see: "differences under ±4.0% cannot be
    seen with 6 pairs here"."""
    pairs, d = row.pairs or 0, row.detectable
    if d is None:
        if pairs == 1:
            return "one pair cannot tell a difference from noise: run 2 repeats or more"
        return "nothing was measured"
    return f"differences under {_pm(d)} cannot be seen with {pairs} pair{'s' if pairs != 1 else ''} here"


def speed_verdict_text(row: Speedup) -> str:
    """The verdict on one configuration in a sentence, with its interval."""
    v, s = row.verdict, row.speedup
    if v == "baseline":
        return "target alone: the baseline every speedup is measured against"
    if s is None or v is None:
        return "not measured"
    ci, pairs = row.ci, row.pairs or 0
    where = f"{s:.2f}× target alone" + (f", 95% interval {interval_text(ci)}" if ci else "") + f" over {pairs} pairs"
    if v == "faster":
        return f"faster: {where}; all of the interval is above 1×"
    if v == "slower":
        return f"slower: {where}; all of the interval is below 1×"
    return f"within noise: {where}, which holds 1×; {detectable_text(row)}"


def until_sure_text(repeat: int, max_repeats: int, rows: Sequence[SpeedRow], target: float) -> str:
    """Progress of run-until-sure: "repeat 4 of at most 10; draft:k=2 is slower,
    ngram:auto still within noise (±5.2%)"."""
    parts = []
    for row in rows:
        c, v, d = row.config, row.verdict, row.detectable
        if v in ("faster", "slower"):
            parts.append(f"{c} is {v}")
        elif d is None:
            parts.append(f"{c} needs more pairs")
        elif d <= target:
            parts.append(f"{c} is within noise ({_pm(d)}, sure)")
        else:
            parts.append(f"{c} still within noise ({_pm(d)})")
    return f"repeat {repeat} of at most {max_repeats}" + ("; " + ", ".join(parts) if parts else "")


def stopping_text(stopping: dict | None, rows: Sequence[SpeedRow]) -> str:
    """Why the runs stopped where they did."""
    if not stopping:
        return ""
    r, reason = stopping.get("repeats") or 0, stopping.get("reason")
    reps = f"{r} repeat{'s' if r != 1 else ''}"
    if stopping.get("mode") != "until-sure":
        return f"Ran {reps}, as asked; run until sure to repeat until every interval is narrow enough."
    target = stopping.get("half_width") or 0.0
    wide = [f"{row.config} {_pm(row.detectable)}" if row.detectable is not None else row.config
            for row in rows if row.verdict != "baseline"
            and (row.detectable is None or row.detectable > target)]
    if reason == "sure":
        return f"Sure after {reps}: every interval is within {_pm(target)}."
    left = f": still wider than {_pm(target)}: {', '.join(wide)}" if wide else ""
    if reason == "time":
        seconds = stopping.get("seconds_budget") or 0
        return f"Stopped at the time budget ({seconds / 60:.0f} min) after {reps}{left}."
    return f"Stopped at the budget of {reps}{left}."


def noise_text(noise: dict | None) -> str:
    """The machine's noise floor, from target alone's repeats."""
    x = (noise or {}).get("run_to_run")
    if x is None:
        return "Target alone ran once per prompt, so this machine's run-to-run noise was not measured."
    return (f"On this machine target alone's speed moved by about {_pm(x)} from one repeat to the next "
            f"({noise.get('runs')} runs): a single run cannot show a smaller difference.")


def prediction_text(predicted: float, row: Speedup, predicted_ci=None) -> str:
    """The advisor's prediction (with its interval, when it has one) against the measured interval."""
    ci = row.ci
    said = f"predicted {predicted:.2f}×" + (f" (95% interval {interval_text(predicted_ci)})" if predicted_ci else "")
    if not ci:
        return f"{said}; the measurement has no interval (one pair)"
    where = "inside" if ci[0] <= predicted <= ci[1] else "outside"
    return (f"{said}, measured {row.speedup:.2f}× (95% interval {interval_text(ci)}): "
            f"the prediction is {where} the measured interval")


# -- the advisor: predictions from short runs of the real loop (specdesk.bench.loop_calibration) --

def advisor_progress_text(config: str, repeat: int, min_repeats: int, max_repeats: int) -> str:
    """The loop calibration's progress: "advisor: draft:k=3, repeat 2 of 3"."""
    if repeat <= min_repeats:
        return f"advisor: {config}, repeat {repeat} of {min_repeats}"
    return f"advisor: {config}, repeat {repeat} of at most {max_repeats}"


def predicted_cell(pred: dict | None) -> str:
    """A prediction for a table cell: "0.88× (0.84–0.92)", or "–" when none was made."""
    if not pred or pred.get("predicted_speedup") is None:
        return "–"
    ci = pred.get("predicted_ci")
    return f"{pred['predicted_speedup']:.2f}×" + (f" ({interval_text(ci)})" if ci else "")


#: A prediction's verdict for users: "pays" only when all of its interval is above 1.
PREDICTION_VERDICTS = {"faster": "pays", "slower": "slower", "within-noise": "within noise"}


def prediction_verdict_label(pred: dict | None) -> str:
    if not pred or pred.get("predicted_speedup") is None:
        return "not predicted"
    if pred.get("predicted_ci") is None:
        return "no interval"
    return PREDICTION_VERDICTS.get(pred.get("verdict") or "", "–")


def _loop_basis(pred: dict, runs: int | None) -> str:
    where = f"{runs} short runs of the real decode loop" if runs else "short runs of the real decode loop"
    return f"95% interval {interval_text(pred.get('predicted_ci'))}, from {where}"


def advice_verdict_text(best: dict | None, preds: list[dict], runs: int | None, why: str) -> str:
    """The advisor's headline: a configuration pays only when all of its predicted
    interval is above 1; otherwise whether the best is within noise or slower.
    ``preds`` are Prediction.to_dict()s; ``why`` what the component costs say."""
    if best is not None:
        return (f"Speculation pays on this machine: {best['config']} is predicted at {best['predicted_speedup']:.2f}× "
                f"target alone ({_loop_basis(best, runs)}; {why}).")
    drafted = [p for p in preds if p.get("basis") == "measured" and p.get("predicted_speedup") is not None]
    if not drafted:
        return f"Nothing was measured in the loop, so the advisor does not say speculation pays ({why})."
    top = max(drafted, key=lambda p: p["predicted_speedup"])
    worst = min(p["predicted_speedup"] for p in drafted)
    if top.get("verdict") == "slower":
        return (f"Speculation slows this machine down: the best configuration tried ({top['config']}) is predicted "
                f"at {top['predicted_speedup']:.2f}× target alone ({_loop_basis(top, runs)}), {worst:.2f}× at worst "
                f"({why}).")
    return (f"No configuration is sure to pay here: the best tried ({top['config']}) is predicted at "
            f"{top['predicted_speedup']:.2f}× target alone ({_loop_basis(top, runs)}), within noise of 1×; "
            f"{worst:.2f}× at worst ({why}).")


def components_why_text(verify4: float, draft1: float | None) -> str:
    """What the isolated component costs say (they choose which k the advisor tries, never the verdict)."""
    why = f"by the isolated calls, a verify batch of 4 tokens costs {verify4:.1f} target steps"
    if draft1 is not None:
        why += f" and one draft step {draft1:.2f} of a step"
    return why


def measured_best_text(row: SpeedRow) -> str:
    """The best measured configuration, said as sure as the run allows."""
    s, v = row.speedup, row.verdict
    ci = row.ci
    where = f"{row.config} at {s:.2f}× overall" + (f" (95% interval {interval_text(ci)})" if ci else "")
    if v == "faster":
        return f"Measured: the best configuration was {where}, faster than target alone."
    if v == "slower":
        return f"Measured: every configuration was slower than target alone; the best was {where}."
    return f"Measured: the best configuration was {where}, within noise of target alone."


def chat_verdict_text(ratio: float, band: float, verdict: str, reference: float, how: str, live: bool,
                      slower_why: str = "") -> str:
    """The chat's verdict line: one answer against target alone's reference speed,
    judged against what the machine's noise allows one run (``band``, a fraction)."""
    prefix = "So far: " if live else ""
    ref = (f" (target alone {reference:.1f} tok/s, "
           + ("measured)" if how == "measured" else "estimated from this session's target steps)"))
    if verdict == "faster":
        return f"{prefix}{ratio:.2f}× target alone — faster, beyond this machine's noise ({_pm(band)} for one answer).{ref}"
    if verdict == "slower":
        return f"{prefix}{ratio:.2f}× target alone — slower, {slower_why}.{ref}"
    return (f"{prefix}{ratio:.2f}× target alone — within this machine's noise ({_pm(band)} for one answer): "
            f"run a comparison to tell.{ref}")


#: Under the replayed answers: what the race shows, and why it is replayed.
#: What skipping the warm-up costs (the CLI's --no-warmup, the app's setting).
NO_WARMUP_COST = (
    "the first answer pays each model's first decode and each batch shape's first use inside its timed "
    "steps: on a GPU up to hundreds of milliseconds a context (cuBLAS, kernels loaded, graphs captured), on a "
    "CPU the weights' first read; its speed reads low and auto re-measures what those calls made look dear")
WARMUP_NOTE = ("Before the first answer, each model decodes the batch shapes the loop will use once, untimed "
               "(a fraction of a second on a CPU)")


REPLAY_NOTE = (
    "Replay types each answer out at the times its tokens were really produced (the clock starts with the "
    "prompt). The runs ran one after another, interleaved; two live runs side by side would fight over this "
    "machine's cores and slow each other down, so replaying the recorded times is the honest race."
)


def replay_clock_text(t: float, end: float, speed: float) -> str:
    """The replay's clock: "1.24 s of 3.50 s" (and the speed when not real time)."""
    text = f"{t:.2f} s of {end:.2f} s"
    return text if speed == 1.0 else f"{text} at {speed:g}×"


def memory_buys_text(up: dict | None) -> str:
    """The draft's memory spent on the target instead: the better quantization it would
    buy (``QuantUpgrade.to_dict()``, estimated from the sizes), the one sentence the CLI,
    the app and the advice say it with ("" without one)."""
    if not up:
        return ""
    return (f"Without the draft, its memory would buy the target at {up['better']} instead of {up['current']} "
            f"(estimated): about {format_bytes(up['better_bytes'])} (+{format_bytes(up['extra_bytes'])}).")


def published_text(pub: dict | None, note: str | None = None) -> str:
    """Whether the target's Hugging Face repo publishes that quantization
    (``PublishedQuant.to_dict()``), or why none is offered ("" when neither is known)."""
    if pub:
        size = f" ({format_bytes(pub['size'])})" if pub.get("size") else ""
        command = f": {pub['command']}" if pub.get("command") else ""
        return f"{pub['repo']} publishes {pub['quant']} as {pub['file']}{size}{command}."
    return f"({note}.)" if note else ""


def memory_offer_text(said: str, up: dict | None, pub: dict | None, note: str | None) -> str:
    """What to add to ``said`` (an advice that may have said it already) about the draft's
    memory: the better quantization once, then whether it is published."""
    if not up:
        return ""
    parts = [] if memory_buys_text(up) in said else [memory_buys_text(up)]
    return " ".join(parts + [published_text(pub, note)]).strip()


def drift_table_text(drift: dict | None) -> str:
    """The measured kernel drift by verify batch size, one line a batch (a tooltip's)."""
    if not drift:
        return "The kernel drift was not measured."
    lines = [f"Kernel drift by verify batch size ({drift.get('positions')} positions):"]
    for b in drift.get("by_batch") or []:
        lines.append(
            f"  batch {b['batch']}: mean TV {100 * b['tv_mean']:.3f}%, worst {100 * b['tv_max']:.2f}%, "
            f"logits ±{b['logit_diff_max']:.3f}, argmax flips {b['flips']}/{b['positions']}"
        )
    return "\n".join(lines)


def identity_text(row, runs: Sequence[dict], drift: dict | None, temperature: float | None) -> tuple[str, str]:
    """A configuration's identity with target alone at T=0 (``row``: a bench ConfigRow;
    ``runs``: the comparison's run records), in a few words and explained: each
    divergence in a sentence, and what "identical" means on this machine."""
    if row.baseline:
        return "baseline", ""
    if not row.compared:
        return "not compared (T > 0)", claim_text(drift, temperature)
    tips = [f"{r['suite']}/{r['prompt_id']} #{r['repeat'] + 1}: {verdict_text(r['divergence'], drift)}"
            for r in runs if r["config"] == row.config and r["identical"] is False and r.get("divergence")]
    text = f"{row.identical}/{row.compared} identical"
    if row.near_ties:
        text += f", {row.near_ties} near-tie"
    if row.mismatches:
        text += f", {row.mismatches} MISMATCH"
    if drift and drift.get("positions"):
        text += f" · drift flips {100 * drift.get('flip_share', 0.0):.2g}%"
    tip = "\n".join(tips[:12])
    if row.near_ties and not row.mismatches:
        tip += ("\n\nA near-tie: a batched verify pass runs other kernels than a single step, and where the two "
                "best tokens nearly tie the argmax can flip. Not a bug.")
    tip += "\n\n" + claim_text(drift)
    return text, tip.strip()


def drift_report_text(drift: dict) -> str:
    """The measured kernel drift (``Drift.to_dict()``, measured with the control) as a
    table, one row a verify batch size and the control's (single-token steps repeated,
    which must show none), and the overall figures."""
    lines = [f"{'batch':>5}  {'positions':>9}  {'mean TV':>8}  {'worst TV':>8}  {'max |dlogit|':>12}  {'flips T=0':>10}"]
    for b in drift.get("by_batch") or []:
        name = "1*" if b["batch"] == 1 else str(b["batch"])
        lines.append(f"{name:>5}  {b['positions']:>9}  {100 * b['tv_mean']:>7.3f}%  {100 * b['tv_max']:>7.2f}%  "
                     f"{b['logit_diff_max']:>12.4f}  {b['flips']:>3} ({100 * b['flip_share']:.1f}%)")
    if any(b["batch"] == 1 for b in drift.get("by_batch") or []):
        lines.append("  (1* = the control: single-token steps repeated; it must show no drift)")
    margin = drift.get("flip_margin_max")
    worst = drift.get("worst_batch")
    lines.append(
        f"overall: mean TV {100 * drift['tv_mean']:.3f}%, worst {100 * drift['tv_max']:.2f}%"
        + (f" (batch {worst})" if worst else "")
        + f"; argmax flips {drift['flips']} ({100 * drift['flip_share']:.2f}% of position x batch pairs)"
        + (f", largest flipped margin {margin:.3f}" if margin is not None else "")
        + f"; near-ties (top two within {drift['near_tie_logits']:g}): {100 * drift['near_tie_share']:.1f}% of positions; "
        f"{drift['seconds']:.1f} s")
    return "\n".join(lines)


def _fmt(x: float | None, f: str = "{:.2f}") -> str:
    return "-" if x is None else f.format(x)


def serve_load_text(o: dict) -> str:
    """A load on a server (``bench.serve_load.summarize``) as a few lines: what came back,
    throughput, first token, the wait in line, decode speed, where the wall time went and
    the server's memory."""
    pc, t, q, d = o["per_client_tokens_per_s"], o["ttft_s"], o["queue_wait_s"], o["decode_tokens_per_s"]
    lines = [
        f"{o['clients']} clients x {o['requests_per_client']} requests, max_tokens {o['max_tokens']}: {o['ok']} ok, "
        f"{o['rejected_503']} refused (503), {o['error_count']} errors"
        + (f" ({', '.join(o['errors'])})" if o["errors"] else "") + f" in {o['wall_s']:.1f} s",
        f"throughput         {_fmt(o['throughput_tokens_per_s'], '{:.1f}')} tokens/s, {_fmt(o['requests_per_s'])} requests/s "
        f"(per client {_fmt(pc['min'], '{:.1f}')}..{_fmt(pc['max'], '{:.1f}')} tokens/s)",
        f"first token        p50 {_fmt(t['p50'])} s, p95 {_fmt(t['p95'])} s (min {_fmt(t['min'])}, max {_fmt(t['max'])})",
        f"waited in line     p50 {_fmt(q['p50'])} s, p95 {_fmt(q['p95'])} s (max {_fmt(q['max'])})",
        f"decode per request p50 {_fmt(d['p50'], '{:.1f}')} tokens/s (min {_fmt(d['min'], '{:.1f}')}, "
        f"max {_fmt(d['max'], '{:.1f}')}); throughput / median decode = {_fmt(o['throughput_over_median_decode'])} "
        "(1.00: serving costs nothing besides decoding; one answer is decoded at a time)",
    ]
    b = o["busy_share"]
    if b["prompt"] is not None:
        lines.append(f"wall time          prompts {100 * b['prompt']:.0f}%, decoding {100 * b['decode']:.0f}%, neither "
                     f"{100 * max(0.0, 1 - b['prompt'] - b['decode']):.0f}% (HTTP, chat templates, hand-over between "
                     f"requests); acceptance p50 {_fmt(o['acceptance']['p50'], '{:.2f}')}")
    r = o["server_rss_bytes"]
    if r["before"] is not None and r["after"] is not None:
        lines.append(f"server RSS         {format_bytes(r['before'])} before, {format_bytes(r['after'])} after "
                     f"({(r['delta'] or 0) / 2**20:+.1f} MiB)")
    return "\n".join(lines)


# -- what a model can be (the library's summary, doctor) ------------------------------------------

_ROLLBACK_WAYS = {
    "snapshots": "rolls back by recurrent-state snapshots ({n} kept, {snap} beside a {state} state)",
    "checkpoints": "rolls back by checkpoints (a {state} copy of its recurrent state per draft, and the accepted tokens "
                   "decoded again)",
}


def role_text(info: dict | None, error: str | None, role: str) -> str:
    """Whether a model file can be a ``role`` ("target" or "draft"), and how or why not,
    from the library's summary (``inspect_gguf``) and its validation error."""
    if error:
        return f"no: {error}"
    rb = (info or {}).get("rollback") or {}
    way = rb.get(role, "kv")
    text = _ROLLBACK_WAYS.get(way)
    if text is None:
        win = rb.get("sliding_window")
        return f"yes (a sliding window of {win}: rollbacks past it are rebuilt exactly)" if win else "yes"
    return "yes, " + text.format(n=rb.get("n_rs_seq", 0), snap=format_bytes(rb.get("snapshot_bytes", 0)),
                                 state=format_bytes(rb.get("state_bytes", 0)))


def role_rows(info: dict | None, error: str | None) -> list[tuple[str, str]]:
    """What a model can be, as the Library and doctor show it: a target, a draft (the MTP
    source rows come from session.source_table)."""
    return [("as a target", role_text(info, error, "target")), ("as a draft", role_text(info, error, "draft"))]


def rollback_text(report: dict | None) -> str:
    """What rolling back a hybrid target or draft costs, from the calibration's counters
    (session.rollback.costs_report): "" where every context drops positions itself."""
    if not report:
        return ""
    parts = []
    t = report.get("target")
    if t and t.get("kind") == "recurrent":
        if t.get("n_rs_seq"):
            parts.append(f"The target is a hybrid: it keeps {t['n_rs_seq']} snapshots of its recurrent state "
                         f"({format_bytes(t['snapshot_bytes'])}), so a draft of up to {t['n_rs_seq']} tokens rolls back "
                         f"with no copy; a longer one takes a checkpoint ({format_bytes(t['state_bytes'])}) and decodes "
                         "the accepted tokens again.")
        else:
            parts.append(f"The target is a hybrid without snapshots: every draft takes a checkpoint "
                         f"({format_bytes(t['state_bytes'])}) and decodes the accepted tokens again.")
    for name, c in report.items():
        if name == "target" or not c or c.get("kind") != "recurrent":
            continue
        spent = c["checkpoint_seconds"] + c["restore_seconds"] + c["replay_seconds"]
        parts.append(f"The {name} is a hybrid too and rolls back by checkpoints: {c['checkpoints']} copies of "
                     f"{format_bytes(c['state_bytes'])} and {c['replayed']} tokens decoded again during the calibration "
                     f"({spent * 1000:.0f} ms outside its drafting's batches).")
    return " ".join(parts)
