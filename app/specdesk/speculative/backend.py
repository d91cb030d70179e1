"""What the speculative loop needs from a model context (the engine provides it).

Keeping this a protocol lets the algorithm run on a scripted fake in unit tests
and on llama.cpp contexts in the app, through the same code.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np


class Backend(Protocol):
    @property
    def n_vocab(self) -> int: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def n_past(self) -> int:
        """How many tokens the context holds (its single rollback coordinate)."""

    # Cumulative seconds spent inside the native decode call plus copying logits out.
    native_seconds: float

    # The tokens the context holds, in order (len(history) == n_past).
    history: list[int]

    # How many tokens the last prefill evaluated (the rest were reused).
    last_prefill_evaluated: int

    def prefill(self, tokens: Sequence[int], logits: bool = True,
                cancel: Callable[[], bool] | None = None) -> np.ndarray | None:
        """Make the context hold exactly ``tokens``, evaluating only what follows the
        longest common prefix with what it holds; return the last position's logits
        (or None with ``logits=False``, which then evaluates nothing already held).
        ``cancel`` is checked between chunks of a long prompt: when it returns True,
        ``specdesk.errors.Cancelled`` is raised, with the chunks so far kept."""

    def eval(self, tokens: Sequence[int], all_rows: bool = True) -> np.ndarray:
        """Append ``tokens`` at ``n_past``; return logits rows (all of them, or the last)."""

    def rollback(self, n_past: int) -> None:
        """Forget every position from ``n_past`` on."""

    def is_eog(self, token: int) -> bool: ...

    def token_bytes(self, token: int) -> bytes: ...


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share: what a context can keep."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
