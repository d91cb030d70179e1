"""Translated drafts: a draft model with *any* vocabulary proposes text, which is
re-tokenized with the target's tokenizer (universal assisted generation, as in
transformers' AssistedCandidateGeneratorDifferentTokenizers).

The draft generates greedily in its own tokens, so its proposal is a deterministic
function of the context: the verifier treats it as one-hot (q is None), exactly like
an n-gram lookup, which keeps both verifiers exact at T = 0 and T > 0. Acceptance and
cost are measured under their own source name, ``"translated"``.

Everything is aligned on *bytes of text*, and a step costs the same however long the
text is (the work is bounded by the look-behind windows and the text that is new):

- The target's sequence is kept as its text, with the byte offset where each target
  token ends (:class:`~.text_align.TokenText`: only new tokens' pieces are read).
- The draft side keeps the draft tokens that stand for that text and, beyond it, the
  draft's own continuation, each with the byte offset (in the same text) where it
  ends. While the draft's text holds the target's (the target accepted what the draft
  wrote, its own next token included), all of it is kept, so the continuation is never
  generated twice. Where the two part (a partial accept, a correction), the draft
  keeps the tokens that end inside the common text minus a small look-behind and
  re-tokenizes from there to the end of the target's text: the rollback happens in
  draft tokens, mapped through the text offsets, and the draft context then evaluates
  only what differs (its ``prefill`` keeps the common prefix).
- The draft context holds a window, the prefix and the draft tokens from ``w0`` on,
  within its own context size: when drafting would overflow it, the window moves on
  and keeps half of that context (evaluated again once), so a text for which the
  draft's vocabulary needs more tokens than its context holds never fails the answer.
- The draft's continuation (bytes) is appended to a window of the target's last few
  tokens, re-tokenized with the target's tokenizer, and aligned on the byte offset
  where the accepted text ends: what follows that boundary is the proposal, so a
  target token spread over several draft tokens is proposed whole. The last target
  token is held back (unless the draft ended its answer): more text could still
  merge into it. Where p-min stopped the draft, its text is final in this context,
  and the draft's own best guess at what follows (the token p-min refused) decides:
  if the target's tokenizer, given that guess after the text, still ends a token
  exactly where the text ends, the last token is proposed too (a same-vocabulary
  draft proposes every token it drafted; without this, a draft stopped after one
  target token's worth of text proposed nothing while it had paid for that token).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np

from ..backend import Backend, common_prefix_length
from ..sampling import SamplingParams, TopToken
from .base import EMPTY_DRAFT, TRANSLATED, Budget, Draft
from .text_align import TokenText, Tokenizer, common_bytes, complete_utf8, is_continuation, tokenize_span

__all__ = ["SOURCE", "Tokenizer", "TranslatedDraftProposer", "common_bytes", "complete_utf8", "tokenize_span"]

SOURCE = TRANSLATED


class TranslatedDraftProposer:
    """A draft model with another vocabulary, drafting greedily; see the module
    docstring. ``prefix``: tokens the draft context starts with (its BOS, when its
    vocabulary adds one), covering no text."""

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
        top = TopToken(p_min)

        def pick(rows: np.ndarray) -> tuple[int, float]:
            return top(rows[0])  # read where the row lies: nothing copied

        self._pick = pick
        self.reset_state()

    # -- state -------------------------------------------------------------------------

    def reset_state(self) -> None:
        # The target's sequence as text.
        self._target = TokenText(self.ttok)
        # The draft's tokens for (a prefix of) the text plus its own continuation, each
        # with its end offset in the same text coordinates; the text they spell.
        self._dtoks: list[int] = []
        self._dends: list[int] = []
        self._dtext = bytearray()
        self._agree = 0  # bytes of _dtext known to equal the target's text
        # The continuation stopped for good: the draft ended its answer, or p-min stopped
        # it (the same context would stop it again); cleared when the texts part.
        self._ended = False
        self._halted = False
        # When p-min stopped it: the bytes of the token it refused, its best guess at
        # what follows its text (decides whether the last target token is complete).
        self._guess = b""
        self._w0 = 0  # the draft context's window: prefix + _dtoks[_w0:]
        # Diagnostics: the last step's draft tokens generated and kept from the step
        # before, and target tokens proposed.
        self.last_generated = 0
        self.last_reused = 0
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
        """The draft-side tokens standing for the text, and the continuation (prefix not
        included)."""
        return list(self._dtoks)

    @property
    def draft_ends(self) -> list[int]:
        return list(self._dends)

    @property
    def window_start(self) -> int:
        """The first draft token the draft context holds (after the prefix)."""
        return self._w0

    def _follow(self, seq: Sequence[int]) -> None:
        self._agree = min(self._agree, self._target.follow(seq))

    def _sync(self) -> bool:
        """Bring the draft tokens in step with the target's text (re-tokenizing only
        where they part); False when the draft's tokenizer does not spell that window
        back (then it holds the common part only, and does not draft this step)."""
        text = self._target.text
        a = min(self._agree, len(self._dtext))
        cp = a + common_bytes(memoryview(self._dtext)[a:], memoryview(text)[a:])
        if cp >= len(text):
            self._agree = len(text)  # the draft's text holds the target's: keep it all
            return True
        self._ended = self._halted = False
        self._guess = b""
        i = bisect.bisect_right(self._dends, cp)  # tokens wholly inside the common text
        j = max(0, i - self.lookbehind)
        if j < self._w0 < i:
            j = self._w0  # the look-behind stays inside the window
        while j > 0 and self._dends[j - 1] < len(text) and is_continuation(text[self._dends[j - 1]]):
            j -= 1
        start = self._dends[j - 1] if j else 0
        end = complete_utf8(text)
        got = tokenize_span(self.dtok, bytes(text[start:end]))
        if got is None:
            self._truncate(i)  # only the tokens inside the common text still stand for it
            return False
        ids, ends = got
        self._truncate(j)
        self._dtoks += ids
        self._dends += [start + e for e in ends]
        self._dtext += text[start:end]
        self._agree = len(self._dtext)
        return True

    def _truncate(self, j: int) -> None:
        """Keep the first ``j`` draft tokens and their text."""
        cut = self._dends[j - 1] if j else 0
        del self._dtoks[j:], self._dends[j:], self._dtext[cut:]
        self._agree = min(self._agree, cut)
        self._w0 = min(self._w0, j)  # the window starts again where the text parted before it

    def _fit(self, extra: int) -> bool:
        """Keep the window with room for ``extra`` more tokens in the draft's context:
        when it would overflow, move it on to keep half of the context. False when not
        even one draft token and ``extra`` fit."""
        room = self.ctx.n_ctx - len(self.prefix)
        if len(self._dtoks) - self._w0 + extra <= room:
            return True
        keep = min(room // 2, room - extra)
        if keep < 1:
            return False
        w0 = len(self._dtoks) - keep
        while w0 < len(self._dtoks) - 1 and is_continuation(self._dtext[self._dends[w0 - 1]]):
            w0 += 1  # the window starts on a character
        self._w0 = max(self._w0, w0)
        return True

    def _window(self) -> list[int]:
        self._w0 = min(self._w0, max(0, len(self._dtoks) - 1))  # it holds a token, when there is one
        return self.prefix + self._dtoks[self._w0 :]

    def _behind(self, full: list[int]) -> int:
        return len(full) - min(common_prefix_length(self.ctx.history, full), max(len(full) - 1, 0))

    def _wanted(self, k: int) -> int:
        """Draft tokens of continuation for k target tokens and the one held back."""
        return min(self.max_draft_tokens, math.ceil((k + 1) * self.ratio) + 1)

    # -- the proposer interface --------------------------------------------------------

    def prepare(self, prompt: Sequence[int], budget: Budget) -> int:
        if len(prompt) <= 1:
            return 0
        self._follow(prompt[:-1])
        if not self._sync() or not (self.prefix or self._dtoks) or not self._fit(self._wanted(1)):
            return 0
        full = self._window()
        if budget(SOURCE, self._behind(full)) <= 0:
            return 0
        self.ctx.prefill(full, logits=False)
        return self.ctx.last_prefill_evaluated

    def propose(self, seq: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator) -> Draft:
        self.last_generated, self.last_reused, self.last_proposed, self.last_dropped = 0, 0, (), None
        self._follow(seq)
        text = self._target.text
        if complete_utf8(text) != len(text):
            return EMPTY_DRAFT  # the target is inside a character: wait for its end
        if not self._sync() or not (self.prefix or self._dtoks):
            return EMPTY_DRAFT
        k = budget(SOURCE, self._behind(self._window()))
        if k <= 0:
            return EMPTY_DRAFT
        first = bisect.bisect_right(self._dends, len(text))  # the continuation's first token
        self.last_reused = len(self._dtoks) - first
        n_gen = 0 if self._ended or self._halted else max(0, self._wanted(k) - self.last_reused)
        synced = self._generate(n_gen) if n_gen and self._fit(n_gen) else 0
        cont = bytes(self._dtext[len(text) :])
        tokens = self._to_target(text, cont, self._ended)
        n_cont = len(self._dtoks) - first
        if tokens and n_cont:
            # Draft tokens per target token, for the next step's draft length.
            self.ratio = min(4.0, max(0.5, 0.8 * self.ratio + 0.2 * n_cont / (len(tokens) + (not self._ended))))
        tokens = tokens[:k]
        self.last_proposed = tuple(tokens)
        if not tokens:
            return Draft(source=SOURCE, synced=synced)
        return Draft(tokens=tuple(tokens), source=SOURCE, synced=synced)

    def _generate(self, n: int) -> int:
        """Extend the continuation by up to ``n`` draft tokens, greedily (the last one is
        not evaluated: a later step does that, or drops it); returns how many tokens the
        draft context evaluated to catch up first."""
        full = self._window()
        n = min(n, self.ctx.n_ctx - len(full) + 1)
        out = self.ctx.prefill(full, fn=self._pick)
        synced = self.ctx.last_prefill_evaluated
        self._guess = b""
        for i in range(n):
            t, conf = out
            if self.ctx.is_eog(t):
                self._ended = True
                break
            if self.p_min > 0 and conf < self.p_min:
                self._halted = True
                self._guess = self.dtok.token_bytes(t)
                break
            self._dtoks.append(t)
            self._dtext += self.dtok.token_bytes(t)
            self._dends.append(len(self._dtext))
            self.last_generated += 1
            if i + 1 < n:
                out = self.ctx.eval([t], all_rows=False, fn=self._pick)
        return synced

    def _to_target(self, text: bytearray, cont: bytes, ended: bool) -> list[int]:
        """Target tokens for ``cont`` after ``text``: a window of the target's last tokens
        plus the continuation, re-tokenized and cut at the end of the accepted text."""
        if not cont:
            return []
        whole = True  # cont is the draft's text to its end (nothing cut off)
        if not ended:
            n = complete_utf8(cont)
            whole = n == len(cont)
            cont = cont[:n]
        tends = self._target.ends
        a = max(0, len(tends) - self.target_lookbehind)
        while a > 0 and tends[a - 1] < len(text) and is_continuation(text[tends[a - 1]]):
            a -= 1
        for start in (tends[a - 1] if a else 0, len(text)):
            window = bytes(text[start:])
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
            if not ended and out and not (whole and self._complete(window + cont, ids)):
                self.last_dropped = out[-1]
                out = out[:-1]  # it may still merge with text the draft has not written
            return out
        return []

    def _complete(self, text: bytes, ids: list[int]) -> bool:
        """Whether the last of ``ids`` (``text`` re-tokenized) is complete: p-min stopped
        the draft right after ``text``, and with its best guess at what follows, the
        target's tokenizer still spells ``text`` as ``ids`` and ends a token there."""
        guess = self._guess
        if not (self._halted and guess):
            return False
        got = tokenize_span(self.ttok, text + guess)
        return got is not None and got[0][: len(ids)] == ids and len(ids) < len(got[1]) and got[1][len(ids) - 1] == len(text)
