"""Draft length: a fixed k, or ``auto``, which drafts only as far as it pays.

``auto`` keeps the cost model of :mod:`costmodel` up to date from every step
(verify seconds per batch size, draft seconds per draft length) and the acceptance
per draft position, separately for each source (the draft model; n-gram lookups by
match length, since a long match predicts far better than a short one). For each
step it picks the k with the best predicted tokens/s, k = 0 (target alone)
included.

Exploration: when drafting does not pay by the estimates, a draft length is still
tried now and then while an optimistic acceptance (an upper confidence bound) and
the low prior cost of never-measured batch sizes predict a gain; the interval
between such probes doubles each time (8, 16, … 128 steps). When even the
optimistic estimate cannot pay, as with a draft model on a CPU where verifying b
tokens costs about b steps, auto stops probing altogether.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .costmodel import CostModel, PositionAcceptance, RunningCost

NGRAM_BUCKETS = (1, 2, 3, 4, 6, 9, 16, 32)


def ngram_bucket(match_length: int) -> int:
    b = NGRAM_BUCKETS[0]
    for x in NGRAM_BUCKETS:
        if match_length >= x:
            b = x
    return b


def source_key(source: str, match_length: int | None) -> str:
    if source == "ngram":
        return f"ngram:{ngram_bucket(match_length or 1)}"
    return source


@dataclass(frozen=True)
class StepCost:
    """What one step cost, for the controller to learn from."""

    source: str  # "draft", "ngram" or "" when nothing was drafted
    match_length: int | None
    drafted: int
    accepted: int
    draft_seconds: float  # the proposer's call, 0 for none
    verify_seconds: float  # the target's batch of drafted + 1 tokens
    draft_synced: int = 0  # tokens the draft model had to catch up on (draft calls only)


class Controller(Protocol):
    def budget(self, source: str, match_length: int | None, limit: int) -> int: ...

    def observe(self, cost: StepCost) -> None: ...


class FixedK:
    """Always draft up to k tokens (fewer when the proposer stops early). What the
    steps cost can still teach an ``auto`` controller (``teach``) for later runs."""

    def __init__(self, k: int, teach: "Controller | None" = None) -> None:
        if k <= 0:
            raise ValueError(f"k must be a positive integer, got {k}")
        self.k = k
        self.teach = teach

    def budget(self, source: str, match_length: int | None, limit: int) -> int:
        return max(0, min(self.k, limit))

    def observe(self, cost: StepCost) -> None:
        if self.teach is not None:
            self.teach.observe(cost)

    def describe(self) -> str:
        return f"k={self.k}"


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
    _probe_gap: dict[str, int] = field(default_factory=dict)
    _since_probe: dict[str, int] = field(default_factory=dict)
    # Seconds per token the draft model spends catching up (beyond the one or two
    # every draft call evaluates): what drafting costs after the draft fell behind.
    catch_up: RunningCost = field(default_factory=RunningCost)
    catch_up_horizon: float = 32.0  # at most this many drafting steps share a catch-up
    catch_up_tokens_per_step: float = 4.0

    def _kmax(self, source: str) -> int:
        return self.k_max_ngram if source == "ngram" else self.k_max

    def plan(self, source: str, hint: int | None, limit: int, z: float = 0.0) -> tuple[int, list[float | None]]:
        """Best k and the predicted rate of each k. ``hint``: the n-gram match length,
        or how many tokens the draft model must catch up on first."""
        key = source_key(source, hint)
        acc = self.acceptance.setdefault(key, PositionAcceptance())
        kmax = max(0, min(self._kmax(source), limit))
        alphas = acc.alphas(kmax, z=z)
        extra = 0.0
        if source == "draft" and hint and self.catch_up.n:
            # Catching up is paid once; every drafting step after it starts in sync.
            # Spread it over the drafting steps the rest of the answer can hold (about
            # one per catch_up_tokens_per_step tokens), else the longer auto waits,
            # the dearer resuming looks, and it never drafts again in this answer.
            steps_ahead = min(self.catch_up_horizon, max(1.0, limit / self.catch_up_tokens_per_step))
            extra = self.catch_up.value * max(0, hint - 2) / steps_ahead
        rates = self.costs.rates(alphas, draft_costs=(source == "draft"), optimistic=z > 0, extra=extra)
        if rates[0] is None:
            return 0, rates
        best_k, best = 0, rates[0] * self.margin
        for k in range(1, len(rates)):
            r = rates[k]
            if r is not None and r > best:
                best_k, best = k, r
        return best_k, rates

    def budget(self, source: str, match_length: int | None, limit: int) -> int:
        if limit <= 0:
            return 0
        if self.costs.step_cost is None:
            # The first step of a session measures a plain target step.
            return 0
        key = source_key(source, match_length)
        k, _ = self.plan(source, match_length, limit)
        if k > 0:
            self._probe_gap[key] = self.first_probe_gap
        else:
            # Would an optimistic acceptance (and the low prior slope for batch sizes
            # never measured) pay? Then try it now and then: this is how unmeasured
            # costs and a change of text get noticed. Each probe that does not turn the
            # decision doubles the wait before the next, so a machine where drafting
            # cannot pay soon stops paying for probes.
            since = self._since_probe.get(key, 1 << 30) + 1
            self._since_probe[key] = since
            if since >= self._probe_gap.get(key, 0):
                k_opt, _ = self.plan(source, match_length, limit, z=self.z)
                if k_opt > 0:
                    k = k_opt
                    self._since_probe[key] = 0
                    self._probe_gap[key] = min(self.max_probe_gap, max(self.first_probe_gap, 2 * self._probe_gap.get(key, 0)))
        self.last_choice[key] = k
        return k

    def observe(self, cost: StepCost) -> None:
        self.costs.observe_verify(cost.drafted + 1, cost.verify_seconds)
        if cost.source == "draft" and cost.drafted > 0:
            if cost.draft_synced <= 2:
                self.costs.observe_draft(cost.drafted, cost.draft_seconds)
            elif self.costs.draft_measured(cost.drafted):
                over = cost.draft_seconds - self.costs.draft_cost(cost.drafted)
                self.catch_up.add(max(0.0, over) / (cost.draft_synced - 2))
        if cost.drafted > 0:
            key = source_key(cost.source, cost.match_length)
            self.acceptance.setdefault(key, PositionAcceptance()).record(cost.drafted, cost.accepted)

    # -- what carries over to the next session on the same pair ----------------

    def saved_costs(self) -> dict:
        """The measured costs (not the acceptance, which follows the text)."""
        d = self.costs.to_dict()
        if self.catch_up.n:
            d["catch_up"] = [self.catch_up.value, self.catch_up.n]
        return d

    def restore_costs(self, state: dict, weight: int = 4) -> None:
        """Start from costs saved by :meth:`saved_costs`, each counted as at most
        ``weight`` measurements, so fresh measurements soon outweigh them."""
        self.costs = CostModel.from_dict(state, weight=weight)
        cu = state.get("catch_up")
        if isinstance(cu, (list, tuple)) and len(cu) == 2:
            try:
                value, n = float(cu[0]), int(cu[1])
            except (TypeError, ValueError):
                return
            if value >= 0 and n > 0:
                self.catch_up = RunningCost.seeded(value, min(n, weight))

    def describe(self) -> str:
        return "auto"
