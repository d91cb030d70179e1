"""Hybrid: copy from an n-gram match when there is one worth using, else ask the
draft model."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..sampling import SamplingParams
from .base import Budget, Draft
from .draft_model import DraftModelProposer
from .ngram import NgramProposer


class HybridProposer:
    name = "hybrid"

    def __init__(self, draft: DraftModelProposer, ngram: NgramProposer | None = None) -> None:
        self.draft = draft
        self.ngram = ngram or NgramProposer()

    @property
    def native_seconds(self) -> float:
        return self.draft.native_seconds

    def prepare(self, prompt: Sequence[int], budget: Budget) -> None:
        self.draft.prepare(prompt, budget)

    def propose(self, seq: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator) -> Draft:
        d = self.ngram.propose(seq, budget, params, rng)
        if len(d):
            return d
        return self.draft.propose(seq, budget, params, rng)

    def reset(self) -> None:
        self.draft.reset()
        self.ngram.reset()
