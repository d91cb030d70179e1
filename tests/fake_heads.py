"""A scripted DFlash head for the unit tests: the dflash proposer's protocol
(``speculative.proposers.dflash.DFlashBackend``) over a fake model, as tests/fake_mtp.py
is the MTP heads' (an EAGLE-3 head drafts through that one).

Its block's row ``i`` is the model's logits after ``seq`` and the model's own greedy
continuation of ``i`` tokens: every row is computed without the tokens drafted (or
sampled) before it, as a real block's are."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specdesk.speculative.backend import common_prefix_length


class FakeBlockHead:
    def __init__(self, model, n_ctx: int = 4096, block_size: int = 4) -> None:
        self.model = model
        self._n_ctx = n_ctx
        self.block_size = block_size
        self.history: list[int] = []
        self.native_seconds = 0.0
        self.last_prefill_evaluated = 0
        self.blocks: list[tuple[int, int]] = []  # (len(seq), k) per block

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def max_draft(self) -> int:
        return self.block_size - 1

    def sync(self, tokens: Sequence[int]) -> int:
        tokens = list(tokens)
        keep = common_prefix_length(self.history, tokens)
        self.history = tokens
        return len(tokens) - keep

    def block(self, seq: Sequence[int], k: int, fn=None):
        assert 1 <= k <= self.max_draft
        self.last_prefill_evaluated = self.sync(list(seq[:-1]))
        self.blocks.append((len(seq), k))
        ctx, rows = list(seq), []
        for _ in range(k):
            row = np.asarray(self.model.logits(ctx), dtype=np.float32)
            rows.append(row)
            ctx.append(int(row.argmax()))
        view = np.stack(rows)
        view.flags.writeable = False
        return fn(view) if fn is not None else view.copy()

    def rollback(self, n_past: int) -> None:
        assert 0 <= n_past <= len(self.history)
        del self.history[n_past:]
