"""Turn logits into the probability distribution the sampler draws from.

The same warp is applied to the target's logits (p) and the draft's logits (q),
which is what keeps rejection sampling exact: the output follows the *warped*
target distribution, the one plain target-alone sampling would use.

The chain follows llama.cpp's default order: top-k, top-p, min-p on the
untempered distribution, then temperature over the survivors.

A warped row is kept over its support (:class:`Warped`), computed from the row where
it lies: what exact rejection sampling needs (p and q at a drafted token, and the
residual max(0, p - q) at a rejection, which is 0 outside p's support) without a
dense copy of the vocabulary per row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import NonFiniteLogitsError

# For top-p we look for the nucleus among this many best tokens first and only
# sort the whole vocabulary when their mass is not enough.
_NUCLEUS_PREFILTER = 1024


@dataclass(frozen=True)
class SamplingParams:
    """Sampler settings. ``temperature == 0`` means greedy (argmax)."""

    temperature: float = 0.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    min_p: float = 0.0  # 0.0 = off

    def __post_init__(self) -> None:
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top-k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top-p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"min-p must be in [0, 1), got {self.min_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def top_probability(logits: np.ndarray, top: int | None = None, scratch: np.ndarray | None = None) -> float:
    """Probability of the argmax (``top``, when the caller has it) under the plain
    softmax, for p-min checks: one exp over the row, into ``scratch`` (a float32 array
    of the row's length, reused from call to call) or a new array, summed in float32
    (NumPy's pairwise sum, within about 1e-6 of the float64 sum; a float64 sum of
    float32 values converts each one and took as long as the exp)."""
    x = np.asarray(logits, dtype=np.float32)
    m = x.max() if top is None else x[top]
    out = scratch if scratch is not None else np.empty(x.shape, dtype=np.float32)
    np.subtract(x, m, out=out)
    np.exp(out, out=out)
    return float(1.0 / float(out.sum()))


def check_finite(value: float) -> None:
    """``value`` (a row's largest logit: NaN where any is, since argmax and max pick a
    NaN) is a number; NonFiniteLogitsError otherwise. One comparison per row."""
    if not math.isfinite(value):
        raise NonFiniteLogitsError()


class TopToken:
    """A greedy draft step, read where the row lies: the argmax of a logits row and,
    when ``p_min`` is set, its probability under the plain softmax (else NaN).
    The probability costs an exp over the row, the dearest part of a greedy draft
    step after the decode: it is computed in a scratch row of this reader's own (one
    per proposer, so no two threads share one), with no array made per call."""

    def __init__(self, p_min: float) -> None:
        self.p_min = p_min
        self._scratch: np.ndarray | None = None

    def __call__(self, logits: np.ndarray) -> tuple[int, float]:
        t = int(logits.argmax())
        check_finite(logits[t])
        if self.p_min <= 0:
            return t, float("nan")
        s = self._scratch
        if s is None or s.shape[0] != logits.shape[-1]:
            s = self._scratch = np.empty(logits.shape[-1], dtype=np.float32)
        return t, top_probability(logits, t, s)


@dataclass(frozen=True)
class Warped:
    """A warped distribution kept over its support: the tokens top-k, top-p and min-p
    keep (``ids``, ascending) and their probabilities (``probs``, float64, summing to
    1). Every other token has probability 0, so this is the dense vector of
    :func:`warp` without its zeros: what exact rejection sampling needs of a row."""

    ids: np.ndarray
    probs: np.ndarray

    @classmethod
    def from_dense(cls, probs: np.ndarray) -> Warped:
        probs = np.asarray(probs, dtype=np.float64)
        ids = np.flatnonzero(probs)
        return cls(ids, probs[ids])

    def prob(self, token: int) -> float:
        i = int(np.searchsorted(self.ids, token))
        return float(self.probs[i]) if i < self.ids.shape[0] and self.ids[i] == token else 0.0

    def probs_at(self, tokens: np.ndarray) -> np.ndarray:
        """The probability of each of ``tokens`` (0 outside the support)."""
        i = np.minimum(np.searchsorted(self.ids, tokens), self.ids.shape[0] - 1)
        return np.where(self.ids[i] == tokens, self.probs[i], 0.0)

    def dense(self, n: int) -> np.ndarray:
        out = np.zeros(n, dtype=np.float64)
        out[self.ids] = self.probs
        return out

    def sample(self, rng: np.random.Generator) -> int:
        return sample(self.probs, rng, self.ids)


def warp(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Return a probability vector (float64, same length as ``logits``).

    Greedy params give a one-hot vector on the argmax.
    """
    return warp_support(logits, params).dense(np.shape(logits)[-1])


