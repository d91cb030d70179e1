"""Draft length: a fixed k, or ``auto``, which drafts only while drafting has been
measured to pay.

auto judges by outcomes. It keeps the realized cost per emitted token of its own
recent steps, measured end to end: the step's whole time (propose with the draft's
catch-up, verify, roll back, the Python around them) over the tokens the step added
to the answer (:class:`~costmodel.Outcome`, a ratio estimator with its standard
error). Target alone (k = 0) is one such outcome, in seconds per token, shared by
every source and measured as it runs alone: not the step right after the draft model
ran (which pays for the draft's run in the caches: that is charged to drafting); a
step slowed by something else on the machine counts as at most ``spike`` times the
fastest recent one; and whenever a verify batch timed since seems to cost less than
one target step (impossible: the step was timed while something slowed it), or every
``stale_steps`` while drafting pays, auto times target alone again (``measuring
target alone``, two steps). A reference that looks too dear would make any draft look
cheap: this is how the app's slowed first steps (its start-up work beside the first
answer) once made auto draft a whole answer that target alone would have written
faster. Drafting outcomes are compared with target alone's current cost: one per
source (the judge; n-gram lookups per match-length bucket, since a long match
predicts far better than a short one) and one per source and k, which corrects the
prior where it was measured.

The judge is a sequential test on each source, not a bandit over k. A bandit (UCB,
Thompson sampling) keeps sampling every arm that might be best, at a regret that
grows with the answer; on most CPUs every drafting arm loses, so what exploring may
cost must be fixed in advance, and exploring must stop as soon as the evidence says
"loses". With both estimates' uncertainty (the ratio's standard error, target
alone's relative one, both growing the longer ago they were measured):

- ``measured cheaper``: the source's ratio is below 1 by ``z_on`` standard errors; it
  drafts, and goes on drafting while the ratio stays below 1;
- ``measured dearer``: the ratio is above 1 by ``z_refute`` standard errors, over two
  steps at least; the source drafts no more while that holds;
- in between it is undecided: where the estimate says a k pays it drafts it as a
  ``probe`` (counted by the judge); where target alone's own uncertainty is most of
  the doubt it times target alone (``measuring target alone``).

Exploring is bounded by a budget: what drafting has cost beyond target alone for the
same tokens (every drafting step, its catch-up, the first target step after it and
the draft's prompt prefill; steps that won give it back) may not exceed
``budget_share`` (2.5%) of the session's expected target-alone time (its tokens so
far and the room left in this answer). A probe or exploration that would cross it
is not made (``probe budget spent``). One exception, the entry ticket: a draft model
never tried on this pair evaluates the prompt up front, and its first probe is not
held back by that prefill (without which no draft could ever be tried in sync).

The component cost model (:mod:`costmodel`: verify seconds per batch size, draft
seconds per length and acceptance per position, all measured in the loop, plus the
loop's measured overhead per step beyond those calls) is the prior: it chooses which
k to try, pooled with the (source, k) outcome wherever one was measured, each
weighted by its precision (the prior as uncertain as ``prior_cv``). Where the
estimate says no k pays (``estimated dearer``), a k is still tried now and then
(``explore``, priced at its worst, not counted by the judge) while an optimistic
acceptance and the low prior slope of batch sizes never measured leave room for a
gain: exploring goes where the prior is least sure, the longest such k the budget
affords, and the wait between explorations doubles (8, 16, ... 128 steps). When even
a draft that is always right cannot pay at the loop's costs (``bound<1``), nothing is
tried. The prior never decides that drafting pays: only the source's outcome does.

A draft model that sat out some steps must first catch up on every token since it
last synced, paid once before anything is won: auto resumes only when the gain
estimated per token over the answer left outweighs it (``catch-up too dear``). The
first draft of a session drafts at most ``first_draft_k`` tokens: one short probe is
the cheapest way to learn that drafting cannot pay.

Every call to ``budget`` leaves a :class:`Decision` (k and why), which the decoder puts
on the Step and in the statistics; :attr:`AutoK.estimate` gives an :class:`Estimate`
(drafting against target alone, per emitted token, with intervals) for the app to
show. What was measured carries over to the next session on the pair (see
:mod:`specdesk.session.costcache`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple, Protocol

from .costmodel import CostModel, Outcome, PositionAcceptance, RunningCost
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
FIRST_STEP = "first step"  # auto measures a few plain target steps before anything else
REFERENCE = "measuring target alone"  # undecided mostly because target alone's cost is unsure
LAST_TOKEN = "last token"  # no room left to draft
BOUND = "bound<1"  # even a draft that is always right cannot pay at the measured costs
CATCH_UP = "catch-up too dear"  # the draft's catch-up costs more than drafting wins over the answer left
PROBE = "probe"  # drafting where the estimate says it pays, within the budget, while the outcome is undecided
EXPLORE = "explore"  # a k the estimate doubts but an optimistic view does not, within the budget
CHEAPER = "measured cheaper"  # the source's drafting was measured cheaper per token than target alone
DEARER = "measured dearer"  # the source's drafting was measured dearer than target alone
ESTIMATED = "estimated dearer"  # no k is estimated to pay for this arm now (prior and outcomes)
BUDGET_SPENT = "probe budget spent"  # undecided, but exploring has cost its share
FIXED = "fixed"  # a fixed k
NO_CANDIDATE = "no candidate"  # the proposer had nothing to offer (no n-gram match)
TARGET_ALONE = "target alone"  # no proposer

_seconds = itemgetter(1)  # of a (step, seconds) pair


class Decision(NamedTuple):
    """What the controller chose for one step, and why; ``arm`` is the source's key
    (the n-gram match bucket included) that the step's outcome is counted under. (A
    named tuple: one is made every step, and a frozen dataclass costs several times
    more to make.)"""

    k: int
    reason: str
    source: str = ""
    arm: str = ""

    @property
    def key(self) -> str:
        """The kind of decision, without k (what the statistics count)."""
        return f"{self.source}: {self.reason}" if self.source else self.reason

    def __str__(self) -> str:
        if self.reason == CHEAPER:
            what = f"k={self.k} {CHEAPER}"
        elif self.reason in (PROBE, EXPLORE):
            what = f"{self.reason} k={self.k}"
        elif self.reason == FIXED:
            what = f"k={self.k} fixed"
        else:
            what = self.reason
        return f"{self.source}: {what}" if self.source else what


class StepCost(NamedTuple):
    """What one step cost and gave, for the controller to learn from (a named tuple,
    as Decision: one is made every step)."""

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
    # The verify batch was the first of its size in the target's context and paid the
    # backend's one-off set-up for it: not what a batch of that size costs a step.
    verify_setup: bool = False

    @property
    def judged_drafted(self) -> int:
        return self.drafted if self.judged is None else self.judged


@dataclass(frozen=True)
class Estimate:
    """auto's current view, for a person: drafting (``k`` tokens from ``arm``) against
    target alone, in seconds per emitted token, each with an interval of ``z``
    standard errors; None where not measured yet. ``spent`` and ``allowance``: the
    exploration budget, in seconds."""

    decision: Decision
    target_alone: float | None
    target_alone_interval: tuple[float, float] | None
    arm: str = ""
    k: int = 0  # the draft length of this step (0: nothing drafted)
    drafting: float | None = None
    drafting_interval: tuple[float, float] | None = None
    steps: float = 0.0  # effective number of recent steps the drafting figure rests on
    spent: float = 0.0
    allowance: float = 0.0


class Controller(Protocol):
    def budget(self, source: str, hint: int | None, limit: int) -> int:
        """How many tokens to draft from ``source`` now (at most ``limit``); ``hint``
        is the n-gram match length, or how far the draft model is behind. Leaves a
        Decision for :meth:`take_decision`."""

    def peek(self, source: str, hint: int | None, limit: int) -> int:
        """Whether a draft model should evaluate the prompt up front (1 or more), with
        no decision left."""

    def observe(self, cost: StepCost) -> None: ...

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        """The draft model evaluated ``tokens`` prompt tokens in ``seconds``."""

    def take_decision(self) -> Decision | None:
        """The decision of the last budget call since the previous take, if any."""

    def describe(self) -> str: ...


class FixedK:
    """Always draft up to k tokens (fewer when the proposer stops early)."""

    def __init__(self, k: int) -> None:
        if k <= 0:
            raise ValueError(f"k must be a positive integer, got {k}")
        self.k = k
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
        pass

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        pass

    def describe(self) -> str:
        return f"k={self.k}"


@dataclass
class _Prior:
    """The component model's view of one arm, refreshed now and then: per k (index 0
    unused) the predicted cost per emitted token as a share of target alone's, at
    the estimated acceptance and at an optimistic one; and the least a draft that is
    always right could cost, as the same share (at or above 1: no draft can pay)."""

    mean: list[float]
    optimistic: list[float] | None  # computed when first needed
    bound: float
    stamp: int  # the step it was computed at
    seen: int  # the arm's drafting steps then


@dataclass
class AutoK:
    """Choose k per step from the measured outcomes (see module docstring)."""

    costs: CostModel = field(default_factory=CostModel)
    k_max: int = 8
    k_max_ngram: int = 12
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

    def __post_init__(self) -> None:
        self._target = Outcome()  # target alone: seconds per token
        self._sources: dict[str, Outcome] = {}  # the judges: every drafting step of a source
        self._arms: dict[str, list[Outcome | None]] = {}  # per arm and k, catch-ups left out
        self._priors: dict[str, _Prior] = {}
        self._versions: dict[str, int] = {}  # per arm: how many outcomes were added (for caches)
        self._estimates: dict[str, tuple] = {}
        self._pooled: dict[tuple[str, int, bool], tuple] = {}  # (prior, arm's and target's steps) -> pooled
        self._seen: dict[str, int] = {}  # drafting steps per arm
        # the loop's time beyond its timed calls (verify, draft), per source ("" for k = 0)
        self._loop: dict[str, list[float]] = {}
        self._drafting: set[str] = set()  # sources drafting because they were measured cheaper
        self._probe_gap: dict[str, int] = {}
        self._since_probe: dict[str, int] = {}
        self._t = 0  # steps observed
        self._tokens = 0  # tokens emitted in them (the session's answers)
        self._spent = 0.0  # seconds drafting cost beyond target alone (see spent)
        self._entry = 0.0  # of which the draft's first prompt prefill
        self._room = 0  # the room left in the answer at the last decision
        self._keys: dict[tuple[str, int], str] = {}
        self._decision: Decision | None = None
        self._tcache: tuple[int, tuple[float, float] | None] = (-1, None)
        self._target_steps = 0
        self._reference_t = 0  # the step of the last REFERENCE decision
        self._reference_left = 0  # REFERENCE steps still to take
        self._after_draft = False  # the draft model ran since the last target step
        self._after_prefill = False  # ... and that was the prompt's prefill
        self._recent_target: list[tuple[int, float]] = []  # (step, seconds per token) of recent target steps
        self._view: tuple | None = None  # the last decision's figures, replaced whole (other threads read it)
        self._pending: dict[str, list[float]] = {}  # restored outcomes, until target alone is timed
        self._verify_seen: dict[int, int] = {}  # batch size -> the step it was last timed

    def _kmax(self, source: str) -> int:
        return self.k_max_ngram if source in LOOKUP_SOURCES else self.k_max

    def _arm_key(self, source: str, hint: int | None) -> str:
        if source not in LOOKUP_SOURCES:
            return source
        h = hint or 1
        key = self._keys.get((source, h))
        if key is None:
            key = self._keys[(source, h)] = source_key(source, h)
        return key

    # -- what was measured ---------------------------------------------------------------

    def _stale(self, o: Outcome) -> float:
        return math.sqrt(1.0 + (self._t - o.t) / self.stale_steps)

    def target_alone(self) -> tuple[float, float] | None:
        """Target alone's seconds per token and its standard error (None before a step)."""
        c = self._tcache
        if c[0] == self._t:
            return c[1]
        o = self._target
        t = None
        if o.x > 0:
            mean = o.y / o.x
            if self._recent_target:  # the slowed first steps of a session do not hold it up either
                mean = min(mean, self.spike * min(x for _, x in self._recent_target))
            t = (mean, o.se(self.floor_cv) * self._stale(o))
        self._tcache = (self._t, t)
        return t

    def _ratio(self, o: Outcome | None, t: tuple[float, float] | None) -> tuple[float, float, float] | None:
        """(ratio, its standard error, the share of its variance that target alone's
        uncertainty brings)."""
        if o is None or o.x <= 0 or t is None or t[0] <= 0:
            return None
        r = o.y / o.x / t[0]
        se = o.se(self.floor_cv_draft) * self._stale(o) / t[0]
        rel0 = t[1] / t[0]
        v0 = r * r * rel0 * rel0
        var = se * se + v0
        return r, math.sqrt(var), (v0 / var if var > 0 else 0.0)

    def source_ratio(self, key: str) -> tuple[float, float] | None:
        """Drafting from a source (``key``: its name, or for lookups its match bucket, as
        :func:`source_key` writes it): its measured cost per token as a share of target
        alone's, and the standard error (both estimates' uncertainty); the judge."""
        rs = self._ratio(self._sources.get(key), self.target_alone())
        return None if rs is None else rs[:2]

    def allowance(self, room: int | None = None) -> float:
        """Seconds exploring may cost so far: a share of target alone's time for the
        session's tokens and the room left in this answer."""
        t = self.target_alone()
        if t is None:
            return 0.0
        return self.budget_share * t[0] * (self._tokens + (self._room if room is None else room))

    @property
    def spent(self) -> float:
        """Seconds drafting has cost beyond target alone for the same tokens this
        session, the draft's prompt prefill included (negative where drafting won)."""
        return self._spent

    # -- the prior -------------------------------------------------------------------------

    def _overhead(self, source: str) -> float:
        """Seconds a step of ``source`` takes beyond its timed calls (Python, rollback,
        bookkeeping), as measured; a source not measured yet is taken at k = 0's."""
        s = self._loop.get(source) or self._loop.get("")
        return max(0.0, s[0] / s[1]) if s and s[1] > 0 else 0.0

    def _prior(self, source: str, key: str) -> _Prior | None:
        """Refreshed every ``prior_refresh`` steps, and after every step of an arm that
        has few (its acceptance is still being learnt); the optimistic row only when
        an exploration asks for it."""
        p = self._priors.get(key)
        seen = self._seen.get(key, 0)
        if p is not None and self._t - p.stamp < self.prior_refresh and (seen == p.seen or seen > 4):
            return p
        if self.costs.verify_cost(1) is None:
            return None
        row, bound = self._prior_row(source, key, False)
        p = self._priors[key] = _Prior(row, None, bound, self._t, seen)
        return p

    def _prior_row(self, source: str, key: str, optimistic: bool) -> tuple[list[float], float]:
        # a share of the component model's own target step: the prior is consistent in
        # itself (if a slowed step inflates it, it errs towards trying, and the outcome,
        # against target alone's robust cost, judges)
        base = self.costs.verify_cost(1) + self._overhead("")
        oh = self._overhead(source)
        acc = self.acceptance.get(key) or PositionAcceptance()
        model = source in MODEL_SOURCES
        row = [math.inf]
        bound = math.inf
        e = reach = 1.0
        for k, a in enumerate(acc.alphas(self._kmax(source), z=self.z if optimistic else 0.0), start=1):
            reach *= a
            e += reach
            v = self.costs.verify_cost(k + 1, optimistic)
            if v is None:
                row.append(math.inf)
                continue
            cost = (v + (self.costs.draft_cost(k, optimistic) if model else 0.0) + oh) / base
            row.append(cost / e)
            bound = min(bound, cost / (k + 1))
        return row, bound

    def _optimistic(self, source: str, key: str, p: _Prior) -> list[float]:
        if p.optimistic is None:
            p.optimistic = self._prior_row(source, key, True)[0]
        return p.optimistic

    def perfect_bound(self, source: str) -> float | None:
        """The best speedup over target alone a draft from ``source`` that is always
        right could reach, at the loop's measured costs (None before a step)."""
        p = self._prior(source, self._arm_key(source, None))
        return None if p is None else 1.0 / p.bound

    # -- the choice of k -------------------------------------------------------------------

    def catch_up_seconds_per_token(self) -> float:
        if self.catch_up.n:
            return self.catch_up.value
        return self.prior_catch_up_share * self.costs.draft_cost(1)

    def catch_up_price(self, behind: int | None) -> float:
        """Seconds the draft model needs to catch up on ``behind`` tokens, beyond the
        one or two every draft call evaluates."""
        return self.catch_up_seconds_per_token() * max(0, (behind or 0) - 2)

    def estimated(self, key: str, kmax: int, prior: _Prior, optimistic: bool = False,
                  source: str = "") -> tuple[int, float]:
        """The k (1..kmax) with the lowest estimated cost per token, as a share of
        target alone's: the prior pooled with the arm's outcome where one was measured
        (with ``optimistic``, the optimistic prior and the outcome less its interval)."""
        stamp = (self._versions.get(key, 0), self._target.t, kmax, optimistic)
        hit = self._estimates.get(key)
        if hit is not None and hit[0] is prior and hit[1] == stamp:
            return hit[2]
        result = self._estimate(key, kmax, self._optimistic(source or key.split(":")[0], key, prior)
                                if optimistic else prior.mean, optimistic)
        self._estimates[key] = (prior, stamp, result)
        return result

    def _estimate(self, key: str, kmax: int, row: list[float], optimistic: bool) -> tuple[int, float]:
        arms = self._arms.get(key)
        pooled = self._pooled
        best_k, best = 0, math.inf
        for k in range(1, min(kmax, len(row) - 1) + 1):
            v = row[k]
            o = arms[k] if arms is not None and k < len(arms) else None
            if o is not None and o.x > 0:
                hit = pooled.get((key, k, optimistic))
                stamp = (o.t, self._target.t)
                if hit is not None and hit[0] == v and hit[1] == stamp:
                    v = hit[2]
                else:
                    p = v
                    v = self._pool(o, v, optimistic)
                    pooled[(key, k, optimistic)] = (p, stamp, v)
            if v < best:
                best_k, best = k, v
        return best_k, best

    def _pool(self, o: Outcome, v: float, optimistic: bool) -> float:
        """An arm's outcome pooled with the prior ``v`` (both as shares of target
        alone's cost), each weighted by its precision."""
        c0 = self.target_alone()[0]
        r = o.y / o.x / c0
        var = o.var(self.floor_cv_draft) / (c0 * c0)
        if optimistic:
            r -= self.z_refute * math.sqrt(var)
        if v == math.inf:
            return r
        cv = self.prior_cv * v
        wp = 1.0 / (cv * cv)
        wo = 1.0 / var if var > 0 else 1e12
        return (wp * v + wo * r) / (wp + wo)

    def decide(self, source: str, hint: int | None, limit: int) -> Decision:
        """The budget for one step and why."""
        if limit <= 0:
            return Decision(0, LAST_TOKEN, source)
        self._room = limit
        key = self._arm_key(source, hint)
        t = self.target_alone()
        prior = self._prior(source, key) if t is not None and self._target_steps >= self.first_steps else None
        if prior is None:
            return Decision(0, FIRST_STEP, source, key)
        if self._pending:
            self._apply_restored(t[0])
        model = source in MODEL_SOURCES
        kmax = min(self._kmax(source), limit)
        if model and not self.costs.draft:
            kmax = min(kmax, self.first_draft_k)
        o = self._sources.get(key)
        judge = None
        cheaper = False
        if o is not None and o.x > 0 and key in self._drafting and self.z_keep <= 0 and o.y < o.x * t[0]:
            cheaper = True  # drafting, and still below 1: the interval need not be looked at
            if self._reference_left > 0 or (self._t - self._reference_t >= self.first_probe_gap and (
                    self._t - self._target.t > self.stale_steps or self._target_stale())):
                # target alone was timed long ago: time it again (two steps, the first
                # after drafting pays for the draft's run), so the comparison stays fair
                return self._reference(source, key)
        elif o is not None:
            judge = self._ratio(o, t)
        if judge is not None:
            r, se, target_share = judge
            if r - self.z_refute * se > 1.0 and self._sources[key].n >= self.min_refute_steps:
                self._drafting.discard(key)
                return Decision(0, DEARER, source, key)
            cheaper = r + (self.z_keep if key in self._drafting else self.z_on) * se < 1.0
            if self._reference_left > 0 or (not cheaper and target_share > 0.5
                                            and self._t - self._reference_t >= self.first_probe_gap):
                # undecided, mostly because target alone's cost is unsure: measure it
                return self._reference(source, key)
        if not cheaper:
            self._drafting.discard(key)
        k, est = self.estimated(key, kmax, prior)
        behind = hint if model and hint and hint > 2 else 0
        if k and est * self.margin < 1.0:
            if behind and self.catch_up_price(behind) > (1.0 - est) * t[0] * min(limit, self.catch_up_horizon):
                return Decision(0, CATCH_UP, source, key)
            if cheaper:
                self._drafting.add(key)
                return Decision(k, CHEAPER, source, key)
            return self._probe(source, key, k, behind, limit, t[0])
        if prior.bound >= 1.0:
            return Decision(0, BOUND, source, key)
        # No k is estimated to pay: now and then, while an optimistic view leaves room
        # for a gain, try one (the wait doubles after each such probe).
        since = self._since_probe.get(key, 1 << 30) + 1
        self._since_probe[key] = since
        if since >= self._probe_gap.get(key, 0):
            k, opt = self.estimated(key, kmax, prior, optimistic=True, source=source)
            # the longest k that may pay and that the budget affords at its worst
            while k > 0:
                if self.estimated(key, k, prior, optimistic=True, source=source)[1] < 1.0:
                    d = self._probe(source, key, k, behind, limit, t[0], EXPLORE)
                    if d.k:
                        self._since_probe[key] = 0
                        gap = self._probe_gap.get(key, 0)
                        self._probe_gap[key] = min(self.max_probe_gap, max(self.first_probe_gap, 2 * gap))
                        return d
                k -= 1
            if opt < 1.0:
                return Decision(0, BUDGET_SPENT, source, key)
        return Decision(0, ESTIMATED, source, key)

    def _target_stale(self) -> bool:
        """Target alone's step looks dearer than a verify batch measured since: a batch
        of several tokens cannot cost less than one, so the step was timed while
        something slowed it; time it again."""
        one = self.costs.verify.get(1)
        if one is None:
            return False
        since = self._target.t
        seen = self._verify_seen
        return any(b > 1 and seen.get(b, -1) > since and rc.value < 0.8 * one.value for b, rc in self.costs.verify.items())

    def _reference(self, source: str, key: str) -> Decision:
        """Time target alone, in two steps: the first after drafting pays for the
        draft's run (its weights took the caches) and is not counted."""
        if self._reference_left <= 0:
            self._reference_left = 2
        self._reference_left -= 1
        self._reference_t = self._t
        return Decision(0, REFERENCE, source, key)

    def _probe(self, source: str, key: str, k: int, behind: int, limit: int, c0: float, why: str = PROBE) -> Decision:
        """A probe of k while the budget allows it. Where the estimate says k pays
        (``probe``) it is expected to cost nothing but a catch-up; an ``explore`` is
        priced at its worst (nothing accepted). The first probe of a source never
        measured may start in sync after the draft's prompt prefill: that entry ticket,
        already paid, does not hold it back."""
        cost = self.catch_up_price(behind)
        if why == EXPLORE:
            v = self.costs.verify_cost(k + 1) or 0.0
            d = self.costs.draft_cost(k) if source in MODEL_SOURCES else 0.0
            cost += max(0.0, v + d + self._overhead(source) - c0)
        credit = self._entry if key not in self._sources else 0.0
        if self._spent - credit + cost > self.allowance(limit):
            return Decision(0, BUDGET_SPENT, source, key)
        return Decision(k, why, source, key)

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
        judge = self.source_ratio(self._arm_key(source, hint))
        if judge is not None:
            return 1 if judge[0] + self.z_on * judge[1] < 1.0 else 0
        t = self.target_alone()
        prior = self._prior(source, self._arm_key(source, hint)) if t is not None else None
        return 1 if prior is None or prior.bound < 1.0 else 0

    def take_decision(self) -> Decision | None:
        d, self._decision = self._decision, None
        return d

    # -- learning -----------------------------------------------------------------------------

    def observe(self, cost: StepCost) -> None:
        self._t += 1
        self._tokens += cost.emitted
        if not cost.verify_setup:  # a one-off would make the size look dearer than it is
            self.costs.observe_verify(cost.drafted + 1, cost.verify_seconds)
            self._verify_seen[cost.drafted + 1] = self._t
        caught_up = 0.0
        if cost.drafted > 0:
            if cost.source in MODEL_SOURCES:
                if cost.draft_synced <= 2:
                    self.costs.observe_draft(cost.drafted, cost.draft_seconds)
                elif self.costs.draft_measured(cost.drafted):
                    caught_up = max(0.0, cost.draft_seconds - self.costs.draft_cost(cost.drafted))
                    self.catch_up.add(caught_up / (cost.draft_synced - 2))
                elif self.catch_up.n:
                    # a first draft that had to catch up: its catch-up at the measured
                    # prefill cost, the rest is what drafting costs
                    caught_up = min(cost.draft_seconds, self.catch_up_price(cost.draft_synced))
                    self.costs.observe_draft(cost.drafted, cost.draft_seconds - caught_up)
            key = self._arm_key(cost.source, cost.match_length)
            pa = self.acceptance.get(key)
            if pa is None:
                pa = self.acceptance[key] = PositionAcceptance()
            pa.record(cost.judged_drafted, cost.accepted)
            self._seen[key] = self._seen.get(key, 0) + 1
        if cost.emitted <= 0 or cost.step_seconds <= 0:
            return
        d = cost.decision
        k = d.k if d is not None and d.arm else 0
        self._learn_loop(d.source if k else "", cost.step_seconds - caught_up,
                         cost.verify_seconds + cost.draft_seconds - caught_up)
        if k == 0:
            # target alone as it runs alone: a step right after the draft model ran pays
            # for it (its weights took the caches), which is charged to drafting
            if self._after_draft and not any(s in self._drafting for s in MODEL_SOURCES):
                t = self.target_alone()
                if t is not None:
                    excess = max(0.0, cost.step_seconds - cost.emitted * t[0])
                    self._spent += excess
                    if self._after_prefill:
                        self._entry += excess  # part of the entry ticket
            self._after_prefill = False
            if not self._after_draft:
                self._observe_target(cost.step_seconds / cost.emitted)
            self._after_draft = False
            return
        self._after_draft = d.source in MODEL_SOURCES  # a lookup evicts nothing
        t = self.target_alone()
        if t is None:
            return
        c0 = t[0]
        self._spent += cost.step_seconds - cost.emitted * c0  # what drafting cost, or won (< 0)
        if d.reason != EXPLORE:  # the judge weighs drafting where the estimate says it pays
            judge = self._sources.get(d.arm)
            if judge is None:
                judge = self._sources[d.arm] = Outcome()
            _add(judge, cost.emitted, cost.step_seconds, self.decay, self._t, self.clip)
        arms = self._arms.get(d.arm)
        if arms is None:
            arms = self._arms[d.arm] = [None] * (self._kmax(d.source) + 1)
        if k < len(arms):
            o = arms[k]
            if o is None:
                o = arms[k] = Outcome()
            _add(o, cost.emitted, cost.step_seconds - caught_up, self.decay, self._t, self.clip)
            self._versions[d.arm] = self._versions.get(d.arm, 0) + 1

    def _observe_target(self, seconds: float) -> None:
        """A target step, as it runs alone. A step slowed by something else on the
        machine (another process, the app's own start-up work) counts as at most
        ``spike`` times the fastest recent one: target alone's cost must not be
        inflated, or drafting would look cheaper than it is."""
        recent = self._recent_target
        recent.append((self._t, seconds))
        while len(recent) > 16 or (len(recent) > 2 and self._t - recent[0][0] > 64):
            del recent[0]  # the last 16 target steps, or fewer: those of the last 64 steps
        y = min(seconds, self.spike * min(recent, key=_seconds)[1])
        o = self._target
        if o.x > 0 and y < 0.5 * o.y / o.x:
            # far faster than what was counted: the earlier steps were slowed (nothing
            # makes a step faster than its compute), start again from this one
            self._target = o = Outcome()
            del recent[:-1]
        # it decays per step of the session, not per target step: timed rarely while
        # drafting pays, its last timing counts most
        o.add(1.0, y, self.decay_target ** max(1, min(64, self._t - o.t)), self._t)
        self._target_steps += 1
        self._tcache = (-1, None)

    def _learn_loop(self, source: str, seconds: float, timed: float) -> None:
        s = self._loop.get(source)
        if s is None:
            s = self._loop[source] = [0.0, 0.0]
        s[0] = s[0] * self.decay + (seconds - timed)
        s[1] = s[1] * self.decay + 1.0

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        """The draft's prompt prefill: what a catch-up costs per token, and, unless its
        drafting was measured cheaper, a cost of exploring."""
        if tokens > 2 and seconds >= 0:
            self.catch_up.add(seconds / tokens)
        self._after_draft = self._after_prefill = True
        if seconds > 0 and not any(s in self._drafting for s in MODEL_SOURCES):
            self._spent += seconds
            self._entry += seconds

    # -- what a person sees ----------------------------------------------------------------

    @property
    def estimate(self) -> Estimate | None:
        """auto's current view: its last decision and the figures behind it (None before
        a decision). Built when read (the app reads it a few times a second), from
        another thread too: it only reads."""
        view = self._view
        if view is None:
            return None
        d, room = view
        t = self.target_alone()
        o = self._sources.get(d.arm) if d.arm else None
        judge = self._ratio(o, t)
        steps = o.n if o is not None else 0.0
        spent, allowance = self._spent, self.allowance(room)
        ti = di = drafting = None
        if t is not None:
            ti = (t[0] - self.z_show * t[1], t[0] + self.z_show * t[1])
            if judge is not None:
                r, se, _ = judge
                drafting = r * t[0]
                di = ((r - self.z_show * se) * t[0], (r + self.z_show * se) * t[0])
        return Estimate(d, None if t is None else t[0], ti, d.arm, d.k, drafting, di,
                        steps if drafting is not None else 0.0, spent, allowance)

    # -- what carries over to the next session on the same pair ----------------

    def saved_costs(self) -> dict:
        """The measured component costs and outcomes (not the acceptance, which follows
        the text; nor target alone's seconds, which follow the machine's load)."""
        d = self.costs.to_dict()
        if self.catch_up.n:
            d["catch_up"] = [self.catch_up.value, self.catch_up.n]
        t = self.target_alone()
        out = dict(self._pending)  # restored, never applied: kept as they came
        if t is not None:  # as shares of target alone's cost: they hold under another load
            c0 = t[0]
            for key, o in self._sources.items():
                if o.x > 0:
                    out[key] = [o.mean / c0, o.x_mean, o.sd() / c0, o.n]
            for key, arms in self._arms.items():
                for k, o in enumerate(arms):
                    if o is not None and o.x > 0:
                        out[f"{key}|{k}"] = [o.mean / c0, o.x_mean, o.sd() / c0, o.n]
        if out:
            d["outcomes"] = out
        return d

    def reseeded(self) -> None:
        """The costs changed outside this controller's own measurements (a
        calibration seeded them): the prior's predictions are made again from them.
        The outcomes stay: they are what drafting really cost, and they judge."""
        self._priors.clear()
        self._estimates.clear()
        self._pooled.clear()

    def restore_costs(self, state: dict, weight: int = 4) -> None:
        """Start from what :meth:`saved_costs` saved, each cost and outcome counted as at
        most ``weight`` steps, so this session's own soon outweigh them."""
        self.costs = CostModel.from_dict(state, weight=weight)
        self._priors.clear()
        cu = state.get("catch_up")
        if isinstance(cu, (list, tuple)) and len(cu) == 2:
            try:
                value, n = float(cu[0]), int(cu[1])
            except (TypeError, ValueError):
                value, n = -1.0, 0
            if value >= 0 and n > 0:
                self.catch_up = RunningCost.seeded(value, min(n, weight))
        outcomes = state.get("outcomes")
        self._pending = {}
        if isinstance(outcomes, dict):
            for name, row in outcomes.items():
                row = self._restored(name, row, weight)
                if row is not None:
                    self._pending[name] = row

    def _restored(self, name: object, row: object, weight: int) -> list[float] | None:
        """A saved outcome that can be used: [ratio, tokens per step, sd as a share, steps]."""
        if not isinstance(name, str) or not isinstance(row, (list, tuple)) or len(row) != 4:
            return None
        try:
            ratio, x_mean, sd, n = (float(v) for v in row)
        except (TypeError, ValueError):
            return None
        if not all(math.isfinite(v) for v in (ratio, x_mean, sd, n)) or min(ratio, x_mean, n) <= 0 or sd < 0:
            return None
        key, bar, ks = name.rpartition("|")
        source = (key if bar else name).split(":")[0]
        if source not in MODEL_SOURCES + LOOKUP_SOURCES:
            return None
        if bar and not (ks.isdigit() and 1 <= int(ks) <= self._kmax(source)):
            return None
        return [ratio, x_mean, sd, min(n, float(weight))]

    def _apply_restored(self, c0: float) -> None:
        """The restored outcomes, in seconds at this session's target-alone cost."""
        for name, (ratio, x_mean, sd, n) in self._pending.items():
            o = Outcome.seeded(ratio * c0, x_mean, sd * c0, n)
            key, bar, ks = name.rpartition("|")
            if not bar:
                self._sources.setdefault(name, o)
                continue
            arms = self._arms.setdefault(key, [None] * (self._kmax(key.split(":")[0]) + 1))
            if arms[int(ks)] is None:
                arms[int(ks)] = o
        self._pending = {}

    def describe(self) -> str:
        return "auto"


def _add(o: Outcome, x: float, y: float, decay: float, t: int, clip: float) -> None:
    """One step into an outcome; a step dearer than ``clip`` times the outcome's mean
    (another process took the cores for a moment) counts as that much."""
    if o.w >= 3.0 and o.x > 0:
        y = min(y, clip * o.y / o.x * x)
    o.add(x, y, decay, t)


