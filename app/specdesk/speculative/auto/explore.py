"""What exploring may cost: drafting's cost beyond target alone for the same tokens,
held to a share of target alone's expected time, and the doubling wait between
explorations of a k the estimate doubts."""

from __future__ import annotations


class Exploration:
    """``spent``: seconds drafting cost beyond target alone this session (every
    drafting step, its catch-up, the first target step after it and the draft's prompt
    prefill; steps that won give it back), of which ``entry`` the draft's first prompt
    prefill (the entry ticket: a draft model never tried evaluates the prompt up front,
    and its first probe is not held back by that). ``allowance``: ``share`` of target
    alone's time for the session's tokens and the room left in this answer."""

    def __init__(self, share: float, first_gap: int, max_gap: int) -> None:
        self.share, self.first_gap, self.max_gap = share, first_gap, max_gap
        self.spent = 0.0
        self.entry = 0.0
        self.tokens = 0  # tokens emitted this session
        self.room = 0  # the room left in the answer at the last decision
        self.gap: dict[str, int] = {}  # per arm: steps to wait between explorations
        self.since: dict[str, int] = {}  # per arm: steps since the last exploration

    def allowance(self, step_seconds: float | None, room: int | None = None) -> float:
        if step_seconds is None:
            return 0.0
        return self.share * step_seconds * (self.tokens + (self.room if room is None else room))

    def affords(self, cost: float, allowance: float, credit: float = 0.0) -> bool:
        return self.spent - credit + cost <= allowance

    def charge(self, seconds: float, entry: bool = False) -> None:
        self.spent += seconds
        if entry:
            self.entry += seconds

    def due(self, arm: str) -> bool:
        """Counts a step of ``arm`` that no k is estimated to pay for; whether an
        exploration is due."""
        since = self.since.get(arm, 1 << 30) + 1
        self.since[arm] = since
        return since >= self.gap.get(arm, 0)

    def explored(self, arm: str) -> None:
        """An exploration was made: the next waits twice as long (8, 16, ... steps)."""
        self.since[arm] = 0
        self.gap[arm] = min(self.max_gap, max(self.first_gap, 2 * self.gap.get(arm, 0)))
