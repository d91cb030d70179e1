"""One-offs: a call far dearer than expected (a context's first decode, a page fault, a
GC pause, another process's burst) is not taken for what drafting costs until it is
measured again.

The trap they set: the draft's prompt prefill, its first decode, once cost 300 ms on a
GPU where its steady price is 0.05 ms a token. Taken as the price of a catch-up and
charged to the exploration budget, it spent the budget, so no probe ran, so the draft
fell behind, so every catch-up looked too dear, so none was ever measured and the price
never corrected: auto drafted nothing for the rest of the answer. The rule here: what
rests on one call far from what was expected is held, and the next call of the same
kind decides: far too, it was real (both count, and the budget is charged the excess
then: beyond the budget, auto loses at most the excess of that one re-measurement);
near, it was a one-off (its excess is dropped).
"""

from __future__ import annotations


class OneOffs:
    """Held excesses per kind (a judge's key): what a step cost beyond ``far`` times
    what it was expected to cost."""

    def __init__(self, far: float) -> None:
        self.far = far
        self.held: dict[str, float] = {}
        self.dropped = 0  # one-offs found, for a person's curiosity and the tests

    def take(self, kind: str, seconds: float, expected: float, setup: bool = False) -> tuple[float, float]:
        """A step of ``kind`` that took ``seconds`` where ``expected`` was predicted:
        (the seconds to count now, the seconds of an earlier held excess now confirmed).
        A step whose backend says it paid a set-up (``setup``: a batch shape's first
        use) has all its excess held."""
        held = self.held.pop(kind, None)
        limit = (1.0 if setup else self.far) * expected
        if expected > 0 and seconds > limit:
            if held is None:
                self.held[kind] = seconds - limit  # re-measured before it counts
                return limit, 0.0
            return seconds, held  # twice far: what it costs now
        if held is not None:
            self.dropped += 1
        return seconds, 0.0


class Prefill:
    """The draft's prompt prefill, held until its price per token is confirmed: by the
    draft's single decode where it costs no more a token (a batch never costs more per
    token than its tokens decoded one by one, beyond a one-off), else by a catch-up
    measured in the loop, the same kind of call, which re-measures it."""

    def __init__(self, tokens: int, seconds: float, charge: bool) -> None:
        self.tokens, self.seconds, self.charge = tokens, seconds, charge

    @property
    def per_token(self) -> float:
        return self.seconds / self.tokens

    def settle(self, far: float, caught_up: float | None, one: float | None) -> tuple[bool, float] | None:
        """(whether it was real, the seconds to charge for it), or None to wait:
        ``caught_up`` is the catch-ups' price per token as measured, ``one`` the draft's
        single decode. Over ``far`` times the catch-ups' price, it was a one-off, charged
        at that price."""
        if caught_up is None:
            if one is None or self.per_token > one:
                return None  # dearer a token than a single decode: a catch-up re-measures it first
            return True, self.seconds if self.charge else 0.0
        real = self.per_token <= far * caught_up
        return real, (self.seconds if real else self.tokens * caught_up) if self.charge else 0.0
