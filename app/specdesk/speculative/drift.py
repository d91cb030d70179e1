"""How far a verify batch moves the target's distribution from a single-token step.

Speculative decoding is exact in exact arithmetic: greedy verification keeps only
the target's argmax, and rejection sampling draws from the target's distribution.
llama.cpp, though, runs other kernels (and sums in another order) for a batch of
b tokens than for one token, so the target's logits for the same position differ
a little between target-alone decoding (one token per step) and a verify batch.
Speculation therefore follows the target's distribution *as llama.cpp computes it
in a verify batch*. This probe measures how far that is from single-token steps.

Over a window of W positions of a text, it decodes the window one token per step
(target alone), then again in consecutive batches of b tokens for each batch size
(every row offset inside a batch occurs), from the same prefix. Each batched row is
compared with the single-step row for the same position:

- total variation between the two warped distributions (at the chosen settings);
- the largest absolute logit difference;
- whether the argmax flips (what temperature 0 sees), and at what single-step
  margin between the two best logits it flipped.

The share of positions whose two best single-step logits lie within
``NEAR_TIE_LOGITS`` says how often a flip is possible at all. As in a speculative
run, positions after the first of a batch see keys and values the batches computed.

An optional control decodes the window one token per step a second time: it must
match exactly (batch 1, zero drift), or the probe would be measuring noise.

Pure numpy over the :class:`Backend` protocol; no I/O.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .backend import Backend
from .sampling import SamplingParams, warp

# Two tokens whose logits differ by less than this are a near-tie: a batched verify
# pass can flip their order.
NEAR_TIE_LOGITS = 0.5

Progress = Callable[[float], None]  # 0..1; may raise to cancel


@dataclass(frozen=True)
class BatchDrift:
    """The drift of one batch size against single-token steps, over all probed positions."""

    batch: int
    positions: int
    tv_mean: float
    tv_max: float
    logit_diff_max: float  # largest |logit difference| over positions and vocabulary
    logit_diff_mean: float  # mean over positions of the largest |logit difference|
    flips: int  # positions whose argmax differs
    flip_margin_max: float | None = None  # largest single-step top-2 margin at which it flipped

    @property
    def flip_share(self) -> float:
        return self.flips / self.positions if self.positions else 0.0

    def to_dict(self) -> dict:
        return {
            "batch": self.batch,
            "positions": self.positions,
            "tv_mean": self.tv_mean,
            "tv_max": self.tv_max,
            "logit_diff_max": self.logit_diff_max,
            "logit_diff_mean": self.logit_diff_mean,
            "flips": self.flips,
            "flip_share": self.flip_share,
            "flip_margin_max": self.flip_margin_max,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "BatchDrift":
        return cls(
            batch=int(d["batch"]),
            positions=int(d["positions"]),
            tv_mean=float(d["tv_mean"]),
            tv_max=float(d["tv_max"]),
            logit_diff_max=float(d["logit_diff_max"]),
            logit_diff_mean=float(d["logit_diff_mean"]),
            flips=int(d["flips"]),
            flip_margin_max=None if d.get("flip_margin_max") is None else float(d["flip_margin_max"]),
        )


@dataclass(frozen=True)
class Drift:
    """What :func:`measure_drift` found, by batch size (batch 1: the control, if run)."""

    by_batch: tuple[BatchDrift, ...]
    positions: int  # positions compared for every batch size
    near_ties: int  # positions whose two best single-step logits are within near_tie_logits
    temperature: float
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    near_tie_logits: float = NEAR_TIE_LOGITS
    window: int = 0
    windows: int = 0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)  # where and on what it was measured (set by callers)

    # -- reading -------------------------------------------------------------------------

    @property
    def batches(self) -> tuple[BatchDrift, ...]:
        """The verify batch sizes (b >= 2), without the control."""
        return tuple(b for b in self.by_batch if b.batch >= 2)

    @property
    def control(self) -> BatchDrift | None:
        return next((b for b in self.by_batch if b.batch == 1), None)

    def batch(self, b: int) -> BatchDrift | None:
        return next((x for x in self.by_batch if x.batch == b), None)

    @property
    def near_tie_share(self) -> float:
        return self.near_ties / self.positions if self.positions else 0.0

    @property
    def tv_mean(self) -> float:
        """Mean total variation over every batch size's positions."""
        bs = self.batches
        n = sum(b.positions for b in bs)
        return sum(b.tv_mean * b.positions for b in bs) / n if n else 0.0

    @property
    def tv_max(self) -> float:
        return max((b.tv_max for b in self.batches), default=0.0)

    @property
    def worst_batch(self) -> int | None:
        bs = [b for b in self.batches if b.tv_max > 0]
        return max(bs, key=lambda b: b.tv_max).batch if bs else None

    @property
    def logit_diff_max(self) -> float:
        return max((b.logit_diff_max for b in self.batches), default=0.0)

    @property
    def flips(self) -> int:
        return sum(b.flips for b in self.batches)

    @property
    def flip_share(self) -> float:
        """Share of (position, batch size) pairs whose argmax flipped."""
        n = sum(b.positions for b in self.batches)
        return self.flips / n if n else 0.0

    @property
    def flip_margin_max(self) -> float | None:
        ms = [b.flip_margin_max for b in self.batches if b.flip_margin_max is not None]
        return max(ms) if ms else None

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p, self.min_p)

    # -- storing -------------------------------------------------------------------------

    def to_dict(self) -> dict:
        return {
            "sampling": {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "min_p": self.min_p},
            "positions": self.positions,
            "window": self.window,
            "windows": self.windows,
            "near_tie_logits": self.near_tie_logits,
            "near_ties": self.near_ties,
            "near_tie_share": self.near_tie_share,
            "tv_mean": self.tv_mean,
            "tv_max": self.tv_max,
            "worst_batch": self.worst_batch,
            "logit_diff_max": self.logit_diff_max,
            "flips": self.flips,
            "flip_share": self.flip_share,
            "flip_margin_max": self.flip_margin_max,
            "by_batch": [b.to_dict() for b in self.by_batch],
            "seconds": self.seconds,
            **({"measured_on": self.extra} if self.extra else {}),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Drift":
        """The inverse of :meth:`to_dict` (raises KeyError/ValueError/TypeError on a damaged dict)."""
        s = d["sampling"]
        return cls(
            by_batch=tuple(BatchDrift.from_dict(b) for b in d["by_batch"]),
            positions=int(d["positions"]),
            near_ties=int(d["near_ties"]),
            temperature=float(s["temperature"]),
            top_k=int(s.get("top_k", 0)),
            top_p=float(s.get("top_p", 1.0)),
            min_p=float(s.get("min_p", 0.0)),
            near_tie_logits=float(d.get("near_tie_logits", NEAR_TIE_LOGITS)),
            window=int(d.get("window", 0)),
            windows=int(d.get("windows", 0)),
            seconds=float(d.get("seconds", 0.0)),
            extra=dict(d.get("measured_on") or {}),
        )


#: The sampling settings the drift is measured at by default: the raw distribution.
T1 = SamplingParams(temperature=1.0)

# -- measuring --------------------------------------------------------------------------


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    return float(0.5 * np.abs(np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64)).sum())


