"""A loaded GGUF model, over llama-cpp-python's low-level API.

This package is the only code in SpecDesk that imports llama_cpp.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import llama_cpp

from ..errors import Cancelled, ModelFileError, SpecDeskError
from ..rules import kv
from .backend import (
    Buffer,
    capture_buffers,
    clear_native_errors,
    deferred_interrupt,
    ensure_backend,
    last_native_error,
    native_callback,
)
from .devices import backends
from .rpc import gone
from .threads import default_threads
from ..rules.vocab import VocabInfo

__all__ = ["Buffer", "Model", "capture_buffers", "default_threads", "ensure_backend", "last_native_error",
           "supports_gpu_offload", "system_info", "amx_compiled", "cpu_repack_buffer_type"]

log = logging.getLogger(__name__)

def supports_gpu_offload() -> bool:
    """Whether a local GPU backend is built in (llama.cpp also says yes for a build
    whose only offload target is the RPC backend: that one is not a local GPU)."""
    ensure_backend()
    if not llama_cpp.llama_supports_gpu_offload():
        return False
    return any(b not in ("CPU", "RPC", "BLAS") for b in backends())


def system_info() -> str:
    ensure_backend()
    return llama_cpp.llama_print_system_info().decode("utf-8", "replace")


@functools.cache  # the build is fixed for the process: asked at every load and memory estimate
def amx_compiled() -> bool:
    """Whether this llama.cpp carries its AMX kernels (built on a CPU with Intel AMX,
    Sapphire Rapids or later).

    Their buffers are turned off at every load (``use_extra_bufts``): llama.cpp 0.3.36's
    AMX matrix product loads a tile configuration (``ldtilecfg``) of which only the
    first 32 of 64 bytes are set; the rest is whatever the stack held. Where that is
    not zero the configuration is invalid and the CPU faults: on a 2-core Xeon VM here,
    every batch of more than one token (a prompt, a verify) killed the process with
    SIGSEGV, in SpecDesk and in llama-cpp-python's own ``Llama`` alike
    (llama.cpp#20824 and dspy#10079 report the same crash, "machine-dependent"). A
    probe of the tiles cannot tell, since the bytes are the stack's, so the buffers are
    off wherever the code is in. llama.cpp has no switch for its AMX buffer alone, so
    the loader sends the weights CPU_REPACK takes there by name
    (``tensor_buft_overrides``, :meth:`Model.__init__`'s ``repack``): on that VM a
    Qwen 1.5B Q4_K_M step took 61 ms against 79 ms in the mapped file."""
    return "AMX_INT8 = 1" in system_info()


def repack_types() -> frozenset[str]:
    """Quantizations this build repacks for the CPU (an extra copy in RAM).

    Measured on x86 with AVX2/AVX-512: llama.cpp's CPU_REPACK buffer holds exactly the
    Q4_0 and Q4_K matrices (and IQ4_NL) except token_embd; Q4_1, Q5_0, Q6_K and Q8_0
    stay as they are. On a build with AMX code the loader names them itself
    (``Model(repack=...)``, see :func:`amx_compiled`)."""
    info = system_info()
    if "REPACK = 1" not in info:
        return frozenset()
    if "AVX2 = 1" in info:
        return frozenset({"Q4_0", "Q4_K", "IQ4_NL"})
    if "NEON = 1" in info:
        return frozenset({"Q4_0", "IQ4_NL"})
    return frozenset()


class _BuftOverride(ctypes.Structure):
    """llama.h's ``llama_model_tensor_buft_override``: a tensor name pattern (a regex)
    and the buffer type its tensors go to."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


_LAYER_NAME = re.compile(r"^blk\.([0-9]+)\.(.+)$")


def name_patterns(names: Sequence[str]) -> list[str]:
    """Regexes that match exactly ``names``, one per tensor kind (``blk.N.ffn_up.weight``
    for all its layers at once): llama.cpp compiles every pattern again for every
    tensor it creates, so 7 patterns instead of 7 per layer."""
    layers: dict[str, list[str]] = {}
    rest = []
    for name in names:
        m = _LAYER_NAME.match(name)
        if m:
            layers.setdefault(m.group(2), []).append(m.group(1))
        else:
            rest.append(name)
    out = [rf"^blk\.(?:{'|'.join(ids)})\.{re.escape(kind)}$" for kind, ids in layers.items()]
    return out + ["^" + re.escape(name) + "$" for name in rest]


@functools.cache
def cpu_repack_buffer_type() -> int | None:
    """ggml's CPU_REPACK buffer type, from the CPU backend's extra buffer types
    (``ggml_backend_dev_get_extra_bufts``); None where this build has none."""
    ensure_backend()
    from .devices import cpu_extra_buffer_types

    return cpu_extra_buffer_types().get("CPU_REPACK")


@dataclass(frozen=True)
class ModelShape:
    n_vocab: int
    n_ctx_train: int
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_params: int
    size_bytes: int
    description: str


class Model:
    """One loaded GGUF model: weights, vocabulary, chat template.

    ``progress`` is llama.cpp's load progress callback (0..1); returning False from it
    cancels the load, which then raises :class:`specdesk.errors.Cancelled`.
    ``load_mtp`` also loads its multi-token-prediction (NextN) blocks, which llama.cpp
    skips otherwise (engine/mtp.py drafts with them).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        n_gpu_layers: int = 0,
        progress: Callable[[float], bool] | None = None,
        vocab_only: bool = False,
        devices: list[int] | None = None,
        tensor_split: list[float] | None = None,
        rpc_endpoints: tuple[str, ...] = (),
        repack: Sequence[str] = (), load_mtp: bool = False,
    ) -> None:
        """``repack``: the weight tensors to keep in llama.cpp's CPU_REPACK buffer where
        this build's extra buffers are off (:func:`amx_compiled`); each must be a
        matrix product's weight of a type that buffer takes, in a layer that stays on
        the CPU (``specdesk.library.gguf.estimate.repacked_tensors`` names them).
        Elsewhere llama.cpp chooses its buffers itself and ``repack`` is not used."""
        ensure_backend()
        self.path = Path(path)
        self.n_gpu_layers = n_gpu_layers
        #: the RPC servers this model's layers live on (checked before each step)
        self.rpc_endpoints = tuple(rpc_endpoints)
        self._model = None
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.vocab_only = self.vocab_only = vocab_only
        params.load_mtp = self.load_mtp = load_mtp
        self.repacked_by_name = 0  # weights sent to CPU_REPACK by name (AMX builds)
        if amx_compiled():
            params.use_extra_bufts = False  # llama.cpp's AMX kernels can crash: see amx_compiled
            buft = cpu_repack_buffer_type() if repack and not vocab_only else None
            if buft:
                # llama.cpp takes an override's buffer as given: only the names asked for
                patterns = [p.encode() for p in name_patterns(repack)]
                self._overrides = (_BuftOverride * (len(patterns) + 1))(*((p, buft) for p in patterns))
                params.tensor_buft_overrides = ctypes.cast(self._overrides, ctypes.c_void_p)
                self.repacked_by_name = len(repack)
            log.info("%s: llama.cpp's AMX buffer is off (its AMX kernels can crash); %d weights repacked by name",
                     self.path.name, self.repacked_by_name)
        if devices is not None:
            # the devices to offload to, NULL-terminated; an empty list keeps every layer on the CPU
            self._devices = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
            params.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        if tensor_split:
            n = int(llama_cpp.llama_max_devices())
            self._split = (ctypes.c_float * n)(*(list(tensor_split)[:n] + [0.0] * max(0, n - len(tensor_split))))
            params.tensor_split = self._split
        cancelled = [False]
        interrupted = [False]  # Ctrl+C meanwhile (set by deferred_interrupt): stop the load

        def _cb(p: float, _user: ctypes.c_void_p) -> bool:
            if interrupted[0]:
                return False
            if progress is None:
                return True
            try:
                keep_going = bool(progress(float(p)))
            except Exception:  # noqa: BLE001 - never let an exception cross into C
                log.exception("load progress callback failed")
                keep_going = True
            if not keep_going:
                cancelled[0] = True
            return keep_going

        self._progress_cb = llama_cpp.llama_progress_callback(native_callback(_cb))  # keep a reference
        params.progress_callback = self._progress_cb
        clear_native_errors()
        # os.fsencode: the path's own bytes (a file name that is not UTF-8 comes back as them)
        with deferred_interrupt(interrupted), capture_buffers() as buffers:
            model = llama_cpp.llama_model_load_from_file(os.fsencode(self.path), params)
            if interrupted[0]:
                if model:
                    llama_cpp.llama_model_free(model)
                return  # deferred_interrupt raises KeyboardInterrupt on the way out
        self.buffers: list[Buffer] = buffers
        if not model:
            if cancelled[0]:
                raise Cancelled(f"loading {self.path.name} was cancelled")
            why = last_native_error() or "see the log for the reason"
            raise ModelFileError(f"{self.path.name}: llama.cpp could not load this model: {why}")
        self._model = model
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self._piece_cache: dict[int, bytes] = {}
        self._eog_cache: dict[int, bool] = {}  # token -> end of generation (asked once per token)
        n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        if vocab_only:
            # llama.cpp aborts on hyper-parameter queries of a vocab-only model.
            self.shape = ModelShape(n_vocab, 0, 0, 0, 0, 0, 0, 0, "vocab only")
        else:
            self.shape = ModelShape(
                n_vocab=n_vocab,
                n_ctx_train=llama_cpp.llama_model_n_ctx_train(model),
                n_layer=llama_cpp.llama_model_n_layer(model),
                n_embd=llama_cpp.llama_model_n_embd(model),
                n_head=llama_cpp.llama_model_n_head(model),
                n_head_kv=llama_cpp.llama_model_n_head_kv(model),
                n_params=llama_cpp.llama_model_n_params(model),
                size_bytes=llama_cpp.llama_model_size(model),
                description=self._desc(),
            )

    # -- basics -----------------------------------------------------------------

    @property
    def ptr(self):
        if self._model is None:
            raise SpecDeskError("the model was closed")
        return self._model

    @property
    def n_vocab(self) -> int:
        return self.shape.n_vocab

    def _desc(self) -> str:
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self._model, buf, 256)
        return buf.value.decode("utf-8", "replace")

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(4096)
        n = llama_cpp.llama_model_meta_val_str(self.ptr, key.encode(), buf, 4096)
        if n < 0:
            return None
        return buf.value.decode("utf-8", "replace")

    def head_dims(self) -> tuple[int, int]:
        """(key_length, value_length) per head, from the GGUF or n_embd / n_head."""
        arch = self.meta("general.architecture") or ""
        k = self.meta(f"{arch}.attention.key_length")
        v = self.meta(f"{arch}.attention.value_length")
        return kv.head_dims(self.shape.n_embd, self.shape.n_head, int(k) if k else None, int(v) if v else None)

    def kv_bytes_per_token(self, cache_type_bytes: float = 2.0) -> float:
        """KV cache bytes per context position (rules.kv's formula)."""
        k, v = self.head_dims()
        return kv.kv_bytes_per_token([self.shape.n_head_kv] * self.shape.n_layer, k, v, cache_type_bytes)

    def close(self) -> None:
        if self._model is not None:
            if self.rpc_endpoints:
                why = gone(self.rpc_endpoints)
                if why:
                    # its layers lived on the lost server: freeing them would make llama.cpp abort
                    log.info("%s left allocated: %s", self.path.name, why)  # the error that follows says it once
                    self._model = None
                    return
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    # -- vocabulary ---------------------------------------------------------------

    def vocab_info(self) -> VocabInfo:
        v = self._vocab
        n = self.shape.n_vocab

        def text(i: int) -> str:
            t = llama_cpp.llama_vocab_get_text(v, i)
            return t.decode("utf-8", "replace") if t is not None else ""

        return VocabInfo(
            vocab_type=int(llama_cpp.llama_vocab_type(v)),
            n_tokens=n,
            bos=int(llama_cpp.llama_vocab_bos(v)),
            eos=int(llama_cpp.llama_vocab_eos(v)),
            add_bos=bool(llama_cpp.llama_vocab_get_add_bos(v)),
            add_eos=bool(llama_cpp.llama_vocab_get_add_eos(v)),
            text=text,
        )

    def is_eog(self, token: int) -> bool:
        e = self._eog_cache.get(token)
        if e is None:
            e = self._eog_cache[token] = bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))
        return e

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate: a byte that was not UTF-8, or JSON's \ud800
            raise SpecDeskError(f"the text is not valid Unicode: character {e.start} is a lone surrogate "
                                f"(\\u{ord(text[e.start]):04x}); it cannot be tokenized") from None
        n_max = len(data) + 16
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            raise SpecDeskError("the text could not be tokenized")
        return list(buf[:n])

    def token_bytes(self, token: int) -> bytes:
        """The bytes this token stands for (special tokens rendered, as in a chat)."""
        b = self._piece_cache.get(token)
        if b is None:
            buf = ctypes.create_string_buffer(64)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, 64, 0, True)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, -n, 0, True)
            b = buf.raw[: max(n, 0)]
            self._piece_cache[token] = b
        return b

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", "replace")

    def chat_template(self) -> str | None:
        t = llama_cpp.llama_model_chat_template(self.ptr, None)
        return t.decode("utf-8", "replace") if t else None

    def token_text(self, token: int) -> str:
        t = llama_cpp.llama_vocab_get_text(self._vocab, token)
        return t.decode("utf-8", "replace") if t else ""
