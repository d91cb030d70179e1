"""What a step teaches auto: the component costs as a steady run of drafting would
pay them (:class:`Measurements`), the acceptance, the judges' outcomes, the budget's
spending and target alone's cost (:func:`observe`, :func:`observe_prefill`, over the
policy's parts)."""

from __future__ import annotations

import math
from collections.abc import Callable

from ..controller import EXPLORE, StepCost
from ..costmodel import CostModel, PositionAcceptance, RunningCost
from ..proposers.base import Source
from .oneoff import Prefill
from .outcomes import band, judge_key, source_of


class Measurements:
    """The costs a step shows, taken as a steady run pays them. A verify batch that
    changed the target's shape is taken less what the change cost; one whose change
    was not priced yet (NaN) is held until the target's change cost is known. The
    draft's calls are taken less their changes where priced (whole where not), its
    steady single decodes on their own, and a catch-up's seconds apart; a one-off
    among the draft's decodes is no part of any."""

    def __init__(self, costs: Callable[[], CostModel], catch_up: Callable[[], RunningCost],
                 prior_catch_up_share: float) -> None:
        self._costs, self._catch_up, self.prior_catch_up_share = costs, catch_up, prior_catch_up_share
        self.unpriced: list[tuple[int, float]] = []  # (batch size, seconds) with an unpriced change
        self.verify_seen: dict[int, int] = {}  # batch size -> the step it was last timed
        self.prefill: Prefill | None = None  # the draft's prompt prefill, until its price is confirmed
        self.caught_up: float | None = None  # the price per token of the last step's catch-up, where measured
        self.recent: list[float] = []  # the last few catch-ups' prices per token (a confirmed prefill's too)

    def add_catch_up(self, per_token: float) -> None:
        self._catch_up().add(per_token)
        self.recent = self.recent[-3:] + [per_token]

    def single_decode(self) -> float | None:
        """The draft model's steady single decode, where measured (else a draft call's
        share: drafting k tokens decodes k + 1 of them)."""
        costs = self._costs()
        dd = costs.draft_decode
        if dd.n:
            return dd.value
        return min((rc.value / (k + 1) for k, rc in costs.draft.items() if rc.n), default=None)

    def catch_up_seconds_per_token(self, least: bool = False) -> float:
        """As measured by catch-ups (and confirmed prefills); with ``least``, at most the
        cheapest of the last few (a one-off only makes a call dearer: what condemns a
        source must not rest on one); a prefill not confirmed yet at most the draft's
        single decode (a batch costs no more per token than its tokens one by one,
        beyond a one-off), or before one was measured the prior; else the prior, a share
        of a draft step."""
        cu = self._catch_up()
        if cu.n:
            return min(cu.value, min(self.recent)) if least and self.recent else cu.value
        prior = self.prior_catch_up_share * self._costs().draft_cost(1)
        if self.prefill is not None:  # one call, maybe the draft's first: no dearer than a yardstick says
            one = self.single_decode()
            return min(self.prefill.per_token, prior if one is None else one)
        return prior

    def catch_up_price(self, behind: int | None, least: bool = False) -> float:
        """Seconds the draft model needs to catch up on ``behind`` tokens, beyond the
        one or two every draft call evaluates (``least``: see above)."""
        return self.catch_up_seconds_per_token(least) * max(0, (behind or 0) - 2)

    def verify(self, cost: StepCost, now: int) -> None:
        costs = self._costs()
        b = cost.drafted + 1
        if not cost.verify_setup:  # a one-off would make the size look dearer
            if math.isnan(cost.verify_reshape):
                self.unpriced = self.unpriced[-7:] + [(b, cost.verify_seconds)]
            else:
                costs.observe_verify(b, cost.verify_seconds - cost.verify_reshape)
                self.verify_seen[b] = now
        if self.unpriced and not math.isnan(cost.verify_change_cost):
            for size, seconds in self.unpriced:
                costs.observe_verify(size, max(0.0, seconds - cost.verify_change_cost))
                self.verify_seen[size] = now
            self.unpriced = []

    def draft(self, cost: StepCost) -> float:
        """The draft model's costs; returns the seconds of the call that were a catch-up
        (what the draft missed while it sat out steps)."""
        costs, catch_up = self._costs(), self._catch_up()
        self.caught_up = None
        s, n = cost.draft_steady
        if n:
            costs.observe_draft_decode(s / n)
        seconds = (cost.draft_seconds - cost.draft_oneoff
                   - (0.0 if math.isnan(cost.draft_reshape) else cost.draft_reshape))
        if cost.draft_synced <= 2:
            costs.observe_draft(cost.drafted, seconds)
            return 0.0
        caught_up = 0.0
        if costs.draft_measured(cost.drafted):
            caught_up = max(0.0, seconds - costs.draft_cost(cost.drafted))
            self.caught_up = caught_up / (cost.draft_synced - 2)
            self.add_catch_up(self.caught_up)
        elif catch_up.n:
            # a first draft that had to catch up: its catch-up at the measured prefill
            # cost, the rest is what drafting costs
            caught_up = min(seconds, self.catch_up_price(cost.draft_synced))
            costs.observe_draft(cost.drafted, seconds - caught_up)
        return caught_up

    def target_stale(self, since: int) -> bool:
        """Target alone's step looks dearer than a verify batch measured since: a batch
        of several tokens cannot cost less than one, so the step was timed while
        something slowed it; time it again."""
        costs = self._costs()
        one = costs.verify.get(1)
        if one is None:
            return False
        if any(b > 1 and s < 0.8 * one.value for b, s in self.unpriced):  # even with a change of shape in it
            return True
        seen = self.verify_seen
        return any(b > 1 and seen.get(b, -1) > since and rc.value < 0.8 * one.value for b, rc in costs.verify.items())


