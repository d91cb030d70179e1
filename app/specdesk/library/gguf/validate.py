"""Validation of GGUF files against llama.cpp's loader, memoised per file version.

:func:`validate_gguf` is :func:`~.reader.read_gguf` plus the semantic checks
llama.cpp's loader makes (key types, hyper-parameters, the exact tensor set of the
common architectures, the vocabulary), so that a file that passes is not then
rejected -- or crashed on -- by llama.cpp. ``tests/integration/test_gguf_llama_agreement.py``
checks that claim against the real loader on mutated files.

It is linear in the header's size and memory-bounded like ``read_gguf``: long arrays
are read lazily, except the two the checks need (the tokens, as raw bytes, and their
types), and the token uniqueness check hashes every token once.

A split model (``name-00001-of-0000N.gguf`` ...) is validated as one: named by any
part, every part is read and the set checked as llama.cpp checks it
(:func:`~.split.read_model`), each part's layout is checked, and the semantic checks
run on the first part's metadata with every part's tensors (:func:`~.split.merged`),
which is what :func:`validate_gguf` returns.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from pathlib import Path


from ...errors import Cancelled, ModelFileError
from ...rules.kv import head_dims
from .arrays import StringArray, is_array
from .gemma4 import CHECKS as GEMMA4_CHECKS
from .header import GGUFFile, TensorInfo
from .heads import check_head
from .hybrid import CHECKED_HYBRIDS, check_layout
from .split import merged, read_model, split_parts
from .rules import (
    ARCH_KEY_TYPES,
    ARCH_REQUIRED_KEYS,
    BPE_PRE_TOKENIZERS,
    EMBD_SHAPE_EXEMPT,
    HEAD_ARCHITECTURES,
    EXACT_LAYOUT_ARCHS,
    EXPERTS_ASSERTED,
    GENERAL_KEY_TYPES,
    HEAD_SIZES_ASSERTED,
    CHECKED_RECURRENT_ARCHITECTURES,
    LAYER_INPUT_HEADS,
    HYBRID_ARCHITECTURES,
    INT_ARRAY_TYPES,
    MTP_ONLY_PROBE_ARCHS,
    NO_HEADS_ARCHS,
    NROT_MUST_MATCH,
    RECURRENT_ARCHITECTURES,
    REFUSED_RECURRENT_ARCHITECTURES,
    ROPE_SCALING_TYPES,
    SUPPORTED_ARCHITECTURES,
    TOKENIZER_MODELS,
    K,
)
from .spec import GGML_MAX_DIMS, GGML_TENSOR_ALIGNMENT, INTEGER_GGML_TYPES, LLAMA_MAX_EXPERTS, LLAMA_MAX_LAYERS, VT, type_name
from .stream import Cancel
from .text import label as _label
from .text import n as _n
from .text import show as _show
from .vocab_rules import Vocab, first_problem, no_vocabulary

_BLK_RE = re.compile(r"^blk\.([0-9]+)\.")
_CANCEL_EVERY = 1 << 12


class _Validator:
    """The semantic checks of ``validate_gguf`` over a parsed header."""

    def __init__(self, g: GGUFFile, cancel: Cancel | None = None, parts: list[GGUFFile] | None = None) -> None:
        self.g = g
        #: the files as they are on disk: ``[g]``, or every part of a split model
        self.parts = parts or [g]
        self.cancel = cancel
        self.label = _label(g.path)
        self.md = g.metadata
        self.types = g.value_types
        # filled in by the checks, in order
        self.arch = ""
        self.n_layer = self.n_embd = self.n_expert = 0
        self.n_ff: list[int] = []
        self.n_head: list[int] = []
        self.n_head_kv: list[int] = []
        self.head_k = self.head_v = self.n_rot = 0
        self.n_vocab: int | None = None
        self.nextn = 0

    def fail(self, problem: str) -> ModelFileError:
        return ModelFileError(f"{self.label}: {problem}")

    # -- helpers --------------------------------------------------------------------------

    def key(self, template: str) -> str:
        return template.format(arch=self.arch)

    def type_ok(self, key: str, spec: str) -> bool:
        vtype, etype = self.types[key]
        if spec == "u32":
            return vtype == VT.UINT32
        if spec == "u16":
            return vtype == VT.UINT16
        if spec == "f32":
            return vtype == VT.FLOAT32
        if spec == "bool":
            return vtype == VT.BOOL
        if spec == "str":
            return vtype == VT.STRING
        if spec == "layers":
            return vtype == VT.UINT32 or (vtype == VT.ARRAY and etype in INT_ARRAY_TYPES)
        if spec == "ints":
            return vtype == VT.ARRAY and etype in INT_ARRAY_TYPES
        if spec == "arr_str":
            return vtype == VT.ARRAY and etype == VT.STRING
        if spec == "arr_f32":
            return vtype == VT.ARRAY and etype == VT.FLOAT32
        if spec == "arr_i32":
            return vtype == VT.ARRAY and etype == VT.INT32
        if spec == "arr_u8":
            return vtype == VT.ARRAY and etype in (VT.INT8, VT.UINT8)
        raise AssertionError(spec)

    _SPEC_NAMES = {
        "u32": "a uint32", "u16": "a uint16", "f32": "a float32",
        "bool": "a bool", "str": "a string", "layers": "a uint32 or an array of int32/uint32",
        "ints": "an array of int32/uint32", "arr_str": "an array of strings",
        "arr_f32": "an array of float32", "arr_i32": "an array of int32",
        "arr_u8": "an array of int8 or uint8",
    }

    def check_type(self, key: str, spec: str) -> None:
        if key in self.md and not self.type_ok(key, spec):
            raise self.fail(
                f"metadata key '{_show(key)}' is {type_name(*self.types[key])}; "
                f"llama.cpp needs {self._SPEC_NAMES[spec]}"
            )

    def require(self, key: str, spec: str, why: str = "") -> object:
        if key not in self.md:
            raise self.fail(f"missing metadata key '{_show(key)}'{why}")
        self.check_type(key, spec)
        return self.md[key]

    def per_layer(self, key: str, default: list[int]) -> list[int]:
        """A "layers" key as one value per layer (llama.cpp's get_key_or_arr)."""
        if key not in self.md:
            return default
        value = self.md[key]
        if is_array(value):
            if len(value) != self.n_layer:  # type: ignore[arg-type]
                raise self.fail(f"metadata key '{_show(key)}' has {len(value)} values but the model has {self.n_layer} layers")  # type: ignore[arg-type]
            values = [int(v) for v in value]  # type: ignore[union-attr]  # n_layer <= 512: never lazy
            if any(v < 0 for v in values):
                raise self.fail(f"metadata key '{_show(key)}' has a negative value")
            return values
        return [int(value)] * self.n_layer  # type: ignore[call-overload]

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel():
            raise Cancelled(f"{self.label}: checking the file was cancelled")

    # -- the checks -------------------------------------------------------------------------

    def run(self) -> None:
        for part in self.parts:
            self.check_layout(part)
            self.check_nested_arrays(part)
        self.check_architecture()
        self.check_key_types()
        self.check_hparams()
        self.check_graph_asserts()
        self.check_vocab()
        self.check_tensors()
        self.check_architecture_rules()
        if self.arch in LAYER_INPUT_HEADS:
            check_head(self.g)

    def check_layout(self, g: GGUFFile) -> None:
        """llama.cpp requires tensor data in header order, each padded to the alignment
        (gguf_init_from_file: "tensor 'x' has offset N, expected M"), and ggml requires
        memory-mapped tensor data at 32-byte aligned addresses (an assertion, i.e. a
        crash, with general.alignment < 32). For each file (each part of a split model).
        """

        def fail(problem: str) -> ModelFileError:
            return ModelFileError(f"{_label(g.path)}: {problem}")

        expected = 0
        for i, t in enumerate(g.tensors):
            if i and not i % _CANCEL_EVERY:
                self.check_cancel()
            rel = t.offset - g.data_offset
            if rel != expected:
                raise fail(
                    f"tensor '{_show(t.name)}' data is at offset {_n(rel)} of the data section; llama.cpp "
                    f"requires {_n(expected)} (tensors stored in header order, padded to {g.alignment} bytes)"
                )
            expected += (t.n_bytes + g.alignment - 1) // g.alignment * g.alignment
            if t.offset % GGML_TENSOR_ALIGNMENT:
                raise fail(
                    f"tensor '{_show(t.name)}' data starts at byte {_n(t.offset)}, not a multiple of "
                    f"{GGML_TENSOR_ALIGNMENT}; llama.cpp aborts on such memory-mapped weights"
                )

    def check_nested_arrays(self, g: GGUFFile) -> None:
        """llama.cpp's GGUF reader rejects arrays of arrays ("invalid GGUF type"), in any file."""
        for key, (vtype, etype) in g.value_types.items():
            if vtype == VT.ARRAY and etype == VT.ARRAY:
                raise ModelFileError(f"{_label(g.path)}: metadata key '{_show(key)}' is an array of arrays, "
                                     "which llama.cpp cannot read")

    def check_architecture(self) -> None:
        """general.architecture is a string naming an architecture llama.cpp knows."""
        key = K.General.ARCHITECTURE
        if key not in self.md:
            raise self.fail("missing metadata key 'general.architecture' (not a model file?)")
        self.check_type(key, "str")
        arch = self.md[key]
        assert isinstance(arch, str)
        if arch not in SUPPORTED_ARCHITECTURES:
            raise self.fail(f"architecture '{_show(arch)}' is not supported by this llama.cpp build")
        self.arch = arch

    def check_key_types(self) -> None:
        """Every key llama.cpp reads has the exact type llama.cpp expects."""
        for key, spec in GENERAL_KEY_TYPES.items():
            self.check_type(key, spec)
        for template, spec in ARCH_KEY_TYPES.items():
            self.check_type(self.key(template), spec)
        rope = self.md.get(self.key(K.Rope.SCALING_TYPE))
        if rope is not None and rope not in ROPE_SCALING_TYPES:
            raise self.fail(f"unknown rope scaling type '{_show(rope)}' (llama.cpp knows {', '.join(sorted(ROPE_SCALING_TYPES))})")

    def check_hparams(self) -> None:
        """The hyper-parameters llama.cpp's load_hparams requires, with sane values."""
        why = f" (required for {self.arch})"
        self.require(self.key(K.LLM.CONTEXT_LENGTH), "u32", why)
        self.n_embd = int(self.require(self.key(K.LLM.EMBEDDING_LENGTH), "u32", why))  # type: ignore[call-overload]
        self.n_layer = int(self.require(self.key(K.LLM.BLOCK_COUNT), "u32", why))  # type: ignore[call-overload]
        for key in ARCH_REQUIRED_KEYS.get(self.arch, ()):
            self.require(self.key(key), ARCH_KEY_TYPES[key], why)
        if self.n_embd < 1:
            raise self.fail(f"{self.key(K.LLM.EMBEDDING_LENGTH)} is 0")
        if not 1 <= self.n_layer <= LLAMA_MAX_LAYERS:
            raise self.fail(f"{self.key(K.LLM.BLOCK_COUNT)} is {self.n_layer}; llama.cpp supports 1 to {LLAMA_MAX_LAYERS} layers")
        nextn = self.md.get(self.key(K.LLM.NEXTN_PREDICT_LAYERS))
        if isinstance(nextn, int) and nextn > self.n_layer:  # llama.cpp asserts it at every load: an abort
            raise self.fail(f"{self.key(K.LLM.NEXTN_PREDICT_LAYERS)} is {nextn}, more than the {self.n_layer} blocks")
        if isinstance(nextn, int) and nextn == self.n_layer and self.arch not in HEAD_ARCHITECTURES:  # a trunk of no layers: llama.cpp crashes running it
            raise self.fail(f"{self.key(K.LLM.NEXTN_PREDICT_LAYERS)} is {nextn}: all its blocks are MTP heads and it "
                            "has no trunk to run (a file of heads alone, for another model's trunk?)")
        self.nextn = nextn if isinstance(nextn, int) else 0

        n_expert = int(self.md.get(self.key(K.LLM.EXPERT_COUNT), 0))  # type: ignore[call-overload]
        n_used = int(self.md.get(self.key(K.LLM.EXPERT_USED_COUNT), 0))  # type: ignore[call-overload]
        if n_expert > LLAMA_MAX_EXPERTS:
            raise self.fail(f"{self.key(K.LLM.EXPERT_COUNT)} is {n_expert}; llama.cpp supports at most {LLAMA_MAX_EXPERTS}")
        if n_used > n_expert or (n_expert > 0) != (n_used > 0):
            raise self.fail(f"inconsistent expert counts: {n_used} used of {n_expert}")
        self.n_expert = n_expert

        head_key = self.key(K.Attention.HEAD_COUNT)
        if self.arch not in NO_HEADS_ARCHS and head_key not in self.md:
            raise self.fail(f"missing metadata key '{head_key}'{why}")
        self.n_ff = self.per_layer(self.key(K.LLM.FEED_FORWARD_LENGTH), [0] * self.n_layer)
        self.n_head = self.per_layer(head_key, [0] * self.n_layer)
        self.n_head_kv = self.per_layer(self.key(K.Attention.HEAD_COUNT_KV), list(self.n_head))
        n_head0 = self.n_head[0]  # llama.cpp derives the head size from layer 0
        if self.arch not in NO_HEADS_ARCHS and not any(self.n_head):
            raise self.fail(f"{head_key} is 0")
        key_len = self.md.get(self.key(K.Attention.KEY_LENGTH))
        val_len = self.md.get(self.key(K.Attention.VALUE_LENGTH))
        self.head_k = self.head_v = 0
        if n_head0 > 0:
            if key_len is None and self.n_embd % n_head0:
                raise self.fail(f"{head_key} ({n_head0}) does not divide the embedding length ({self.n_embd})")
            self.head_k, self.head_v = head_dims(self.n_embd, n_head0, None if key_len is None else int(key_len),  # type: ignore[call-overload]
                                                 None if val_len is None else int(val_len))  # type: ignore[call-overload]
            if self.head_k < 1 or self.head_v < 1:
                raise self.fail("attention key/value length is 0")
        for il, (h, hkv) in enumerate(zip(self.n_head, self.n_head_kv)):
            if h and hkv and h % hkv:
                raise self.fail(f"layer {il}: {self.key(K.Attention.HEAD_COUNT_KV)} ({hkv}) does not divide {head_key} ({h})")
            if hkv > h:
                raise self.fail(f"layer {il}: more key/value heads ({hkv}) than attention heads ({h})")
        self.n_rot = self.head_k
        rot = self.md.get(self.key(K.Rope.DIMENSION_COUNT))
        if rot is not None:
            self.n_rot = int(rot)  # type: ignore[call-overload]
        if n_head0 and self.arch in NROT_MUST_MATCH and self.n_rot != self.head_k:
            raise self.fail(f"{self.key(K.Rope.DIMENSION_COUNT)} is {self.n_rot} but the head size is {self.head_k} (llama.cpp: invalid n_rot)")

    def check_graph_asserts(self) -> None:
        """What the loader or the graph of the MTP architectures asserts of the
        hyper-parameters (an abort at load, or when a context is made)."""
        if self.arch in EXPERTS_ASSERTED and self.n_expert == 0:
            raise self.fail(f"{self.key(K.LLM.EXPERT_COUNT)} is 0; {self.arch} is a mixture of experts (llama.cpp "
                            "asserts experts)")
        rot = HEAD_SIZES_ASSERTED.get(self.arch)
        if rot is not None and self.head_k and self.head_k != self.head_v:
            raise self.fail(f"its key heads ({self.head_k}) and value heads ({self.head_v}) differ in length; "
                            f"llama.cpp's {self.arch} graph asserts they do not")
        if rot and self.head_k and self.n_rot != self.head_k:
            raise self.fail(f"{self.key(K.Rope.DIMENSION_COUNT)} is {self.n_rot} but the head size is {self.head_k}; "
                            f"llama.cpp's {self.arch} graph asserts they are equal")
        if self.arch == "deepseek2" and self.head_k:
            mla = self.md.get(self.key(K.Attention.KEY_LENGTH_MLA))
            mla_v = self.md.get(self.key(K.Attention.VALUE_LENGTH_MLA))
            k = int(mla) if isinstance(mla, int) and mla and isinstance(mla_v, int) and mla_v else self.head_k
            if k - self.n_rot < 1:  # n_embd_head_qk_nope >= 1, asserted by its loader
                raise self.fail(f"its key heads ({k}) are no longer than their rotary part ({self.n_rot}); llama.cpp's "
                                "deepseek2 loader asserts they are")

    def check_vocab(self) -> None:
        """The tokenizer metadata llama.cpp's vocabulary loader reads, then the rules its
        loader and tokenizers assume (:mod:`.vocab_rules`; breaking one aborts or hangs)."""
        T = K.Tokenizer
        model = self.require(T.MODEL, "str", " (llama.cpp needs a tokenizer)")
        if model not in TOKENIZER_MODELS:
            raise self.fail(f"unknown tokenizer model '{_show(model)}' (tokenizer.ggml.model)")
        vocab_size = self.md.get(self.key(K.LLM.VOCAB_SIZE))
        if model in ("none", "no_vocab"):
            raise self.fail(no_vocabulary(str(model)))
        tokens = self.require(T.LIST, "arr_str", " (the vocabulary)")
        assert isinstance(tokens, StringArray)  # read_gguf(load=...) keeps it raw
        n_tokens = len(tokens)
        if n_tokens == 0:
            raise self.fail("tokenizer.ggml.tokens is empty")
        for key in (T.SCORES, T.TOKEN_TYPE):
            if key in self.md and len(self.md[key]) != n_tokens:  # type: ignore[arg-type]
                raise self.fail(f"{key} has {_n(len(self.md[key]))} entries but there are {_n(n_tokens)} tokens")  # type: ignore[arg-type]
        if model == "gpt2":
            self.require(T.MERGES, "arr_str", " (a gpt2/BPE vocabulary needs its merges)")
            pre = self.md.get(T.PRE)
            if pre is not None and pre not in BPE_PRE_TOKENIZERS:
                raise self.fail(f"unknown pre-tokenizer '{_show(pre)}' (tokenizer.ggml.pre)")
        problem = first_problem(Vocab(str(model), self.md, tokens, self.cancel))
        if problem is not None:
            raise self.fail(problem)
        self.n_vocab = int(vocab_size) if vocab_size is not None else n_tokens  # type: ignore[call-overload]
        if vocab_size is not None and vocab_size != n_tokens:
            raise self.fail(f"{self.key(K.LLM.VOCAB_SIZE)} is {_n(vocab_size)} but tokenizer.ggml.tokens has {_n(n_tokens)} tokens")  # type: ignore[arg-type]

    def check_tensors(self) -> None:
        """The tensors llama.cpp's load_tensors creates.

        For every architecture: token_embd.weight exists with shape {n_embd, n_vocab};
        output.weight, if present, has n_vocab columns; the blk.N indices are exactly
        0..block_count-1. For llama and qwen2 (dense) the exact tensor set and shapes are
        checked, because llama.cpp rejects a missing tensor, a wrong shape and any tensor
        it does not use ("wrong number of tensors").
        """
        names = {t.name: t for t in self.g.tensors}
        embd = names.get("token_embd.weight")
        if embd is None and self.arch not in LAYER_INPUT_HEADS:  # a head may use its target's (ctx_other)
            raise self.fail("missing tensor 'token_embd.weight'")
        if embd is not None and self.arch not in EMBD_SHAPE_EXEMPT:
            if embd.shape[0] != self.n_embd:
                raise self.fail(f"token_embd.weight has rows of {_n(embd.shape[0])} but the embedding length is {_n(self.n_embd)}")
            if self.n_vocab is not None:
                if len(embd.shape) < 2 or embd.shape[1] != self.n_vocab:
                    cols = embd.shape[1] if len(embd.shape) > 1 else 1
                    raise self.fail(f"token_embd.weight has {_n(cols)} rows but the vocabulary has {_n(self.n_vocab)} tokens")
                out = names.get("output.weight")
                if out is not None and self.arch not in LAYER_INPUT_HEADS and (len(out.shape) < 2 or out.shape[1] != self.n_vocab):
                    raise self.fail(f"output.weight does not match the vocabulary of {_n(self.n_vocab)} tokens")
        layers: set[int] = set()
        for name in names:
            m = _BLK_RE.match(name)
            if m:
                idx = m.group(1)
                if str(int(idx)) != idx or int(idx) >= self.n_layer:
                    raise self.fail(f"tensor '{_show(name)}' does not belong to any of the {self.n_layer} layers")
                layers.add(int(idx))
        if layers and len(layers) != self.n_layer:
            missing = min(set(range(self.n_layer)) - layers)
            raise self.fail(f"the model has {self.n_layer} layers but there are no tensors for layer {missing}")
        if self.nextn > 0 and self.arch in MTP_ONLY_PROBE_ARCHS and "blk.0.attn_norm.weight" not in names:
            raise self.fail("it declares MTP heads but has no 'blk.0.attn_norm.weight': llama.cpp would take it for a "
                            "file of heads alone and load its trunk without checking a tensor of it")
        if self.arch in EXACT_LAYOUT_ARCHS and self.n_expert == 0:
            self.check_exact_layout(names)
        if self.arch in CHECKED_HYBRIDS:
            check_layout(self, names)

    def check_architecture_rules(self) -> None:
        """What one architecture's loader and graph assert beyond the checks above (an
        abort where broken): Gemma 4's sliding-window layers (library/gguf/gemma4.py)."""
        check = GEMMA4_CHECKS.get(self.arch)
        problem = check(self.g) if check is not None else None
        if problem:
            raise self.fail(problem)

    def expected_tensors(self) -> dict[str, tuple[tuple[int, ...], bool]]:
        """name -> (shape, required) of the tensors llama.cpp creates for llama/qwen2."""
        E, V = self.n_embd, self.n_vocab or 0
        hk, hv = self.head_k, self.head_v
        exp: dict[str, tuple[tuple[int, ...], bool]] = {}

        def add(name: str, shape: tuple[int, ...], required: bool = True) -> None:
            exp[name] = (shape, required)

        add("token_embd.weight", (E, V))
        add("output_norm.weight", (E,))
        add("output.weight", (E, V), False)
        if self.arch == "llama":
            rope_type = self.md.get(self.key(K.Rope.SCALING_TYPE))
            if rope_type == "longrope":
                add("rope_factors_long.weight", (self.n_rot // 2,), False)
                add("rope_factors_short.weight", (self.n_rot // 2,), False)
            else:
                add("rope_freqs.weight", (self.n_rot // 2,), False)
        for i in range(self.n_layer):
            nh, nkv, nff = self.n_head[i], self.n_head_kv[i], self.n_ff[i]
            if nkv < 1 or nff < 1:
                raise self.fail(f"layer {i} has no key/value heads or no feed-forward size")
            q, k, v = hk * nh, hk * nkv, hv * nkv
            p = f"blk.{i}."
            add(p + "attn_norm.weight", (E,))
            add(p + "attn_q.weight", (E, q))
            add(p + "attn_k.weight", (E, k))
            add(p + "attn_v.weight", (E, v))
            add(p + "attn_output.weight", (q, E))
            add(p + "ffn_norm.weight", (E,))
            add(p + "ffn_gate.weight", (E, nff))
            add(p + "ffn_down.weight", (nff, E))
            add(p + "ffn_up.weight", (E, nff))
            if self.arch == "qwen2":
                # llama.cpp builds qwen2 with wq {n_embd, n_embd} and k/v biases of n_embd_gqa
                if q != E or k != v:
                    raise self.fail(f"layer {i}: unusual attention sizes for qwen2 (q {q}, k {k}, v {v}, embedding {E})")
                add(p + "attn_q.bias", (E,))
                add(p + "attn_k.bias", (k,))
                add(p + "attn_v.bias", (v,))
            elif q == E and k == v:
                # optional biases, only where llama.cpp's shapes are unambiguous
                add(p + "attn_q.bias", (E,), False)
                add(p + "attn_k.bias", (k,), False)
                add(p + "attn_v.bias", (v,), False)
                add(p + "attn_output.bias", (E,), False)
                add(p + "ffn_gate.bias", (nff,), False)
                add(p + "ffn_down.bias", (E,), False)
                add(p + "ffn_up.bias", (nff,), False)
        return exp

    def check_exact_layout(self, names: dict[str, TensorInfo]) -> None:
        def pad(shape: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(shape) + (1,) * (GGML_MAX_DIMS - len(shape))

        def fmt(shape: tuple[int, ...]) -> str:
            return "[" + ", ".join(str(d) for d in shape) + "]"

        exp = self.expected_tensors()
        for name, (shape, required) in exp.items():
            t = names.get(name)
            if t is None:
                if required:
                    raise self.fail(f"missing tensor '{name}' (required by the {self.arch} architecture)")
                continue
            if pad(t.shape) != pad(shape):
                raise self.fail(f"tensor '{name}' has shape {fmt(t.shape)}; {self.arch} needs {fmt(shape)}")
            if t.ggml_type in INTEGER_GGML_TYPES:
                raise self.fail(f"tensor '{name}' has type {t.type_name}, which is not a weight type")
        for name in names:
            if name not in exp:
                raise self.fail(f"unexpected tensor '{_show(name)}' for the {self.arch} architecture (llama.cpp rejects unused tensors)")


# --------------------------------------------------------------------------------------
# The memo
# --------------------------------------------------------------------------------------

_MEMO_SIZE = 64
_memo: OrderedDict[tuple, GGUFFile | str] = OrderedDict()
_memo_lock = threading.Lock()


#: A file modified less than this long ago is not memoised: file systems stamp
#: modification times with a coarse clock (a few ms; 2 s on FAT), so a file rewritten
#: in place twice within one tick keeps its (size, mtime, inode) -- git's "racy clean"
#: problem, solved the same way.
_RACY_NS = 3_000_000_000


def _memo_key(path: Path) -> tuple | None:
    """(resolved path, size, mtime, inode, device), or None when the file is missing,
    unreadable or too recently modified to be told apart from its next version."""
    try:
        st = os.stat(path)
        if st.st_mtime_ns > time.time_ns() - _RACY_NS:
            return None
        return (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
    except (OSError, ValueError):
        return None  # validation itself names the problem


def clear_memo() -> None:
    """Forget every memoised validation (tests; a file rewritten within the same ns)."""
    with _memo_lock:
        _memo.clear()


def _model_key(path: Path) -> tuple | None:
    """The memo key of the model ``path`` names: every part's (a change to any part is a
    new model), or None when one cannot be taken."""
    keys = tuple(_memo_key(p) for p in split_parts(path))
    return None if any(k is None for k in keys) else keys


def _validated(path: Path, cancel: Cancel | None) -> GGUFFile:
    key = _model_key(path)
    if key is not None:
        with _memo_lock:
            hit = _memo.get(key)
            if hit is not None:
                _memo.move_to_end(key)
        if isinstance(hit, GGUFFile):
            return hit
        if isinstance(hit, str):
            raise ModelFileError(hit)
    T = K.Tokenizer
    try:
        parts = read_model(path, load=(T.LIST, T.TOKEN_TYPE, T.PRECOMPILED_CHARSMAP), cancel=cancel)
        g = merged(parts)
        _Validator(g, cancel, parts).run()
    except ModelFileError as e:
        result: GGUFFile | str = str(e)
    else:
        result = g.unloaded()  # the memo keeps the small parts only
    if key is not None:
        with _memo_lock:
            _memo[key] = result
            while len(_memo) > _MEMO_SIZE:
                _memo.popitem(last=False)
    if isinstance(result, str):
        raise ModelFileError(result)
    return result


def check_rollback(g: GGUFFile) -> None:
    """Refuse a recurrent or hybrid architecture whose files SpecDesk does not check
    (a malformed one would abort llama.cpp); the checked ones roll back exactly."""
    arch = g.architecture or ""
    if arch in REFUSED_RECURRENT_ARCHITECTURES:
        kind = "recurrent" if arch in RECURRENT_ARCHITECTURES else "a hybrid of attention and recurrent layers"
        assert arch in RECURRENT_ARCHITECTURES or arch in HYBRID_ARCHITECTURES
        checked = ", ".join(sorted(CHECKED_RECURRENT_ARCHITECTURES))
        raise ModelFileError(
            f"{_label(g.path)}: architecture '{_show(arch)}' is {kind}; SpecDesk speculates on such models only where "
            f"it checks their tensors before llama.cpp loads them ({checked}), as a malformed one aborts llama.cpp"
        )


def validate_gguf(
    path: str | os.PathLike[str],
    *,
    cancel: Cancel | None = None,
    allow_recurrent: bool = False,
) -> GGUFFile:
    """``read_gguf`` plus the semantic checks llama.cpp's loader makes.

    A file that passes should load in llama.cpp (the agreement test checks this on
    hundreds of mutated files). On top of the structural checks of ``read_gguf``:

    * tensor data is laid out in header order, each tensor padded to the alignment
      (llama.cpp rejects any other layout); no metadata array holds arrays;
    * a split model, named by any of its parts, has all its parts, each with the
      split keys llama.cpp reads (``split.no`` in order, one ``split.count``, a
      ``split.tensors.count`` that counts every part's tensors, no tensor twice) and
      names it can follow; the checks below then see the first part's metadata and
      every part's tensors, and so does the returned header (its ``path`` is the first
      part, the file llama.cpp must be given);
    * ``general.architecture`` is a string naming an architecture llama.cpp knows;
    * every metadata key llama.cpp reads has the exact type it expects (uint32 block
      count, float32 rms epsilon, string array of tokens, ...); a rope scaling type is
      one llama.cpp knows;
    * ``{arch}.context_length``, ``.embedding_length`` and ``.block_count`` exist (and
      ``.attention.head_count`` for attention models); 1 <= block_count <= 512; per-layer
      arrays have one value per layer; head_count divides embedding_length (without an
      explicit key_length); head_count_kv divides head_count; expert counts are
      consistent; for llama the rope dimension equals the head size;
    * the tokenizer model is one llama.cpp knows; the tokens exist, are unique as
      llama.cpp compares them (raw bytes up to the first NUL; llama.cpp aborts on
      duplicates) and scores/token types have one entry per token; a BPE vocabulary
      has merges and a known pre-tokenizer; ``{arch}.vocab_size`` matches; and every
      rule of :mod:`.vocab_rules` (the ones llama.cpp's vocabulary loader and
      tokenizers assume: special-token ids, byte tokens, the charsmap, ...) holds;
    * ``token_embd.weight`` exists with shape {embedding_length, n_vocab}; output.weight
      matches the vocabulary; the blk.N indices are exactly 0..block_count-1; for llama
      and qwen2 the exact tensor set and shapes llama.cpp creates, and nothing else;
    * for a hybrid architecture SpecDesk accepts (qwen35, :mod:`.hybrid`): the
      hyper-parameters its graph asserts on or divides by, and the exact tensor set;
    * unless ``allow_recurrent``: the architecture is not a recurrent or hybrid one
      (llama.cpp's lists) that SpecDesk does not check (:func:`check_rollback`).

    Linear in the header's size, with memory as ``read_gguf``; ``cancel`` is checked
    in the long loops. The result (or the error) is memoised per (resolved path, size,
    mtime, inode): validating an unchanged file again is free. Long arrays in the
    returned header are ``GGUFArray`` references (read them with ``load_array``).
    """
    g = _validated(Path(path), cancel)
    if not allow_recurrent:
        check_rollback(g)
    return g


