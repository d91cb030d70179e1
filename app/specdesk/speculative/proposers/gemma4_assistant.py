"""Draft tokens with a Gemma 4 assistant: a small network that shares the target's KV
cache and reads the target's hidden state with the token that state predicted.

The proposer talks to it through :class:`AssistantBackend` (the engine's
``Gemma4Assistant`` on llama.cpp, a scripted fake in tests). Unlike a draft model or
the MTP heads it holds nothing of its own: its attention reads the target's cache, so
there is never anything to catch up on (``Draft.synced`` is 0, and the prompt phase
prepares nothing). A draft is the pending token with the target's state before it
(:meth:`AssistantBackend.first`), then each drafted token with the assistant's own state
(:meth:`AssistantBackend.next`), all at the pending token's position, as llama.cpp's
driver runs it.

Exact as every proposer: at temperature 0 it drafts its argmax, above it it samples from
its own warped distribution and hands it to the verifier as q.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import numpy as np

from ..sampling import SamplingParams, TopToken
from .base import EMPTY_DRAFT, Budget, Draft, DraftTokens, Source, register_source, row_reader

T = TypeVar("T")

SOURCE = register_source(Source("gemma4-assistant", model=True, code="g", label="Gemma 4 assistant",
                                 colour="#d4e8ff", what="the target's Gemma 4 assistant"))


class AssistantBackend(Protocol):
    """What the gemma4-assistant proposer needs of an assistant."""

    @property
    def n_vocab(self) -> int: ...

    # The target's context size (the assistant's cache is the target's).
    n_ctx: int
    # Cumulative seconds inside the native decode calls.
    native_seconds: float

    def first(self, seq: Sequence[int], fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T:
        """The first draft position after ``seq`` (the target holds all of it but the
        last token); ``fn`` of its logits row, shape (1, n_vocab)."""

    def next(self, token: int, fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T:
        """The next draft position: ``token`` (the one just drafted) on the assistant's
        own state; ``fn`` of its logits row."""

    def reset(self) -> None: ...


class Gemma4AssistantProposer:
    """Greedy at temperature 0 (stopping early below ``p_min``, llama.cpp's
    --draft-p-min, which its driver applies too), sampling with q above it."""

    drafts = True

    def __init__(self, assistant: AssistantBackend, n_vocab_target: int, p_min: float = 0.75) -> None:
        if not 0.0 <= p_min < 1.0:
            raise ValueError(f"p-min must be in [0, 1), got {p_min}")
        self.assistant = assistant
        self.p_min = p_min
        self.n_common = min(assistant.n_vocab, n_vocab_target)
        self._top = TopToken(p_min)

    @property
    def native_seconds(self) -> float:
        return self.assistant.native_seconds

    def prepare(self, prompt: Sequence[int], budget: Budget) -> int:
        """Nothing to read: the target's reading of the prompt is the assistant's."""
        return 0

    def propose(self, seq: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator) -> Draft:
        k = budget(SOURCE, 0)
        k = min(k, self.assistant.n_ctx - len(seq) + 1)
        if k <= 0 or len(seq) < 2:  # no state of the target's to draft from before its first token
            return EMPTY_DRAFT
        pick = row_reader(params, self._top, self.n_common)
        out = self.assistant.first(seq, fn=pick)
        drafted = DraftTokens(params, rng, self.p_min)
        for i in range(k):
            t = drafted.take(out)
            if t is None:
                break
            if i + 1 < k:
                out = self.assistant.next(t, fn=pick)
        return drafted.draft(SOURCE)

    def reset(self) -> None:
        self.assistant.reset()
