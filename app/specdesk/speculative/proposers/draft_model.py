"""Draft tokens from a second, smaller model sharing the target's vocabulary."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..backend import Backend, common_prefix_length
from ..costmodel import one_off_excess
from ..sampling import SamplingParams, TopToken
from .base import DRAFT, EMPTY_DRAFT, Budget, Draft, DraftTokens, Source, row_reader


def _unread(rows: np.ndarray) -> None:
    return None


class DraftModelProposer:
    """At temperature 0 it drafts greedily; above it samples from its own warped
    distribution and keeps q (over its support) for the verifier; either way it reads
    the draft's logits where llama.cpp wrote them, copying no row. It stops early when its top
    probability falls below ``p_min`` (llama.cpp's --draft-p-min).

    The draft context follows the sequence lazily: each call rolls it back to the
    longest common prefix with the sequence and evaluates only what is new: the one
    token the target added. To keep it one, the draft evaluates its last drafted token
    too (its row is not read): after a full accept it holds every token but the
    target's bonus. Every decode of the draft is then a single token with its row, one
    batch shape, so llama.cpp reuses its graph from decode to decode; a two-token
    catch-up after each full accept changed the shape twice a step, and each change
    rebuilt the graph (on a GPU, 3.3 ms to launch the catch-up, 7 ms a step in all at
    k=8, against 1.3 ms for the decode it adds).
    """

    drafts = True

    def __init__(self, ctx: Backend, n_vocab_target: int, p_min: float = 0.75, source: Source = DRAFT) -> None:
        if not 0.0 <= p_min < 1.0:
            raise ValueError(f"p-min must be in [0, 1), got {p_min}")
        self.ctx = ctx
        self.source = source  # what its drafts carry: a draft model's, or another model source's
        self.p_min = p_min
        self.n_vocab_target = n_vocab_target
        # Logits are compared over the common range when the vocab sizes differ.
        self.n_common = min(ctx.n_vocab, n_vocab_target)
        self._top = TopToken(p_min)

    @property
    def native_seconds(self) -> float:
        return self.ctx.native_seconds

    def prepare(self, prompt: Sequence[int], budget: Budget) -> int:
        """Evaluate the prompt on the draft during the prompt phase (as the target
        does), unless the controller would not draft at all: then it stays lazy.
        Returns how many tokens it evaluated (a reused prefix is not evaluated)."""
        if len(prompt) > 1 and budget(self.source, 1) > 0:
            self.ctx.prefill(list(prompt[:-1]), logits=False)
            return self.ctx.last_prefill_evaluated
        return 0

    def catch_up(self, seq: Sequence[int]) -> int:
        """How many tokens the draft context must evaluate before drafting after seq."""
        return len(seq) - min(common_prefix_length(self.ctx.history, seq), len(seq) - 1)

    def propose(self, seq: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator) -> Draft:
        k = budget(self.source, self.catch_up(seq))
        # The draft evaluates seq plus the k drafted tokens.
        k = min(k, self.ctx.n_ctx - len(seq))
        if k <= 0:
            return EMPTY_DRAFT
        pick = row_reader(params, self._top, self.n_common)
        ctx = self.ctx
        out = ctx.prefill(seq, fn=pick)
        synced = ctx.last_prefill_evaluated
        reshape = ctx.last_reshape_seconds if synced else 0.0
        drafted = DraftTokens(params, rng, self.p_min)
        steady: list[float] = []
        for i in range(k):
            t = drafted.take(out)
            if t is None:
                break
            # the last token's row is asked for and not read: the same shape as the rest
            t0 = ctx.native_seconds
            out = ctx.eval([t], all_rows=False, fn=pick if i + 1 < k else _unread)
            if ctx.last_shape_changed:
                reshape += ctx.last_reshape_seconds
            else:
                steady.append(ctx.native_seconds - t0)
        oneoff = one_off_excess(steady)
        return drafted.draft(self.source, synced=synced, steady=(sum(steady) - oneoff, len(steady)), reshape=reshape,
                             oneoff=oneoff)

    def reset(self) -> None:
        self.ctx.rollback(0)
