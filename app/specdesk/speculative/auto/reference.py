"""Target alone's cost per token, as it runs alone: the yardstick every draft is
judged against, kept robust to a machine that slows a step now and then."""

from __future__ import annotations

from ..costmodel import Outcome
from .outcomes import staleness

_seconds = lambda pair: pair[1]  # noqa: E731 - of a (step, seconds) pair


class TargetAlone:
    """Seconds per token of target-alone steps. A step slowed by something else on the
    machine (another process, the app's own start-up work) counts as at most ``spike``
    times the fastest recent one: target alone's cost must not be inflated, or drafting
    would look cheaper than it is. It decays per step of the session (``decay`` a
    step), not per target step: timed rarely while drafting pays, its last timing
    counts most."""

    def __init__(self, floor_cv: float, decay: float, spike: float, stale_steps: float) -> None:
        self.floor_cv, self.decay, self.spike, self.stale_steps = floor_cv, decay, spike, stale_steps
        self.outcome = Outcome()
        self.steps = 0  # target steps counted
        self.recent: list[tuple[int, float]] = []  # (step, seconds per token) of recent target steps
        self._cache: tuple[int, tuple[float, float] | None] = (-1, None)
        # timing it again on purpose (REFERENCE): the step asked at, and the steps left
        self.asked_at = 0
        self.left = 0

    @property
    def t(self) -> int:
        """The step it was last timed at."""
        return self.outcome.t

    def observe(self, now: int, seconds: float) -> bool:
        """A target step's seconds per token; True where it showed the steps counted so
        far were slowed (far faster than them), and the count started again from it."""
        recent = self.recent
        recent.append((now, seconds))
        while len(recent) > 16 or (len(recent) > 2 and now - recent[0][0] > 64):
            del recent[0]  # the last 16 target steps, or fewer: those of the last 64 steps
        y = min(seconds, self.spike * min(recent, key=_seconds)[1])
        o = self.outcome
        restart = o.x > 0 and y < 0.5 * o.y / o.x
        if restart:
            # far faster than what was counted: the earlier steps were slowed (nothing
            # makes a step faster than its compute), start again from this one
            self.outcome = o = Outcome()
            del recent[:-1]
        o.add(1.0, y, self.decay ** max(1, min(64, now - o.t)), now)
        self.steps += 1
        self._cache = (-1, None)
        return restart

    def value(self, now: int) -> tuple[float, float] | None:
        """Seconds per token and the standard error (None before a step)."""
        c = self._cache
        if c[0] == now:
            return c[1]
        o = self.outcome
        t = None
        if o.x > 0:
            mean = o.y / o.x
            if self.recent:  # the slowed first steps of a session do not hold it up either
                mean = min(mean, self.spike * min(x for _, x in self.recent))
            t = (mean, o.se(self.floor_cv) * staleness(now, o, self.stale_steps))
        self._cache = (now, t)
        return t

    def ask(self, now: int) -> None:
        """Time it again, in two steps: the first after drafting pays for the draft's
        run (its weights took the caches) and is not counted."""
        if self.left <= 0:
            self.left = 2
        self.left -= 1
        self.asked_at = now
