"""N-gram prompt lookup: draft by copying what followed the same tokens before.

A pure matcher (as llama.cpp's ngram-simple and vLLM's ngram proposer): find the
longest suffix of the sequence that occurred earlier, and propose the tokens that
followed its most recent occurrence. The match length is returned too: a long match
is a much better predictor than a short one, and the controller uses it to decide
how far to draft.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..sampling import SamplingParams
from .base import EMPTY_DRAFT, Budget, Draft


@dataclass(frozen=True)
class NgramMatch:
    length: int  # how many trailing tokens matched (capped at max_match)
    start: int  # index in the sequence where the copied continuation starts
    tokens: tuple[int, ...]  # the continuation, at most max_tokens long


def find_ngram(
    tokens: Sequence[int] | np.ndarray,
    max_tokens: int,
    min_match: int = 1,
    max_match: int = 32,
) -> NgramMatch | None:
    """Longest earlier occurrence of the sequence's suffix, most recent first.

    Returns None when no suffix of at least ``min_match`` tokens occurred before
    (with at least one token after it), or when ``max_tokens`` is 0.
    """
    arr = np.asarray(tokens, dtype=np.int64)
    n = arr.shape[0]
    if max_tokens <= 0 or n < min_match + 1:
        return None
    # Candidate occurrence ends e (exclusive): arr[e-1] == arr[n-1], with e <= n-1
    # so that at least one continuation token arr[e] exists.
    ends = np.flatnonzero(arr[: n - 1] == arr[n - 1]) + 1
    length = 1
    while ends.shape[0] and length < max_match and length < n - 1:
        ok = ends - 1 - length >= 0
        nxt = ends[ok]
        nxt = nxt[arr[nxt - 1 - length] == arr[n - 1 - length]]
        if nxt.shape[0] == 0:
            break
        ends = nxt
        length += 1
    if ends.shape[0] == 0 or length < min_match:
        return None
    e = int(ends[-1])  # most recent occurrence
    cont = arr[e : e + max_tokens]
    return NgramMatch(length=length, start=e, tokens=tuple(int(t) for t in cont))


class NgramProposer:
    """Prompt lookup over prompt + output; the controller decides how much of the
    continuation to use from the match length."""

    name = "ngram"
    drafts = True
    native_seconds = 0.0

    def __init__(self, min_match: int = 1, max_match: int = 32, max_tokens: int = 16) -> None:
        self.min_match = min_match
        self.max_match = max_match
        self.max_tokens = max_tokens

    def lookup(self, seq: Sequence[int]) -> NgramMatch | None:
        return find_ngram(seq, self.max_tokens, self.min_match, self.max_match)

    def prepare(self, prompt: Sequence[int], budget: Budget) -> int:
        return 0

    def propose(self, seq: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator) -> Draft:
        m = self.lookup(seq)
        if m is None:
            return EMPTY_DRAFT
        k = min(budget("ngram", m.length), len(m.tokens))
        if k <= 0:
            return EMPTY_DRAFT
        return Draft(tokens=m.tokens[:k], source="ngram", match_length=m.length, match_start=m.start)

    def reset(self) -> None:
        pass
