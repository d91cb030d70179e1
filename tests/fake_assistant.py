"""A scripted fake of a Gemma 4 assistant (the gemma4-assistant proposer's
``AssistantBackend``), over the fake models of fakes.py.

Its logits after a sequence are ``model``'s: the target's own model for an assistant
that agrees with it, another for one that does not. As the engine's assistant, it holds
nothing of its own and reads the target's state: :meth:`first` checks that the target
holds the sequence but its pending token (the decoder's invariant, which the real one
needs because it reads the target's cache), and every call is recorded.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class FakeAssistant:
    def __init__(self, model, target, n_ctx: int = 4096) -> None:
        self.model, self.target = model, target
        self.n_ctx = n_ctx
        self.native_seconds = 0.0
        self.seq: list[int] = []
        self.calls: list[tuple[str, int]] = []  # ("first", len(seq)) | ("next", token)
        self.resets = 0

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    def _row(self, fn):
        row = np.asarray(self.model.logits(self.seq), dtype=np.float32)[None, :]
        row.flags.writeable = False
        return fn(row) if fn is not None else row.copy()

    def first(self, seq: Sequence[int], fn=None):
        seq = list(seq)
        assert len(seq) >= 2 and self.target.history == seq[:-1], "the target must hold all but the pending token"
        self.seq = seq
        self.calls.append(("first", len(seq)))
        return self._row(fn)

    def next(self, token: int, fn=None):
        assert self.seq, "next follows first"
        self.seq.append(int(token))
        self.calls.append(("next", int(token)))
        return self._row(fn)

    def reset(self) -> None:
        self.seq = []
        self.resets += 1
