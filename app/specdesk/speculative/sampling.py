"""Turn logits into the probability distribution the sampler draws from.

The same warp is applied to the target's logits (p) and the draft's logits (q),
which is what keeps rejection sampling exact: the output follows the *warped*
target distribution, the one plain target-alone sampling would use.

The chain follows llama.cpp's default order: top-k, top-p, min-p on the
untempered distribution, then temperature over the survivors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def top_probability(logits: np.ndarray) -> float:
    """Probability of the argmax under the plain softmax (for p_min checks)."""
    x = np.asarray(logits, dtype=np.float32)
    m = x.max()
    return float(1.0 / np.exp(x - m, dtype=np.float32).sum(dtype=np.float64))


def warp(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Return a probability vector (float64, same length as ``logits``).

    Greedy params give a one-hot vector on the argmax.
    """
    x = np.asarray(logits, dtype=np.float64)
    n = x.shape[-1]
    out = np.zeros(n, dtype=np.float64)
    if params.greedy:
        out[int(np.argmax(x))] = 1.0
        return out

    # Candidate set, as indices into x.
    if 0 < params.top_k < n:
        cand = np.argpartition(-x, params.top_k - 1)[: params.top_k]
    else:
        cand = None

    if params.top_p < 1.0:
        cand = _nucleus(x, cand, params.top_p)

    vals = x if cand is None else x[cand]
    if params.min_p > 0.0:
        keep = vals >= vals.max() + np.log(params.min_p)
        if cand is None:
            cand = np.flatnonzero(keep)
        else:
            cand = cand[keep]
        vals = x[cand]

    scaled = (vals - vals.max()) / params.temperature
    e = np.exp(scaled)
    probs = e / e.sum()
    if cand is None:
        return probs
    out[cand] = probs
    return out


def _nucleus(x: np.ndarray, cand: np.ndarray | None, top_p: float) -> np.ndarray:
    """Smallest set of best tokens whose untempered mass reaches top_p."""
    pool = np.arange(x.shape[-1]) if cand is None else cand
    vals = x[pool]
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


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a probability vector."""
    nz = np.flatnonzero(probs)
    if nz.shape[0] == 1:
        return int(nz[0])
    cum = np.cumsum(probs[nz])
    u = rng.random() * cum[-1]
    i = int(np.searchsorted(cum, u, side="right"))
    return int(nz[min(i, nz.shape[0] - 1)])
