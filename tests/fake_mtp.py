"""A scripted fake of a model's MTP heads (the mtp proposer's ``MtpBackend``), over the
fake models of fakes.py.

The heads' logits after a sequence are ``model``'s: the target's own model for heads
that agree with it, another for heads that do not. As the engine's heads, the fake
holds the sequence the way the real context does: ``prefill`` positions pair a token
with the target's state and are kept, ``eval`` positions (drafted on the heads' own
state) are dropped at the next prefill, and every batch it evaluates is recorded.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from specdesk.speculative.backend import common_prefix_length


class FakeHeads:
    def __init__(self, model, n_ctx: int = 4096, max_draft: int | None = None) -> None:
        self.model = model
        self._n_ctx = n_ctx
        self._max_draft = max_draft
        self.history: list[int] = []
        self.drafted: list[int] = []
        self.native_seconds = 0.0
        self.last_prefill_evaluated = 0
        self.batches: list[tuple[str, int]] = []  # ("prefill" | "eval", tokens) per call

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def max_draft(self) -> int | None:
        return self._max_draft

    def _row(self, fn):
        row = np.asarray(self.model.logits(self.history + self.drafted), dtype=np.float32)[None, :]
        row.flags.writeable = False
        return fn(row) if fn is not None else row.copy()

    def prefill(self, tokens: Sequence[int], logits: bool = True, fn=None):
        tokens = list(tokens)
        keep = common_prefix_length(self.history, tokens)
        if logits and keep == len(tokens) and keep > 0:
            keep -= 1
        self.rollback(keep)
        rest = tokens[keep:]
        self.last_prefill_evaluated = len(rest)
        if rest:
            self.batches.append(("prefill", len(rest)))
            self.history.extend(rest)
        return self._row(fn) if logits else None

    def eval(self, tokens: Sequence[int], all_rows: bool = False, fn=None):
        assert len(tokens) == 1
        if self._max_draft is not None:
            assert len(self.drafted) + 1 < self._max_draft, "more draft steps than chained heads"
        self.drafted.append(int(tokens[0]))
        self.batches.append(("eval", 1))
        return self._row(fn)

    def rollback(self, n_past: int) -> None:
        assert 0 <= n_past <= len(self.history)
        del self.history[n_past:]
        self.drafted = []
