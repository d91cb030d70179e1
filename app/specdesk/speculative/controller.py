"""Draft length: a fixed k, or ``auto``, which drafts only as far as it pays.

``auto`` keeps the cost model of :mod:`costmodel` up to date from every step
(verify seconds per batch size, draft seconds per draft length, the draft's
catch-up seconds per token) and the acceptance per draft position, separately for
each source (the draft model; n-gram lookups by match length, since a long match
predicts far better than a short one). For each step it picks the k with the best
predicted tokens/s, k = 0 (target alone) included.

Before any of that, two ceilings that need no acceptance at all:

- The perfect-draft bound: the speedup a draft that is always right would reach
  at the measured costs. Below 1 (a CPU where verifying b tokens costs about b
  steps and a draft step over half of one), no draft of that source can pay: auto
  stops drafting and probing it for the session, and re-checks only when the
  measured costs move materially: a reseed (restored costs, a settings change), or
  a measured verify batch or draft call cost (measured again by n-gram steps or
  fixed-k runs) drifting by more than ``drift``. The
  target step alone does not reopen it: on a shared machine it swings with the
  load, and next to batch costs measured under another load it would fake a
  change of ratio that no one measured.
- The catch-up: a draft model that sat out some steps must first evaluate every
  token since it last synced. That price, at the draft's measured prefill cost, is
  paid before anything is won; when it exceeds what a perfect draft could win over
  the answer left, auto does not draft (nor probe).

Exploration: when drafting does not pay by the estimates, a draft length is still
tried now and then while an optimistic acceptance (an upper confidence bound) and
the low prior cost of never-measured batch sizes predict a gain; the interval
between such probes doubles each time (8, 16, … 128 steps).

Every call to ``budget`` leaves a :class:`Decision` (k and why), which the decoder
takes and puts on the Step and in the statistics, so the trace and the app can say
why auto drafted or did not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .costmodel import CostModel, PositionAcceptance, RunningCost
from .proposers.base import LOOKUP_SOURCES, MODEL_SOURCES

NGRAM_BUCKETS = (1, 2, 3, 4, 6, 9, 16, 32)


def ngram_bucket(match_length: int) -> int:
    b = NGRAM_BUCKETS[0]
    for x in NGRAM_BUCKETS:
        if match_length >= x:
            b = x
    return b


def source_key(source: str, match_length: int | None) -> str:
    if source in LOOKUP_SOURCES:
        return f"{source}:{ngram_bucket(match_length or 1)}"
    return source


# Why a step drafted what it did (Decision.reason).
FIRST_STEP = "first step"  # auto measures one plain target step before anything else
LAST_TOKEN = "last token"  # no room left to draft
BOUND = "bound<1"  # even a draft that is always right cannot pay at the measured costs
CATCH_UP = "catch-up too dear"  # the draft's catch-up costs more than it could win over the answer left
PROBE = "probe"  # a try, to measure costs and acceptance the estimates are unsure of
COST_MODEL = "by cost model"  # the k with the best predicted tokens/s (0 included)
FIXED = "fixed"  # a fixed k
NO_CANDIDATE = "no candidate"  # the proposer had nothing to offer (no n-gram match)
TARGET_ALONE = "target alone"  # no proposer


@dataclass(frozen=True)
class Decision:
    """What the controller chose for one step, and why."""

    k: int
    reason: str
    source: str = ""

    @property
    def key(self) -> str:
        """The kind of decision, without k (what the statistics count)."""
        if self.reason == COST_MODEL:
            what = f"k>0 {COST_MODEL}" if self.k else f"k=0 {COST_MODEL}"
        else:
            what = self.reason
        return f"{self.source}: {what}" if self.source else what

    def __str__(self) -> str:
        if self.reason == COST_MODEL:
            what = f"k={self.k} {COST_MODEL}"
        elif self.reason == PROBE:
            what = f"probe k={self.k}"
        elif self.reason == FIXED:
            what = f"k={self.k} fixed"
        else:
            what = self.reason
        return f"{self.source}: {what}" if self.source else what


@dataclass(frozen=True)
class StepCost:
    """What one step cost and gave, for the controller to learn from."""

    source: str  # the draft's source ("draft", "translated", "ngram", "history"), "" when nothing was drafted
    match_length: int | None
    drafted: int  # tokens drafted: the verify batch was drafted + 1 tokens
    accepted: int  # draft tokens kept in the answer
    draft_seconds: float  # the proposer's call, 0 for none
    verify_seconds: float  # the target's batch of drafted + 1 tokens
    draft_synced: int = 0  # tokens the draft model had to catch up on (draft calls only)
    # Draft tokens whose verdict counts for acceptance: all drafted, or fewer when an
    # accepted token ended the answer (the rest were never judged as part of it).
    judged: int | None = None
    emitted: int = 0  # tokens the step added to the answer
    step_seconds: float = 0.0  # the whole step, end to end: propose, verify, roll back, bookkeeping
    decision: Decision | None = None  # what the controller chose for this step

    @property
    def judged_drafted(self) -> int:
        return self.drafted if self.judged is None else self.judged


class Controller(Protocol):
    def budget(self, source: str, hint: int | None, limit: int) -> int:
        """How many tokens to draft from ``source`` now (at most ``limit``); ``hint``
        is the n-gram match length, or how far the draft model is behind. Leaves a
        Decision for :meth:`take_decision`."""

    def peek(self, source: str, hint: int | None, limit: int) -> int:
        """What :meth:`budget` would answer, with no side effect (no probe counted, no
        decision left): whether a draft model should evaluate the prompt up front."""

    def observe(self, cost: StepCost) -> None: ...

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        """The draft model evaluated ``tokens`` prompt tokens in ``seconds``."""

    def take_decision(self) -> Decision | None:
        """The decision of the last budget call since the previous take, if any."""

    def describe(self) -> str: ...


class FixedK:
    """Always draft up to k tokens (fewer when the proposer stops early). What the
    steps cost can still teach an ``auto`` controller (``teach``) for later runs."""

    def __init__(self, k: int, teach: Controller | None = None) -> None:
        if k <= 0:
            raise ValueError(f"k must be a positive integer, got {k}")
        self.k = k
        self.teach = teach
        self._decision: Decision | None = None

    def peek(self, source: str, hint: int | None, limit: int) -> int:
        return max(0, min(self.k, limit))

    def budget(self, source: str, hint: int | None, limit: int) -> int:
        k = self.peek(source, hint, limit)
        self._decision = Decision(k, FIXED if limit > 0 else LAST_TOKEN, source)
        return k

    def take_decision(self) -> Decision | None:
        d, self._decision = self._decision, None
        return d

    def observe(self, cost: StepCost) -> None:
        if self.teach is not None:
            self.teach.observe(cost)

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        if self.teach is not None:
            self.teach.observe_prefill(tokens, seconds)

    def describe(self) -> str:
        return f"k={self.k}"


@dataclass(frozen=True)
class _Stopped:
    """The costs at which a source's perfect-draft bound was found below 1."""

    measured: dict[tuple[str, int], float]  # verify batches (b >= 2) and draft calls, as measured then
    epoch: int


