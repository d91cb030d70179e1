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

from ..backend import common_prefix_length
from ..sampling import SamplingParams
from .base import EMPTY_DRAFT, NGRAM, Budget, Draft


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


def _char(token: int) -> str:
    """A token as one character (code points skip the UTF-16 surrogates)."""
    return chr(token + 2048 if token >= 0xD800 else token)


class SuffixMatcher:
    """:func:`find_ngram`'s answer for a sequence that grows, without a pass over the
    sequence in Python or NumPy per step.

    The sequence is held as a string of one character per token, so that the most
    recent earlier occurrence of its last L tokens is one ``str.rfind`` (C speed). A
    suffix that occurred earlier has every shorter suffix occurring there too, so the
    longest match is found by doubling L, then halving the gap: about log2(32) searches
    for the longest, and fewer for the short matches that are the rule. Among the
    occurrences of the longest match (capped at ``max_match``) the most recent one wins,
    exactly as :func:`find_ngram` chooses.

    The decoder hands over the same list every step, and it only grows within an
    answer: only its new tokens are appended. Any other sequence is compared with the
    one held (C speed), and held anew when it differs.
    """

    def __init__(self, max_match: int = 32) -> None:
        self.max_match = max_match
        self._tokens: list[int] = []
        self._text = ""
        self._ref: Sequence[int] | None = None
        self._memo: tuple | None = None

    def __len__(self) -> int:
        return len(self._tokens)

    def follow(self, seq: Sequence[int]) -> None:
        """Hold ``seq``."""
        n_old = len(self._tokens)
        if seq is self._ref and len(seq) >= n_old and (n_old == 0 or seq[n_old - 1] == self._tokens[-1]):
            c = n_old
        else:
            c = common_prefix_length(self._tokens, seq)
        self._ref = seq
        if c == n_old == len(seq):
            return
        self._memo = None
        new = [int(t) for t in seq[c:]]
        if c < n_old:
            del self._tokens[c:]
            self._text = self._text[:c]
        self._tokens += new
        self._text += "".join(map(_char, new))

    def match(self, max_tokens: int, min_match: int = 1) -> NgramMatch | None:
        """find_ngram(held sequence, max_tokens, min_match, max_match)."""
        n = len(self._tokens)
        key = (n, max_tokens, min_match)
        if self._memo is not None and self._memo[0] == key:
            return self._memo[1]
        m = None
        if max_tokens > 0 and n >= max(2, min_match + 1):
            text, top = self._text, min(self.max_match, n - 1)
            found, start = 0, -1  # the longest suffix known to occur earlier, and where
            length = 1
            while length <= top:  # doubling
                s = text.rfind(text[n - length :], 0, n - 1)
                if s < 0:
                    break
                found, start = length, s
                length *= 2
            missing = min(length, top + 1)  # the shortest suffix known not to occur earlier
            while missing - found > 1:  # halving
                mid = (found + missing) // 2
                s = text.rfind(text[n - mid :], 0, n - 1)
                if s < 0:
                    missing = mid
                else:
                    found, start = mid, s
            if found >= max(1, min_match):
                e = start + found
                m = NgramMatch(length=found, start=e, tokens=tuple(self._tokens[e : e + max_tokens]))
        self._memo = (key, m)
        return m


class NgramProposer:
    """Prompt lookup over prompt + output; the controller decides how much of the
    continuation to use from the match length."""

    drafts = True
    native_seconds = 0.0

    def __init__(self, min_match: int = 1, max_match: int = 32, max_tokens: int = 16) -> None:
        self.min_match = min_match
        self.max_match = max_match
        self.max_tokens = max_tokens
        self._matcher = SuffixMatcher(max_match)

    def lookup(self, seq: Sequence[int]) -> NgramMatch | None:
        self._matcher.follow(seq)
        return self._matcher.match(self.max_tokens, self.min_match)

    def prepare(self, prompt: Sequence[int], budget: Budget) -> int:
        self._matcher.follow(prompt)  # the prompt is indexed in the prompt phase
        return 0

    def propose(self, seq: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator) -> Draft:
        return self.draft_from(self.lookup(seq), budget)

    @staticmethod
    def draft_from(m: NgramMatch | None, budget: Budget) -> Draft:
        """The draft for a match, as long as the controller wants it."""
        if m is None:
            return EMPTY_DRAFT
        k = min(budget(NGRAM, m.length), len(m.tokens))
        if k <= 0:
            return EMPTY_DRAFT
        return Draft(tokens=m.tokens[:k], source=NGRAM, match_length=m.length, match_start=m.start)

    def reset(self) -> None:
        pass
