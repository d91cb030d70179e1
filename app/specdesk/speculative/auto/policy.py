"""auto's policy: each step's draft length, from the judges, the prior and the
exploration budget (see the package's docstring for the whole design)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..controller import (BOUND, BUDGET_SPENT, CATCH_UP, CHEAPER, DEARER, ESTIMATED, EXPLORE, FIRST_STEP, LAST_TOKEN,
                          LONGER, PROBE, REFERENCE, Decision, Estimate, StepCost)
from ..costmodel import FAR, CostModel, PositionAcceptance, RunningCost
from ..proposers.base import Source
from . import learn, saved, view
from .saved import apply_restored
from .explore import Exploration
from .judge import Judges
from .oneoff import OneOffs
from .outcomes import K_BANDS, band, judge_key, source_key
from .prior import Prior, PriorRow
from .reference import TargetAlone

_BANDS = range(len(K_BANDS))


@dataclass
class AutoK:
    """Choose k per step from the measured outcomes (see the package's docstring)."""

    costs: CostModel = field(default_factory=CostModel)
    k_max: int = 32  # a draft model, as far as a GPU's cheap verify batches justify
    k_max_ngram: int = 32
    acceptance: dict[str, PositionAcceptance] = field(default_factory=dict)
    z: float = 1.5  # width of the optimistic acceptance the prior explores with
    margin: float = 1.02  # a k must be estimated this much cheaper than target alone to be drafted
    z_on: float = 1.64  # a source drafts once its ratio is below 1 by this many standard errors
    z_keep: float = 0.0  # ... and goes on drafting while it is below 1 by this many
    z_refute: float = 1.0  # above 1 by this many: measured dearer, it drafts no more
    min_refute_steps: float = 2.0  # ... once the outcome rests on this many steps at least
    z_show: float = 1.64  # the intervals an Estimate shows (90%)
    budget_share: float = 0.025  # exploring costs at most this share of target alone's expected time
    # The per-step spread assumed before an outcome's own steps show it: a target step
    # (its time alone varies), a drafting step (so do the tokens it emits).
    floor_cv: float = 0.15
    floor_cv_draft: float = 0.5
    prior_cv: float = 0.25  # the prior's own uncertainty, where it is pooled with an outcome
    decay: float = 0.97  # per step of the outcome: it follows its recent steps
    decay_target: float = 0.95  # target alone follows the machine's load faster (per step of the session)
    stale_steps: float = 256.0  # an outcome measured this many steps ago counts with twice the variance
    clip: float = 4.0  # a step costing more than this many times its outcome's mean counts as that much
    spike: float = 1.25  # a target step counts as at most this many times the fastest recent one
    first_steps: int = 3  # target steps measured before anything is drafted
    first_draft_k: int = 2  # the first draft of a model source, before any draft call was measured
    first_probe_gap: int = 8
    max_probe_gap: int = 128
    prior_refresh: int = 16  # observed steps between refreshes of the prior's predictions
    catch_up_horizon: float = 128.0  # at most this many tokens of the answer left repay a catch-up
    # Seconds per token the draft model spends catching up (beyond the one or two every
    # draft call evaluates), measured from catch-ups and from the draft's prompt prefill.
    catch_up: RunningCost = field(default_factory=RunningCost)
    # Before a catch-up was measured: its cost per token as a share of one draft step
    # (a batched evaluation costs far less per token than a single step).
    prior_catch_up_share: float = 0.2
    # A k drafted last stays while another is estimated at most this much cheaper: each
    # change of k changes the verify batch's shape, which a GPU pays for.
    keep_k: float = 0.03
    # A draft all kept may be followed by one this many times longer (see _longer).
    grow: int = 4
    # A prefill more than this many times the catch-ups' price, or a drafting step more
    # than ``far_step`` times what the prior predicts, is held until the next of its kind
    # says whether it was a one-off (see .oneoff): the budget of a short answer is a few
    # steps' worth, and one slowed step must not spend it.
    far: float = FAR
    far_step: float = 2.0

    def __post_init__(self) -> None:
        self.reference = TargetAlone(self.floor_cv, self.decay_target, self.spike, self.stale_steps)
        self.judges = Judges(self.decay, self.clip, self.floor_cv_draft, self.stale_steps, self.z_refute,
                             self.min_refute_steps)
        self.prior = Prior(lambda: self.costs, lambda: self.acceptance, self.judges, self.z, self.prior_cv,
                           self.z_refute, self.floor_cv_draft, self.decay, self.prior_refresh)
        self.explore = Exploration(self.budget_share, self.first_probe_gap, self.max_probe_gap)
        self._t = 0  # steps observed
        self._keys: dict[tuple[str, int], str] = {}
        self._last_band: dict[str, int] = {}  # per arm: the band it last drafted in
        self._last_k: dict[str, int] = {}  # per arm: the k it last drafted
        self._all_kept: dict[str, int] = {}  # per arm: the k of its last draft if every token was kept, else 0
        self._decision: Decision | None = None
        self._view: tuple | None = None  # the last decision's figures, replaced whole (other threads read it)
        self._pending: dict[str, list[float]] = {}  # restored outcomes, until target alone is timed
        self.measured = learn.Measurements(lambda: self.costs, lambda: self.catch_up, self.prior_catch_up_share)
        self._after_draft = False  # the draft model ran since the last target step
        self._after_prefill = False  # ... and that was the prompt's prefill
        self.oneoffs = OneOffs(self.far_step)

    def _kmax(self, source: Source) -> int:
        return self.k_max_ngram if source.is_lookup else self.k_max

    def _arm_key(self, source: Source, hint: int | None) -> str:
        if not source.is_lookup:
            return source
        h = hint or 1
        key = self._keys.get((source, h))
        if key is None:
            key = self._keys[(source, h)] = source_key(source, h)
        return key

    # -- what was measured ---------------------------------------------------------------

    def target_alone(self) -> tuple[float, float] | None:
        """Target alone's seconds per token and its standard error (None before a step)."""
        return self.reference.value(self._t)

    def source_ratio(self, key: str) -> tuple[float, float] | None:
        """Drafting from an arm (``key``: a source's name, or for lookups its match
        bucket, as :func:`source_key` writes it; with ``#b``, band b of its draft
        lengths, else the band it last drafted in): its measured cost per token as a
        share of target alone's, and the standard error (both estimates'); the judge."""
        if "#" not in key and self._last_band.get(key):
            key = f"{key}#{self._last_band[key]}"
        rs = self.judges.ratio(key, self.target_alone(), self._t)
        return None if rs is None else rs[:2]

    def allowance(self, room: int | None = None) -> float:
        """Seconds exploring may cost so far: a share of target alone's time for the
        session's tokens and the room left in this answer."""
        t = self.target_alone()
        return self.explore.allowance(None if t is None else t[0], room)

    @property
    def spent(self) -> float:
        """Seconds drafting has cost beyond target alone for the same tokens this
        session, the draft's prompt prefill included (negative where drafting won)."""
        return self.explore.spent

    def perfect_bound(self, source: str) -> float | None:
        """The best speedup over target alone a draft from ``source`` that is always
        right could reach, at the loop's measured costs (None before a step)."""
        src = Source.of(source)
        p = self.prior.row(src, self._arm_key(src, None), self._kmax(src), self._t)
        return None if p is None else 1.0 / p.bound

    def catch_up_price(self, behind: int | None, least: bool = False) -> float:
        """Seconds the draft model needs to catch up on ``behind`` tokens, beyond the
        one or two every draft call evaluates: as measured, to spend the budget on it;
        with ``least``, at the cheapest of the last few catch-ups, to refuse it (a
        one-off must not condemn the draft for the rest of the answer)."""
        return self.measured.catch_up_price(behind, least)

    # -- the choice of k -------------------------------------------------------------------

    def decide(self, source: str, hint: int | None, limit: int) -> Decision:
        """The budget for one step and why."""
        src = Source.of(source)
        if limit <= 0:
            return Decision(0, LAST_TOKEN, src)
        self.explore.room = limit
        key = self._arm_key(src, hint)
        t = self.target_alone()
        k_max = self._kmax(src)
        prior = self.prior.row(src, key, k_max, self._t) if t is not None and self.reference.steps >= self.first_steps else None
        if prior is None:
            return Decision(0, FIRST_STEP, src, key)
        if self._pending:
            apply_restored(self.judges, self._pending, t[0], k_max)
        c0 = t[0]
        kmax = min(k_max, limit)
        if src.is_model and not self.costs.draft and not self.costs.draft_decode.n:
            kmax = min(kmax, self.first_draft_k)
        # a band of draft lengths measured dearer is not drafted; the others still may be
        refuted = self.judges.refuted_bands(key, t, self._t, range(1) if src.is_lookup else _BANDS)
        k, est = self.prior.estimated(src, key, kmax, k_max, prior, c0, skip=refuted)
        if k and src.is_model and not self.costs.draft and not self.costs.draft_decode.n:
            k = kmax  # the first draft: long enough that a decode of it keeps its shape (a steady cost)
        last = self._last_k.get(key, 0)
        if k and src.is_model and last and last != k and last <= kmax and band(last, src) not in refuted:
            at = self.prior.at(key, last, prior, c0)
            if at <= est * (1.0 + self.keep_k):
                k, est = last, at
        chosen = k
        if k and est * self.margin < 1.0:
            chosen = k = self._to_the_end(src, k, limit, prior, c0, refuted)
            k = self._longer(src, key, k, kmax, k_max, prior, c0, refuted, limit)
        jk = judge_key(key, max(1, k))
        cheaper, d = self._judged(src, key, jk, t)
        if d is not None:
            return d
        behind = hint if src.is_model and hint and hint > 2 else 0
        if k and est * self.margin < 1.0:
            if behind and self.catch_up_price(behind, least=True) > (1.0 - est) * c0 * min(limit, self.catch_up_horizon):
                return Decision(0, CATCH_UP, src, key)
            if cheaper:
                self.judges.drafting.add(jk)
                return Decision(k, CHEAPER if k == chosen else LONGER, src, key)
            d = self._probe(src, key, k, behind, limit, c0)
            return d if not d.k or k == chosen else d._replace(reason=LONGER)
        if refuted and self.prior.estimated(src, key, kmax, k_max, prior, c0)[1] * self.margin < 1.0:
            return Decision(0, DEARER, src, key)  # what would pay was measured dearer
        if prior.bound >= 1.0:
            return Decision(0, BOUND, src, key)
        return self._explore(src, key, kmax, k_max, prior, c0, behind, limit, refuted)

    def _to_the_end(self, src: Source, k: int, limit: int, prior: PriorRow, c0: float, refuted: set[int]) -> int:
        """The answer's last draft: where drafting all of the ``limit`` tokens left
        would finish the answer for less than a target step more than ``k`` is
        predicted to cost, it drafts them all, rather than leave a few tokens for a
        step of their own."""
        steps = prior.steps
        if k < limit < len(steps) and band(limit, src) not in refuted and steps[limit] - steps[k] < c0:
            return limit
        return k

    def _longer(self, src: Source, key: str, k: int, kmax: int, k_max: int, prior: PriorRow, c0: float,
                refuted: set[int], limit: int) -> int:
        """Until the first token of the arm's drafts is rejected, where its last draft was
        all kept and was the longest it ever drafted, a longer one, at most ``grow``
        times that (a slow start, as TCP's, which ends at the first loss): the k the
        hopeful row (an optimistic acceptance, the costs as measured) estimates
        cheapest, or the longest shorter one the budget affords at its worst (nothing
        kept beyond ``k``). Without it a draft that is always right would reach a long
        k only as fast as the estimated acceptance of positions never drafted creeps up,
        a few tokens a step, and a short answer would be over before it got there; with
        it, 2, 8, 32."""
        kept = self._all_kept.get(key, 0)
        acc = self.acceptance.get(key)
        if src.is_lookup or not kept or acc is None or acc.ever_rejected:
            return k  # slow start ends at the first rejected token: from then on the estimate decides
        if kept < len(acc.reached):
            return k  # not at the frontier: the positions beyond were drafted, and are estimated
        if self.measured.target_stale(self.reference.t):
            return k  # target alone was timed while something slowed it: what drafting won may be no win
        cap = min(kmax, self.grow * kept, len(prior.steps) - 1)
        if cap <= k:
            return k
        longer, _ = self.prior.estimated(src, key, cap, k_max, prior, c0, skip=refuted, hopeful=True)
        allowance = self.allowance(limit)
        steps = prior.steps
        for n in range(longer, k, -1):
            if band(n, src) not in refuted and self.explore.affords(max(0.0, steps[n] - steps[k]), allowance):
                return n
        return k

    def _judged(self, src: Source, key: str, jk: str, t: tuple[float, float]) -> tuple[bool, Decision | None]:
        """Whether the judge ``jk`` has drafting measured cheaper; or a decision to time
        target alone again first (see :meth:`.judge.Judges.verdict`)."""
        ref = self.reference
        due = not ref.asked_at or self._t - ref.asked_at >= self.first_probe_gap
        stale = due and (self._t - ref.t > self.stale_steps or self.measured.target_stale(ref.t))
        cheaper, again = self.judges.verdict(jk, t, self._t, self.z_on, self.z_keep, ref.left > 0, due, stale)
        return cheaper, self._reference(src, key) if again else None

    def _explore(self, src: Source, key: str, kmax: int, k_max: int, prior: PriorRow, c0: float, behind: int,
                 limit: int, refuted: set[int]) -> Decision:
        """No k is estimated to pay: now and then, while an optimistic view leaves room
        for a gain, try the longest k that may pay and that the budget affords at its
        worst (the wait doubles after each such exploration), at most a verify batch
        twice the largest measured (the optimistic view extrapolates unmeasured batch
        sizes at a low slope: a CPU's long batches cost far more)."""
        kmax = min(kmax, 2 * max(self.costs.verify, default=1) - 1)
        if self.explore.due(key):
            k, opt = self.prior.estimated(src, key, kmax, k_max, prior, c0, optimistic=True, skip=refuted)
            while k > 0:
                if self.prior.estimated(src, key, k, k_max, prior, c0, optimistic=True, skip=refuted)[1] < 1.0:
                    d = self._probe(src, key, k, behind, limit, c0, EXPLORE)
                    if d.k:
                        self.explore.explored(key)
                        return d
                k -= 1
            if opt < 1.0:
                return Decision(0, BUDGET_SPENT, src, key)
        return Decision(0, ESTIMATED, src, key)

    def _reference(self, src: Source, key: str) -> Decision:
        self.reference.ask(self._t)
        return Decision(0, REFERENCE, src, key)

    def _probe(self, src: Source, key: str, k: int, behind: int, limit: int, c0: float, why: str = PROBE) -> Decision:
        """A probe of k while the budget allows it. Where the estimate says k pays
        (``probe``) it is expected to cost nothing but a catch-up; an ``explore`` is
        priced at its worst (nothing accepted). The first probe of an arm never measured
        may start in sync after the draft's prompt prefill: that entry ticket, already
        paid, does not hold it back."""
        cost = self.catch_up_price(behind)
        if why == EXPLORE:
            v = self.costs.verify_cost(k + 1) or 0.0
            d = self.costs.draft_cost(k) if src.is_model else 0.0
            cost += max(0.0, v + d + self.prior.overhead(src) - c0)
        tried = any(j == key or j.startswith(key + "#") for j in self.judges.sources)
        credit = self.explore.entry if not tried else 0.0
        if not self.explore.affords(cost, self.allowance(limit), credit):
            return Decision(0, BUDGET_SPENT, src, key)
        return Decision(k, why, src, key)

    def budget(self, source: str, hint: int | None, limit: int) -> int:
        d = self.decide(source, hint, limit)
        self._decision = d
        self._view = (d, limit)  # one tuple, replaced whole
        return d.k

    def peek(self, source: str, hint: int | None, limit: int) -> int:
        """1 when a draft model should evaluate the prompt up front: its drafting was
        measured cheaper, or it was never tried and the prior does not rule it out (the
        entry ticket: one prefill, so that a first probe starts in sync). Otherwise it
        stays lazy, and a later probe prices its catch-up."""
        if limit <= 0:
            return 0
        src = Source.of(source)
        key = self._arm_key(src, hint)
        judged = [self.source_ratio(j) for j in self.judges.sources if j == key or j.startswith(key + "#")]
        judged = [j for j in judged if j is not None]
        if judged:
            return 1 if any(r + self.z_on * se < 1.0 for r, se in judged) else 0
        t = self.target_alone()
        prior = self.prior.row(src, key, self._kmax(src), self._t) if t is not None else None
        return 1 if prior is None or prior.bound < 1.0 else 0

    def take_decision(self) -> Decision | None:
        d, self._decision = self._decision, None
        return d

    # -- learning -----------------------------------------------------------------------------

    def observe(self, cost: StepCost) -> None:
        learn.observe(self, cost)

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        learn.observe_prefill(self, tokens, seconds)

    # -- what a person sees ----------------------------------------------------------------

    @property
    def estimate(self) -> Estimate | None:
        """auto's current view (None before a decision). Built when read (the app reads
        it a few times a second), from another thread too: it only reads."""
        return view.estimate(self._view, self.target_alone(), self.judges, self._t, self.explore, self._last_band,
                             self.z_show)

    # -- what carries over ----------------------------------------------------------------

    # -- what carries over to the next session on the same pair ----------------

    def saved_costs(self) -> dict:
        """The measured component costs and outcomes (see :mod:`.saved`)."""
        return saved.save(self)

    def reseeded(self) -> None:
        """The costs changed outside this controller's own measurements (a
        calibration seeded them): the prior's predictions are made again from them.
        The outcomes stay: they are what drafting really cost, and they judge."""
        self.prior.clear()

    def restore_costs(self, state: dict, weight: int = 4) -> None:
        """Start from what :meth:`saved_costs` saved, each cost and outcome counted as at
        most ``weight`` steps, so this session's own soon outweigh them."""
        saved.restore(self, state, weight)

    def describe(self) -> str:
        return "auto"
