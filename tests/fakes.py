"""A scripted fake backend: a tiny deterministic "language model" over a small
vocabulary, implementing the same protocol as the llama.cpp contexts.

Logits at a position are a fixed function of the two previous tokens, so the
exact distribution of any continuation can be computed by hand in tests.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from specdesk.speculative.backend import common_prefix_length


class FakeModel:
    def __init__(self, n_vocab: int = 8, seed: int = 0, scale: float = 2.0, base: "FakeModel | None" = None, noise: float = 0.0):
        rng = np.random.default_rng(seed)
        if base is None:
            self.table = rng.normal(0.0, scale, size=(n_vocab, n_vocab, n_vocab)).astype(np.float32)
        else:
            # A "draft" model: the base model's logits plus noise (partial agreement).
            self.table = (base.table + rng.normal(0.0, noise, size=base.table.shape)).astype(np.float32)
        self.n_vocab = self.table.shape[-1]

    def logits(self, history: Sequence[int]) -> np.ndarray:
        a = history[-2] if len(history) >= 2 else 0
        b = history[-1] if len(history) >= 1 else 0
        return self.table[a, b]


class FakeBackend:
    def __init__(self, model: FakeModel, n_ctx: int = 4096, eog: int | None = None, step_cost: float = 0.0):
        self.model = model
        self._n_ctx = n_ctx
        self.eog = eog
        self.history: list[int] = []
        self.native_seconds = 0.0
        self.last_prefill_evaluated = 0
        self.evaluated = 0  # every token ever evaluated
        self.batches: list[int] = []  # size of every eval call
        self.step_cost = step_cost  # fake seconds per eval call, added to native_seconds

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def n_past(self) -> int:
        return len(self.history)

    def eval(self, tokens: Sequence[int], all_rows: bool = True) -> np.ndarray:
        if not tokens:
            raise ValueError("empty batch")
        if len(self.history) + len(tokens) > self._n_ctx:
            raise RuntimeError("context overflow")
        rows = []
        for t in tokens:
            self.history.append(int(t))
            rows.append(self.model.logits(self.history))
        self.evaluated += len(tokens)
        self.batches.append(len(tokens))
        self.native_seconds += self.step_cost
        out = np.stack(rows)
        return out if all_rows else out[-1:]

    def prefill(self, tokens: Sequence[int], logits: bool = True):
        tokens = list(tokens)
        keep = common_prefix_length(self.history, tokens)
        if logits and keep == len(tokens) and keep > 0:
            keep -= 1
        self.rollback(keep)
        rest = tokens[keep:]
        self.last_prefill_evaluated = len(rest)
        if not rest:
            return None
        rows = self.eval(rest, all_rows=False)
        return rows[-1] if logits else None

    def rollback(self, n_past: int) -> None:
        if n_past < 0 or n_past > len(self.history):
            raise ValueError(f"cannot roll back to {n_past} with {len(self.history)} tokens")
        del self.history[n_past:]

    def is_eog(self, token: int) -> bool:
        return self.eog is not None and token == self.eog

    def token_bytes(self, token: int) -> bytes:
        return f"<{token}>".encode()
