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

import functools
import math
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import NonFiniteLogitsError

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
    the row is kept. Top-k and top-p are found without sorting the vocabulary nor
    taking the exponential of all of it (see :func:`_top_k` and :func:`_nucleus`): on a
    152k vocabulary that cost 2 ms a token, a third of a GPU's step. Without top-k,
    top-p or min-p the support is the whole vocabulary.
    """
    x = np.asarray(logits)
    n = x.shape[-1]
    t = int(np.argmax(x))
    m = float(x[t])
    check_finite(m)  # NaN or inf would make every probability NaN, and the draw the last token
    if params.greedy:
        return Warped(np.array([t]), np.ones(1))

    cand = _top_k(x, m, params.top_k) if 0 < params.top_k < n else None  # indices into x
    if params.top_p < 1.0:
        cand = _nucleus(x, m, cand, params.top_p)
    if params.min_p > 0.0:
        # min-p keeps the tokens within log(min_p) of the best, whose logit is m
        floor = m + math.log(params.min_p)
        if cand is None:
            cand = _at_least(x, floor)
        else:
            cand = cand[np.asarray(x[cand], dtype=np.float64) >= floor]

    # the same operations in the same order as (exp((vals - m) / T)) / sum, in place: on
    # the whole vocabulary (no truncation) each temporary was a fresh 1.2 MB
    probs = np.array(x if cand is None else x[cand], dtype=np.float64)
    np.subtract(probs, m, out=probs)
    np.divide(probs, params.temperature, out=probs)
    np.exp(probs, out=probs)
    np.divide(probs, probs.sum(), out=probs)
    if cand is None:
        return Warped(_every_id(n), probs)
    order = np.argsort(cand)
    return Warped(cand[order], probs[order])


_local = threading.local()


def _scratch(n: int) -> np.ndarray:
    """A float64 buffer of ``n`` for this thread, kept: a whole vocabulary's cumulative
    sum made afresh each draw cost more in page faults than in adding."""
    buf = getattr(_local, "buf", None)
    if buf is None or buf.shape[0] < n:
        buf = _local.buf = np.empty(n, dtype=np.float64)
    return buf[:n]


@functools.lru_cache(maxsize=4)
def _every_id(n: int) -> np.ndarray:
    """0 .. n-1, read-only: the support of an untruncated row, made once per vocabulary."""
    ids = np.arange(n)
    ids.flags.writeable = False
    return ids


def _at_least(x: np.ndarray, floor: float) -> np.ndarray:
    """The indices (ascending) of the logits >= ``floor``, compared in float64 as the
    dense algorithm compares them: a float32 pass with the bound rounded down finds the
    candidates, float64 decides at the boundary."""
    cand = np.flatnonzero(x >= np.nextafter(np.float32(floor), np.float32(-np.inf)))
    return cand[np.asarray(x[cand], dtype=np.float64) >= floor]


# The band of logits searched first: within _BANDS[i] of the best. A token further than
# 16 below the best weighs less than e^-16 (1.1e-7) of it, so the whole vocabulary's
# tail below the widest band weighs at most 0.017 of the best token.
_BANDS = (8.0, 16.0)


def _top_k(x: np.ndarray, m: float, k: int) -> np.ndarray:
    """The k best tokens (ties at the k-th logit broken arbitrarily, as a partition
    does): every token outside a band of at least k tokens is below every token in it,
    so the k best of the band are the k best of the row."""
    for width in _BANDS:
        band = np.flatnonzero(x >= m - width)
        if band.shape[0] >= k:
            break
    else:
        band = np.arange(x.shape[-1])
    if band.shape[0] == k:
        return band
    return band[np.argpartition(-np.asarray(x[band], dtype=np.float64), k - 1)[:k]]


# The relative error allowed for a float32 exponential (numpy's is within 3 ulp, 4e-7,
# and the float32 difference it is taken of adds 1e-6 at most, 16 below the best).
_EPS = 1e-5


def _nucleus(x: np.ndarray, m: float, cand: np.ndarray | None, top_p: float) -> np.ndarray:
    """The smallest set of best tokens whose untempered mass reaches ``top_p`` (of the
    candidates', after top-k), as the dense algorithm finds it: sort by logit (ties by
    index), cut where the cumulative mass first reaches top_p * Z.

    Over the whole vocabulary it sorts only a few tokens and takes float64
    exponentials of only those, and it is still the exact nucleus:

    - Z is bounded, not summed: the band of logits within 16 of the best is summed with
      float32 exponentials (within _EPS of the exact ones), and the tail below it
      weighs between 0 and (tail tokens) x e^-16. The cut only moves later as Z grows,
      so where the cuts at both ends of the interval agree, it is the cut at the true
      Z. Where they disagree (the cumulative mass passes top_p within the interval),
      the bound is tightened, then Z summed exactly, and the cut made there.
    - The band is split into unit buckets of logit below the best. Every token of a
      bucket is above every token of the buckets below it (rounding keeps order), so
      the sorted order runs bucket after bucket: the buckets whose mass, summed, stays
      below top_p * Z are in the nucleus whole, and only the buckets the cut may fall
      in are sorted, their probabilities computed as the dense algorithm computes them.
    - Where the band may not reach top_p * Z, the nucleus may hold tail tokens: the
      row is sorted whole (the definition itself)."""
    if cand is not None:  # after top-k: a few tokens, the mass theirs alone
        return cand[_cut_sorted(np.asarray(x[cand], dtype=np.float64), top_p)]
    n = x.shape[-1]
    edge = np.float32(m - _BANDS[-1])
    band = np.flatnonzero(x >= edge)
    below = np.subtract(np.float32(m), x[band], dtype=np.float32)  # in [0, 16], in the tokens' order
    e32 = np.exp(-below)
    s = float(e32.sum(dtype=np.float64))
    tail = (n - band.shape[0]) * math.exp(float(edge) - m)  # each tail token weighs < e^(edge - m)
    z_lo, z_hi = s * (1.0 - _EPS), s * (1.0 + _EPS) + tail
    if z_lo < top_p * z_hi:  # the band alone may not reach top_p: tail tokens may belong
        return _nucleus_dense(x, top_p)
    # the buckets the cut may fall in, at Z's two ends and the float32 sums' error
    lo, hi = top_p * z_lo * (1.0 - _EPS), top_p * z_hi * (1.0 + 2 * _EPS)
    head, bucket, first = _head(below, e32, lo, hi, _NEAR)
    if head is None:  # the cut may lie further down: bucket the whole band
        head, bucket, first = _head(below, e32, lo, hi, _BANDS[-1] + 1.0)
    whole = bucket < first
    vals = np.asarray(x[band[head]], dtype=np.float64) - m
    exact = np.exp(vals)
    h = float(exact.sum())  # the head's mass, float64
    before = float(exact[whole].sum())  # the whole buckets': the cumulative mass where the part starts
    rest = max(0.0, s - float(e32[head].sum(dtype=np.float64)))  # the rest of the band, float32's
    part = head[~whole]
    pv = vals[~whole]
    order = np.argsort(-pv, kind="stable")  # part ascends in index, so ties keep index order
    pv = pv[order]

    def cut(z: float) -> int:  # the probabilities as the dense algorithm computes them
        return int(np.searchsorted(before / z + np.cumsum(np.exp(pv - math.log(z))), top_p, side="left"))

    slack = _EPS * s
    k = cut(h + max(0.0, rest - slack))
    if cut(h + rest + slack + tail) != k and cut(h + rest + slack + _tail_bound(x, m, band.shape[0], edge)) != k:
        rest = _rest_mass(x, m, band[head], np.float32)  # the tail summed too, in float32
        k = cut(h + rest * (1.0 - _EPS))
        if cut(h + rest * (1.0 + _EPS)) != k:
            k = cut(h + _rest_mass(x, m, band[head], np.float64))
    keep = np.concatenate((head[whole], part[order[: min(k + 1, order.shape[0])]]))
    return band[keep]


# The buckets counted one by one: within 10 of the best (the cut of a top-p of 0.95 lay
# within 9 in every row of real answers looked at); the rest of the band is one lump.
_NEAR = 10.0


def _head(below: np.ndarray, e32: np.ndarray, lo: float, hi: float, near: float):
    """The band's positions in the buckets before the cut's last possible one and in
    it (ascending), their buckets, and the cut's first possible bucket; None when
    the cut may lie beyond the buckets within ``near`` (in the lump of the rest)."""
    pos = np.flatnonzero(below < near) if near <= _BANDS[-1] else np.arange(below.shape[0])
    bucket = below[pos].astype(np.int64)
    mass = np.cumsum(np.bincount(bucket, weights=e32[pos]))
    last = int(np.searchsorted(mass, hi, side="left"))
    if last >= mass.shape[0]:
        if pos.shape[0] < below.shape[0]:
            return None, None, 0
        last = mass.shape[0] - 1  # the band holds the nucleus (the caller made sure): its last bucket
    first = int(np.searchsorted(mass, lo, side="left"))
    keep = bucket <= last
    return pos[keep], bucket[keep], first


def _tail_bound(x: np.ndarray, m: float, n_band: int, edge: np.float32) -> float:
    """A tighter bound of the mass below the band (relative to the best's): most of the
    tail lies far below it, so a count of the tokens within 20 of the best bounds the
    rest by e^-20 each."""
    floor = np.float32(m - 20.0)
    near = int(np.count_nonzero(x >= floor)) - n_band
    far = x.shape[-1] - n_band - near
    return near * math.exp(float(edge) - m) + far * math.exp(float(floor) - m)


def _rest_mass(x: np.ndarray, m: float, head: np.ndarray, dtype) -> float:
    """The mass of every token but ``head``'s (relative to the best's): exponentials in
    float32 or float64, summed in their own type. In float32 the result is within _EPS:
    the difference from the best rounds by 2e-6 at most (16 and more below it), the
    exponential by 3 ulp, and NumPy's pairwise sum of non-negative terms by under
    30 ulp on a row of 2^18 (blocks of 128 summed eight ways, then halved). Summing
    in float32 rather than casting every term to float64 costs a quarter less."""
    e = np.subtract(np.asarray(x, dtype=dtype), dtype(m), dtype=dtype)
    np.exp(e, out=e)
    e[head] = 0.0
    return float(e.sum())


def _cut_sorted(vals: np.ndarray, top_p: float) -> np.ndarray:
    """The nucleus by the definition: the positions in ``vals`` (float64 logits) of the
    best tokens, sorted (ties by position), up to where their mass first reaches top_p."""
    m = vals.max()
    log_z = m + math.log(float(np.exp(vals - m).sum()))
    order = np.argsort(-vals, kind="stable")
    cum = np.cumsum(np.exp(vals[order] - log_z))
    n_keep = int(np.searchsorted(cum, top_p, side="left")) + 1
    return order[: min(n_keep, order.shape[0])]


def _nucleus_dense(x: np.ndarray, top_p: float) -> np.ndarray:
    """The nucleus over the whole row sorted (a row so flat that the band of the best
    16 logits holds less than top_p of the mass)."""
    return _cut_sorted(np.asarray(x, dtype=np.float64), top_p)


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


def sample(probs: np.ndarray, rng: np.random.Generator, ids: np.ndarray | None = None) -> int:
    """Draw one token id from a probability vector (over ``ids``, ascending, when
    given: the same draw as from the dense vector they stand for)."""
    if np.count_nonzero(probs) == 1:
        i = int(np.flatnonzero(probs)[0])  # no draw: the random stream is left as it was
    else:
        # The cumulative sum over every token, zeros included, holds at each non-zero the
        # sums over the non-zeros alone (adding 0.0 is exact), and the first entry above u
        # is always at a non-zero: the token the sum over the non-zeros would give,
        # without gathering them (a whole vocabulary's copy when nothing truncates it).
        cum = np.cumsum(probs, out=_scratch(probs.shape[0]))
        u = rng.random() * cum[-1]
        i = int(np.searchsorted(cum, u, side="right"))
        if i >= probs.shape[0]:  # u rounded up to the total: the last token that can be drawn
            i = int(np.flatnonzero(probs)[-1])
    return i if ids is None else int(ids[i])
