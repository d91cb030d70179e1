"""No proposer: the target alone, through the same loop and timers as the others."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..sampling import SamplingParams
from .base import EMPTY_DRAFT, Budget, Draft


class NoProposer:
    drafts = False
    native_seconds = 0.0

    def prepare(self, prompt: Sequence[int], budget: Budget) -> int:
        return 0

    def propose(self, seq: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator) -> Draft:
        return EMPTY_DRAFT

    def reset(self) -> None:
        pass
