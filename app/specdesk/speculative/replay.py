"""A machine's costs, replayed: backends that cost what a measured device costs, so
the real decode loop and the real ``auto`` run on a GPU's profile on any machine.

:class:`ReplayBackend` implements the loop's :class:`~.backend.Backend` over a
synthetic text whose every position has one right token (the target's argmax there);
a draft backend guesses it right with a given probability, drawn once per position
(so a draft model is right about a position however often it is asked). Each eval
costs what the profile says a batch of that many tokens costs, plus a shape change's
cost where the batch's shape (tokens, rows asked for) differs from the last one (the
graph rebuild and CUDA-graph re-capture a GPU pays). Those costs pass on a
:class:`ReplayClock`: in ``virtual`` mode they are added to a clock that counts
nothing else (deterministic: the loop's own Python is free), in ``real`` mode to the
wall clock, with the backend's own bookkeeping taken out, so the loop's real host time
counts as it would beside the device.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from .backend import common_prefix_length
from .shapes import ShapeTimer

T = TypeVar("T")


@dataclass(frozen=True)
class ModelCosts:
    """Seconds for one eval of a batch of n tokens, measured points with linear
    interpolation between them and the last two points' slope beyond; plus what a
    change of batch shape costs, and the one-offs: a context's first decode
    (``first_call`` more), a batch shape's first use (``first_shape`` more), and a
    share ``spike_share`` of calls that cost ``spike_times`` as much."""

    batch: Mapping[int, float]
    shape_change: float = 0.0
    prefill_per_token: float | None = None  # a long prompt's tokens (None: the batch table's slope)
    first_call: float = 0.0
    first_shape: float = 0.0
    spike_share: float = 0.0
    spike_times: float = 1.0

    def __post_init__(self) -> None:
        if 1 not in self.batch or any(n <= 0 or s <= 0 for n, s in self.batch.items()):
            raise ValueError("a cost profile needs a positive cost for a batch of 1 token, and positive costs")
        if min(self.shape_change, self.first_call, self.first_shape) < 0 or not 0.0 <= self.spike_share <= 1.0 \
                or self.spike_times < 1.0:
            raise ValueError("one-off costs must be >= 0, a spike share in [0, 1] and spikes at least 1 times a call")

    @property
    def step(self) -> float:
        return self.batch[1]

    def __call__(self, n: int) -> float:
        pts = sorted(self.batch.items())
        if n in self.batch:
            return self.batch[n]
        if n > 32 and self.prefill_per_token is not None:
            return pts[-1][1] + self.prefill_per_token * (n - pts[-1][0])
        below = [p for p in pts if p[0] < n]
        above = [p for p in pts if p[0] > n]
        if below and above:
            (b0, v0), (b1, v1) = below[-1], above[0]
            return v0 + (v1 - v0) * (n - b0) / (b1 - b0)
        if len(below) >= 2:
            (b0, v0), (b1, v1) = below[-2], below[-1]
            return v1 + max(0.0, (v1 - v0) / (b1 - b0)) * (n - b1)
        return pts[0][1] * n


class ReplayClock:
    """The loop's clock: the replayed devices' seconds, plus (``real``) the host's."""

    def __init__(self, real: bool = False) -> None:
        self.real = real
        self._offset = 0.0
        self._virtual = 0.0

    def __call__(self) -> float:
        return time.perf_counter() + self._offset if self.real else self._virtual

    def spend(self, seconds: float, own: float = 0.0) -> None:
        """The device worked ``seconds``; the backend's own Python took ``own`` of the
        wall clock meanwhile, which is not the loop's."""
        if self.real:
            self._offset += seconds - own
        else:
            self._virtual += seconds


@dataclass
class ReplayText:
    """The right token at every position, and whether a draft is right there."""

    n_vocab: int
    seed: int = 0
    _tokens: dict[int, int] = field(default_factory=dict)

    def right(self, position: int) -> int:
        t = self._tokens.get(position)
        if t is None:
            t = self._tokens[position] = int(np.random.default_rng((self.seed, position)).integers(1, self.n_vocab))
        return t


class Device:
    """What a replayed device charges one context's decodes: each batch's cost, a
    change of shape (tokens, rows of logits) from the last one, the one-offs (the
    context's first decode, a shape's first use) and a spike where the seeded stream
    draws one."""

    def __init__(self, costs: ModelCosts, seed: int = 1) -> None:
        self.costs = costs
        self.calls = 0  # decodes, warm-up's included
        self.shape = (0, 0)
        self.shapes: set[tuple[int, int]] = set()  # the shapes set up (their first use paid)
        self._spikes = np.random.default_rng((seed, 17))

    def decode(self, shape: tuple[int, int]) -> tuple[float, bool]:
        """The seconds a decode of ``shape`` costs now, and whether it paid a set-up
        (flagged as the engine flags a shape's first use, where the profile has one)."""
        c = self.costs
        seconds = c(shape[0])
        if shape != self.shape and self.shape[0] > 0:
            seconds += c.shape_change
        first = shape not in self.shapes
        if first:
            self.shapes.add(shape)
            seconds += c.first_shape
        if not self.calls:
            seconds += c.first_call
        setup = first and (c.first_shape > 0 or (not self.calls and c.first_call > 0))
        if c.spike_share and self._spikes.random() < c.spike_share:
            seconds *= c.spike_times
        self.calls += 1
        self.shape = shape
        return seconds, setup


