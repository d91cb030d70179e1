"""Draft heads that read the target's layer inputs: EAGLE-3 and DFlash, as contexts the
eagle3 and dflash proposers draft with.

Each head is a GGUF of its own architecture (``eagle3``, ``dflash``), loaded as a Model
and given a context made with ``llama_context_params.ctx_other`` set to the target's
context: through it the head uses the target's token embeddings and output matrix
where it ships none (the vendored src/llama-context.cpp). The head names the target
layers it reads (``llama_model_target_layer_ids``); :class:`~.features.TargetFeatures`
keeps their inputs after each of the target's decodes, and the head follows the target
lazily, as the MTP heads and a draft model do, reading what is new when it drafts.

The protocols are llama.cpp's (``common_speculative_impl_draft_eagle3`` and
``…_draft_dflash`` in the vendored common/speculative.cpp):

* EAGLE-3 (:class:`Eagle3Heads`): an encoder (``LLAMA_PROCESS_TYPE_ENCODE``, here
  ``llama_encode``) projects each position's features to ``g_P``; at position ``P`` the
  decoder holds the pair (token ``x_{P+1}``, ``g_P``), so for a sequence of ``N`` tokens
  (the last not yet decoded by the target) it holds positions ``0 .. N-2`` and the last
  one's logits give the first draft token. Each further token is the last drafted one
  paired with the decoder's own pre-norm state (``llama_get_embeddings_nextn``) at the
  next position; those positions are never kept, as the MTP heads' are not.
* DFlash (:class:`DFlashHeads`): the features of every position the target decoded are
  injected into the head's KV cache (a decode of embedding rows), then one decode of a
  block ``[x_{N-1}, mask, ..., mask]`` at positions ``N-1 ..`` with non-causal attention
  gives every draft token at once, each mask position's row its own distribution; the
  block is dropped from the cache straight after.

Rows that carry both a token and an embedding go through a ``llama_batch`` with both
arrays, which llama.cpp's ``llama_batch_compat`` reads ("a batch can carry both", the
MTP hook batches): the same ``llama_batch_ext`` that ``llama_batch_ext_*`` +
``llama_process`` would build entry by entry, filled here from NumPy in one go
(``llama_batch_ext_set_embd_state``, the one call that would differ, is a stub that
returns false in this llama.cpp: src/llama-batch.cpp, "TODO").
"""

from __future__ import annotations

import ctypes
import time
from typing import Callable, Sequence, TypeVar

import llama_cpp
import numpy as np

from ..errors import ContextOverflowError, SpecDeskError
from ..speculative.backend import common_prefix_length
from .backend import deferred_interrupt
from .context import Context
from .features import TargetFeatures, heads_api, target_layer_ids
from .model import Buffer, Model, capture_buffers
from .rpc import check_alive, gone

T = TypeVar("T")

_NULL_TOKENS = ctypes.POINTER(ctypes.c_int32)()


