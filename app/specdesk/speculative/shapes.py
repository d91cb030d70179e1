"""What a change of batch shape costs a context, learnt from its own decodes.

llama.cpp reuses a context's graph only while the batch keeps its shape (its tokens
and the rows of logits asked for): each change builds and allocates the graph again,
and on CUDA runs without, then re-captures, its CUDA graph. On a GPU that is
milliseconds of host time (1.1 ms for a 7B target's step after a verify batch, 3 ms
for a draft's), a cost a steady run of drafting never pays but a lone probe pays on
every batch. :class:`ShapeTimer` keeps each shape's steady seconds (decodes that kept
the shape) and, from decodes that changed to a shape whose steady cost is known, what
a change adds; a changed decode's share of that change is then known for any shape, so
that auto can take a probe's batches for what they cost in a steady run.
"""

from __future__ import annotations

import math

from .costmodel import RunningCost


class ShapeTimer:
    def __init__(self) -> None:
        self.steady: dict[tuple[int, int], RunningCost] = {}
        self.change = RunningCost()
        self.last: tuple[int, int] = (0, 0)
        self.changes = 0  # decodes that changed the shape, ever

    def record(self, shape: tuple[int, int], seconds: float) -> tuple[bool, float]:
        """One decode of ``shape`` (tokens, rows of logits) that took ``seconds``:
        whether it changed the shape, and the seconds of it the change is taken to
        have cost: 0 where it did not change, NaN where it did and no change was
        measured yet (its time says nothing yet of what the shape costs steadily)."""
        changed = shape != self.last and self.last[0] > 0
        self.last = shape
        if not changed:
            rc = self.steady.get(shape)
            if rc is None:
                rc = self.steady[shape] = RunningCost()
            rc.add(seconds)
            return False, 0.0
        self.changes += 1
        base = self.steady.get(shape)
        if base is not None and base.n:
            extra = max(0.0, seconds - base.value)
            self.change.add(extra)
            return True, min(seconds, extra)
        return True, min(seconds, self.change.value) if self.change.n else math.nan

    @property
    def cost(self) -> float:
        """What a change of shape is taken to cost (NaN before one was measured)."""
        return self.change.value if self.change.n else math.nan
