"""Draft tokens with an EAGLE-3 head: a one-layer decoder that reads, at each position,
the token after it and a projection of the target's inputs of three of its layers
there (the engine's ``Eagle3Heads``).

It drafts as the MTP heads do (:mod:`.mtp`), through the same protocol: the head
follows the sequence lazily (``prefill``: the pairs the target's last decodes made
possible, whose last row gives the first draft token), then one ``eval`` per further
token on the head's own state, positions it never keeps. Exact as every proposer: at
temperature 0 it drafts its argmax, above it it samples from its own warped
distribution and hands that q to the verifier.

A head's first position pairs the second token with the target's features at the
first: after a one-token sequence there is nothing to draft from.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..sampling import SamplingParams
from .base import EAGLE3, EMPTY_DRAFT, Budget, Draft
from .mtp import MtpBackend, MtpProposer

SOURCE = EAGLE3


class Eagle3Proposer(MtpProposer):
    """The MTP heads' loop over an EAGLE-3 head; its drafts carry the ``eagle3`` source."""

    def __init__(self, head: MtpBackend, n_vocab_target: int, p_min: float = 0.75) -> None:
        super().__init__(head, n_vocab_target, p_min=p_min, source=SOURCE)

    def propose(self, seq: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator) -> Draft:
        if len(seq) < 2:
            return EMPTY_DRAFT
        return super().propose(seq, budget, params, rng)
