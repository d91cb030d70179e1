"""Two vocabularies over one text: the byte helpers the translated proposer aligns
tokens with, and a token sequence kept as its text incrementally.

Pure Python over bytes; a tokenizer is the small :class:`Tokenizer` protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..backend import common_prefix_length


class Tokenizer(Protocol):
    """One model's tokenizer, as the translated proposer needs it."""

    def tokenize(self, text: str) -> list[int]:
        """Plain text to tokens: no BOS/EOS added, special tokens (e.g. ``<|im_start|>``)
        parsed, no leading space added."""

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for (special tokens rendered as their text)."""


def is_continuation(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


def complete_utf8(data: bytes | bytearray | memoryview) -> int:
    """Length of the longest prefix of ``data`` that does not end inside a UTF-8
    character (a character split across tokens is not complete yet)."""
    n = len(data)
    i = n - 1
    # Walk back over at most 3 continuation bytes to the lead byte.
    while i >= 0 and n - i <= 4 and is_continuation(data[i]):
        i -= 1
    if i < 0:
        return n
    lead = data[i]
    need = 1 if lead < 0x80 else 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1
    return n if n - i >= need else i


def common_bytes(a: bytes | bytearray, b: bytes | bytearray) -> int:
    """How many leading bytes ``a`` and ``b`` share (memcmp-speed bisection)."""
    ma, mb = memoryview(a), memoryview(b)
    n = min(len(ma), len(mb))
    if ma[:n] == mb[:n]:
        return n
    lo, hi = 0, n  # ma[:lo] == mb[:lo], ma[:hi] != mb[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ma[:mid] == mb[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def tokenize_span(tok: Tokenizer, data: bytes) -> tuple[list[int], list[int]] | None:
    """Tokens of ``data`` and the byte offset (within ``data``) where each ends, or None
    when the tokens' bytes do not spell ``data`` back (a normalizing tokenizer). A
    tokenizer that adds a leading space (SentencePiece) is allowed for: the space is
    not counted."""
    if not data:
        return [], []
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return None
    ids = tok.tokenize(text)
    pieces = [tok.token_bytes(t) for t in ids]
    joined = b"".join(pieces)
    shift = len(joined) - len(data)
    if shift < 0 or shift > 1 or joined[shift:] != data or (shift and joined[:1] != b" "):
        return None
    ends: list[int] = []
    pos = -shift
    for p in pieces:
        pos += len(p)
        ends.append(max(pos, 0))
    return ids, ends


class TokenText:
    """A token sequence as its text, followed incrementally: the tokens, their text and
    the byte offset where each token ends. Following the next sequence costs the pieces
    of its new tokens only: the decoder hands over the same list every step, and it
    only grows within an answer (any other sequence is compared with the one held, at
    C speed, and what differs is replaced)."""

    def __init__(self, tok: Tokenizer) -> None:
        self.tok = tok
        self.tokens: list[int] = []
        self.text = bytearray()
        self.ends: list[int] = []
        self._ref: Sequence[int] | None = None  # the list followed last

    def follow(self, seq: Sequence[int]) -> int:
        """Hold ``seq``; return the byte offset up to which the text is unchanged."""
        n_old = len(self.tokens)
        if seq is self._ref and len(seq) >= n_old and (n_old == 0 or seq[n_old - 1] == self.tokens[-1]):
            c = n_old
        else:
            c = common_prefix_length(self.tokens, seq)
        self._ref = seq
        kept = self.ends[c - 1] if c else 0
        if c < n_old:
            del self.tokens[c:]
            del self.ends[c:]
            del self.text[kept:]
        for t in seq[c:]:
            t = int(t)
            self.text += self.tok.token_bytes(t)
            self.tokens.append(t)
            self.ends.append(len(self.text))
        return kept
