"""Explain why a speculative run at temperature 0 differs from target alone.

In exact arithmetic greedy speculation reproduces the target's output token for
token. llama.cpp, though, uses different kernels for different batch sizes, so the
target's logits for the same position differ slightly between a single-token step
and a position inside a verify batch; where the top two logits nearly tie, the
argmax can flip (seen: Qwen2.5-Coder-1.5B at a margin of 0.115 with 4 tokens
verified at once). From there on the two runs legitimately continue differently.

To tell that apart from a bug, both runs are *replayed*: every batch each run sent
to the target is sent again in the same shapes, and the target's logits at the
first differing position are read from each replay. The divergence is a
``near-tie`` when each replay reproduces its own run's token and the two tokens are
within ``NEAR_TIE_LOGITS`` of each other; anything else is a ``mismatch``.
:func:`verdict_text` says it in a sentence, with the machine's measured kernel drift
(:mod:`specdesk.speculative.drift`) when there is one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from .backend import Backend
from .decoder import Step
from .drift import NEAR_TIE_LOGITS

__all__ = ["NEAR_TIE_LOGITS", "Divergence", "explain", "first_difference", "replay_logits"]


@dataclass(frozen=True)
class Divergence:
    index: int  # position in the generated tokens
    baseline_token: int
    speculative_token: int
    margin: float  # |logit(baseline) - logit(speculative)| in the baseline's computation
    margin_batched: float  # the same in the speculative run's computation
    reproduced: bool  # each replay picked its own run's token
    verdict: str  # "near-tie" | "mismatch"
    baseline_text: str = ""
    speculative_text: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


def replay_logits(target: Backend, prompt: Sequence[int], steps: Sequence[Step], position: int) -> np.ndarray | None:
    """The target's logits for generated token ``position``, computed with the same
    batches the run used (from an empty context)."""
    target.rollback(0)
    target.prefill(list(prompt[:-1]), logits=False)
    seq = list(prompt)
    produced = 0
    for step in steps:
        if not step.tokens:
            continue
        batch = [seq[-1]] + list(step.draft_tokens)
        rows = target.eval(batch, all_rows=True)
        n = len(step.tokens)
        if produced <= position < produced + n:
            return rows[position - produced]
        target.rollback(len(seq) + step.accepted)
        seq.extend(t.token for t in step.tokens)
        produced += n
    return None


def explain(
    target: Backend,
    prompt: Sequence[int],
    baseline_steps: Sequence[Step],
    speculative_steps: Sequence[Step],
) -> Divergence | None:
    """None when both runs emitted the same tokens."""
    a = [t.token for s in baseline_steps for t in s.tokens]
    b = [t.token for s in speculative_steps for t in s.tokens]
    i = first_difference(a, b)
    if i is None:
        return None
    if i >= len(a) or i >= len(b):
        # One run stopped earlier (EOS) where the other went on: compare at that index.
        ta = a[i] if i < len(a) else -1
        tb = b[i] if i < len(b) else -1
    else:
        ta, tb = a[i], b[i]
    la = replay_logits(target, prompt, baseline_steps, i)
    lb = replay_logits(target, prompt, speculative_steps, i)
    target.rollback(0)
    if la is None or lb is None or ta < 0 or tb < 0:
        return Divergence(i, ta, tb, float("nan"), float("nan"), False, "mismatch")
    margin = float(abs(la[ta] - la[tb]))
    margin_b = float(abs(lb[ta] - lb[tb]))
    reproduced = int(np.argmax(la)) == ta and int(np.argmax(lb)) == tb
    verdict = "near-tie" if reproduced and max(margin, margin_b) <= NEAR_TIE_LOGITS else "mismatch"
    return Divergence(
        index=i,
        baseline_token=ta,
        speculative_token=tb,
        margin=margin,
        margin_batched=margin_b,
        reproduced=reproduced,
        verdict=verdict,
        baseline_text=target.token_bytes(ta).decode("utf-8", "replace"),
        speculative_text=target.token_bytes(tb).decode("utf-8", "replace"),
    )