def warp_support(logits: np.ndarray, params: SamplingParams) -> Warped:
    """The warped distribution of a logits row over its support (see :class:`Warped`).

    The row may be a read-only view of llama.cpp's buffer: the candidates are chosen on
    it as it is (float32), and only their logits are taken to float64, so no copy of
    the row is kept; without top-k, top-p or min-p the support is the whole vocabulary.
    """
    x = np.asarray(logits)
    n = x.shape[-1]
    if params.greedy:
        t = int(np.argmax(x))
        check_finite(x[t])
        return Warped(np.array([t]), np.ones(1))

    # Candidate set, as indices into x.
    if 0 < params.top_k < n:
        cand = np.argpartition(-x, params.top_k - 1)[: params.top_k]
    else:
        cand = None

    if params.top_p < 1.0:
        cand = _nucleus(x, cand, params.top_p)

    vals = np.asarray(x if cand is None else x[cand], dtype=np.float64)
    check_finite(vals.max())  # NaN or inf would make every probability NaN, and the draw the last token
    if params.min_p > 0.0:
        keep = vals >= vals.max() + np.log(params.min_p)
        cand = np.flatnonzero(keep) if cand is None else cand[keep]
        vals = vals[keep]

    scaled = (vals - vals.max()) / params.temperature
    e = np.exp(scaled)
    probs = e / e.sum()
    if cand is None:
        return Warped(np.arange(n), probs)
    order = np.argsort(cand)
    return Warped(cand[order], probs[order])


class WarpedRows:
    """The rows of a verify batch, each warped when first asked for (a verifier that
    rejects at position i never warps the rows after it)."""

    def __init__(self, rows: np.ndarray, params: SamplingParams) -> None:
        self.rows = rows
        self.params = params
        self._done: dict[int, Warped] = {}

    def __len__(self) -> int:
        return self.rows.shape[0]

    def __getitem__(self, i: int) -> Warped:
        w = self._done.get(i)
        if w is None:
            w = self._done[i] = warp_support(self.rows[i], self.params)
        return w


def _nucleus(x: np.ndarray, cand: np.ndarray | None, top_p: float) -> np.ndarray:
    """Smallest set of best tokens whose untempered mass reaches top_p."""
    pool = np.arange(x.shape[-1]) if cand is None else cand
    vals = np.asarray(x if cand is None else x[pool], dtype=np.float64)
    m = vals.max()
    log_z = m + np.log(np.exp(vals - m).sum())
    if pool.shape[0] > _NUCLEUS_PREFILTER:
        best = np.argpartition(-vals, _NUCLEUS_PREFILTER - 1)[:_NUCLEUS_PREFILTER]
        if np.exp(vals[best] - log_z).sum() >= top_p:
            pool, vals = pool[best], vals[best]
    order = np.argsort(-vals, kind="stable")
    cum = np.cumsum(np.exp(vals[order] - log_z))
    n_keep = int(np.searchsorted(cum, top_p, side="left")) + 1
    return pool[order[: min(n_keep, order.shape[0])]]


def sample(probs: np.ndarray, rng: np.random.Generator, ids: np.ndarray | None = None) -> int:
    """Draw one token id from a probability vector (over ``ids``, ascending, when
    given: the same draw as from the dense vector they stand for)."""
    nz = np.flatnonzero(probs)
    if nz.shape[0] == 1:
        i = int(nz[0])
    else:
        cum = np.cumsum(probs[nz])
        u = rng.random() * cum[-1]
        i = int(nz[min(int(np.searchsorted(cum, u, side="right")), nz.shape[0] - 1)])
    return i if ids is None else int(ids[i])
