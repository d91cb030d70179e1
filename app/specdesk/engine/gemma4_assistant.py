"""A Gemma 4 assistant (llama.cpp's ``gemma4-assistant``) as a draft context that shares
the target's KV cache.

How llama.cpp 0.3.36 runs one (its vendored sources):

* The assistant's context is made with ``llama_context_params.ctx_other`` = the target's
  context (src/llama-context.cpp throws "Gemma4Assistant requires ctx_other" without
  one). Its memory (``create_memory`` in src/llama-model.cpp) is a sliding-window cache
  whose every layer *is* a layer of the target's cache: a sliding layer shares the
  target's second-to-last layer, a global one its last (``share``), and the cells (which
  positions are held) are the target's too (src/llama-kv-cache.cpp: ``v_cells_impl`` of
  ``other``). Writing to it, removing from it, shifting it are no-ops
  (``seq_rm``/``apply_ubatch``/``update``: ``if (other) return``), and its positions are
  the target's (``seq_pos_max``). So the assistant has no state of its own: rolling the
  target back rolls the assistant back, and there is nothing else to roll.
* Its graph (src/models/gemma4-assistant.cpp) takes, per row, a token id *and* a hidden
  state of the target's width: it embeds the token with the target's embedding table,
  concatenates the hidden state, projects (``nextn.pre_projection``), runs its layers
  with queries only, attending over the target's cached keys and values, and outputs
  logits and its own next hidden state (``nextn.post_projection``, ``t_h_nextn``).
* llama.cpp's driver is the MTP one (``common_speculative_impl_draft_mtp`` in
  common/speculative.cpp, ``is_mem_shared``): the target keeps its hidden states
  (``llama_set_embeddings_nextn(ctx_tgt, true, masked=false)``: the post-final-norm state,
  one row per token); the first draft token is the pending token at its position ``p``
  with the target's state of the row before it; each further draft token is the last
  drafted one *at the same position p* with the assistant's own state from the step
  before (Hugging Face's gemma4_assistant does the same). No catch-up: the target's
  cache is the assistant's.

SpecDesk's target holds every token of the sequence but the pending one (the decoder's
invariant), which is what the assistant reads: :meth:`Gemma4Assistant.first` checks it.

The sliding window. The target's sliding cache is ``n_swa`` + a batch of cells (padded to
256) and reuses a cell once its position is masked for the *next* position
(``find_slot``: ``is_masked_swa(pos_cell, seq_pos_max + 1)``). A verify batch starts at
that next position and a rollback never goes below it, so every cell a verify batch
reuses is outside the window of every position the sequence can then continue from:
rolling back a rejected draft near the window's edge leaves the cache able to serve what
follows, and the assistant, reading the same cells with the same window, sees what the
target sees. Going back further (a new prompt sharing an old prefix) is another matter:
``Context.prefill`` keeps no prefix the sliding cache no longer covers.

The hidden-state calls are C++-mangled exports of src/llama-ext.h (engine/mtp.py binds
them, with a one-line error where a build lacks one); ``llama_get_ctx_other`` is bound
here the same way. The batch carries token ids and hidden states together
(``llama_batch_compat``: "a batch can carry both"), through ``llama_decode``.
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
from .hidden import TargetHiddenStates
from .model import Buffer, Model, capture_buffers
from .mtp import nextn_api
from .rpc import check_alive, gone

T = TypeVar("T")

_GET_CTX_OTHER = "_Z19llama_get_ctx_otherP13llama_context"


@functools.cache
def _get_ctx_other():
    lib = llama_cpp.llama_cpp._lib
    try:
        fn = getattr(lib, _GET_CTX_OTHER)
    except AttributeError:
        where = getattr(lib, "_name", "libllama")
        raise SpecDeskError(f"this llama.cpp ({where}) does not export llama_get_ctx_other (C++ symbol "
                            f"{_GET_CTX_OTHER}): it cannot run a Gemma 4 assistant; llama-cpp-python 0.3.36 does") from None
    fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_void_p
    return fn


def _addr(ptr) -> int | None:
    return ctypes.cast(ptr, ctypes.c_void_p).value


class Gemma4Assistant:
    """The assistant ``model`` (a loaded ``gemma4-assistant`` GGUF) drafting for
    ``target`` (the ``gemma4`` target's context), as the gemma4-assistant proposer's
    backend (``speculative.proposers.gemma4_assistant.AssistantBackend``).

    :meth:`activate` before a generation that drafts with it (the target keeps its hidden
    states from then on, and is rolled back to where they are known); :meth:`deactivate`
    before one that does not. Its context quacks like a :class:`Context` where the
    session's bookkeeping reads one (``buffers``, ``n_ctx``, ``threads``, ``close``)."""

    def __init__(self, model: Model, target: Context) -> None:
        api = nextn_api()
        get_other = _get_ctx_other()
        self.model, self.target, self._api = model, target, api
        mp = model.ptr
        self.n_embd = int(llama_cpp.llama_model_n_embd_out(mp))  # the target's width: the rows it reads
        if self.n_embd != int(llama_cpp.llama_model_n_embd(target.model.ptr)):
            raise SpecDeskError(f"{model.path.name} reads hidden states {self.n_embd} wide, but "
                                f"{target.model.path.name}'s are {llama_cpp.llama_model_n_embd(target.model.ptr)}")
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = target.n_ctx  # (llama.cpp sizes its cache views to the target's cache anyway)
        params.n_batch = params.n_ubatch = 1  # it decodes one token at a time
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = self.threads = target.threads
        params.no_perf = True
        other = target.ptr  # the target's context: the assistant's cache is its
        params.ctx_other = other
        with deferred_interrupt() as interrupted, capture_buffers() as buffers:
            ctx = llama_cpp.llama_init_from_model(mp, params)
            if interrupted[0] and ctx:
                llama_cpp.llama_free(ctx)
        if not ctx:
            raise SpecDeskError(f"{model.path.name}: llama.cpp could not make a context for the assistant "
                                "beside its target (out of memory?)")
        if _addr(get_other(ctx)) != _addr(target.ptr):
            llama_cpp.llama_free(ctx)
            raise SpecDeskError(f"{model.path.name}: llama.cpp did not attach the assistant to its target's context")
        self.buffers: list[Buffer] = buffers
        self._ctx = ctx
        api.llama_set_embeddings_nextn(ctx, True, True)  # its own next hidden state, for its output row
        self.n_ctx = llama_cpp.llama_n_ctx(target.ptr)
        self._n_vocab = model.n_vocab
        self._batch = llama_cpp.llama_batch_init(1, 0, 1)
        b = self._batch
        self._embd = np.zeros((1, self.n_embd), dtype=np.float32)
        b.embd = self._embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float))  # a batch carrying both
        b.n_seq_id[0] = 1
        b.seq_id[0][0] = 0
        b.logits[0] = 1
        b.n_tokens = 1
        # the target's hidden state at each position, and the tokens they were computed after
        self.hidden = TargetHiddenStates(target, api, self.n_embd, self.n_ctx, "assistant")
        self._own = np.zeros(self.n_embd, dtype=np.float32)  # its own state after the last draft step
        self._p0: int | None = None  # the position it drafts at (the pending token's)
        self.native_seconds = 0.0

    # -- the target's side --------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.hidden.active

    def activate(self) -> None:
        """Make the target keep its hidden states; positions it holds whose state was
        never kept are evaluated again (rolled back)."""
        self.hidden.activate()

    def deactivate(self) -> None:
        self.hidden.deactivate()

    # -- the AssistantBackend protocol ---------------------------------------------------

    @property
    def n_vocab(self) -> int:
        return self._n_vocab

    def first(self, seq: Sequence[int], fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T:
        """The first draft position after ``seq``: its pending token (the last) at its
        position, with the target's hidden state before it; ``fn`` of its logits row
        (a read-only view of shape (1, n_vocab)), or a copy. The target must hold
        ``seq`` but its last token, with its hidden states kept (:meth:`activate`)."""
        n = len(seq)
        if n < 2:
            raise ValueError("the assistant drafts after a state of the target: at least two tokens")
        if n - 1 != self.target.n_past or common_prefix_length(self.target.history, seq) < n - 1:
            raise SpecDeskError("the target does not hold the sequence the assistant drafts after")
        if not self.hidden.covers(seq, n - 1):
            raise SpecDeskError("the target's hidden states do not cover the sequence (activate the assistant first)")
        if n > self.n_ctx:
            raise ContextOverflowError(f"the context is full: {n} tokens do not fit in {self.n_ctx}")
        self.target.settle()  # the cache it reads must hold the sequence now, not at the target's next decode
        if llama_cpp.llama_memory_seq_pos_max(llama_cpp.llama_get_memory(self.target.ptr), 0) != n - 2:
            raise SpecDeskError("the target's cache does not hold the sequence the assistant drafts after")
        self._p0 = n - 1
        return self._step(seq[-1], self.hidden.rows[n - 2], fn)

    def next(self, token: int, fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T:
        """A further draft position: ``token`` (the last drafted) at the same position,
        with the assistant's own hidden state from the step before."""
        if self._p0 is None:
            raise ValueError("the assistant's next draft token follows a first one")
        return self._step(token, self._own, fn)

    def _step(self, token: int, h: np.ndarray, fn: Callable[[np.ndarray], T] | None) -> np.ndarray | T:
        if self.model.rpc_endpoints:
            check_alive(self.model.rpc_endpoints)  # llama.cpp would abort on a server that has gone
        b = self._batch
        b.token[0] = int(token)
        b.pos[0] = self._p0
        self._embd[0] = h
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(self._ctx, b)
        self.native_seconds += time.perf_counter() - t0
        if rc != 0:
            if rc == 1:
                raise ContextOverflowError(f"no room in the target's cache for the assistant at position {self._p0}")
            raise SpecDeskError(f"llama_decode failed with code {rc} in the Gemma 4 assistant")
        ptr = self._api.llama_get_embeddings_nextn(self._ctx)
        if not ptr:
            raise SpecDeskError("llama.cpp kept no hidden state for the assistant's output")
        self._own[:] = np.ctypeslib.as_array(ptr, shape=(self.n_embd,))
        view = np.ctypeslib.as_array(llama_cpp.llama_get_logits(self._ctx), shape=(1, self._n_vocab))
        view.flags.writeable = False
        return fn(view) if fn is not None else view.copy()

    # -- lifetime ------------------------------------------------------------------------

    def reset(self) -> None:
        """Nothing of its own to forget: its cache is the target's."""
        self._p0 = None

    def close(self) -> None:
        if getattr(self, "_ctx", None) is not None:
            self.deactivate()
            self._batch.embd = None  # ours: llama_batch_free must not free it
            llama_cpp.llama_batch_free(self._batch)
            if not (self.model.rpc_endpoints and gone(self.model.rpc_endpoints)):
                llama_cpp.llama_free(self._ctx)  # (on a lost server llama.cpp would abort: left allocated)
            self._ctx = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
