"""The target's own multi-token-prediction (NextN) heads as a draft context.

The protocol is llama.cpp's (``common_speculative_impl_draft_mtp`` in the vendored
common/speculative.cpp), driven lazily as the draft model's context is:

* The target runs with its NextN hidden states on (``llama_set_embeddings_nextn(ctx,
  true, masked=false)``): every decode leaves one row ``h_p`` per token, the hidden
  state that predicted the token after position ``p``. :class:`MtpHeads` copies them
  out after each of the target's decodes (``Context.decode_observers``).
* A second context of the same model, ``LLAMA_CONTEXT_TYPE_MTP``, runs only the NextN
  block(s) and holds their KV cache. Its position ``p`` is token ``x_p`` paired with
  the target's ``h_{p-1}`` (zeros at 0); its logits there predict ``x_{p+1}``.
  :meth:`MtpHeads.prefill` makes it hold a sequence that way, evaluating only what is
  new: the tokens the target accepted since the last draft, and the pending token,
  whose logits give the first draft token.
* Each further draft token is the last drafted token paired with the head's *own*
  hidden state from the step before (:meth:`MtpHeads.eval`). Those positions do not
  pair a token with the target's state, so they are never reused: the next prefill
  drops them and evaluates the accepted ones again with the target's rows.
* A model with several heads (Step 3.5) chains them, head ``i`` for draft token
  ``i + 1`` (``llama_set_nextn_layer_offset``): every head's KV layer is filled at
  each catch-up, and draft step ``i`` re-evaluates the pending token and the ``i``
  drafted ones under head ``i``, as llama.cpp's driver does.

The hidden-state calls are declared in the vendored src/llama-ext.h, a C++ header:
libllama exports them under C++-mangled names only, bound here by those names (a build
without one is refused in one line). ``llama_batch_ext_set_embd_state``, which the
Python bindings also bind, is a stub in this llama.cpp (src/llama-batch.cpp: "TODO",
returns false); llama.cpp's own driver passes the hidden state as the batch entry's
embedding beside its token id, as :meth:`MtpHeads._decode` does through a
``llama_batch`` carrying both (``llama_batch_compat``: "a batch can carry both").
"""

from __future__ import annotations

import ctypes
import functools
import time
from typing import Callable, Sequence, TypeVar

import llama_cpp
import numpy as np

from ..errors import ContextOverflowError, SpecDeskError
from ..speculative.backend import common_prefix_length
from .backend import deferred_interrupt
from .context import Context
from .ext import bind
from .hidden import TargetHiddenStates
from .model import Buffer, Model, capture_buffers
from .rpc import check_alive, gone

T = TypeVar("T")

# name -> (C++-mangled symbol, argument types, result type); Itanium ABI, as `nm -D libllama.so` lists them
_SYMBOLS = {
    "llama_set_embeddings_nextn": ("_Z26llama_set_embeddings_nextnP13llama_contextbb",
                                   [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool], None),
    "llama_get_embeddings_nextn": ("_Z26llama_get_embeddings_nextnP13llama_context",
                                   [ctypes.c_void_p], ctypes.POINTER(ctypes.c_float)),
    "llama_set_nextn_layer_offset": ("_Z28llama_set_nextn_layer_offsetP13llama_contexti",
                                     [ctypes.c_void_p, ctypes.c_int32], None),
}


def nextn_api_of(lib: ctypes.CDLL):
    """The hidden-state calls of ``lib`` (SpecDeskError in one line where one is missing)."""
    return bind(lib, _SYMBOLS, "it cannot run a model's MTP heads")


@functools.cache
def nextn_api():
    """The hidden-state calls of libllama."""
    return nextn_api_of(llama_cpp.llama_cpp._lib)


def _as_floats(a: np.ndarray):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