def _close(a: float, b: float, fraction: float) -> bool:
    return abs(a - b) <= fraction * max(abs(b), 1e-12)


def _measured_ratios(costs: CostModel) -> dict[tuple[str, int], float]:
    """The batch and draft costs actually measured (not interpolated from the target
    step, which swings with the machine's load)."""
    out = {("verify", b): rc.value for b, rc in costs.verify.items() if b >= 2}
    out.update({("draft", k): rc.value for k, rc in costs.draft.items()})
    return out


def _moved(now: dict[tuple[str, int], float], then: dict[tuple[str, int], float], fraction: float) -> bool:
    if now.keys() != then.keys():
        return True  # a size measured for the first time
    return any(not _close(v, then[key], fraction) for key, v in now.items())


@dataclass
class AutoK:
    """Choose k per step from measured costs and acceptance (see module docstring)."""

    costs: CostModel = field(default_factory=CostModel)
    k_max: int = 8
    k_max_ngram: int = 12
    z: float = 1.5  # width of the optimistic bound used for exploration
    margin: float = 1.02  # a draft must beat target alone by this much to be used
    acceptance: dict[str, PositionAcceptance] = field(default_factory=dict)
    last_choice: dict[str, int] = field(default_factory=dict)
    first_probe_gap: int = 8
    max_probe_gap: int = 128
    # Until a draft-model call was measured, draft at most this many tokens: two
    # measured points (a step, a batch of k + 1) and one draft call are enough to
    # judge the bound, and a long first draft on a machine where drafting cannot
    # pay is the dearest way to find out.
    first_draft_k: int = 2
    _probe_gap: dict[str, int] = field(default_factory=dict)
    _since_probe: dict[str, int] = field(default_factory=dict)
    # Seconds per token the draft model spends catching up (beyond the one or two
    # every draft call evaluates): what drafting costs after the draft fell behind.
    # Measured from catch-ups and from the draft's prompt prefill.
    catch_up: RunningCost = field(default_factory=RunningCost)
    catch_up_horizon: float = 32.0  # at most this many drafting steps share a catch-up
    catch_up_tokens_per_step: float = 4.0
    # Before a catch-up was measured: its cost per token as a share of one draft step
    # (a batched evaluation costs far less per token than a single step).
    prior_catch_up_share: float = 0.2
    # A source whose perfect-draft bound is below bound_floor stops for the session;
    # it is re-checked when a measured batch or draft cost moved by more than
    # ``drift`` (a fraction) from where it stopped, a new size was measured, or the
    # costs were reseeded.
    bound_floor: float = 1.0
    drift: float = 0.2
    _stopped: dict[str, _Stopped] = field(default_factory=dict)
    _epoch: int = 0
    _decision: Decision | None = None

    def _kmax(self, source: str) -> int:
        return self.k_max_ngram if source in LOOKUP_SOURCES else self.k_max

    # -- ceilings that need no acceptance --------------------------------------------

    def catch_up_seconds_per_token(self) -> float:
        if self.catch_up.n:
            return self.catch_up.value
        return self.prior_catch_up_share * self.costs.draft_cost(1)

    def catch_up_price(self, behind: int | None) -> float:
        """Seconds the draft model needs to catch up on ``behind`` tokens, beyond the
        one or two every draft call evaluates (which the draft costs include)."""
        return self.catch_up_seconds_per_token() * max(0, (behind or 0) - 2)

    def perfect_bound(self, source: str, behind: int | None = None, tokens_left: int | None = None) -> float | None:
        """The best speedup over target alone a draft from ``source`` could reach
        (acceptance 1 everywhere); with ``behind`` and ``tokens_left``, the draft
        model's catch-up paid out of the answer left. None before a target step."""
        kmax = self._kmax(source) if tokens_left is None else max(1, min(self._kmax(source), tokens_left))
        price = self.catch_up_price(behind) if source in MODEL_SOURCES else 0.0
        return self.costs.perfect_draft_bound(
            kmax, draft_costs=(source in MODEL_SOURCES), catch_up_seconds=price, tokens_left=tokens_left if price else None
        )

    def stopped(self, source: str) -> bool:
        """Whether even a perfect draft from ``source`` cannot pay at the measured
        costs; once found, it holds until the costs move materially."""
        step = self.costs.step_cost
        best = self.costs.perfect_draft(self._kmax(source), draft_costs=(source in MODEL_SOURCES))
        if step is None or best is None:
            return False
        held = self._stopped.get(source)
        if held is not None:
            if held.epoch == self._epoch and not _moved(_measured_ratios(self.costs), held.measured, self.drift):
                return True
            del self._stopped[source]  # batch or draft costs were measured anew: look again
        if step / best[1] < self.bound_floor:
            self._stopped[source] = _Stopped(_measured_ratios(self.costs), self._epoch)
            return True
        return False

    # -- the choice of k ---------------------------------------------------------------

    def plan(self, source: str, hint: int | None, limit: int, z: float = 0.0) -> tuple[int, list[float | None]]:
        """Best k and the predicted rate of each k. ``hint``: the n-gram match length,
        or how many tokens the draft model must catch up on first."""
        key = source_key(source, hint)
        acc = self.acceptance.setdefault(key, PositionAcceptance())
        kmax = max(0, min(self._kmax(source), limit))
        alphas = acc.alphas(kmax, z=z)
        extra = 0.0
        if source in MODEL_SOURCES and hint and hint > 2 and z == 0:
            # Catching up is paid once; every drafting step after it starts in sync.
            # Spread it over the drafting steps the rest of the answer can hold (about
            # one per catch_up_tokens_per_step tokens), else the longer auto waits,
            # the dearer resuming looks, and it never drafts again in this answer.
            # (A probe's catch-up is priced whole, against what a perfect draft could
            # win over the answer left: see decide.)
            steps_ahead = min(self.catch_up_horizon, max(1.0, limit / self.catch_up_tokens_per_step))
            extra = self.catch_up_price(hint) / steps_ahead
        rates = self.costs.rates(alphas, draft_costs=(source in MODEL_SOURCES), optimistic=z > 0, extra=extra)
        if rates[0] is None:
            return 0, rates
        best_k, best = 0, rates[0] * self.margin
        for k in range(1, len(rates)):
            r = rates[k]
            if r is not None and r > best:
                best_k, best = k, r
        return best_k, rates

    def decide(self, source: str, hint: int | None, limit: int) -> Decision:
        """The budget for one step and why (probe bookkeeping included)."""
        if limit <= 0:
            return Decision(0, LAST_TOKEN, source)
        if self.costs.step_cost is None:
            # The first step of a session measures a plain target step.
            return Decision(0, FIRST_STEP, source)
        if self.stopped(source):
            return Decision(0, BOUND, source)
        if source in MODEL_SOURCES and hint and hint > 2:
            with_catch_up = self.perfect_bound(source, hint, limit)
            if with_catch_up is not None and with_catch_up < self.bound_floor:
                return Decision(0, CATCH_UP, source)
        key = source_key(source, hint)
        if source in MODEL_SOURCES and not self.costs.draft:
            limit = min(limit, self.first_draft_k)
        k, _ = self.plan(source, hint, limit)
        if k > 0:
            self._probe_gap[key] = self.first_probe_gap
            return Decision(k, COST_MODEL, source)
        # Would an optimistic acceptance (and the low prior slope for batch sizes
        # never measured) pay? Then try it now and then: this is how unmeasured
        # costs and a change of text get noticed. Each probe that does not turn the
        # decision doubles the wait before the next, so a machine where drafting
        # does not pay soon stops paying for probes.
        since = self._since_probe.get(key, 1 << 30) + 1
        self._since_probe[key] = since
        if since >= self._probe_gap.get(key, 0):
            k_opt, _ = self.plan(source, hint, limit, z=self.z)
            if k_opt > 0:
                self._since_probe[key] = 0
                self._probe_gap[key] = min(self.max_probe_gap, max(self.first_probe_gap, 2 * self._probe_gap.get(key, 0)))
                return Decision(k_opt, PROBE, source)
        return Decision(0, COST_MODEL, source)

    def budget(self, source: str, hint: int | None, limit: int) -> int:
        d = self.decide(source, hint, limit)
        self._decision = d
        self.last_choice[source_key(source, hint)] = d.k
        return d.k

    def peek(self, source: str, hint: int | None, limit: int) -> int:
        """1 or more while a draft from ``source`` may still pay (so a draft model
        should evaluate the prompt up front, which also measures its prefill cost),
        0 once it cannot; no probe is counted."""
        if limit <= 0:
            return 0
        if self.costs.step_cost is None:
            return 1  # nothing measured yet: the first probe should not start with a catch-up
        if self.stopped(source):
            return 0
        return max(1, self.plan(source, hint, limit)[0])

    def take_decision(self) -> Decision | None:
        d, self._decision = self._decision, None
        return d

    def observe(self, cost: StepCost) -> None:
        self.costs.observe_verify(cost.drafted + 1, cost.verify_seconds)
        if cost.source in MODEL_SOURCES and cost.drafted > 0:
            if cost.draft_synced <= 2:
                self.costs.observe_draft(cost.drafted, cost.draft_seconds)
            elif self.costs.draft_measured(cost.drafted):
                over = cost.draft_seconds - self.costs.draft_cost(cost.drafted)
                self.catch_up.add(max(0.0, over) / (cost.draft_synced - 2))
        if cost.drafted > 0:
            key = source_key(cost.source, cost.match_length)
            self.acceptance.setdefault(key, PositionAcceptance()).record(cost.judged_drafted, cost.accepted)

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        if tokens > 2 and seconds >= 0:
            self.catch_up.add(seconds / tokens)

    # -- what carries over to the next session on the same pair ----------------

    def saved_costs(self) -> dict:
        """The measured costs (not the acceptance, which follows the text)."""
        d = self.costs.to_dict()
        if self.catch_up.n:
            d["catch_up"] = [self.catch_up.value, self.catch_up.n]
        return d

    def restore_costs(self, state: dict, weight: int = 4) -> None:
        """Start from costs saved by :meth:`saved_costs`, each counted as at most
        ``weight`` measurements, so fresh measurements soon outweigh them. A reseed:
        every source stopped by its bound is looked at again."""
        self.costs = CostModel.from_dict(state, weight=weight)
        self.reseeded()
        cu = state.get("catch_up")
        if isinstance(cu, (list, tuple)) and len(cu) == 2:
            try:
                value, n = float(cu[0]), int(cu[1])
            except (TypeError, ValueError):
                return
            if value >= 0 and n > 0:
                self.catch_up = RunningCost.seeded(value, min(n, weight))

    def reseeded(self) -> None:
        """The costs changed outside the measurements (restored, a settings change):
        re-check every bound."""
        self._epoch += 1
        self._stopped.clear()

    def describe(self) -> str:
        return "auto"
