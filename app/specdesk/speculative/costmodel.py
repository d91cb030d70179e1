"""Measured costs and acceptance, the speed they predict for each draft length, and
measured outcomes (what steps really cost per emitted token, :class:`Outcome`).

Leviathan et al. give the expected tokens per verify pass for a draft of k tokens
with a constant acceptance rate a: E = (1 - a^(k+1)) / (1 - a). Here acceptance is
kept per draft position (conditional on reaching it), so

    E(k) = 1 + sum_{i=1..k} prod_{j<=i} a_j

and the speed of drafting k is E(k) / (draft_cost(k) + verify_cost(k + 1)).

Costs are seconds measured on this machine: the verify cost of a batch of b tokens
is not b times a step on a CPU, and not one step on a GPU; nothing is assumed
where a measurement exists. The same model serves the benchmark advisor and, as the
prior that chooses what to try, the core's ``auto`` draft length (which judges by
:class:`Outcome`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


#: A measurement more than this many times its cost as known is held until the next
#: one says whether it was a one-off (see :class:`RunningCost`); a first measurement,
#: more than FAR_FIRST times what the prior expected of it.
FAR = 4.0
FAR_FIRST = 3.0


def one_off_excess(seconds: list[float], far: float = FAR) -> float:
    """Of the seconds of a run of like calls (a draft's single decodes of one shape),
    what those more than ``far`` times the run's median took beyond that: a one-off
    inside the run (a page fault, a GC pause, another process's burst), which one call's
    total would otherwise take for what drafting costs. Needs three calls to tell."""
    if len(seconds) < 3:
        return 0.0
    bar = far * sorted(seconds)[len(seconds) // 2]
    return sum(x - bar for x in seconds if x > bar)


class RunningCost:
    """Mean of the first measurements, then an exponential moving average.

    With ``far``, a measurement more than ``far`` times the cost as known (a page fault,
    a GC pause, another process's burst: one call) is held, not taken: the next one
    re-measures it. Far too, both are taken (the cost moved); near, the held one is
    dropped as a one-off. One call cannot move the cost by itself, nor set it at more
    than ``FAR_FIRST`` times what the prior expected (a single measurement would
    otherwise price every draft length, and one that says none can pay is never
    re-measured)."""

    def __init__(self, warm: int = 8, decay: float = 0.15, far: float | None = None) -> None:
        self.n = 0
        self.value = 0.0
        self._warm = warm
        self._decay = decay
        self.far = far
        self.held: float | None = None  # a far measurement waiting for the next one

    @classmethod
    def seeded(cls, value: float, n: int, far: float | None = None) -> RunningCost:
        """A cost carried over from earlier measurements, counted as ``n`` of them."""
        rc = cls(far=far)
        rc.value, rc.n = value, n
        return rc

    def add(self, x: float, prior: float | None = None) -> None:
        """One measurement; ``prior``, what it was expected to cost before any was
        taken (a first measurement far above it is held too)."""
        ref = self.value if self.n else prior
        if self.far is not None and ref:
            held, self.held = self.held, None
            if x > (self.far if self.n else min(self.far, FAR_FIRST)) * ref:
                if held is None:
                    self.held = x  # one far call: re-measured before it counts
                    return
                self._add(held)  # two in a row: the cost moved
        self._add(x)

    def _add(self, x: float) -> None:
        self.n += 1
        if self.n <= self._warm:
            self.value += (x - self.value) / self.n
        else:
            self.value += self._decay * (x - self.value)


def expected_tokens(alphas: Sequence[float]) -> list[float]:
    """E(k) for k = 0..len(alphas): tokens emitted per verify pass."""
    out = [1.0]
    reach = 1.0
    for a in alphas:
        reach *= a
        out.append(out[-1] + reach)
    return out


@dataclass
class CostModel:
    """Seconds per verify batch of b tokens and per draft call of k tokens."""

    verify: dict[int, RunningCost] = field(default_factory=dict)
    draft: dict[int, RunningCost] = field(default_factory=dict)
    # Slope (as a share of one step per extra token) assumed for batch sizes never
    # measured. Low on purpose: an optimistic prior makes auto try a size once,
    # after which the measurement replaces it.
    prior_verify_slope: float = 0.1
    # Draft cost per token assumed before any draft call was measured, as a share
    # of one target step.
    prior_draft_share: float = 0.25
    # Target alone's step for a reference line: the plain mean of the single-token
    # steps timed (then a slow average), steadier than ``verify[1]``, which follows
    # the last few steps so that auto reacts quickly to a busier machine.
    reference: RunningCost = field(default_factory=lambda: RunningCost(warm=256, decay=0.01))
    # One single-token decode of the draft model while it drafts on (no shape change):
    # a draft of k tokens then costs k + 1 of them (its catch-up of the target's token
    # and its k tokens), where no call of that length was measured whole.
    draft_decode: RunningCost = field(default_factory=lambda: RunningCost(far=FAR))

    # A size's first measurement held (far above what the others predict for it) until
    # its next one: not a cost yet. Per table ("verify", "draft"), size -> RunningCost.
    held: dict[str, dict[int, RunningCost]] = field(default_factory=dict, repr=False)

    def _observe(self, table: dict[int, RunningCost], name: str, size: int, seconds: float,
                 prior: Callable[[], float | None]) -> None:
        rc = table.get(size)
        if rc is not None:
            rc.add(seconds)
            return
        held = self.held.setdefault(name, {})
        rc = held.pop(size, None) or RunningCost(far=FAR)
        rc.add(seconds, prior())
        if rc.n:
            table[size] = rc
        else:
            held[size] = rc

    def observe_verify(self, batch: int, seconds: float) -> None:
        self._observe(self.verify, "verify", batch, seconds, lambda: self.verify_cost(batch))
        if batch == 1:
            self.reference.add(seconds)

    @property
    def reference_step(self) -> float | None:
        """Seconds per target step, over the single-token steps this model timed (else
        auto's current estimate, e.g. carried over from an earlier session)."""
        return self.reference.value if self.reference.n else self.verify_cost(1)

    def observe_draft(self, k: int, seconds: float) -> None:
        if k > 0:
            self._observe(self.draft, "draft", k, seconds, lambda: self.draft_cost(k) if self.step_cost else None)

    def observe_draft_decode(self, seconds: float) -> None:
        if seconds > 0:
            step = self.step_cost
            self.draft_decode.add(seconds, self.prior_draft_share * step if step else None)

    def set_verify(self, batch: int, seconds: float) -> None:
        rc = RunningCost(far=FAR)
        rc.add(seconds)
        self.verify[batch] = rc

    def set_draft(self, k: int, seconds: float) -> None:
        rc = RunningCost(far=FAR)
        rc.add(seconds)
        self.draft[k] = rc

    @property
    def step_cost(self) -> float | None:
        """One target step (a verify batch of 1)."""
        return self.verify_cost(1)

    def draft_measured(self, k: int) -> bool:
        return k in self.draft

    def verify_cost(self, batch: int, optimistic: bool = False) -> float | None:
        """Seconds for a verify batch: measured, interpolated between measurements, or
        extrapolated past the largest one (with the measured slope, or with the low
        prior slope when ``optimistic``, which is how auto decides to try a size)."""
        rc = self.verify.get(batch)
        if rc is not None:
            return rc.value
        pts = sorted((b, rc.value) for b, rc in self.verify.items())
        if not pts:
            return None
        for b, v in pts:
            if b == batch:
                return v
        below = [(b, v) for b, v in pts if b < batch]
        above = [(b, v) for b, v in pts if b > batch]
        if below and above:
            (b0, v0), (b1, v1) = below[-1], above[0]
            return v0 + (v1 - v0) * (batch - b0) / (b1 - b0)
        if above:  # smaller than anything measured: scale down from the smallest
            b1, v1 = above[0]
            base = v1 / (1.0 + self.prior_verify_slope * (b1 - 1))
            return base * (1.0 + self.prior_verify_slope * (batch - 1))
        # larger than anything measured
        b1, v1 = below[-1]
        one = self.verify[1].value if 1 in self.verify else v1 / (1.0 + self.prior_verify_slope * (b1 - 1))
        if optimistic or len(below) < 2:
            return v1 + self.prior_verify_slope * one * (batch - b1)
        b0, v0 = below[-2]
        slope = max(0.0, (v1 - v0) / (b1 - b0))
        return v1 + slope * (batch - b1)

    def draft_cost(self, k: int, optimistic: bool = False) -> float:
        """Seconds for a draft-model call drafting k tokens (measured, interpolated, or
        extrapolated like :meth:`verify_cost`)."""
        if k <= 0:
            return 0.0
        if k in self.draft:
            return self.draft[k].value
        if self.draft_decode.n:
            return (k + 1) * self.draft_decode.value
        pts = sorted((kk, rc.value) for kk, rc in self.draft.items())
        step = self.step_cost or 0.0
        if not pts:
            return self.prior_draft_share * step * k
        below = [(kk, v) for kk, v in pts if kk < k]
        above = [(kk, v) for kk, v in pts if kk > k]
        if below and above:
            (k0, v0), (k1, v1) = below[-1], above[0]
            return v0 + (v1 - v0) * (k - k0) / (k1 - k0)
        if above:
            k1, v1 = above[0]
            return v1 * k / k1
        k1, v1 = below[-1]
        if optimistic:
            return v1 + self.prior_draft_share * step * (k - k1)
        if len(below) >= 2:
            k0, v0 = below[-2]
            return v1 + max(0.0, (v1 - v0) / (k1 - k0)) * (k - k1)
        return v1 * k / k1

    def perfect_draft(self, k_max: int, draft_costs: bool = True) -> tuple[int, float] | None:
        """The draft length and seconds per emitted token of a draft that is always
        right (k + 1 tokens per step), at the measured costs: the least any draft can
        cost per token here. None until a target step was measured.

        Costs not measured are extrapolated as :meth:`verify_cost` does without
        optimism (the measured slope once two sizes were measured, the low prior
        slope before), so a machine is judged on what it was seen to cost."""
        best: tuple[int, float] | None = None
        for k in range(1, max(0, k_max) + 1):
            v = self.verify_cost(k + 1)
            if v is None or v <= 0:
                return None
            per_token = (v + (self.draft_cost(k) if draft_costs else 0.0)) / (k + 1)
            if best is None or per_token < best[1]:
                best = (k, per_token)
        return best

    def perfect_draft_bound(
        self, k_max: int, draft_costs: bool = True, catch_up_seconds: float = 0.0, tokens_left: float | None = None
    ) -> float | None:
        """The best speedup over target alone any draft could reach: acceptance 1 at
        every position. With ``catch_up_seconds`` (what the draft must evaluate before
        it can draft) and ``tokens_left``, the catch-up is paid once out of what a
        perfect draft could win over the rest of the answer. None until a target step
        was measured."""
        step = self.step_cost
        best = self.perfect_draft(k_max, draft_costs)
        if step is None or best is None:
            return None
        per_token = best[1]
        if tokens_left is None or catch_up_seconds <= 0:
            return step / per_token
        if tokens_left <= 0:
            return 0.0
        return tokens_left * step / (catch_up_seconds + tokens_left * per_token)

    def rates(
        self, alphas: Sequence[float], draft_costs: bool = True, optimistic: bool = False, extra: float = 0.0
    ) -> list[float | None]:
        """Predicted tokens/s for k = 0..len(alphas), None where no step cost is known;
        ``extra`` seconds are added to every k > 0 (a draft's catch-up)."""
        es = expected_tokens(alphas)
        out: list[float | None] = []
        for k, e in enumerate(es):
            v = self.verify_cost(k + 1, optimistic)
            if v is None or v <= 0:
                out.append(None)
                continue
            d = self.draft_cost(k, optimistic) if draft_costs else 0.0
            out.append(e / (v + d + (extra if k else 0.0)))
        return out

    # -- persistence: what was measured survives the process ---------------------

    def to_dict(self) -> dict:
        """Seconds per verify batch and per draft call, and how many measurements each rests on."""
        d_decode = {"draft_decode": [self.draft_decode.value, self.draft_decode.n]} if self.draft_decode.n else {}
        return {
            **d_decode,
            "verify": {str(b): rc.value for b, rc in sorted(self.verify.items())},
            "draft": {str(k): rc.value for k, rc in sorted(self.draft.items())},
            "counts": {
                "verify": {str(b): rc.n for b, rc in sorted(self.verify.items())},
                "draft": {str(k): rc.n for k, rc in sorted(self.draft.items())},
            },
        }

    @classmethod
    def from_dict(cls, d: dict, weight: int | None = None) -> CostModel:
        """Costs saved by :meth:`to_dict`. With ``weight``, each cost counts as at most
        that many measurements, so this run's own measurements soon outweigh it."""
        cm = cls()
        counts = d.get("counts") or {}
        for name, target in (("verify", cm.verify), ("draft", cm.draft)):
            ns = counts.get(name) or {}
            for key, v in (d.get(name) or {}).items():
                try:
                    value, n, size = float(v), int(ns.get(key, 1)), int(key)
                except (TypeError, ValueError):
                    continue
                if not (math.isfinite(value) and value > 0 and size > 0 and n > 0):
                    continue  # a damaged entry is simply not used
                target[size] = RunningCost.seeded(value, min(n, weight) if weight else n, far=FAR)
        dd = d.get("draft_decode")
        if isinstance(dd, (list, tuple)) and len(dd) == 2:
            try:
                value, n = float(dd[0]), int(dd[1])
            except (TypeError, ValueError):
                value, n = 0.0, 0
            if math.isfinite(value) and value > 0 and n > 0:
                cm.draft_decode = RunningCost.seeded(value, min(n, weight) if weight else n, far=FAR)
        return cm


@dataclass
class PositionAcceptance:
    """Acceptance per draft position, conditional on the position being reached.

    Counts decay (``decay`` per recorded step), so the estimate follows the text
    being written: a draft that was right about code may be wrong about a poem.
    """

    reached: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)
    decay: float = 0.97

    def record(self, n_drafted: int, n_accepted: int) -> None:
        n_reached = min(n_accepted + 1, n_drafted)
        while len(self.reached) < n_drafted:
            self.reached.append(0.0)
            self.accepted.append(0.0)
        if self.decay < 1.0:
            self.reached = [x * self.decay for x in self.reached]
            self.accepted = [x * self.decay for x in self.accepted]
        for i in range(n_reached):
            self.reached[i] += 1
        for i in range(n_accepted):
            self.accepted[i] += 1

    @property
    def ever_rejected(self) -> bool:
        """Whether a drafted token was ever rejected: a position reached more often
        than kept (both counts decay alike, so they stay equal while every token is kept)."""
        return any(r > a for r, a in zip(self.reached, self.accepted))

    @property
    def pooled(self) -> tuple[int, int]:
        return sum(self.accepted), sum(self.reached)

    def alphas(self, k: int, prior: float = 0.5, strength: float = 2.0, z: float = 0.0) -> list[float]:
        """Posterior mean (z=0) or an upper confidence bound (z>0) per position 1..k.

        Each position's prior is the pooled rate of all positions, so rarely reached
        positions borrow strength from the others.
        """
        acc, n = self.pooled
        pooled = (acc + prior * strength) / (n + strength)
        out = []
        for i in range(k):
            r = self.reached[i] if i < len(self.reached) else 0
            a = self.accepted[i] if i < len(self.accepted) else 0
            m = (a + pooled * 4.0) / (r + 4.0)
            if z > 0:
                m = min(1.0, m + z * math.sqrt(max(m * (1 - m), 0.02) / (r + 4.0)))
            out.append(m)
        return out

    def hopeful(self, k: int, z: float, prior: float = 0.5, strength: float = 2.0) -> list[float]:
        """Per position 1..k: where the position was ever reached, an upper confidence
        bound of its own estimate (as :meth:`alphas` with ``z``); where it never was, one
        of the pooled rate (all positions' verdicts, a token's acceptance as one rate).
        How far a draft all kept may grow: beyond the positions ever judged only the
        pooled rate speaks, and it is sure of itself once many tokens were judged (a
        draft right 90% of the time is not taken for one that is always right), unsure
        after a few (two tokens kept leave room for a draft that is always right)."""
        acc, n = self.pooled
        p = (acc + prior * strength) / (n + strength)
        up = min(1.0, p + z * math.sqrt(p * (1.0 - p) / (n + strength)))
        own = self.alphas(k, prior, strength, z)
        return [a if i < len(self.reached) and self.reached[i] > 0 else up for i, a in enumerate(own)]


class Outcome:
    """The realized cost of one arm over its recent steps: exponentially decayed sums
    of the tokens each step emitted (x) and what it cost (y), enough for the ratio
    y/x and its standard error (the delta method for a ratio estimator)."""

    __slots__ = ("w", "w2", "x", "y", "xx", "xy", "yy", "t", "_memo")

    def __init__(self) -> None:
        self.w = self.w2 = self.x = self.y = self.xx = self.xy = self.yy = 0.0
        self.t = 0  # the controller's step count at the last update
        self._memo: tuple | None = None  # (floor_cv, prior_steps, variance) until the next add

    @classmethod
    def seeded(cls, ratio: float, x_mean: float, sd: float, n: float) -> Outcome:
        """As if ``n`` steps of ``x_mean`` tokens had cost ``ratio`` per token, with a
        per-step residual standard deviation ``sd``."""
        o = cls()
        o.w, o.w2 = n, n
        o.x = n * x_mean
        o.y = ratio * o.x
        o.xx = n * x_mean * x_mean
        o.xy = ratio * o.xx
        o.yy = n * sd * sd + ratio * ratio * o.xx
        return o

    def add(self, x: float, y: float, decay: float, t: int) -> None:
        d = decay
        self.w = self.w * d + 1.0
        self.w2 = self.w2 * d * d + 1.0
        self.x = self.x * d + x
        self.y = self.y * d + y
        self.xx = self.xx * d + x * x
        self.xy = self.xy * d + x * y
        self.yy = self.yy * d + y * y
        self.t = t
        self._memo = None

    @property
    def n(self) -> float:
        """The effective number of steps the estimate rests on."""
        return self.w * self.w / self.w2 if self.w2 > 0 else 0.0

    @property
    def mean(self) -> float:
        return self.y / self.x if self.x > 0 else math.inf

    @property
    def x_mean(self) -> float:
        return self.x / self.w if self.w > 0 else 0.0

    def sd(self) -> float:
        """The per-step residual standard deviation, y - ratio * x."""
        if self.w <= 0 or self.x <= 0:
            return 0.0
        r = self.y / self.x
        return math.sqrt(max(0.0, (self.yy - 2.0 * r * self.xy + r * r * self.xx) / self.w))

    def var(self, floor_cv: float, prior_steps: float = 2.0) -> float:
        """The ratio's variance. The residual variance of a few steps is shrunk toward
        ``floor_cv`` of the mean step cost (``prior_steps`` of pseudo-weight): one step
        says nothing about the spread."""
        m = self._memo
        if m is not None and m[0] == floor_cv and m[1] == prior_steps:
            return m[2]
        if self.w <= 0 or self.x <= 0:
            return math.inf
        r = self.y / self.x
        s2 = max(0.0, (self.yy - 2.0 * r * self.xy + r * r * self.xx) / self.w)
        n = self.n
        prior = (floor_cv * self.y / self.w) ** 2
        extra = max(0.0, n - 1.0)
        s2 = (extra * s2 + prior_steps * prior) / (extra + prior_steps)
        xm = self.x / self.w
        v = s2 / n / (xm * xm)
        self._memo = (floor_cv, prior_steps, v)
        return v

    def se(self, floor_cv: float, prior_steps: float = 2.0) -> float:
        """The ratio's standard error (see :meth:`var`)."""
        return math.sqrt(self.var(floor_cv, prior_steps))
