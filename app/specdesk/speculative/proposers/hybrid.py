"""Hybrid: copy the longest match there is (from the prompt and the answer so far, or
from earlier turns), else ask the draft model (same vocabulary or translated)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..sampling import SamplingParams
from .base import EMPTY_DRAFT, Budget, Draft, Proposer
from .history import HistoryProposer
from .ngram import NgramProposer


class HybridProposer:
    drafts = True

    def __init__(self, draft: Proposer, ngram: NgramProposer | None = None,
                 history: HistoryProposer | None = None) -> None:
        self.draft = draft
        self.ngram = ngram or NgramProposer()
        self.history = history

    @property
    def native_seconds(self) -> float:
        return self.draft.native_seconds

    def prepare(self, prompt: Sequence[int], budget: Budget) -> int:
        self.ngram.prepare(prompt, budget)
        return self.draft.prepare(prompt, budget)

    def propose(self, seq: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator) -> Draft:
        m = self.ngram.lookup(seq)
        h = self.history.lookup(seq) if self.history is not None else None
        if h is not None and (m is None or h.length > m.length):
            d = self.history.draft_from(h, budget)
        elif m is not None:
            d = self.ngram.draft_from(m, budget)
        else:
            d = EMPTY_DRAFT
        if len(d):
            return d
        return self.draft.propose(seq, budget, params, rng)

    def reset(self) -> None:
        self.draft.reset()
        self.ngram.reset()