class ReplayBackend:
    """A target (``acceptance`` None: always right) or a draft model (right at each
    position with probability ``acceptance``) over ``text``, costing ``costs`` on
    ``clock``. Its rows put ``margin`` on the token it predicts, 0 elsewhere."""

    def __init__(self, text: ReplayText, costs: ModelCosts, clock: ReplayClock, *, acceptance: float | None = None,
                 seed: int = 1, n_ctx: int = 1 << 16, margin: float = 12.0) -> None:
        self.text = text
        self.costs = costs
        self.clock = clock
        self.acceptance = acceptance
        self.seed = seed
        self.margin = margin
        self._n_ctx = n_ctx
        self.history: list[int] = []
        self.native_seconds = 0.0
        self.logits_bytes_copied = 0
        self.last_prefill_evaluated = 0
        self.last_batch_first = False
        self.last_shape_changed = False
        self.last_reshape_seconds = 0.0
        self._timer = ShapeTimer()  # what the engine learns of its own shape changes, learnt the same way
        self.evaluated = 0
        self.device = Device(costs, seed)
        self._rows = np.zeros((64, text.n_vocab), dtype=np.float32)
        self._set: list[tuple[int, int]] = []  # (row, column) set in _rows
        self._right: dict[int, bool] = {}

    @property
    def n_vocab(self) -> int:
        return self.text.n_vocab

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def n_past(self) -> int:
        return len(self.history)

    @property
    def shape_changes(self) -> int:
        return self._timer.changes

    @property
    def reshape_cost(self) -> float:
        return self._timer.cost

    def predicts(self, position: int) -> int:
        """The token this model's row at ``position - 1`` puts first (for position)."""
        t = self.text.right(position)
        if self.acceptance is None:
            return t
        ok = self._right.get(position)
        if ok is None:
            ok = self._right[position] = bool(np.random.default_rng((self.seed, 7, position)).random() < self.acceptance)
        return t if ok else 1 + (t % (self.text.n_vocab - 1))

    def eval(self, tokens: Sequence[int], all_rows: bool = True, fn: Callable[[np.ndarray], T] | None = None,
             cancel: Callable[[], bool] | None = None) -> np.ndarray | T:
        return self._eval(tokens, all_rows, True, fn)

    def _eval(self, tokens: Sequence[int], all_rows: bool, last_row: bool, fn):
        t0 = time.perf_counter()
        n = len(tokens)
        if n == 0:
            raise ValueError("cannot evaluate an empty batch")
        if self.n_past + n > self._n_ctx:
            raise ValueError(f"the context is full: {self.n_past} + {n} tokens do not fit in {self._n_ctx}")
        p0 = len(self.history)
        self.history.extend(int(t) for t in tokens)
        self.evaluated += n
        n_out = n if all_rows else int(last_row)
        shape = (n, n_out)
        seconds = self._seconds(shape)
        self.last_shape_changed, self.last_reshape_seconds = self._timer.record(shape, seconds)
        self.native_seconds += seconds
        out = None
        if n_out:
            rows = self._fill(range(p0 + n - n_out, p0 + n))
            out = fn(rows) if fn is not None else self._copy(rows)
        self.clock.spend(seconds, time.perf_counter() - t0)
        return out

    def _seconds(self, shape: tuple[int, int]) -> float:
        seconds, self.last_batch_first = self.device.decode(shape)
        return seconds

    def warm_up(self, shapes: Sequence[tuple[int, int]]) -> float:
        """Decode each shape once (paying its one-offs) and hold what it held before;
        nothing the loop reads learns from it (its timings and counters). Returns the
        seconds it cost."""
        t0 = time.perf_counter()
        kept = (self._timer, self.native_seconds, self.evaluated)
        self._timer = ShapeTimer()
        seconds = 0.0
        for shape in shapes:
            seconds += self._seconds(shape)
        self._timer, self.native_seconds, self.evaluated = kept
        self.last_batch_first = self.last_shape_changed = False
        self.last_reshape_seconds = 0.0
        self.clock.spend(seconds, time.perf_counter() - t0)
        return seconds

    def _fill(self, positions: range) -> np.ndarray:
        """Rows for the tokens at ``positions`` (each predicting the next), in a
        reused buffer, read-only (as llama.cpp's)."""
        m = len(positions)
        if m > self._rows.shape[0]:
            self._rows = np.zeros((m, self.text.n_vocab), dtype=np.float32)
            self._set.clear()
        buf = self._rows
        buf.flags.writeable = True
        for r, c in self._set:
            buf[r, c] = 0.0
        self._set = [(i, self.predicts(p + 1)) for i, p in enumerate(positions)]
        for r, c in self._set:
            buf[r, c] = self.margin
        view = buf[:m]
        view.flags.writeable = False
        return view

    def _copy(self, rows: np.ndarray) -> np.ndarray:
        self.logits_bytes_copied += rows.nbytes
        return rows.copy()

    def prefill(self, tokens: Sequence[int], logits: bool = True, cancel: Callable[[], bool] | None = None,
                fn: Callable[[np.ndarray], T] | None = None):
        tokens = list(tokens)
        keep = common_prefix_length(self.history, tokens)
        if logits and keep == len(tokens) and keep > 0:
            keep -= 1
        self.rollback(keep)
        rest = tokens[keep:]
        self.last_prefill_evaluated = len(rest)
        if not rest:
            return None
        out = self._eval(rest, False, logits, fn)
        return out if fn is not None or out is None else out[-1]

    def rollback(self, n_past: int) -> None:
        if n_past < 0 or n_past > len(self.history):
            raise ValueError(f"cannot roll back to {n_past}: the context holds {len(self.history)} tokens")
        del self.history[n_past:]

    def reset(self) -> None:
        self.history.clear()

    def is_eog(self, token: int) -> bool:
        return False

    def token_bytes(self, token: int) -> bytes:
        return b"x"
