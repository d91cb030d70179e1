"""Translated drafts: a draft model with *any* vocabulary proposes text, which is
re-tokenized with the target's tokenizer (universal assisted generation, as in
transformers' AssistedCandidateGeneratorDifferentTokenizers).

The draft generates greedily in its own tokens, so its proposal is a deterministic
function of the context: the verifier treats it as one-hot (q is None), exactly like
an n-gram lookup, which keeps both verifiers exact at T = 0 and T > 0. Acceptance and
cost are measured under their own source name, ``"translated"``.

Everything is aligned on *bytes of text*:

- The target's sequence is kept as its text, with the byte offset where each target
  token ends.
- The draft side keeps the draft tokens that stand for that text, each with the byte
  offset (in the same text) where it ends. When the target's text moves on (a partial
  accept, a correction), the draft keeps the tokens that end inside the common text
  minus a small look-behind, and re-tokenizes the rest of the text from there: the
  rollback happens in draft tokens, mapped through the text offsets, and the draft
  context then evaluates only what differs (its ``prefill`` keeps the common prefix).
- The draft's continuation (bytes) is appended to a window of the target's last few
  tokens, re-tokenized with the target's tokenizer, and aligned on the byte offset
  where the accepted text ends: what follows that boundary is the proposal, so a
  target token spread over several draft tokens is proposed whole. The last target
  token is dropped (unless the draft ended its answer): more draft text could still
  merge into it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..backend import Backend, common_prefix_length
from ..sampling import SamplingParams, top_token
from .base import EMPTY_DRAFT, Budget, Draft

SOURCE = "translated"


class Tokenizer(Protocol):
    """One model's tokenizer, as the translated proposer needs it."""

    def tokenize(self, text: str) -> list[int]:
        """Plain text to tokens: no BOS/EOS added, special tokens (e.g. ``<|im_start|>``)
        parsed, no leading space added."""

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for (special tokens rendered as their text)."""


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


def complete_utf8(data: bytes | bytearray | memoryview) -> int:
    """Length of the longest prefix of ``data`` that does not end inside a UTF-8
    character (a character split across tokens is not complete yet)."""
    n = len(data)
    i = n - 1
    # Walk back over at most 3 continuation bytes to the lead byte.
    while i >= 0 and n - i <= 4 and _is_continuation(data[i]):
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


class TranslatedDraftProposer:
    """A draft model with another vocabulary, drafting greedily; see the module
    docstring. ``prefix``: tokens the draft context starts with (its BOS, when its
    vocabulary adds one), covering no text."""

    name = SOURCE
    drafts = True

    def __init__(
        self,
        ctx: Backend,
        draft_tokenizer: Tokenizer,
        target_tokenizer: Tokenizer,
        *,
        prefix: Sequence[int] = (),
        p_min: float = 0.0,
        lookbehind: int = 4,
        target_lookbehind: int = 4,
        max_draft_tokens: int = 48,
        ratio: float = 1.3,
    ) -> None:
        if not 0.0 <= p_min < 1.0:
            raise ValueError(f"p-min must be in [0, 1), got {p_min}")
        if lookbehind < 1 or target_lookbehind < 1:
            raise ValueError("the look-behind windows must hold at least one token")
        self.ctx = ctx
        self.dtok = draft_tokenizer
        self.ttok = target_tokenizer
        self.prefix = [int(t) for t in prefix]
        self.p_min = p_min
        self.lookbehind = lookbehind
        self.target_lookbehind = target_lookbehind
        self.max_draft_tokens = max_draft_tokens
        # Draft tokens per target token (running estimate): how many draft tokens to
        # generate for a budget of k target tokens.
        self.ratio = ratio
        self.reset_state()

    # -- state -------------------------------------------------------------------------

    def reset_state(self) -> None:
        # The target's sequence as text: its tokens, the text, and each token's end offset.
        self._seq: list[int] = []
        self._text = bytearray()
        self._ends: list[int] = []
        # The draft's tokens for (a prefix of) the text plus its own continuation, each
        # with its end offset in the same text coordinates; the text they spell.
        self._dtoks: list[int] = []
        self._dends: list[int] = []
        self._dtext = b""
        # Diagnostics: the last step's draft tokens generated and target tokens proposed.
        self.last_generated = 0
        self.last_proposed: tuple[int, ...] = ()
        self.last_dropped: int | None = None  # the trailing target token held back, if any

    @property
    def native_seconds(self) -> float:
        return self.ctx.native_seconds

    def reset(self) -> None:
        self.ctx.rollback(0)
        self.reset_state()

    @property
    def draft_tokens(self) -> list[int]:
        """The draft-side tokens standing for the text (prefix not included)."""
        return list(self._dtoks)

    @property
    def draft_ends(self) -> list[int]:
        return list(self._dends)

    def _target_text(self, seq: Sequence[int]) -> bytes:
        """The sequence's text, updated incrementally (pieces of the new tokens only)."""
        n_old = len(self._seq)
        if len(seq) >= n_old and list(seq[:n_old]) == self._seq:
            c = n_old
        else:
            c = common_prefix_length(self._seq, seq)
        del self._seq[c:]
        del self._ends[c:]
        del self._text[(self._ends[-1] if self._ends else 0) :]
        for t in seq[c:]:
            self._text += self.ttok.token_bytes(int(t))
            self._seq.append(int(t))
            self._ends.append(len(self._text))
        return bytes(self._text)

    def _sync(self, text: bytes) -> None:
        """Bring the draft tokens in step with ``text`` (re-tokenizing only its tail)."""
        cp = common_bytes(self._dtext, text)
        i = bisect.bisect_right(self._dends, cp)  # tokens wholly inside the common text
        j = max(0, i - self.lookbehind)
        while j > 0 and self._dends[j - 1] < len(text) and _is_continuation(text[self._dends[j - 1]]):
            j -= 1
        start = self._dends[j - 1] if j else 0
        tail = text[start : complete_utf8(text)]
        got = tokenize_span(self.dtok, tail) if tail else ([], [])
        if got is None and j:
            # A window the draft tokenizer does not spell back: re-tokenize from the start.
            j, start, tail = 0, 0, text[: complete_utf8(text)]
            got = tokenize_span(self.dtok, tail)
        ids, ends = got if got is not None else ([], [])
        self._dtoks = self._dtoks[:j] + ids
        self._dends = self._dends[:j] + [start + e for e in ends]
        self._dtext = text[: self._dends[-1]] if self._dends else b""

    # -- the proposer interface --------------------------------------------------------

    def _behind(self) -> int:
        full = self.prefix + self._dtoks
        return len(full) - min(common_prefix_length(self.ctx.history, full), max(len(full) - 1, 0))

    def prepare(self, prompt: Sequence[int], budget: Budget) -> int:
        if len(prompt) <= 1:
            return 0
        self._sync(self._target_text(prompt[:-1]))
        full = self.prefix + self._dtoks
        if not full or budget(SOURCE, self._behind()) <= 0:
            return 0
        self.ctx.prefill(full, logits=False)
        return self.ctx.last_prefill_evaluated

    def propose(self, seq: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator) -> Draft:
        self.last_generated, self.last_proposed, self.last_dropped = 0, (), None
        text = self._target_text(seq)
        if complete_utf8(text) != len(text):
            return EMPTY_DRAFT  # the target is inside a character: wait for its end
        self._sync(text)
        full = self.prefix + self._dtoks
        if not full:
            return EMPTY_DRAFT
        k = budget(SOURCE, self._behind())
        if k <= 0:
            return EMPTY_DRAFT
        # Draft tokens for k target tokens plus the trailing one that is held back.
        n_draft = min(self.max_draft_tokens, math.ceil((k + 1) * self.ratio) + 1, self.ctx.n_ctx - len(full) + 1)
        if n_draft <= 0:
            return EMPTY_DRAFT
        confident = self.p_min > 0

        def pick(rows: np.ndarray) -> tuple[int, float]:
            return top_token(rows[0], confident)  # read where the row lies: nothing copied

        out = self.ctx.prefill(full, fn=pick)
        synced = self.ctx.last_prefill_evaluated
        gen: list[int] = []
        ended = False
        for i in range(n_draft):
            t, conf = out
            if self.ctx.is_eog(t):
                ended = True
                break
            if self.p_min > 0 and conf < self.p_min:
                break
            gen.append(t)
            if i + 1 < n_draft:
                out = self.ctx.eval([t], all_rows=False, fn=pick)
        self.last_generated = len(gen)
        pieces = [self.dtok.token_bytes(t) for t in gen]
        cont = b"".join(pieces)
        # Remember the continuation: the next step keeps what the target accepted.
        pos = len(text)
        for t, p in zip(gen, pieces):
            pos += len(p)
            self._dtoks.append(t)
            self._dends.append(pos)
        self._dtext = text + cont
        tokens = self._to_target(text, cont, ended)
        if tokens and gen:
            # Draft tokens per target token, for the next step's draft length.
            self.ratio = min(4.0, max(0.5, 0.8 * self.ratio + 0.2 * len(gen) / (len(tokens) + (not ended))))
        tokens = tokens[:k]
        self.last_proposed = tuple(tokens)
        if not tokens:
            return Draft(source=SOURCE, synced=synced)
        return Draft(tokens=tuple(tokens), source=SOURCE, synced=synced)

    def _to_target(self, text: bytes, cont: bytes, ended: bool) -> list[int]:
        """Target tokens for ``cont`` after ``text``: a window of the target's last tokens
        plus the continuation, re-tokenized and cut at the end of the accepted text."""
        if not cont:
            return []
        if not ended:
            cont = cont[: complete_utf8(cont)]
        n = len(self._seq)
        a = max(0, n - self.target_lookbehind)
        while a > 0 and self._ends[a - 1] < len(text) and _is_continuation(text[self._ends[a - 1]]):
            a -= 1
        for start in (self._ends[a - 1] if a else 0, len(text)):
            window = text[start:]
            got = tokenize_span(self.ttok, window + cont)
            if got is None:
                continue
            ids, ends = got
            # The boundary: a token must end exactly where the accepted text ends.
            b = bisect.bisect_left(ends, len(window))
            if len(window) == 0:
                m = 0
            elif b < len(ends) and ends[b] == len(window):
                m = b + 1
            else:
                continue  # a target token straddles the accepted end: try the bare continuation
            out = ids[m:]
            if not ended and out:
                self.last_dropped = out[-1]
                out = out[:-1]  # it may still merge with text the draft has not written
            return out
        return []
