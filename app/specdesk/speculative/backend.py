"""What the speculative loop needs from a model context (the engine provides it).

Keeping this a protocol lets the algorithm run on a scripted fake in unit tests
and on llama.cpp contexts in the app, through the same code.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence, TypeVar

import numpy as np


T = TypeVar("T")


class Backend(Protocol):
    @property
    def n_vocab(self) -> int: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def n_past(self) -> int:
        """How many tokens the context holds (its single rollback coordinate)."""

    # Cumulative seconds spent inside the native decode call.
    native_seconds: float

    # Bytes of logits rows ever copied out (every call without ``fn`` that returns rows).
    logits_bytes_copied: int

    # The tokens the context holds, in order (len(history) == n_past).
    history: list[int]

    # How many tokens the last prefill evaluated (the rest were reused).
    last_prefill_evaluated: int

    # The last eval was the first of its batch size in this context, and paid the
    # backend's one-off set-up for that size (llama.cpp: the graph and its buffers);
    # False where a backend has no such cost.
    last_batch_first: bool

    # How many evals changed the batch's shape (its tokens, or the rows of logits asked
    # for) from the one before: each makes llama.cpp build its graph again, which costs
    # milliseconds on a GPU. A loop in its steady state keeps this from growing.
    shape_changes: int
    # ... whether the last eval was such a change, and the seconds of it the change is
    # taken to have cost (see speculative.shapes).
    last_shape_changed: bool
    last_reshape_seconds: float

    @property
    def reshape_cost(self) -> float:
        """What a change of batch shape is taken to cost this context (NaN before one
        was measured)."""

    def prefill(self, tokens: Sequence[int], logits: bool = True, cancel: Callable[[], bool] | None = None,
                fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T | None:
        """Make the context hold exactly ``tokens``, evaluating only what follows the
        longest common prefix with what it holds; return the last position's logits
        (or None with ``logits=False``, which then evaluates nothing already held).
        With ``fn``, return ``fn(rows)`` instead, ``rows`` a read-only view of shape
        (1, n_vocab) valid only during the call, so that nothing is copied.
        ``cancel`` is checked between chunks of a long prompt: when it returns True,
        ``specdesk.errors.Cancelled`` is raised, with the chunks so far kept."""

    def eval(self, tokens: Sequence[int], all_rows: bool = True,
             fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T:
        """Append ``tokens`` at ``n_past``; return a copy of the logits rows (all of
        them, or the last), or ``fn`` of a read-only view of them (as for prefill)."""

    def rollback(self, n_past: int) -> None:
        """Forget every position from ``n_past`` on."""

    def is_eog(self, token: int) -> bool: ...

    def token_bytes(self, token: int) -> bytes: ...


def argmax_rows(rows: np.ndarray) -> np.ndarray:
    """The argmax of every row (an ``fn`` for greedy verification: no row is copied)."""
    return rows.argmax(axis=-1)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share: what a context can keep.

    Compared a slice at a time (C speed): the whole common part first (one context is
    usually a prefix of the other), else backwards from the end in doubling steps
    (the two usually part near their end: rejected draft tokens) and then by halves."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    a = a if isinstance(a, list) else list(a)
    b = b if isinstance(b, list) else list(b)
    if (a if len(a) == n else a[:n]) == (b if len(b) == n else b[:n]):
        return n
    lo, hi, step = 0, n, 1  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - step > lo:
        m = hi - step
        if a[:m] == b[:m]:
            lo = m
            break
        hi, step = m, step * 2
    while hi - lo > 8:
        m = (lo + hi) // 2
        if a[:m] == b[:m]:
            lo = m
        else:
            hi = m
    while lo < hi and a[lo] == b[lo]:
        lo += 1
    return lo
