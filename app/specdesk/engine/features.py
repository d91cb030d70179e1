"""The target's layer inputs, kept for a draft head that reads them (EAGLE-3, DFlash).

llama.cpp's drivers (``common_speculative_impl_draft_eagle3`` / ``…_dflash`` in the
vendored common/speculative.cpp) switch on ``llama_set_embeddings_layer_inp(ctx_tgt,
lid, true)`` for each layer the head names (``llama_model_target_layer_ids``), and read
``llama_get_embeddings_layer_inp(ctx_tgt, lid)`` after each of the target's decodes:
one row of the target's width per token of the batch, the input of layer ``lid``.
:class:`TargetFeatures` does the same through the target's ``decode_observers`` and
keeps the rows, per position, as the heads concatenate them (layer by layer, in the
head's order), until the head has read them: a head follows the target lazily, so
the rows of the steps it sat out wait here.

These calls are in the vendored src/llama-ext.h, a C++ header: libllama exports them
under C++-mangled names only (bound here by those names, refused in one line where a
build lacks one), as engine/mtp.py binds the NextN calls.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Sequence

import llama_cpp
import numpy as np

from ..errors import SpecDeskError
from ..speculative.backend import common_prefix_length
from .context import Context
from .ext import bind

_f = ctypes.POINTER(ctypes.c_float)
_SYMBOLS = {
    "llama_set_embeddings_layer_inp": ("_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
                                       [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool], None),
    "llama_get_embeddings_layer_inp": ("_Z30llama_get_embeddings_layer_inpP13llama_contextj",
                                       [ctypes.c_void_p, ctypes.c_uint32], _f),
    "llama_set_embeddings_nextn": ("_Z26llama_set_embeddings_nextnP13llama_contextbb",
                                   [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool], None),
    "llama_get_embeddings_nextn": ("_Z26llama_get_embeddings_nextnP13llama_context", [ctypes.c_void_p], _f),
    "llama_get_embeddings_nextn_ith": ("_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
                                       [ctypes.c_void_p, ctypes.c_int32], _f),
    "llama_model_target_layer_ids": ("_Z28llama_model_target_layer_idsPK11llama_model",
                                     [ctypes.c_void_p], ctypes.POINTER(ctypes.c_int32)),
    "llama_model_target_layer_ids_n": ("_Z30llama_model_target_layer_ids_nPK11llama_model",
                                       [ctypes.c_void_p], ctypes.c_uint32),
    "llama_model_dflash_selector_top_k": ("_Z33llama_model_dflash_selector_top_kPK11llama_model",
                                          [ctypes.c_void_p], ctypes.c_int32),
}


def heads_api_of(lib: ctypes.CDLL):
    """The calls a head needs of ``lib`` (SpecDeskError in one line where one is missing)."""
    return bind(lib, _SYMBOLS, "it cannot run EAGLE-3 or DFlash draft heads")


@functools.cache
def heads_api():
    """The calls a head needs of libllama."""
    return heads_api_of(llama_cpp.llama_cpp._lib)


def target_layer_ids(api, model_ptr) -> tuple[int, ...]:
    """The target layers a head's GGUF names (``{arch}.target_layers``), as llama.cpp read them."""
    n = int(api.llama_model_target_layer_ids_n(model_ptr))
    ids = api.llama_model_target_layer_ids(model_ptr)
    return tuple(int(ids[i]) for i in range(n)) if n and ids else ()


class TargetFeatures:
    """The target's inputs of ``layers`` at every position it decodes while
    :meth:`activate`\\ d, concatenated per position, from the first position a head has
    not read (:meth:`release`) on."""

    def __init__(self, target: Context, layers: Sequence[int], api=None) -> None:
        self.api = api or heads_api()
        self.target = target
        self.layers = tuple(int(lid) for lid in layers)
        n_layer = target.model.shape.n_layer
        bad = [lid for lid in self.layers if not 0 <= lid < n_layer]
        if bad or not self.layers:  # llama.cpp asserts lid <= n_layer, and aborts on a layer with no input tensor
            raise SpecDeskError(f"{target.model.path.name} has {n_layer} layers: it has no layer {bad[0] if bad else '(none named)'}")
        self.n_embd = target.model.shape.n_embd
        self.width = self.n_embd * len(self.layers)
        self._rows = np.zeros((64, self.width), dtype=np.float32)
        self._base = 0  # the position of _rows[0]
        self._n = 0  # positions with rows: [_base, _base + _n)
        #: the tokens the target decoded, positions 0.. (what each row was computed at)
        self.tokens: list[int] = []
        self.active = False

    def activate(self) -> None:
        """The target keeps the rows from its next decode on; positions it holds whose
        rows were not kept are evaluated again (rolled back)."""
        if self.active:
            return
        for lid in self.layers:
            self.api.llama_set_embeddings_layer_inp(self.target.ptr, lid, True)
        self.target.decode_observers.append(self._record)
        self.active = True
        known = min(common_prefix_length(self.tokens, self.target.history), self._base + self._n)
        self.target.rollback(known if known >= self._base else 0)

    def deactivate(self) -> None:
        if not self.active:
            return
        for lid in self.layers:
            self.api.llama_set_embeddings_layer_inp(self.target.ptr, lid, False)
        self.target.decode_observers.remove(self._record)
        self.active = False

    def _record(self, p0: int, tokens: Sequence[int]) -> None:
        """After a decode of the target: one row per token of each layer's input."""
        m, e = len(tokens), self.n_embd
        if not self._base <= p0 <= self._base + self._n:
            self._base, self._n = p0, 0  # before what is kept (a new text), or past it: start here
        end = p0 - self._base + m
        if end > len(self._rows):
            grown = np.zeros((max(end, 2 * len(self._rows)), self.width), dtype=np.float32)
            grown[: self._n] = self._rows[: self._n]
            self._rows = grown
        dst = self._rows[p0 - self._base : end]
        for k, lid in enumerate(self.layers):
            ptr = self.api.llama_get_embeddings_layer_inp(self.target.ptr, lid)
            if not ptr:
                raise SpecDeskError(f"llama.cpp kept no input of the target's layer {lid}")
            dst[:, k * e : (k + 1) * e] = np.ctypeslib.as_array(ptr, shape=(m, e))
        self._n = end
        del self.tokens[p0:]
        self.tokens.extend(map(int, tokens))

    def covers(self, a: int, b: int, tokens: Sequence[int]) -> bool:
        """Whether rows for positions [a, b) are kept, computed at ``tokens``' prefix."""
        return (b <= a or self._base <= a and b <= self._base + self._n) and common_prefix_length(self.tokens, tokens) >= b

    def rows(self, a: int, b: int) -> np.ndarray:
        """The rows of positions [a, b) (a view: valid until the target's next decode)."""
        return self._rows[a - self._base : b - self._base]

    #: rows a head has read that are kept all the same (a calibration rewinds a head a few
    #: positions without the target evaluating them again)
    SLACK = 1024

    def release(self, p: int) -> None:
        """A head has read every position before ``p``: forget the rows of all but the
        last :attr:`SLACK` of them."""
        drop = p - self.SLACK - self._base
        if drop < self.SLACK or drop > self._n:
            return
        keep = self._n - drop
        self._rows[:keep] = self._rows[drop : self._n]
        self._base += drop
        self._n = keep