class _HeadContext:
    """A head's context beside ``target`` (ctx_other), its batch, and the target
    features it reads."""

    kind = "head"

    def __init__(self, model: Model, target: Context, n_embd_rows: int) -> None:
        api = heads_api()
        self.model, self.target, self._api = model, target, api
        self.layers = target_layer_ids(api, model.ptr)
        self.features = TargetFeatures(target, self.layers, api)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = target.n_ctx
        n_batch = int(llama_cpp.llama_n_batch(target.ptr))
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = target.threads
        params.no_perf = True
        other = target.ptr  # the target's context: the head reads its layer inputs, embeddings and output
        params.ctx_other = other
        with deferred_interrupt() as interrupted, capture_buffers() as buffers:
            ctx = llama_cpp.llama_init_from_model(model.ptr, params)
            if interrupted[0] and ctx:
                llama_cpp.llama_free(ctx)
        if not ctx:
            raise SpecDeskError(f"{model.path.name}: llama.cpp could not make a context for this {self.kind} head "
                                "(out of memory?)")
        self.buffers: list[Buffer] = buffers
        self._ctx = ctx
        self._mem = llama_cpp.llama_get_memory(ctx)
        self._n_ctx = int(llama_cpp.llama_n_ctx(ctx))
        self._n_batch = n_batch
        self._n_vocab = model.n_vocab
        self.n_embd = model.shape.n_embd
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        b = self._batch
        # (a pointer read from a ctypes structure aliases the field: keep a copy of its value)
        self._tokens_ptr = ctypes.cast(ctypes.cast(b.token, ctypes.c_void_p).value, ctypes.POINTER(ctypes.c_int32))
        self._tok = np.ctypeslib.as_array(b.token, shape=(n_batch,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(n_batch,))
        self._out = np.ctypeslib.as_array(ctypes.cast(b.logits, ctypes.POINTER(ctypes.c_int8)), shape=(n_batch,))
        for i in range(n_batch):
            b.seq_id[i][0] = 0
        np.ctypeslib.as_array(b.n_seq_id, shape=(n_batch,))[:] = 1
        self._embd = np.zeros((n_batch, n_embd_rows), dtype=np.float32)
        #: the tokens the head holds (what each kind pairs with them: see the subclasses)
        self.history: list[int] = []
        self.native_seconds = 0.0
        self.last_prefill_evaluated = 0
        self.closed = False

    # -- the target's side --------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.features.active

    def activate(self) -> None:
        """The target keeps the inputs of the head's layers from now on."""
        self.features.activate()

    def deactivate(self) -> None:
        self.features.deactivate()

    @property
    def n_vocab(self) -> int:
        return self._n_vocab

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def threads(self) -> int:
        return self.target.threads

    def _need_features(self, a: int, b: int, tokens: Sequence[int]) -> np.ndarray:
        if not self.features.covers(a, b, tokens):
            raise SpecDeskError("the target's layer inputs do not cover the sequence (activate the head first)")
        return self.features.rows(a, b)

    # -- llama.cpp -----------------------------------------------------------------------

    def _seq_rm(self, p: int) -> None:
        if not llama_cpp.llama_memory_seq_rm(self._mem, 0, p, -1):
            raise SpecDeskError(f"llama.cpp could not roll the {self.kind} head back to position {p}")

    def _run(self, m: int, p0: int, rows: np.ndarray | None, tokens: Sequence[int] | None, outputs: slice | None,
             encode: bool = False) -> None:
        """One llama_decode (or llama_encode) of ``m`` entries at positions ``p0 ..``:
        token ids, embedding rows, or both; logits for ``outputs``."""
        if self.model.rpc_endpoints:
            check_alive(self.model.rpc_endpoints)
        b = self._batch
        if rows is not None:
            buf = np.ascontiguousarray(rows, dtype=np.float32)
            self._rows_buf = buf  # alive until the call returns
            b.embd = buf.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        else:
            b.embd = None
        b.token = self._tokens_ptr if tokens is not None else _NULL_TOKENS
        if tokens is not None:
            self._tok[:m] = tokens
        self._pos[:m] = np.arange(p0, p0 + m, dtype=np.int32)
        self._out[:m] = 0
        if outputs is not None:
            self._out[:m][outputs] = 1
        b.n_tokens = m
        t0 = time.perf_counter()
        rc = (llama_cpp.llama_encode if encode else llama_cpp.llama_decode)(self._ctx, b)
        self.native_seconds += time.perf_counter() - t0
        b.token, b.embd = self._tokens_ptr, None
        if rc != 0:
            if rc == 1:
                raise ContextOverflowError(f"the {self.kind} head's context is full: no room for {m} more after {p0}")
            raise SpecDeskError(f"llama.cpp failed with code {rc} in the {self.kind} head")

    def _logits(self, n: int, fn: Callable[[np.ndarray], T] | None) -> np.ndarray | T:
        ptr = llama_cpp.llama_get_logits(self._ctx)
        view = np.ctypeslib.as_array(ptr, shape=(n, self._n_vocab))
        view.flags.writeable = False
        return fn(view) if fn is not None else view.copy()

    # -- lifetime ------------------------------------------------------------------------

    def reset(self) -> None:
        self.rollback(0)

    def rollback(self, n_past: int) -> None:  # pragma: no cover - each kind's
        raise NotImplementedError

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.deactivate()
        self._batch.embd = None
        self._batch.token = self._tokens_ptr
        llama_cpp.llama_batch_free(self._batch)
        if not (self.model.rpc_endpoints and gone(self.model.rpc_endpoints)):
            llama_cpp.llama_free(self._ctx)

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


class Eagle3Heads(_HeadContext):
    """An EAGLE-3 head (a context of its model beside the target's), in the MtpBackend
    protocol the eagle3 proposer drafts with (``speculative.proposers.mtp``).

    ``history`` is the sequence the decoder holds pairs for: with ``h`` tokens, its
    positions ``0 .. h-2`` hold (``history[P+1]``, ``g_P``)."""

    kind = "EAGLE-3"
    max_draft = None

    def __init__(self, model: Model, target: Context) -> None:
        super().__init__(model, target, model.shape.n_embd)
        self._api.llama_set_embeddings_nextn(self._ctx, True, True)  # the encoder's g, the decoder's pre-norm state
        self._own = np.zeros(self.n_embd, dtype=np.float32)
        self._drafted = 0  # positions after history's, paired with the head's own state

    def _encode(self, a: int, b: int, tokens: Sequence[int]) -> np.ndarray:
        """g for positions [a, b): the encoder's projection of the target's features."""
        feats = self._need_features(a, b, tokens)
        out = np.empty((b - a, self.n_embd), dtype=np.float32)
        for s in range(0, b - a, self._n_batch):
            e = min(b - a, s + self._n_batch)
            self._run(e - s, a + s, feats[s:e], None, slice(0, None), encode=True)  # (an encoder outputs every row)
            ptr = self._api.llama_get_embeddings_nextn(self._ctx)
            if not ptr:
                raise SpecDeskError("the EAGLE-3 head's encoder gave no output")
            out[s:e] = np.ctypeslib.as_array(ptr, shape=(e - s, self.n_embd))
        return out

    def prefill(self, tokens: Sequence[int], logits: bool = True,
                fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T | None:
        """Hold the pairs of ``tokens`` (positions ``0 .. len-2``), evaluating what is
        new; the last position's logits row (a copy, or ``fn`` of a read-only view of
        shape (1, n_vocab)), or None with ``logits=False`` or fewer than 2 tokens."""
        tokens = tokens if isinstance(tokens, list) else list(tokens)
        n = len(tokens)
        if n > self._n_ctx:
            raise ContextOverflowError(f"{n} tokens do not fit in a context of {self._n_ctx}")
        keep = common_prefix_length(self.history, tokens)
        if logits and keep == n and n >= 2:
            keep -= 1  # evaluate the last pair again for its logits
        self.rollback(keep)
        self.last_prefill_evaluated = max(0, n - max(keep, 1))
        if n < 2 or keep == n:
            self.history = tokens[:]
            return None
        a = max(0, keep - 1)  # the first position to evaluate: pair (tokens[a+1], g_a)
        g = self._encode(a, n - 1, tokens)
        # the decoder's graph gives logits (and states) for every row it is given, and
        # llama.cpp copies out as many as were asked for from the first: the row read is
        # decoded alone (llama.cpp's driver does the same: its seed step is one row)
        last = n - 1 - a - int(logits)
        for s in range(0, last, self._n_batch):
            e = min(last, s + self._n_batch)
            self._run(e - s, a + s, g[s:e], tokens[a + 1 + s : a + 1 + e], None)
        if logits:
            self._run(1, n - 2, g[-1:], tokens[-1:], slice(0, 1))
        self.history = tokens[:]
        self.features.release(n - 1)
        if not logits:
            return None
        self._own[:] = self._row_h()
        return self._logits(1, fn)

    def eval(self, tokens: Sequence[int], all_rows: bool = False,
             fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T:
        """The next draft position: ``tokens[0]`` (the token just drafted) paired with
        the decoder's own state; its logits row, as prefill gives it."""
        if len(tokens) != 1:
            raise ValueError("the head drafts one token at a time")
        p = len(self.history) - 1 + self._drafted  # the position after the last one evaluated
        if p >= self._n_ctx:
            raise ContextOverflowError(f"the context is full: {p + 1} positions do not fit in {self._n_ctx}")
        self._run(1, p, self._own[None, :], [int(tokens[0])], slice(0, 1))
        self._drafted += 1
        self._own[:] = self._row_h()
        return self._logits(1, fn)

    def _row_h(self) -> np.ndarray:
        ptr = self._api.llama_get_embeddings_nextn_ith(self._ctx, 0)
        if not ptr:
            raise SpecDeskError("llama.cpp kept no state for the EAGLE-3 head's output")
        return np.ctypeslib.as_array(ptr, shape=(self.n_embd,))

    def rollback(self, n_past: int) -> None:
        """Hold the pairs of ``history[:n_past]`` only (and no drafted position)."""
        if n_past < 0 or n_past > len(self.history):
            raise ValueError(f"cannot roll back to {n_past}: the head holds {len(self.history)} tokens")
        if n_past == len(self.history) and not self._drafted:
            return
        self._seq_rm(max(0, n_past - 1))
        del self.history[n_past:]
        self._drafted = 0


class DFlashHeads(_HeadContext):
    """A DFlash head: the target's features injected into its KV cache, and a block of
    draft tokens from one decode (:meth:`block`). ``history`` is the tokens whose
    features it holds, one position each."""

    kind = "DFlash"

    def __init__(self, model: Model, target: Context) -> None:
        n_inp = len(target_layer_ids(heads_api(), model.ptr)) * model.shape.n_embd
        super().__init__(model, target, n_inp)
        block = model.meta("dflash.block_size")
        self.block_size = int(block) if block and block.isdigit() else 16
        self.mask = int(llama_cpp.llama_vocab_mask(llama_cpp.llama_model_get_vocab(model.ptr)))
        if self.mask < 0:
            raise SpecDeskError(f"{model.path.name}: this DFlash head names no mask token (tokenizer.ggml.mask_token_id)")
        causal = (model.meta("dflash.attention.causal") or "false") == "true"
        llama_cpp.llama_set_causal_attn(self._ctx, causal)
        self._n_ubatch = int(llama_cpp.llama_n_ubatch(self._ctx))

    @property
    def max_draft(self) -> int:
        """A block of ``block_size`` positions: the anchor and this many masks."""
        return max(0, min(self.block_size, self._n_ubatch) - 1)

    def sync(self, tokens: Sequence[int]) -> int:
        """Hold the features of every position of ``tokens`` (the target's, all decoded),
        injecting what is new; how many positions it injected."""
        tokens = tokens if isinstance(tokens, list) else list(tokens)
        n = len(tokens)
        keep = common_prefix_length(self.history, tokens)
        self.rollback(keep)
        if keep < n:
            feats = self._need_features(keep, n, tokens)
            for s in range(keep, n, self._n_ubatch):  # non-causal: a batch must fit in one ubatch
                e = min(n, s + self._n_ubatch)
                self._run(e - s, s, feats[s - keep : e - keep], None, None)
            self.history = tokens[:]
            self.features.release(n)
        return n - keep

    def block(self, seq: Sequence[int], k: int, fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T:
        """The rows of ``k`` draft tokens after ``seq`` (its last token not decoded by the
        target yet): the features of ``seq[:-1]`` injected, then one decode of
        ``[seq[-1], mask * k]``; rows of shape (k, n_vocab), a copy or ``fn`` of a view."""
        n = len(seq)
        if not 1 <= k <= self.max_draft:
            raise ValueError(f"a block of this head drafts 1 to {self.max_draft} tokens, not {k}")
        if n + k > self._n_ctx:
            raise ContextOverflowError(f"the context is full: {n + k} positions do not fit in {self._n_ctx}")
        self.last_prefill_evaluated = self.sync(list(seq[:-1]))
        try:
            # every row is asked for: the graph gives logits for every row and llama.cpp copies
            # out as many as were asked for from the first (the anchor's row is not used)
            self._run(k + 1, n - 1, None, [int(seq[-1])] + [self.mask] * k, slice(0, None))
            return self._logits(k + 1, lambda rows: rows[1:].copy() if fn is None else fn(rows[1:]))
        finally:
            self._seq_rm(n - 1)  # the block never stays

    def rollback(self, n_past: int) -> None:
        if n_past < 0 or n_past > len(self.history):
            raise ValueError(f"cannot roll back to {n_past}: the head holds {len(self.history)} tokens")
        if n_past == len(self.history):
            return
        self._seq_rm(n_past)
        del self.history[n_past:]
