"""Draft length: what the decode loop asks of a controller (:class:`Controller`), a
fixed k (:class:`FixedK`), and the records a decision leaves (:class:`Decision`,
:class:`StepCost`, :class:`Estimate`). ``auto``, which drafts only while drafting
has been measured to pay, is :mod:`specdesk.speculative.auto`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol


# Why a step drafted what it did (Decision.reason).
FIRST_STEP = "first step"  # auto measures a few plain target steps before anything else
REFERENCE = "measuring target alone"  # undecided mostly because target alone's cost is unsure
LAST_TOKEN = "last token"  # no room left to draft
BOUND = "bound<1"  # even a draft that is always right cannot pay at the measured costs
CATCH_UP = "catch-up too dear"  # the draft's catch-up costs more than drafting wins over the answer left
PROBE = "probe"  # drafting where the estimate says it pays, within the budget, while the outcome is undecided
EXPLORE = "explore"  # a k the estimate doubts but an optimistic view does not, within the budget
CHEAPER = "measured cheaper"  # the source's drafting was measured cheaper per token than target alone
LONGER = "longer, all accepted"  # the last draft was all accepted: a longer one, within the budget
DEARER = "measured dearer"  # the source's drafting was measured dearer than target alone
ESTIMATED = "estimated dearer"  # no k is estimated to pay for this arm now (prior and outcomes)
BUDGET_SPENT = "probe budget spent"  # undecided, but exploring has cost its share
FIXED = "fixed"  # a fixed k
NO_CANDIDATE = "no candidate"  # the proposer had nothing to offer (no n-gram match)
TARGET_ALONE = "target alone"  # no proposer



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
        if self.reason in (CHEAPER, LONGER):
            what = f"k={self.k} {self.reason}"
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
    # Of the verify's and the draft's seconds, what changes of batch shape are taken to
    # have cost (a graph built again): a steady run of drafting does not pay them.
    verify_reshape: float = 0.0
    draft_reshape: float = 0.0
    # What a change of shape costs the target, as learnt so far (NaN: not yet).
    verify_change_cost: float = float("nan")
    # The draft model's single-token decodes that kept their shape: (seconds, how many).
    draft_steady: tuple[float, int] = (0.0, 0)
    # Of the draft's seconds, what one-offs among its decodes took (not what drafting costs).
    draft_oneoff: float = 0.0

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
