"""Draft tokens with a DFlash head: a block of draft tokens from one decode.

The head (the engine's ``DFlashHeads``, a scripted fake in tests) holds the target's
features of every position the target decoded (``history``: it follows the sequence
lazily, injecting what is new when it drafts), and decodes ``[pending, mask, ...]``
at once with attention across the block: each mask position's row is its own
distribution over the token at that position, computed without the tokens drafted
before it.

Exact as every proposer: at temperature 0 each position's argmax, cut where its
probability falls below ``p_min``; above it each position's token is sampled from that
row's warped distribution, which is the q the verifier's rejection rule needs (a draft
token does not depend on the ones before it, so that row is its whole proposal
distribution).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import numpy as np

from ..backend import common_prefix_length
from ..sampling import SamplingParams, TopToken, warp_support
from .base import DFLASH, EMPTY_DRAFT, Budget, Draft, DraftTokens

T = TypeVar("T")

SOURCE = DFLASH


class DFlashBackend(Protocol):
    """What the dflash proposer needs of a DFlash head."""

    @property
    def n_vocab(self) -> int: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def max_draft(self) -> int:
        """The most tokens a block drafts (its trained block size less the anchor)."""

    native_seconds: float
    # The tokens whose features the head holds, one position each.
    history: list[int]
    # How many positions the last block injected first.
    last_prefill_evaluated: int

    def sync(self, tokens: Sequence[int]) -> int:
        """Hold the features of every position of ``tokens``; how many it injected."""

    def block(self, seq: Sequence[int], k: int, fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T:
        """``fn`` of the rows (shape (k, n_vocab)) of ``k`` draft tokens after ``seq``."""

    def rollback(self, n_past: int) -> None: ...


class DFlashProposer:
    """Greedy at temperature 0 (cut below ``p_min``, llama.cpp's --draft-p-min, which its
    DFlash driver applies too), sampling each position with its q above it."""

    drafts = True

    def __init__(self, head: DFlashBackend, n_vocab_target: int, p_min: float = 0.75) -> None:
        if not 0.0 <= p_min < 1.0:
            raise ValueError(f"p-min must be in [0, 1), got {p_min}")
        self.head = head
        self.p_min = p_min
        self.n_common = min(head.n_vocab, n_vocab_target)
        self._top = TopToken(p_min)
        self._drafted_at: int | None = None  # len(seq) when the head last drafted

    @property
    def native_seconds(self) -> float:
        return self.head.native_seconds

    def prepare(self, prompt: Sequence[int], budget: Budget) -> int:
        """During the prompt phase: the head takes the prompt's features (but the last
        token's, which the target has not decoded), unless auto would not draft."""
        if len(prompt) > 1 and budget(SOURCE, 1) > 0:
            n = self.head.sync(list(prompt[:-1]))
            self._drafted_at = len(prompt)
            return n
        return 0

    def catch_up(self, seq: Sequence[int]) -> int:
        """The positions the head must take in before drafting after ``seq`` beyond what
        a step that drafted leaves it (as the MTP proposer counts them)."""
        known = common_prefix_length(self.head.history, seq)
        n = max(0, len(seq) - 1 - known)
        if self._drafted_at is not None and self.head.history and known >= self._drafted_at - 1:
            return min(n, 2)
        return n

    def propose(self, seq: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator) -> Draft:
        synced = self.catch_up(seq)
        k = min(budget(SOURCE, synced), self.head.max_draft, self.head.n_ctx - len(seq))
        if k <= 0 or len(seq) < 1:
            self._drafted_at = None
            return EMPTY_DRAFT
        n = self.n_common
        if params.greedy:
            def read(rows: np.ndarray) -> list:
                return [self._top(rows[i, :n]) for i in range(len(rows))]
        else:
            def read(rows: np.ndarray) -> list:
                return [warp_support(rows[i, :n], params) for i in range(len(rows))]
        reads = self.head.block(seq, k, fn=read)
        self._drafted_at = len(seq)
        drafted = DraftTokens(params, rng, self.p_min)
        for r in reads:
            if drafted.take(r) is None:
                break
        return drafted.draft(SOURCE, synced=synced)

    def reset(self) -> None:
        self.head.rollback(0)
        self._drafted_at = None
