"""The judge: a sequential test on each arm's drafting, per band of draft lengths,
against target alone; and each arm's outcome per draft length, which corrects the
prior where it was measured."""

from __future__ import annotations

from ..costmodel import Outcome
from .outcomes import add_clipped, judge_key, ratio


class Judges:
    """``sources``: the judges, one per arm and band (:func:`judge_key`); ``arms``:
    per arm, the outcome of each draft length (catch-ups left out); ``drafting``: the
    judges whose arm drafts because it was measured cheaper."""

    def __init__(self, decay: float, clip: float, floor_cv: float, stale_steps: float, z_refute: float,
                 min_refute_steps: float) -> None:
        self.decay, self.clip, self.floor_cv, self.stale_steps = decay, clip, floor_cv, stale_steps
        self.z_refute, self.min_refute_steps = z_refute, min_refute_steps
        self.sources: dict[str, Outcome] = {}
        self.arms: dict[str, list[Outcome | None]] = {}
        self.versions: dict[str, int] = {}  # per arm: how many outcomes were added (for caches)
        self.drafting: set[str] = set()

    def ratio(self, key: str, t: tuple[float, float] | None, now: int) -> tuple[float, float, float] | None:
        return ratio(self.sources.get(key), t, now, self.floor_cv, self.stale_steps)

    def verdict(self, key: str, t: tuple[float, float], now: int, z_on: float, z_keep: float, asked: bool, due: bool,
                stale: bool) -> tuple[bool, bool]:
        """Whether the judge ``key`` has drafting measured cheaper (below 1 by ``z_on``
        standard errors, or while drafting by ``z_keep``), and whether target alone
        should be timed again first: ``asked`` (a timing under way), or, when a timing
        is ``due``, drafting's comparison rests on an old or ``stale`` timing, or target
        alone's own uncertainty is most of the doubt."""
        o = self.sources.get(key)
        cheaper = again = False
        if o is not None and o.x > 0 and key in self.drafting and z_keep <= 0 and o.y < o.x * t[0]:
            cheaper = True  # drafting, and still below 1: the interval need not be looked at
            again = asked or stale
        elif o is not None:
            j = self.ratio(key, t, now)
            if j is not None:
                r, se, target_share = j
                cheaper = r + (z_keep if key in self.drafting else z_on) * se < 1.0
                again = asked or (not cheaper and target_share > 0.5 and due)
        if not cheaper:
            self.drafting.discard(key)
        return cheaper, again

    def refuted(self, key: str, t: tuple[float, float] | None, now: int) -> bool:
        """Measured dearer than target alone: above 1 by ``z_refute`` standard errors,
        over ``min_refute_steps`` steps at least."""
        j = self.ratio(key, t, now)
        return j is not None and j[0] - self.z_refute * j[1] > 1.0 and self.sources[key].n >= self.min_refute_steps

    def refuted_bands(self, arm: str, t: tuple[float, float] | None, now: int, bands: range) -> set[int]:
        return {b for b in bands if self.refuted(arm if b == 0 else f"{arm}#{b}", t, now)}

    def add(self, arm: str, k: int, k_max: int, emitted: int, seconds: float, caught_up: float, now: int,
            judged: bool) -> None:
        """A drafting step of ``arm`` at ``k``: to its band's judge (unless it was an
        exploration, ``judged`` False) and to its k's outcome (its catch-up left out)."""
        if judged:
            key = judge_key(arm, k)
            o = self.sources.get(key)
            if o is None:
                o = self.sources[key] = Outcome()
            add_clipped(o, emitted, seconds, self.decay, now, self.clip)
        arms = self.arms.get(arm)
        if arms is None:
            arms = self.arms[arm] = [None] * (k_max + 1)
        if k < len(arms):
            o = arms[k]
            if o is None:
                o = arms[k] = Outcome()
            add_clipped(o, emitted, seconds - caught_up, self.decay, now, self.clip)
            self.versions[arm] = self.versions.get(arm, 0) + 1
