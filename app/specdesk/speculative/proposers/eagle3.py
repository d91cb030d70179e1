"""Draft tokens with an EAGLE-3 head: a one-layer decoder that reads, at each position,
the token after it and a projection of the target's inputs of three of its layers
there (the engine's ``Eagle3Heads``).

It drafts as the MTP heads do (:mod:`.mtp`), through the same protocol: the head
follows the sequence lazily (``prefill``: the pairs the target's last decodes made
possible, whose last row gives the first draft token), then one ``eval`` per further
token on the head's own state, positions it never keeps. Exact as every proposer: at
temperature 0 it drafts its argmax, above it it samples from its own warped
distribution and hands that q to the verifier.
"""

from __future__ import annotations

from .base import EAGLE3
from .mtp import MtpBackend, MtpProposer

SOURCE = EAGLE3


def Eagle3Proposer(head: MtpBackend, n_vocab_target: int, p_min: float = 0.75) -> MtpProposer:
    """The proposer drafting with ``head``; its drafts carry the ``eagle3`` source."""
    return MtpProposer(head, n_vocab_target, p_min=p_min, source=SOURCE)
