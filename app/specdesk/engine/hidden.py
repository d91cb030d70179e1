"""The target's last hidden state at each position, kept for the contexts that read it:
a model's own MTP heads (engine/mtp.py) and a Gemma 4 assistant (engine/gemma4_assistant.py).

llama.cpp keeps it where ``llama_set_embeddings_nextn(ctx, true, false)`` asks it to,
one row of the target's width per token of each decode (``llama_get_embeddings_nextn``).
:class:`TargetHiddenStates` switches that on for the generations that draft with such a
context, reads the rows after each of the target's decodes (its ``decode_observers``)
and keeps them per position, with the tokens they were computed after."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import SpecDeskError
from ..speculative.backend import common_prefix_length
from .context import Context


class TargetHiddenStates:
    """The hidden states of ``target`` (``api``: the NextN calls, engine/mtp.py's
    ``nextn_api``), ``n_embd`` wide, for up to ``n_ctx`` positions, for ``reader`` (its
    name in a message)."""

    def __init__(self, target: Context, api, n_embd: int, n_ctx: int, reader: str) -> None:
        self.target, self._api, self.reader = target, api, reader
        #: the state at each position, and the tokens they were computed after
        self.rows = np.zeros((n_ctx, n_embd), dtype=np.float32)
        self.tokens: list[int] = []
        self.active = False

    def activate(self) -> None:
        """Make the target keep its hidden states from now on; positions it holds whose
        state was never kept are evaluated again (rolled back)."""
        if self.active:
            return
        self._api.llama_set_embeddings_nextn(self.target.ptr, True, False)
        self.target.decode_observers.append(self._record)
        self.active = True
        self.target.rollback(common_prefix_length(self.tokens, self.target.history))

    def deactivate(self) -> None:
        if not self.active:
            return
        self._api.llama_set_embeddings_nextn(self.target.ptr, False, False)
        self.target.decode_observers.remove(self._record)
        self.active = False

    def covers(self, seq: Sequence[int], n: int) -> bool:
        """Whether the states of the first ``n`` positions of ``seq`` are kept."""
        return common_prefix_length(self.tokens, seq) >= n

    def forget(self, p0: int) -> None:
        """Forget the states from position ``p0`` on."""
        del self.tokens[p0:]

    def _record(self, p0: int, tokens: Sequence[int]) -> None:
        """After a decode of the target: its hidden-state rows, one per token."""
        m = len(tokens)
        ptr = self._api.llama_get_embeddings_nextn(self.target.ptr)
        if not ptr:
            raise SpecDeskError(f"llama.cpp kept no hidden states for the target's {self.reader}")
        self.rows[p0 : p0 + m] = np.ctypeslib.as_array(ptr, shape=(m, self.rows.shape[1]))
        del self.tokens[p0:]
        self.tokens.extend(map(int, tokens))