def observe(auto, cost: StepCost) -> None:
    """One step into ``auto`` (an :class:`~.policy.AutoK`)."""
    auto._t += 1
    auto.explore.tokens += cost.emitted
    src = Source.of(cost.source)
    d = cost.decision
    expected = _expected(auto, d.arm, d.k) if d is not None and d.k and d.arm else 0.0  # before the row moves on
    auto.measured.verify(cost, auto._t)
    caught_up = auto.measured.draft(cost) if cost.drafted > 0 and src.is_model else 0.0
    if auto.measured.prefill is not None and cost.drafted > 0 and src.is_model:
        _settle_prefill(auto)
    if cost.drafted > 0:
        key = auto._arm_key(src, cost.match_length)
        pa = auto.acceptance.get(key)
        if pa is None:
            pa = auto.acceptance[key] = PositionAcceptance()
        pa.record(cost.judged_drafted, cost.accepted)
        auto.prior.seen[key] = auto.prior.seen.get(key, 0) + 1
        if d is not None and d.arm:
            auto._all_kept[d.arm] = d.k if d.k and cost.accepted >= cost.drafted >= d.k else 0
    if cost.emitted <= 0 or cost.step_seconds <= 0:
        return
    k = d.k if d is not None and d.arm else 0
    auto.prior.learn_loop(d.source if k else "", cost.step_seconds - caught_up,
                          cost.verify_seconds + cost.draft_seconds - caught_up)
    if k == 0:
        _target_step(auto, cost)
        return
    dsrc = Source.of(d.source)
    auto._after_draft = dsrc.is_model  # a lookup evicts nothing
    t = auto.target_alone()
    if t is None:
        return
    # a step far dearer than its components predict is held from the budget until the next
    # of its kind (the judge sees it whole: it weighs outcomes, and clips a step far off
    # its own mean), but for a step whose verify batch paid a shape's set-up: a one-off
    # the backend named, held from the judge too (counted whole, the set-up of the first
    # verify batch of 33 made k=32 look dearer than k=17 for the rest of a short answer)
    expected = expected + caught_up if expected > 0 else 0.0
    seconds, confirmed = auto.oneoffs.take(judge_key(d.arm, k), cost.step_seconds, expected, cost.verify_setup)
    auto.explore.charge(seconds + confirmed - cost.emitted * t[0])  # what drafting cost, or won (< 0)
    judged = seconds if cost.verify_setup else cost.step_seconds
    if d.reason != EXPLORE:  # the band a person is shown: one its judge has seen
        auto._last_band[d.arm] = band(k, dsrc)
    auto._last_k[d.arm] = k
    auto.judges.add(d.arm, k, auto._kmax(dsrc), cost.emitted, judged, caught_up, auto._t,
                    judged=d.reason != EXPLORE)  # the judge weighs drafting where the estimate says it pays


def _expected(auto, arm: str, k: int) -> float:
    """Seconds a step drafting ``k`` from ``arm`` is predicted to take (its catch-up
    aside): the verify batch, the draft's call and the loop's overhead, as the prior row
    its decision was made on has them (0: none)."""
    p = auto.prior.rows.get(arm)
    return p.steps[k] if p is not None and k < len(p.steps) else 0.0


def _settle_prefill(auto) -> None:
    """The draft's prompt prefill, once a yardstick confirms its price or finds it a
    one-off (see :class:`~.oneoff.Prefill`): its price, and its charge to the budget."""
    m = auto.measured
    settled = m.prefill.settle(auto.far, m.catch_up_seconds_per_token(least=True) if auto.catch_up.n else None,
                               m.single_decode())
    if settled is None:
        return
    real, charge = settled
    if real:
        m.add_catch_up(m.prefill.per_token)
    else:
        auto.oneoffs.dropped += 1
    m.prefill = None
    if charge > 0:
        auto.explore.charge(charge, entry=True)


def _target_step(auto, cost: StepCost) -> None:
    """Target alone as it runs alone: a step right after the draft model ran pays for it
    (its weights took the caches, its batch shape the graph), which is charged to
    drafting."""
    drafting = any(source_of(j).is_model for j in auto.judges.drafting)
    if auto._after_draft and not drafting:
        t = auto.target_alone()
        if t is not None:
            auto.explore.charge(max(0.0, cost.step_seconds - cost.emitted * t[0]), entry=auto._after_prefill)
    auto._after_prefill = False
    if not auto._after_draft and auto.reference.observe(auto._t, cost.step_seconds / cost.emitted):
        # the steps counted so far were slowed: what drafting seemed to win against
        # them was no win, and the component model's own target step was slowed too
        auto.explore.spent = max(0.0, auto.explore.spent)
        auto.costs.set_verify(1, cost.verify_seconds)
        auto.prior.clear()
    auto._after_draft = False


def observe_prefill(auto, tokens: int, seconds: float) -> None:
    """The draft's prompt prefill: what a catch-up costs per token, and, unless its
    drafting was measured cheaper, a cost of exploring; both held until its price is
    confirmed (it may be the draft's first decode, or a call slowed by a one-off)."""
    auto._after_draft = auto._after_prefill = True
    drafting = any(source_of(j).is_model for j in auto.judges.drafting)
    charge = seconds > 0 and not drafting
    if tokens > 2 and seconds >= 0:
        auto.measured.prefill = Prefill(tokens, seconds, charge)
        _settle_prefill(auto)
    elif charge:
        auto.explore.charge(seconds, entry=True)
