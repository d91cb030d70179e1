"""Verifiers: pure functions that decide how much of a draft the target keeps.

Vocabulary (as in vLLM's rejection sampler):
- *accepted*: a draft token the target agrees with;
- *correction* (vLLM: recovered): the target's own token at the first rejection;
- *bonus*: the extra token the target gives after every draft token is accepted.

Both functions see the target's rows for positions ``0..k``: row ``i`` is the
target's prediction for the token after ``draft[:i]``, so row ``k`` is the bonus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from .sampling import sample

NextKind = Literal["correction", "bonus"]


@dataclass(frozen=True)
class Verdict:
    n_accepted: int
    next_token: int
    next_kind: NextKind
    # Target probability p and draft probability q of each accepted token and of the
    # next token, where known (greedy verification knows neither).
    p: tuple[float, ...] = ()
    q: tuple[float, ...] = ()
    # The target's argmax at each emitted position (greedy only), for traces.
    target_argmax: tuple[int, ...] = ()


def verify_greedy(draft: Sequence[int], target_logits: np.ndarray) -> Verdict:
    """Accept draft tokens while they equal the target's argmax.

    ``target_logits`` has ``len(draft) + 1`` rows.
    """
    k = len(draft)
    if target_logits.shape[0] != k + 1:
        raise ValueError(f"need {k + 1} target rows for {k} draft tokens, got {target_logits.shape[0]}")
    best = np.argmax(target_logits, axis=-1)
    n = 0
    while n < k and int(best[n]) == int(draft[n]):
        n += 1
    return Verdict(
        n_accepted=n,
        next_token=int(best[n]),
        next_kind="bonus" if n == k else "correction",
        target_argmax=tuple(int(b) for b in best[: n + 1]),
    )


def verify_stochastic(
    draft: Sequence[int],
    p_rows: np.ndarray,
    q_rows: np.ndarray | None,
    rng: np.random.Generator,
) -> Verdict:
    """Leviathan et al. (2023) Algorithm 1 / Chen et al. (2023).

    ``p_rows``: warped target probabilities, ``k + 1`` rows.
    ``q_rows``: warped draft probabilities the draft tokens were sampled from, ``k`` rows,
    or ``None`` when the draft is deterministic (n-gram lookup, greedy draft): q is then
    one-hot on the drafted token.

    Each draft token x is accepted with probability min(1, p(x)/q(x)); at the first
    rejection the next token is drawn from normalize(max(0, p - q)); after a full accept
    the bonus token is drawn from p. The result is distributed exactly as p.
    """
    k = len(draft)
    if p_rows.shape[0] != k + 1:
        raise ValueError(f"need {k + 1} target rows for {k} draft tokens, got {p_rows.shape[0]}")
    if q_rows is not None and q_rows.shape[0] != k:
        raise ValueError(f"need {k} draft rows for {k} draft tokens, got {q_rows.shape[0]}")
    ps: list[float] = []
    qs: list[float] = []
    for i, x in enumerate(draft):
        x = int(x)
        p_x = float(p_rows[i, x])
        q_x = 1.0 if q_rows is None else float(q_rows[i, x])
        # q_x > 0 always holds for a token the draft sampled; guard anyway.
        accept = q_x > 0.0 and (p_x >= q_x or rng.random() < p_x / q_x)
        if not accept:
            if q_rows is None:
                residual = p_rows[i].copy()
                residual[x] = 0.0
            else:
                residual = np.maximum(p_rows[i] - q_rows[i], 0.0)
            total = residual.sum()
            if total <= 0.0:
                # p == q exactly: the rejection had probability 0; fall back to p.
                residual = p_rows[i]
                total = residual.sum()
            tok = sample(residual / total, rng)
            ps.append(float(p_rows[i, tok]))
            qs.append(float("nan"))
            return Verdict(i, tok, "correction", tuple(ps), tuple(qs))
        ps.append(p_x)
        qs.append(q_x)
    tok = sample(p_rows[k], rng)
    ps.append(float(p_rows[k, tok]))
    qs.append(float("nan"))
    return Verdict(k, tok, "bonus", tuple(ps), tuple(qs))