def top2_margin(logits: np.ndarray) -> float:
    """Difference between the two largest logits (inf for a vocabulary of one)."""
    x = np.asarray(logits)
    if x.shape[-1] < 2:
        return math.inf
    two = np.partition(x, -2)[-2:]
    return float(two[1] - two[0])


def window_starts(n_tokens: int, window: int, max_batch: int, windows: int) -> list[int]:
    """Where the probe's windows start: spread over the later two thirds of the text
    (a realistic context), each followed by enough text for the largest batch."""
    hi = n_tokens - window - max_batch + 1
    if windows <= 0 or window <= 0:
        raise ValueError("the probe needs at least one window of at least one position")
    if hi < 1:
        raise ValueError(
            f"a text of {n_tokens} tokens is too short to probe {window} positions with batches of {max_batch}"
        )
    lo = min(hi, max(1, n_tokens // 3))
    if windows == 1:
        return [hi]
    return sorted({int(round(x)) for x in np.linspace(lo, hi, windows)})


def probe_cost(step: float, verify: Callable[[int], float], batch_sizes: Sequence[int], window: int,
               control: bool = False) -> float:
    """Seconds one window costs, from a step's and each verify batch's measured cost
    (so a caller can size the probe to a time budget)."""
    n = window * step * (2 if control else 1)
    for b in batch_sizes:
        n += math.ceil(window / b) * verify(b)
    return n


def measure_drift(
    target: Backend,
    tokens: Sequence[int],
    *,
    batch_sizes: Sequence[int] = tuple(range(2, 10)),
    window: int = 16,
    windows: int = 2,
    starts: Sequence[int] | None = None,
    params: SamplingParams = T1,
    near_tie: float = NEAR_TIE_LOGITS,
    control: bool = False,
    progress: Progress | None = None,
) -> Drift:
    """Compare single-token steps with verify batches over ``tokens`` (see the module
    docstring). ``starts`` overrides where the windows begin. The target context is
    left empty."""
    sizes = sorted({int(b) for b in batch_sizes})
    if not sizes or sizes[0] < 2:
        raise ValueError(f"batch sizes must be >= 2, got {list(batch_sizes)}")
    tokens = [int(t) for t in tokens]
    max_b = sizes[-1]
    if starts is None:
        starts = window_starts(len(tokens), window, max_b, windows)
    else:
        starts = sorted(int(s) for s in starts)
        for s in starts:
            if s < 1 or s + window + max_b - 1 > len(tokens):
                raise ValueError(f"a window at {s} does not fit in a text of {len(tokens)} tokens")
    if len(tokens) + 1 > target.n_ctx:
        raise ValueError(f"the probe text ({len(tokens)} tokens) does not fit in the context ({target.n_ctx})")

    t0 = time.perf_counter()
    labels = ([1] if control else []) + sizes
    acc = {b: _Acc() for b in labels}
    near_ties = 0
    n_pos = 0
    total_evals = len(starts) * (window * (2 if control else 1) + sum(math.ceil(window / b) for b in sizes))
    done = 0

    def tick(n: int = 1) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(min(1.0, done / total_evals))

    for s in starts:
        target.prefill(tokens[:s], logits=False)
        single = []
        for i in range(window):
            single.append(np.array(target.eval([tokens[s + i]], all_rows=True)[-1], dtype=np.float32))
            tick()
        single_p = [warp(r, params) for r in single]
        margins = [top2_margin(r) for r in single]
        near_ties += sum(1 for m in margins if m <= near_tie)
        n_pos += window

        if control:
            target.rollback(s)
            for i in range(window):
                row = target.eval([tokens[s + i]], all_rows=True)[-1]
                acc[1].add(single[i], single_p[i], row, params, margins[i])
                tick()
        for b in sizes:
            target.rollback(s)
            for c in range(0, window, b):
                rows = target.eval(tokens[s + c : s + c + b], all_rows=True)
                for j in range(min(b, window - c)):
                    acc[b].add(single[c + j], single_p[c + j], rows[j], params, margins[c + j])
                tick()
    target.rollback(0)
    return Drift(
        by_batch=tuple(acc[b].result(b) for b in labels),
        positions=n_pos,
        near_ties=near_ties,
        temperature=params.temperature,
        top_k=params.top_k,
        top_p=params.top_p,
        min_p=params.min_p,
        near_tie_logits=near_tie,
        window=window,
        windows=len(starts),
        seconds=time.perf_counter() - t0,
    )


class _Acc:
    def __init__(self) -> None:
        self.tv: list[float] = []
        self.diff: list[float] = []
        self.flips = 0
        self.flip_margin: float | None = None

    def add(self, single: np.ndarray, single_p: np.ndarray, row: np.ndarray, params: SamplingParams, margin: float) -> None:
        row = np.asarray(row, dtype=np.float32)
        self.tv.append(total_variation(single_p, warp(row, params)))
        self.diff.append(float(np.max(np.abs(row - single))))
        if int(np.argmax(row)) != int(np.argmax(single)):
            self.flips += 1
            self.flip_margin = margin if self.flip_margin is None else max(self.flip_margin, margin)

    def result(self, b: int) -> BatchDrift:
        n = len(self.tv)
        return BatchDrift(
            batch=b,
            positions=n,
            tv_mean=float(np.mean(self.tv)) if n else 0.0,
            tv_max=float(np.max(self.tv)) if n else 0.0,
            logit_diff_max=float(np.max(self.diff)) if n else 0.0,
            logit_diff_mean=float(np.mean(self.diff)) if n else 0.0,
            flips=self.flips,
            flip_margin_max=self.flip_margin,
        )
