"""The prior: what the component costs (verify seconds per batch size, draft seconds
per length, acceptance per position, the loop's measured overhead beyond its timed
calls) predict each draft length costs per token, as a share of target alone's; pooled
with each length's measured outcome, each weighted by its precision."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from ..costmodel import CostModel, Outcome, PositionAcceptance
from ..proposers.base import Source
from .judge import Judges
from .outcomes import band, source_of


@dataclass
class PriorRow:
    """The component model's view of one arm, refreshed now and then: per k (index 0
    unused) the predicted cost per emitted token as a share of target alone's, at the
    estimated acceptance and at an optimistic one (with the low prior slope for sizes
    never measured); at the hopeful acceptance (``PositionAcceptance.hopeful``) with the
    costs as measured (how far a draft that was all accepted may grow); and the least a
    draft that is always right could cost, as the same share (at or above 1: no draft
    can pay)."""

    mean: list[float]
    optimistic: list[float] | None  # computed when first needed
    bound: float
    stamp: int  # the step it was computed at
    seen: int  # the arm's drafting steps then
    steps: list[float] = field(default_factory=list)  # per k, the predicted seconds of a step (its catch-up aside)
    hopeful: list[float] | None = None  # computed when first needed


class Prior:
    """The prior rows of every arm, and the estimates pooled with the arms' outcomes
    (``judges.arms``); ``costs`` and ``acceptance`` are read where they lie (auto's own,
    which a calibration may replace), through the callables given."""

    def __init__(self, costs: Callable[[], CostModel], acceptance: Callable[[], dict[str, PositionAcceptance]],
                 judges: Judges, z: float, prior_cv: float, z_refute: float, floor_cv: float, decay: float,
                 refresh: int) -> None:
        self._costs, self._acceptance, self.judges = costs, acceptance, judges
        self.z, self.prior_cv, self.z_refute, self.floor_cv, self.decay = z, prior_cv, z_refute, floor_cv, decay
        self.refresh = refresh
        self.rows: dict[str, PriorRow] = {}
        self.seen: dict[str, int] = {}  # drafting steps per arm
        # the loop's time beyond its timed calls (verify, draft), per source ("" for k = 0)
        self.loop: dict[str, list[float]] = {}
        self._estimates: dict[str, tuple] = {}
        self._pooled: dict[tuple[str, int, bool], tuple] = {}

    def clear(self) -> None:
        """The costs changed outside auto's own measurements: predict again."""
        self.rows.clear()
        self._estimates.clear()
        self._pooled.clear()

    # -- the loop's overhead ------------------------------------------------------------

    def learn_loop(self, source: str, seconds: float, timed: float) -> None:
        s = self.loop.get(source)
        if s is None:
            s = self.loop[source] = [0.0, 0.0]
        s[0] = s[0] * self.decay + (seconds - timed)
        s[1] = s[1] * self.decay + 1.0

    def overhead(self, source: str) -> float:
        """Seconds a step of ``source`` takes beyond its timed calls (Python, rollback,
        bookkeeping), as measured; a source not measured yet is taken at k = 0's."""
        s = self.loop.get(source) or self.loop.get("")
        return max(0.0, s[0] / s[1]) if s and s[1] > 0 else 0.0

    # -- the rows -----------------------------------------------------------------------

    def row(self, source: Source, key: str, k_max: int, now: int) -> PriorRow | None:
        """Refreshed every ``refresh`` steps, and after every step of an arm that has few (16)
        (its acceptance is still being learnt); the optimistic row only when an
        exploration asks for it. None before a target step was timed."""
        p = self.rows.get(key)
        seen = self.seen.get(key, 0)
        if p is not None and now - p.stamp < self.refresh and (seen == p.seen or seen > 16):
            return p
        if self._costs().verify_cost(1) is None:
            return None
        mean, bound, steps = self._row(source, key, k_max, False)
        p = self.rows[key] = PriorRow(mean, None, bound, now, seen, steps)
        return p

    def _row(self, source: Source, key: str, k_max: int, optimistic: bool,
             hopeful: bool = False) -> tuple[list[float], float, list[float]]:
        # a share of the component model's own target step: the prior is consistent in
        # itself (if a slowed step inflates it, it errs towards trying, and the outcome,
        # against target alone's robust cost, judges)
        costs = self._costs()
        base = costs.verify_cost(1) + self.overhead("")
        oh = self.overhead(source)
        acc = self._acceptance().get(key) or PositionAcceptance()
        row = [math.inf]
        steps = [0.0]
        bound = math.inf
        e = reach = 1.0
        alphas = acc.hopeful(k_max, self.z) if hopeful else acc.alphas(k_max, z=self.z if optimistic else 0.0)
        for k, a in enumerate(alphas, start=1):
            reach *= a
            e += reach
            v = costs.verify_cost(k + 1, optimistic)
            if v is None:
                row.append(math.inf)
                steps.append(0.0)
                continue
            step = v + (costs.draft_cost(k, optimistic) if source.is_model else 0.0) + oh
            steps.append(step)
            cost = step / base
            row.append(cost / e)
            bound = min(bound, cost / (k + 1))
        return row, bound, steps

    def optimistic(self, source: Source, key: str, k_max: int, p: PriorRow) -> list[float]:
        if p.optimistic is None:
            p.optimistic = self._row(source, key, k_max, True)[0]
        return p.optimistic

    def hopeful(self, source: Source, key: str, k_max: int, p: PriorRow) -> list[float]:
        if p.hopeful is None:
            p.hopeful = self._row(source, key, k_max, False, hopeful=True)[0]
        return p.hopeful

    # -- the estimate --------------------------------------------------------------------

    def estimated(self, source: Source, key: str, kmax: int, k_max: int, p: PriorRow, c0: float,
                  optimistic: bool = False, skip: Collection[int] = (), hopeful: bool = False) -> tuple[int, float]:
        """The k (1..kmax, outside the bands ``skip``) with the lowest estimated cost
        per token, as a share of target alone's ``c0``: the prior pooled with the arm's
        outcome where one was measured (with ``optimistic``, the optimistic prior and
        the outcome less its interval; with ``hopeful``, the hopeful prior)."""
        # estimated again when the arm learnt something, its prior row was refreshed, or
        # target alone's cost moved by half a percent (not at every target step it times)
        slot = (key, kmax, optimistic, tuple(sorted(skip)) if skip else (), hopeful)
        stamp = (self.judges.versions.get(key, 0), round(math.log(c0) * 200))
        hit = self._estimates.get(slot)
        if hit is not None and hit[0] is p and hit[1] == stamp:
            return hit[2]
        row = (self.optimistic(source, key, k_max, p) if optimistic
               else self.hopeful(source, key, k_max, p) if hopeful else p.mean)
        result = self._best(key, kmax, row, optimistic, c0, skip)
        self._estimates[slot] = (p, stamp, result)
        return result

    def _best(self, key: str, kmax: int, row: list[float], optimistic: bool, c0: float,
              skip: Collection[int]) -> tuple[int, float]:
        best_k, best = 0, math.inf
        source = source_of(key)
        for k in range(1, min(kmax, len(row) - 1) + 1):
            if skip and band(k, source) in skip:
                continue
            v = self._at(key, k, row, optimistic, c0)
            if v < best:
                best_k, best = k, v
        return best_k, best

    def at(self, key: str, k: int, p: PriorRow, c0: float) -> float:
        """The estimated cost per token of drafting ``k`` (as :meth:`estimated`'s)."""
        return self._at(key, k, p.mean, False, c0) if 0 < k < len(p.mean) else math.inf

    def _at(self, key: str, k: int, row: list[float], optimistic: bool, c0: float) -> float:
        v = row[k]
        arms = self.judges.arms.get(key)
        o = arms[k] if arms is not None and k < len(arms) else None
        if o is not None and o.x > 0:
            pooled = self._pooled
            hit = pooled.get((key, k, optimistic))
            stamp = (o.t, c0)
            if hit is not None and hit[0] == v and hit[1] == stamp:
                return hit[2]
            prior = v
            v = self._pool(o, v, optimistic, c0)
            pooled[(key, k, optimistic)] = (prior, stamp, v)
        return v

    def _pool(self, o: Outcome, v: float, optimistic: bool, c0: float) -> float:
        """An arm's outcome pooled with the prior ``v`` (both as shares of target
        alone's cost), each weighted by its precision."""
        r = o.y / o.x / c0
        var = o.var(self.floor_cv) / (c0 * c0)
        if optimistic:
            r -= self.z_refute * math.sqrt(var)
        if v == math.inf:
            return r
        cv = self.prior_cv * v
        wp = 1.0 / (cv * cv)
        wo = 1.0 / var if var > 0 else 1e12
        return (wp * v + wo * r) / (wp + wo)
