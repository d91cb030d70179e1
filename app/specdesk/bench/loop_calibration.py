"""The advisor's evidence: short real speculative runs, end to end, per candidate
configuration.

The component costs (one target step, a verify batch, a draft call) do not add up to
the loop: the draft's catch-up after each correction, the caches the two models evict
from each other, the Python around every step and whatever else shares the cores are
in no isolated call. So the advisor predicts a configuration's speedup from the loop
itself: target alone (``none``) and every candidate configuration generate a short
greedy answer (48 tokens) to each of three calibration prompts through the same decode loop
users run (:meth:`Session.run`), interleaved and rotated round after round as the
benchmark runner does (:func:`specdesk.bench.runner.schedule_round`), at least
``min_repeats`` rounds and more until every interval is within ``half_width`` or the
time budget is spent. Each round continues target alone's answers of the round before
(:func:`_next_context`): at T = 0 a plain repeat would generate the same 48 tokens again,
re-timing them without sampling the draft's acceptance any further, and the prediction
for a long k rests on that acceptance (on the scripted machines of the tests, three
rounds of the same text missed held-out prompts by up to 11% at k = 7; three rounds
that continue the text, by up to 6%). A configuration's prediction is its paired speedup over target
alone (decode tokens/s, prompt excluded, and the last step too: :func:`steady_rate`),
with a 95% interval and verdict from :func:`specdesk.bench.stats.paired_speedup`: the
wider of the repeats' interval (noise) and the prompts' (a user's next prompt is none of
these; its speedup differs from theirs as theirs differ from each other). Rounds stop
on the repeats' width: more repeats cannot narrow how prompts differ.

The calibration prompts are not any built-in suite's, so a benchmark on those suites
checks the predictions on prompts the calibration never saw.

``auto`` is not run here (its runs would teach the session's own auto controller):
it drafts only what it measured to pay, so its prediction is the better of target
alone and the best measured fixed k of its proposer, less what its probes may cost
(the controller's exploration budget, :attr:`AutoK.budget_share`), with that
configuration's interval.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ..errors import Cancelled
from ..session.text import advisor_progress_text
from ..speculative.auto import AutoK
from ..speculative.sampling import SamplingParams
from . import stats
from ..speculative.proposers.registry import BASELINE
from .configs import BenchConfig, split_name
from .rows import ConfigRow
from .runner import overall, paired_ratios, schedule_round
from .suites import Prompt, Suite

Progress = Callable[[str, float], None]

# Short, everyday requests of three kinds (code, an edit, prose), none of them a
# built-in suite's: the speedup moves from prompt to prompt, and three show by how much.
CALIBRATION_PROMPTS = (
    Prompt("cal-code", "Write a Python function that returns the n-th Fibonacci number iteratively, "
           "with a docstring and two doctest examples.", "calibration"),
    Prompt("cal-edit", "Change this function so that it returns None instead of raising on an empty list, and "
           "reply with the code only:\n\ndef first(xs):\n    if not xs:\n        raise ValueError('empty')\n"
           "    return xs[0]", "calibration"),
    Prompt("cal-prose", "In a short paragraph, explain to a new employee why backups should be tested "
           "by restoring them, not only by checking that they exist.", "calibration"),
)
CALIBRATION_SUITE = Suite("calibration", CALIBRATION_PROMPTS, None, "the advisor's loop calibration")

#: What auto's probes may cost at most, a share of target alone's time (the controller's own budget).
PROBE_BUDGET = AutoK.budget_share


@dataclass(frozen=True)
class LoopOptions:
    max_tokens: int = 48
    min_repeats: int = 3
    max_repeats: int = 6
    half_width: float = 0.03  # stop adding rounds once every interval is within +-3%
    seconds: float = 60.0  # ... or when the next round would end after this budget


@dataclass(frozen=True)
class Prediction:
    """A configuration's predicted speedup over target alone, from the loop's runs."""

    config: str
    speedup: float | None
    ci: tuple[float, float] | None
    verdict: str | None  # faster | slower | within-noise (stats' verdicts); None when nothing was measured
    pairs: int
    basis: str  # "measured": its own runs; "auto": derived from the measured fixed k (see the module docstring)
    via: str | None = None  # for auto: the configuration it is derived from

    @property
    def pays(self) -> bool:
        """Only when the whole interval is above 1."""
        return self.ci is not None and self.ci[0] > 1.0

    def to_dict(self) -> dict:
        return {"config": self.config, "predicted_speedup": self.speedup,
                "predicted_ci": list(self.ci) if self.ci is not None else None,
                "verdict": self.verdict, "pays": self.pays, "pairs": self.pairs, "basis": self.basis, "via": self.via}


@dataclass
class LoopCalibration:
    """What the calibration runs measured: per configuration, the benchmark summary's
    row (speedup, its interval, verdict, acceptance)."""

    configs: list[str]
    rows: dict[str, ConfigRow]
    repeats: int
    runs: int
    seconds: float
    reason: str  # why the rounds stopped: "sure", "repeats" or "time"
    max_tokens: int
    prompts: list[str] = field(default_factory=list)

    def measured(self, config: str) -> Prediction | None:
        row = self.rows.get(config)
        if row is None or row.baseline or row.speedup is None:
            return None
        return Prediction(config, row.speedup, row.ci, row.verdict, row.pairs, "measured")

    def predict(self, config: str) -> Prediction | None:
        """The prediction for ``config``: its own runs', or auto's from its proposer's
        fixed k (None when neither was measured)."""
        if config == BASELINE:
            return None
        own = self.measured(config)
        if own is not None:
            return own
        proposer, rest = split_name(config)
        if rest != "auto":
            return None
        fixed = [p for c in self.configs if (n := split_name(c))[0] == proposer and n[1].startswith("k=")
                 and (p := self.measured(c)) is not None]
        if not fixed:
            return None
        best = max(fixed, key=lambda p: p.speedup)
        keep = 1.0 - PROBE_BUDGET
        if best.speedup > 1.0 and best.ci is not None and best.ci[0] > 1.0:
            ci = (best.ci[0] * keep, best.ci[1] * keep)
            return Prediction(config, best.speedup * keep, ci, stats.verdict_of(ci), best.pairs, "auto", best.config)
        # auto drafts only what it measured to pay: about target alone, less its probes;
        # as sure as the comparison with the best fixed k was
        h = math.log(best.ci[1] / best.ci[0]) / 2 if best.ci is not None else None
        centre = max(1.0, best.speedup) * keep
        ci = (centre * math.exp(-h), centre * math.exp(h)) if h is not None else None
        return Prediction(config, centre, ci, stats.verdict_of(ci), best.pairs, "auto", best.config)

    def to_dict(self) -> dict:
        return {"configs": self.configs, "repeats": self.repeats, "runs": self.runs, "seconds": self.seconds,
                "reason": self.reason, "max_tokens": self.max_tokens, "prompts": self.prompts,
                "predictions": [p.to_dict() for c in self.configs if (p := self.predict(c)) is not None]}


def run_loop(
    target,
    configs: Sequence[BenchConfig],
    options: LoopOptions | None = None,
    suite: Suite = CALIBRATION_SUITE,
    progress: Progress | None = None,
    cancel: Callable[[], bool] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> LoopCalibration:
    """Run ``configs`` (target alone first) on the calibration prompts, interleaved,
    round after round (see the module docstring). ``target`` is a benchmark target
    (:class:`specdesk.bench.runner.SessionTarget`); ``progress`` gets messages such
    as "advisor: draft:k=3, repeat 2 of 3" and the fraction of the most rounds."""
    if not configs or not configs[0].baseline:
        raise ValueError(f"the loop calibration's first config must be the baseline, {BASELINE}")
    options = options or LoopOptions()
    names = [c.name for c in configs]
    tokens = {p.id: target.prompt_tokens(p.text) for p in suite.prompts}
    context = dict(tokens)  # what each prompt's runs of this round continue: see _next_context
    answers: dict[str, list[int] | None] = {}  # target alone's answer of this round; None when it ended
    n_ctx = getattr(target, "n_ctx", None)
    per_round = len(schedule_round([suite], configs, 0))
    runs: list[dict] = []
    start = clock()
    reason, r = "repeats", 0
    while r < options.max_repeats:
        for _, prompt, _, _, c in schedule_round([suite], configs, r):
            if progress is not None:
                progress(advisor_progress_text(c.name, r + 1, options.min_repeats, options.max_repeats),
                         len(runs) / (per_round * options.max_repeats))
            if cancel is not None and cancel():  # after the progress: a cancel it prompted stops this run
                raise Cancelled("the advisor's calibration was cancelled")
            target.reset()
            gen = target.run(context[prompt.id], c.generation(SamplingParams(), options.max_tokens, r))
            runs.append({"suite": suite.name, "prompt_id": prompt.id, "repeat": r, "config": c.name,
                         "stats": dict(gen.stats.to_dict(), tokens_per_second=steady_rate(gen.steps)), "identical": None})
            if c.baseline:
                answers[prompt.id] = gen.tokens if gen.stop_reason == "max_tokens" else None
        r += 1
        for pid, answer in answers.items():
            context[pid] = _next_context(tokens[pid], context[pid], answer, options.max_tokens, n_ctx)
        rows = overall(runs, names)
        elapsed = clock() - start
        if r < options.min_repeats:
            continue
        judged = [row.paired for row in rows if not row.baseline]
        if stats.sure(judged, options.half_width):
            reason = "sure"
            break
        if elapsed + elapsed / r > options.seconds:
            reason = "time"
            break
    target.reset()
    rows = {row.config: row for row in overall(runs, names)}
    for c in names[1:]:
        rows[c] = _for_other_prompts(rows[c], paired_ratios(runs, c))
    return LoopCalibration(names, rows, r, len(runs), clock() - start, reason, options.max_tokens,
                           [p.id for p in suite.prompts])


def _next_context(prompt: list[int], context: list[int], answer: list[int] | None, max_tokens: int,
                  n_ctx: int | None) -> list[int]:
    """What a prompt's runs continue in the next round: this round's context and target
    alone's answer to it, so that each round measures the next stretch of the answer
    (at T = 0 a repeat of the same context would generate the same tokens again, which
    re-times them but samples the draft's acceptance no further); the prompt itself once
    the answer ended before its length, or when the next round would not fit the
    context."""
    if answer is None:  # it ended before its length: the next round starts it again
        return prompt
    longer = context + answer
    if n_ctx is not None and len(longer) + max_tokens > n_ctx:
        return prompt
    return longer


def _for_other_prompts(row: ConfigRow, ratios: dict) -> ConfigRow:
    """A configuration's row with an interval for prompts the calibration did not run:
    the wider of the repeats' interval (how sure these prompts' speedup is) and the
    prompts' (how much the speedup moves from one prompt to the next: each prompt's
    mean ratio taken as one sample of the prompts a user may send)."""
    per_prompt = [[math.exp(sum(math.log(x) for x in v) / len(v))] for v in ratios.values() if v]
    prompts = stats.paired_speedup(per_prompt)
    ci, pci = row.ci, prompts.ci
    if ci is None or pci is None:
        return row
    wide = (min(ci[0], pci[0]), max(ci[1], pci[1]))
    return replace(row, paired=replace(row.paired, ci=wide, verdict=stats.verdict_of(wide),
                                       detectable=max(row.detectable or 0.0, prompts.detectable or 0.0)))


def steady_rate(steps) -> float | None:
    """Decode tokens per second of a run without its last step: the answer's end cuts
    that step's draft short (it emits fewer tokens for about a whole step's cost),
    which weighs on a 48-token run several times as much as on a longer answer."""
    last = max((i for i, st in enumerate(steps) if st.tokens), default=-1)
    if last < 2:
        return steps[-1].stats.tokens_per_second if steps else None
    before = steps[last - 1].stats
    return before.generated / before.decode_seconds if before.decode_seconds > 0 else None
