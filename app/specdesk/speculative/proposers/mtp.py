"""Draft tokens with the target's own multi-token-prediction (NextN) heads.

The heads are a small network that reads the target's hidden state with the token
that state predicted, and guesses the token after it. The proposer talks to them
through :class:`MtpBackend` (the engine's ``MtpHeads`` on llama.cpp, a scripted fake in
tests), as the draft-model proposer talks to a :class:`~..backend.Backend`.

Drafting is the draft model's, with what the heads need: the heads' context follows
the sequence lazily, each call making it hold the sequence (``prefill``: the tokens
the target accepted since the last draft and the pending token, each paired with the
target's hidden state, in one batch whose last row gives the first draft token), then
one ``eval`` per further token on the heads' own state. Drafted positions are never
reused (their state was the heads', not the target's), so after every step the
heads evaluate the tokens the target accepted: that batch is part of what a draft
costs, and ``Draft.synced`` counts only what lies beyond it (after steps that drafted
nothing), as auto prices a draft model's catch-up.

Exact as every proposer: at temperature 0 the heads draft their argmax, above it they
sample from their own warped distribution and hand it to the verifier as q.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import numpy as np

from ..backend import common_prefix_length
from ..sampling import SamplingParams, TopToken
from .base import EMPTY_DRAFT, MTP, Budget, Draft, DraftTokens, Source, row_reader

T = TypeVar("T")

SOURCE = MTP


class MtpBackend(Protocol):
    """What the mtp proposer needs of a model's NextN heads."""

    @property
    def n_vocab(self) -> int: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def max_draft(self) -> int | None:
        """The most tokens one draft can have (chained heads: one each), None for no limit."""

    # Cumulative seconds inside the native decode calls.
    native_seconds: float
    # The tokens the heads hold, each paired with the target's hidden state before it.
    history: list[int]
    # How many tokens the last prefill evaluated.
    last_prefill_evaluated: int

    def prefill(self, tokens: Sequence[int], logits: bool = True,
                fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T | None:
        """Hold exactly ``tokens`` (paired with the target's states), evaluating what
        is new; ``fn`` of the last position's logits row (shape (1, n_vocab)), or None
        with ``logits=False``."""

    def eval(self, tokens: Sequence[int], all_rows: bool = False,
             fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T:
        """The next draft position: ``tokens[0]`` (the token just drafted) on the heads'
        own state; ``fn`` of its logits row."""

    def rollback(self, n_past: int) -> None: ...


class MtpProposer:
    """Greedy at temperature 0 (stopping early below ``p_min``, llama.cpp's
    --draft-p-min, which its MTP driver applies too), sampling with q above it."""

    drafts = True

    def __init__(self, heads: MtpBackend, n_vocab_target: int, p_min: float = 0.75, source: Source = SOURCE) -> None:
        if not 0.0 <= p_min < 1.0:
            raise ValueError(f"p-min must be in [0, 1), got {p_min}")
        self.heads = heads
        self.p_min = p_min
        #: the source its drafts carry (heads of other kinds that draft this way: eagle3)
        self.source = source
        self.n_common = min(heads.n_vocab, n_vocab_target)
        self._top = TopToken(p_min)
        self._drafted_at: int | None = None  # len(seq) when the heads last drafted

    @property
    def native_seconds(self) -> float:
        return self.heads.native_seconds

    def prepare(self, prompt: Sequence[int], budget: Budget) -> int:
        """During the prompt phase: the heads read the prompt (but its last token)
        beside the target, unless auto would not draft."""
        if len(prompt) > 1 and budget(self.source, 1) > 0:
            self.heads.prefill(list(prompt[:-1]), logits=False)
            self._drafted_at = len(prompt)  # in step with the target, as after a draft
            return self.heads.last_prefill_evaluated
        return 0

    def catch_up(self, seq: Sequence[int]) -> int:
        """The tokens the heads must read before drafting after ``seq`` that a step
        which drafted would not have left them (what auto prices as a catch-up): 1 or 2
        in step, more after steps without drafts."""
        n = len(seq) - min(common_prefix_length(self.heads.history, seq), len(seq) - 1)
        if self._drafted_at is not None and self.heads.history and common_prefix_length(self.heads.history, seq) >= self._drafted_at - 1:
            return min(n, 2)  # only what the last verify added: part of the draft's own cost
        return n

    def propose(self, seq: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator) -> Draft:
        synced = self.catch_up(seq)
        k = budget(self.source, synced)
        k = min(k, self.heads.n_ctx - len(seq) + 1)
        if self.heads.max_draft is not None:
            k = min(k, self.heads.max_draft)
        if k <= 0:
            self._drafted_at = None  # the heads fall behind: what they miss is a catch-up
            return EMPTY_DRAFT
        pick = row_reader(params, self._top, self.n_common)
        out = self.heads.prefill(seq, fn=pick)
        self._drafted_at = len(seq)
        drafted = DraftTokens(params, rng, self.p_min)
        for i in range(k):
            t = drafted.take(out)
            if t is None:
                break
            if i + 1 < k:
                out = self.heads.eval([t], fn=pick)
        return drafted.draft(self.source, synced=synced)

    def reset(self) -> None:
        self.heads.rollback(0)
        self._drafted_at = None
