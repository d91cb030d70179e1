"""History lookup: draft by copying what followed the same tokens in earlier turns
(the idea of vLLM's suffix decoding / Arctic Inference, with an n-gram table in
place of a suffix tree).

The index keeps the token sequences of earlier turns (and, optionally, of the user's
other chats), at most ``max_tokens`` of them: the oldest are dropped first. A table
maps every n-gram of ``min_n..max_n`` tokens to the position after its most recent
occurrence. Adding a turn costs O(tokens * levels); a lookup costs O(levels) table
probes plus the copied continuation, independent of how long the history is.

The proposal is a deterministic function of the context, verified as a lookup
(q one-hot), under the source name ``"history"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..sampling import SamplingParams
from .base import EMPTY_DRAFT, HISTORY, Budget, Draft

SOURCE = HISTORY
_SEP = -1  # between documents: no n-gram spans it, no continuation crosses it


@dataclass(frozen=True)
class HistoryMatch:
    length: int  # how many trailing context tokens matched (at least the n-gram, up to max_match)
    start: int  # global position in the index where the continuation starts
    tokens: tuple[int, ...]


class HistoryIndex:
    """A bounded, incremental n-gram index over earlier token sequences."""

    def __init__(self, max_tokens: int = 65_536, min_n: int = 2, max_n: int = 8, max_match: int = 32) -> None:
        if max_tokens <= 0:
            raise ValueError(f"the history must keep at least one token, got {max_tokens}")
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.max_tokens = max_tokens
        self.min_n = min_n
        self.max_n = max_n
        self.max_match = max(max_match, max_n)
        self._buf: list[int] = []  # tokens and separators
        self._base = 0  # global position of _buf[0]
        self._table: dict[tuple[int, ...], int] = {}
        self._tokens = 0  # real tokens kept (separators not counted)

    def __len__(self) -> int:
        """Tokens kept (separators not counted)."""
        return self._tokens

    def clear(self) -> None:
        self._base += len(self._buf)  # positions are never reused
        self._buf.clear()
        self._table.clear()
        self._tokens = 0

    def _keys_before(self, p: int):
        """The n-grams ending just before global position ``p`` (with a token at p)."""
        i = p - self._base
        buf = self._buf
        run = 0  # tokens before i with no separator among them, up to max_n
        while run < self.max_n and i - run - 1 >= 0 and buf[i - run - 1] != _SEP:
            run += 1
        for n in range(self.min_n, run + 1):
            yield tuple(buf[i - n : i])

    def add(self, tokens: Sequence[int]) -> None:
        """Add one document (a turn: its prompt part and answer, or an answer alone)."""
        toks = [int(t) for t in tokens]
        if not toks:
            return
        if len(toks) > self.max_tokens:
            toks = toks[-self.max_tokens :]
        if self._buf and self._buf[-1] != _SEP:
            self._buf.append(_SEP)
        for t in toks:
            self._buf.append(t)
            p = self._base + len(self._buf) - 1
            for gram in self._keys_before(p):
                self._table[gram] = p
        self._tokens += len(toks)
        self._evict()

    def _evict(self) -> None:
        excess = self._tokens - self.max_tokens
        if excess <= 0:
            return
        # Drop the oldest positions up to (and including) the excess-th real token.
        drop = 0
        real = 0
        while real < excess:
            if self._buf[drop] != _SEP:
                real += 1
            drop += 1
        while drop < len(self._buf) and self._buf[drop] == _SEP:
            drop += 1
        # Remove the entries that point into the dropped part, and those whose n-gram
        # starts there (so every entry's n-gram lies in the kept buffer: the table holds
        # at most (max_n - min_n + 1) entries per kept token).
        first = self._base + drop
        end = self._base + len(self._buf)
        for p in range(self._base + 1, min(first + self.max_n, end)):
            for gram in self._keys_before(p):
                if p >= first and len(gram) <= p - first:
                    continue
                if self._table.get(gram) == p:
                    del self._table[gram]
        del self._buf[:drop]
        self._base += drop
        self._tokens -= excess

    def lookup(self, context: Sequence[int], max_tokens: int) -> HistoryMatch | None:
        """The continuation after the longest (then most recent) earlier occurrence of the
        context's suffix, or None when no suffix of ``min_n`` tokens occurred."""
        if max_tokens <= 0 or len(context) < self.min_n:
            return None
        top = min(self.max_n, len(context))
        tail = tuple(int(t) for t in context[-top:])
        for n in range(top, self.min_n - 1, -1):
            p = self._table.get(tail[top - n :])
            if p is None:
                continue
            i = p - self._base
            if i - n < 0 or i >= len(self._buf):
                continue  # a stale entry (cannot happen after _evict, but never trust it)
            # Extend the match backwards (bounded) to report its true length.
            length = n
            while length < self.max_match and length < len(context) and i - length - 1 >= 0:
                b = self._buf[i - length - 1]
                if b == _SEP or b != int(context[-length - 1]):
                    break
                length += 1
            cont: list[int] = []
            for t in self._buf[i : i + max_tokens]:
                if t == _SEP:
                    break
                cont.append(t)
            if not cont:
                continue
            return HistoryMatch(length=length, start=p, tokens=tuple(cont))
        return None


class HistoryProposer:
    """Lookups over earlier turns (see :class:`HistoryIndex`). The session adds each
    finished turn with :meth:`remember`; the controller sizes the draft from the match
    length, as for n-gram lookups."""

    drafts = True
    native_seconds = 0.0

    def __init__(self, index: HistoryIndex | None = None, max_tokens: int = 16) -> None:
        self.index = index if index is not None else HistoryIndex()
        self.max_tokens = max_tokens

    def remember(self, tokens: Sequence[int]) -> None:
        self.index.add(tokens)

    def lookup(self, seq: Sequence[int]) -> HistoryMatch | None:
        return self.index.lookup(seq, self.max_tokens)

    def prepare(self, prompt: Sequence[int], budget: Budget) -> int:
        return 0

    def propose(self, seq: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator) -> Draft:
        return self.draft_from(self.lookup(seq), budget)

    @staticmethod
    def draft_from(m: HistoryMatch | None, budget: Budget) -> Draft:
        """The draft for a match, as long as the controller wants it."""
        if m is None:
            return EMPTY_DRAFT
        k = min(budget(SOURCE, m.length), len(m.tokens))
        if k <= 0:
            return EMPTY_DRAFT
        # match_start is left None: the copied tokens are not in the sequence itself
        # (the decoder maps match_start into the sequence wherever it is set).
        return Draft(tokens=m.tokens[:k], source=SOURCE, match_length=m.length)

    def reset(self) -> None:
        pass  # the history outlives one generation
