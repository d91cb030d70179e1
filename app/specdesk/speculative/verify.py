"""Verifiers: pure functions that decide how much of a draft the target keeps.

Vocabulary (as in vLLM's rejection sampler):
- *accepted*: a draft token the target agrees with;
- *correction* (vLLM: recovered): the target's own token at the first rejection;
- *bonus*: the extra token the target gives after every draft token is accepted.

Both functions see the target's rows for positions ``0..k``: row ``i`` is the
target's prediction for the token after ``draft[:i]``, so row ``k`` is the bonus.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, Sequence

import numpy as np

from .sampling import Warped, sample

NextKind = Literal["correction", "bonus"]


class Verdict(NamedTuple):
    n_accepted: int
    next_token: int
    next_kind: NextKind
    # Target probability p and draft probability q of each accepted token and of the
    # next token, where known (greedy verification knows neither).
    p: tuple[float, ...] = ()
    q: tuple[float, ...] = ()
    # The target's argmax at each emitted position (greedy only), for traces.
    target_argmax: tuple[int, ...] = ()


def verify_greedy(draft: Sequence[int], target_argmax: np.ndarray | Sequence[int]) -> Verdict:
    """Accept draft tokens while they equal the target's argmax.

    ``target_argmax`` holds the argmax of each of the ``len(draft) + 1`` rows (the rows
    themselves are never needed, so none is copied).
    """
    k = len(draft)
    if len(target_argmax) != k + 1:
        raise ValueError(f"need {k + 1} target rows for {k} draft tokens, got {len(target_argmax)}")
    best = target_argmax.tolist() if isinstance(target_argmax, np.ndarray) else [int(b) for b in target_argmax]
    n = 0
    while n < k and best[n] == int(draft[n]):
        n += 1
    return Verdict(
        n_accepted=n,
        next_token=best[n],
        next_kind="bonus" if n == k else "correction",
        target_argmax=tuple(best[: n + 1]),
    )


def verify_stochastic(
    draft: Sequence[int],
    p_rows: Sequence[Warped],
    q_rows: Sequence[Warped] | None,
    rng: np.random.Generator,
) -> Verdict:
    """Leviathan et al. (2023) Algorithm 1 / Chen et al. (2023).

    ``p_rows``: the warped target distributions, ``k + 1`` of them (looked at in order,
    and only up to the first rejection: a lazy sequence warps no row it is not asked
    for). ``q_rows``: the warped draft distributions the draft tokens were sampled
    from, ``k`` of them, or ``None`` when the draft is deterministic (n-gram lookup,
    greedy or translated draft): q is then one-hot on the drafted token.

    Each draft token x is accepted with probability min(1, p(x)/q(x)); at the first
    rejection the next token is drawn from normalize(max(0, p - q)); after a full accept
    the bonus token is drawn from p. The result is distributed exactly as p.

    Why distributions kept over their support are enough, and exact: p(x) and q(x) are
    read from them as from the dense vectors (0 outside a support); max(0, p - q) is
    positive only where p > q >= 0, so inside p's support, and it is computed there
    whole; the bonus and a p == q fallback draw from p over its support, which is all
    of its mass. Every number the algorithm uses is the dense algorithm's.
    """
    k = len(draft)
    if len(p_rows) != k + 1:
        raise ValueError(f"need {k + 1} target rows for {k} draft tokens, got {len(p_rows)}")
    if q_rows is not None and len(q_rows) != k:
        raise ValueError(f"need {k} draft rows for {k} draft tokens, got {len(q_rows)}")
    ps: list[float] = []
    qs: list[float] = []
    for i, x in enumerate(draft):
        x = int(x)
        p = p_rows[i]
        p_x = p.prob(x)
        q_x = 1.0 if q_rows is None else q_rows[i].prob(x)
        # q_x > 0 always holds for a token the draft sampled; guard anyway.
        accept = q_x > 0.0 and (p_x >= q_x or rng.random() < p_x / q_x)
        if not accept:
            if q_rows is None:
                residual = np.where(p.ids == x, 0.0, p.probs)
            else:
                residual = np.maximum(p.probs - q_rows[i].probs_at(p.ids), 0.0)
            total = residual.sum()
            if total <= 0.0:
                # p == q exactly: the rejection had probability 0; fall back to p.
                residual = p.probs
                total = residual.sum()
            tok = sample(residual / total, rng, p.ids)
            ps.append(p.prob(tok))
            qs.append(float("nan"))
            return Verdict(i, tok, "correction", tuple(ps), tuple(qs))
        ps.append(p_x)
        qs.append(q_x)
    p = p_rows[k]
    tok = p.sample(rng)
    ps.append(p.prob(tok))
    qs.append(float("nan"))
    return Verdict(k, tok, "bonus", tuple(ps), tuple(qs))