class MtpHeads:
    """The NextN heads of the model behind ``target`` (loaded with ``load_mtp``), as a
    context the mtp proposer drafts with (``speculative.proposers.mtp.MtpBackend``).

    :meth:`activate` before a generation that drafts with it (it makes the target keep
    its hidden states, and rolls the target back to where they are known);
    :meth:`deactivate` before one that does not (the target's prompt then skips its
    last layer for all but the last token again)."""

    def __init__(self, model: Model, target: Context) -> None:
        api = nextn_api()
        if not model.load_mtp:
            raise SpecDeskError(f"{model.path.name} was loaded without its MTP heads")
        mp = model.ptr
        self.heads = int(llama_cpp.llama_model_n_layer_nextn(mp))
        if self.heads <= 0:
            raise SpecDeskError(f"{model.path.name} carries no MTP heads")
        n_out, n_inp = int(llama_cpp.llama_model_n_embd_out(mp)), int(llama_cpp.llama_model_n_embd_inp(mp))
        if n_out != n_inp:
            raise SpecDeskError(f"{model.path.name}: its hidden state ({n_out}) is not as wide as its heads' input "
                                f"({n_inp}); SpecDesk cannot pair them")
        self.model, self.target, self._api = model, target, api
        self.n_embd = n_out
        params = llama_cpp.llama_context_default_params()
        params.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        params.n_ctx = target.n_ctx
        n_batch = llama_cpp.llama_n_batch(target.ptr)
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = target.threads
        params.no_perf = True
        with deferred_interrupt() as interrupted, capture_buffers() as buffers:
            ctx = llama_cpp.llama_init_from_model(mp, params)
            if interrupted[0] and ctx:
                llama_cpp.llama_free(ctx)
        if not ctx:
            raise SpecDeskError(f"{model.path.name}: llama.cpp could not make a context for its MTP heads (out of memory?)")
        self.buffers: list[Buffer] = buffers
        self._ctx = ctx
        self._mem = llama_cpp.llama_get_memory(ctx)
        # the heads' own hidden state, for their output rows. llama.cpp copies as many rows as
        # there are outputs, from the start of the graph's h_nextn, which some graphs take
        # before the output rows are gathered (qwen35.cpp, glm4-moe.cpp: every token's row)
        # and others after (step35.cpp): a decode of several tokens asks for every row, so
        # that both give the last token's state last (see _decode)
        api.llama_set_embeddings_nextn(ctx, True, True)
        self._n_ctx = llama_cpp.llama_n_ctx(ctx)
        self._n_batch = n_batch
        self._n_vocab = model.n_vocab
        # a batch carrying both token ids and hidden states (llama_batch_compat reads both)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        b = self._batch
        self._embd = np.zeros((n_batch, self.n_embd), dtype=np.float32)
        b.embd = _as_floats(self._embd)
        self._tok = np.ctypeslib.as_array(b.token, shape=(n_batch,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(n_batch,))
        self._out = np.ctypeslib.as_array(ctypes.cast(b.logits, ctypes.POINTER(ctypes.c_int8)), shape=(n_batch,))
        self._nseq = np.ctypeslib.as_array(b.n_seq_id, shape=(n_batch,))
        for i in range(n_batch):
            b.seq_id[i][0] = 0
        self._nseq[:] = 1
        # the target's hidden state at each position, and the tokens they were computed after
        self.hidden = TargetHiddenStates(target, api, self.n_embd, self._n_ctx, "MTP heads")
        # the heads' own hidden state: the last one (one head), or one per draft step (chained heads)
        self._own = np.zeros((self.heads, self.n_embd), dtype=np.float32)
        self._zero = np.zeros(self.n_embd, dtype=np.float32)
        #: the tokens this context holds, each paired with the target's hidden state
        self.history: list[int] = []
        self._drafted: list[int] = []  # positions after history, paired with the heads' own state
        self.native_seconds = 0.0
        self.last_prefill_evaluated = 0
        self._last_m = 1  # rows (every token's) of the last decode that asked for one

    # -- the target's side --------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.hidden.active

    def activate(self) -> None:
        """Make the target keep its hidden states from now on; positions it holds whose
        state was never kept are evaluated again (rolled back)."""
        self.hidden.activate()

    def deactivate(self) -> None:
        self.hidden.deactivate()

    # -- the MtpBackend protocol ---------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        return self._n_vocab

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def max_draft(self) -> int | None:
        """Chained heads draft one token each; a single head drafts on its own output."""
        return self.heads if self.heads > 1 else None

    def prefill(self, tokens: Sequence[int], logits: bool = True,
                fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T | None:
        """Hold exactly ``tokens``, each paired with the target's hidden state before it,
        evaluating what follows the longest common prefix (positions drafted on the
        heads' own state are never kept); return the last position's logits row (a copy,
        or ``fn`` of a read-only view of shape (1, n_vocab)), or None with ``logits=False``."""
        tokens = tokens if isinstance(tokens, list) else list(tokens)
        n = len(tokens)
        if n > self._n_ctx:
            raise ContextOverflowError(f"{n} tokens do not fit in a context of {self._n_ctx}")
        if not self.hidden.covers(tokens, n - 1):
            raise SpecDeskError("the target's hidden states do not cover the sequence (MtpHeads.activate first)")
        keep = common_prefix_length(self.history, tokens)
        if logits and keep == n and keep > 0:
            keep -= 1
        self.rollback(keep)
        self.last_prefill_evaluated = n - keep
        if keep == n:
            return None
        h = self.hidden.rows
        for head in (range(self.heads - 1, -1, -1) if self.heads > 1 else (0,)):
            # every head's KV layer gets the new positions; head 0 last, for the first draft token
            if self.heads > 1:
                self._api.llama_set_nextn_layer_offset(self._ctx, head)
                self._seq_rm(keep)
            start = keep
            while start < n:
                end = min(n, start + self._n_batch)
                self._embd[0 : end - start] = h[start - 1 : end - 1] if start else np.vstack([self._zero, h[0 : end - 1]])
                self._decode(tokens[start:end], start, logits and end == n)
                start = end
        self.history.extend(tokens[keep:])
        if not logits:
            return None
        self._own[0] = self._row_h()
        return self._rows(fn)

    def eval(self, tokens: Sequence[int], all_rows: bool = False,
             fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T:
        """Draft on: the one token ``tokens[0]`` (the last drafted) at the next position,
        paired with the hidden state the head(s) gave for it; its logits row as prefill."""
        if len(tokens) != 1:
            raise ValueError("the heads draft one token at a time")
        i = len(self._drafted) + 1  # the draft step (1: the second draft token)
        p0 = len(self.history) - 1  # the pending token's position
        if p0 + i >= self._n_ctx:
            raise ContextOverflowError(f"the context is full: {p0 + i + 1} tokens do not fit in {self._n_ctx}")
        self._drafted.append(int(tokens[0]))
        if self.heads > 1:
            if i >= self.heads:
                raise ValueError(f"{self.heads} chained heads draft {self.heads} tokens at most")
            # head i re-evaluates the pending token and the drafted ones, each with the state before it
            self._api.llama_set_nextn_layer_offset(self._ctx, i)
            self._seq_rm(p0)
            self._embd[0] = self.hidden.rows[p0 - 1] if p0 else self._zero
            self._embd[1 : i + 1] = self._own[0:i]
            self._decode([self.history[-1]] + self._drafted, p0, True)
            self._api.llama_set_nextn_layer_offset(self._ctx, 0)
        else:
            self._embd[0] = self._own[0]  # the head's state after the token before
            self._decode(self._drafted[-1:], p0 + i, True)
        self._own[i if self.heads > 1 else 0] = self._row_h()
        return self._rows(fn)

    def rollback(self, n_past: int) -> None:
        """Forget every position from ``n_past`` on (and every drafted one)."""
        if n_past < 0 or n_past > len(self.history):
            raise ValueError(f"cannot roll back to {n_past}: the heads hold {len(self.history)} tokens")
        if n_past == len(self.history) and not self._drafted:
            return
        self._seq_rm(n_past)
        del self.history[n_past:]
        self._drafted = []

    def warm_up(self, tokens: Sequence[int]) -> float:
        """The heads' first decodes, untimed, before anything is timed: the target
        evaluates ``tokens`` after what it holds (keeping their hidden states), the heads
        read them in one batch and draft one token on their own state; then both hold
        what they held, and no timing counts it. Returns the seconds it took."""
        if not tokens or not self.active:
            return 0.0
        target = self.target
        p0, h0 = len(target.history), list(self.history)
        seq = list(target.history) + list(tokens)
        if len(seq) + 1 > min(self._n_ctx, target.n_ctx):
            return 0.0
        t0, native = time.perf_counter(), self.native_seconds
        try:
            with target.untimed():
                target.prefill(seq, logits=False)
                self.prefill(seq, fn=lambda rows: None)
                self.eval([int(tokens[-1])], fn=lambda rows: None)
        finally:
            self.rollback(common_prefix_length(self.history, h0))
            target.rollback(p0)
            self.hidden.forget(p0)
            self.native_seconds = native
        return time.perf_counter() - t0

    # -- llama.cpp -----------------------------------------------------------------------

    def _seq_rm(self, p: int) -> None:
        if not llama_cpp.llama_memory_seq_rm(self._mem, 0, p, -1):
            raise SpecDeskError(f"llama.cpp could not roll the MTP heads back to position {p}")

    def _decode(self, tokens: Sequence[int], p0: int, last_row: bool) -> None:
        if self.model.rpc_endpoints:
            check_alive(self.model.rpc_endpoints)  # llama.cpp would abort on a server that has gone
        m = len(tokens)
        self._tok[:m] = tokens
        self._pos[:m] = np.arange(p0, p0 + m, dtype=np.int32)
        # every row where one is asked for: one row only would get the first token's state
        # from the graphs that keep every token's (see __init__)
        self._out[:m] = last_row
        self._batch.n_tokens = m
        self._last_m = m if last_row else 0
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(self._ctx, self._batch)
        self.native_seconds += time.perf_counter() - t0
        if rc != 0:
            if rc == 1:
                raise ContextOverflowError(f"the MTP heads' context is full: no room for {m} more tokens after {p0}")
            raise SpecDeskError(f"llama_decode failed with code {rc} in the MTP heads")

    def _row_h(self) -> np.ndarray:
        """The heads' hidden state at the last decode's last token."""
        ptr = self._api.llama_get_embeddings_nextn(self._ctx)
        if not ptr:
            raise SpecDeskError("llama.cpp kept no hidden state for the MTP heads' output")
        return np.ctypeslib.as_array(ptr, shape=(self._last_m, self.n_embd))[-1]

    def _rows(self, fn: Callable[[np.ndarray], T] | None) -> np.ndarray | T:
        """The last decode's last token's logits row, shape (1, n_vocab), read-only."""
        ptr = llama_cpp.llama_get_logits(self._ctx)
        view = np.ctypeslib.as_array(ptr, shape=(self._last_m, self._n_vocab))[-1:]
        view.flags.writeable = False
        return fn(view) if fn is not None else view.copy()

    # -- lifetime ------------------------------------------------------------------------

    def reset(self) -> None:
        self.rollback(0)

    def close(self) -> None:
        if getattr(self, "_ctx", None) is not None:
            self.deactivate()
            self._batch.embd = None  # ours: llama_batch_free must not free it
            llama_cpp.llama_batch_free(self._batch)
            if not (self.model.rpc_endpoints and gone(self.model.rpc_endpoints)):
                llama_cpp.llama_free(self._ctx)  # (on a lost server llama.cpp would abort: left allocated, as Context does)
            self._ctx = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
