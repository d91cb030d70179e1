"""A tiny but complete llama-architecture GGUF, a hand-written encoder for files
GGUFWriter refuses to write, and crafted worst cases of the vocabulary.

``write_tiny_llama`` writes a 2-layer llama model (about 100 KB) with gguf-py's
GGUFWriter: real-looking metadata, a SentencePiece ("llama") or byte-level BPE ("gpt2")
tokenizer (tiny_vocab.py) with a chat template, Q8_0/F16/F32 tensors with seeded random
data. llama.cpp loads it in milliseconds. ``encode_gguf`` writes a file from raw parts
(counts that lie, invalid types), ``rebuild_gguf`` copies a valid one with edited
metadata or tensors. The mutations aimed at a valid file's fields are in mutations.py.

The tests write their tiny models with these (tests/conftest.py puts tools/ on
``sys.path``), and so does tools/gguf_fuzz_report.py.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as VT

from .tiny_vocab import CHATML_TEMPLATE, bpe_vocab, spm_vocab

@dataclass(frozen=True)
class TinySpec:
    tokenizer: str = "spm"  # "spm" (tokenizer.ggml.model = llama) or "bpe" (gpt2)
    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx: int = 256
    arch: str = "llama"
    seed: int = 0
    output: bool = False  # a separate output.weight (else tied to token_embd)
    alignment: int | None = None  # write general.alignment


def write_tiny_llama(path: str | Path, spec: TinySpec = TinySpec()) -> Path:
    """Write a tiny complete llama GGUF to ``path`` and return the path."""
    path = Path(path)
    rng = np.random.default_rng(spec.seed)
    head_dim = spec.n_embd // spec.n_head
    w = gguf.GGUFWriter(str(path), spec.arch)
    if spec.alignment is not None:
        w.add_custom_alignment(spec.alignment)
    w.add_type("model")
    w.add_name("Tiny Llama Test")
    w.add_size_label("100K")
    w.add_license("apache-2.0")
    w.add_languages(["en"])
    w.add_block_count(spec.n_layer)
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(spec.n_embd)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_rope_dimension_count(head_dim)
    if spec.tokenizer == "spm":
        tokens, scores, types = spm_vocab()
        w.add_vocab_size(len(tokens))
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
    else:
        tokens, types, merges = bpe_vocab()
        w.add_vocab_size(len(tokens))
        w.add_add_space_prefix(False)
        w.add_add_bos_token(False)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("smollm")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_pad_token_id(2)
    w.add_chat_template(CHATML_TEMPLATE)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    n_vocab = len(tokens)
    kv = head_dim * spec.n_head_kv

    def weight(rows: int, cols: int, qtype: Q) -> tuple[np.ndarray, Q]:
        # numpy shape (cols, rows) == ggml ne {rows, cols}
        data = (rng.standard_normal((cols, rows)) * 0.02).astype(np.float32)
        if qtype == Q.F32:
            return data, qtype
        if qtype == Q.F16:
            return data.astype(np.float16), qtype
        return gguf.quants.quantize(data, qtype), qtype

    def add(name: str, arr_q: tuple[np.ndarray, Q]) -> None:
        arr, qtype = arr_q
        if qtype in (Q.F32, Q.F16):
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=qtype)

    add("token_embd.weight", weight(spec.n_embd, n_vocab, Q.Q8_0))
    add("output_norm.weight", (np.ones(spec.n_embd, dtype=np.float32), Q.F32))
    if spec.output:
        add("output.weight", weight(spec.n_embd, n_vocab, Q.F16))
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", (np.ones(spec.n_embd, dtype=np.float32), Q.F32))
        add(p + "attn_q.weight", weight(spec.n_embd, spec.n_embd, Q.Q8_0))
        add(p + "attn_k.weight", weight(spec.n_embd, kv, Q.Q8_0))
        add(p + "attn_v.weight", weight(spec.n_embd, kv, Q.F16))
        add(p + "attn_output.weight", weight(spec.n_embd, spec.n_embd, Q.Q8_0))
        add(p + "ffn_norm.weight", (np.ones(spec.n_embd, dtype=np.float32), Q.F32))
        add(p + "ffn_gate.weight", weight(spec.n_embd, spec.n_ff, Q.Q8_0))
        add(p + "ffn_up.weight", weight(spec.n_embd, spec.n_ff, Q.Q8_0))
        add(p + "ffn_down.weight", weight(spec.n_ff, spec.n_embd, Q.Q8_0))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# -- a tiny hand-written encoder, for files GGUFWriter refuses to write ------------------

_PACK = {VT.UINT8: "<B", VT.INT8: "<b", VT.UINT16: "<H", VT.INT16: "<h", VT.UINT32: "<I", VT.INT32: "<i",
         VT.FLOAT32: "<f", VT.BOOL: "<?", VT.UINT64: "<Q", VT.INT64: "<q", VT.FLOAT64: "<d"}


def encode_value(vtype: int, value) -> bytes:
    """Encode one value. Strings may be str or bytes; arrays are (element type, items)."""
    if vtype == VT.STRING:
        raw = value.encode() if isinstance(value, str) else bytes(value)
        return struct.pack("<Q", len(raw)) + raw
    if vtype == VT.ARRAY:
        etype, items = value
        return struct.pack("<IQ", etype, len(items)) + b"".join(encode_value(etype, v) for v in items)
    if vtype not in _PACK:  # an invalid type: the value is given as raw bytes
        return bytes(value)
    return struct.pack(_PACK[vtype], value)


def encode_gguf(
    kvs: list[tuple[str | bytes, int, object]],
    tensors: list[tuple[str | bytes, tuple[int, ...], int, int]] = (),
    *,
    version: int = 3,
    alignment: int = 32,
    data: bytes = b"",
    n_kv: int | None = None,
    n_tensors: int | None = None,
) -> bytes:
    """A GGUF file from raw parts: kvs are (key, value type, value); tensors are (name,
    dims, ggml type, offset relative to the data section). ``data`` follows the header,
    padded to ``alignment``. Counts can be overridden to lie."""
    out = bytearray(b"GGUF")
    out += struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                       len(kvs) if n_kv is None else n_kv)
    for key, vtype, value in kvs:
        out += encode_value(VT.STRING, key) + struct.pack("<I", vtype) + encode_value(vtype, value)
    for name, dims, ggml_type, offset in tensors:
        out += encode_value(VT.STRING, name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ggml_type, offset)
    if tensors or data:
        out += bytes(-len(out) % alignment)
    out += data
    return bytes(out)


def _plain(value):
    """A metadata value as encode_value takes it: raw bytes for strings of a
    StringArray (kept exactly, invalid UTF-8 included), Python numbers for numpy."""
    from specdesk.library.gguf import StringArray

    if isinstance(value, StringArray):
        return list(value.iter_raw())
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def rebuild_gguf(src: str | Path, dst: str | Path, *, set_kv: dict | None = None, tensor_map=None,
                 extra_tensors: list[tuple[str, tuple[int, ...], int]] = (), sparse: bool = False) -> Path:
    """Copy a (valid) GGUF with edited metadata and/or tensors.

    ``set_kv`` maps key -> (value type, value) to add/replace, or None to delete.
    ``tensor_map(TensorInfo)`` returns (name, dims, ggml type) or None to drop the
    tensor; each kept tensor keeps its data bytes (cut or zero-padded to its new size,
    laid out contiguously again). ``extra_tensors`` (name, dims, ggml type) are appended
    with zero data. ``sparse``: write no tensor data at all, only a hole of the right
    size (for header-only checks of files with large tensors).
    """
    from specdesk.library.gguf import read_gguf

    g = read_gguf(src, load=[k for k, (vt, et) in read_gguf(src, lazy_arrays=True).value_types.items() if et == VT.STRING])
    raw = b"" if sparse else Path(src).read_bytes()
    kvs = []
    edits = dict(set_kv or {})
    alignment = g.alignment
    if "general.alignment" in edits:
        new_alignment = edits["general.alignment"]
        alignment = 32 if new_alignment is None else int(new_alignment[1]) or 1
    for key, value in g.metadata.items():
        vtype, etype = g.value_types[key]
        if key in edits:
            new = edits.pop(key)
            if new is not None:
                kvs.append((key, *new))
            continue
        kvs.append((key, vtype, (etype, _plain(value)) if vtype == VT.ARRAY else value))
    for key, new in edits.items():
        if new is not None:
            kvs.append((key, *new))
    tensors, blobs, rel = [], [], 0
    specs = [(t, (t.name, t.shape, t.ggml_type) if tensor_map is None else tensor_map(t)) for t in g.tensors]
    specs += [(None, extra) for extra in extra_tensors]
    for t, spec in specs:
        if spec is None:
            continue
        name, dims, ggml_type = spec
        block, type_size = gguf.GGML_QUANT_SIZES[Q(ggml_type)] if ggml_type in set(Q) else (1, 1)
        n_bytes = int(np.prod(dims)) // block * type_size
        tensors.append((name, tuple(dims), ggml_type, rel))
        padded = n_bytes + (-n_bytes % alignment)
        if not sparse:
            blob = b"" if t is None else raw[t.offset : t.offset + min(n_bytes, t.n_bytes)]
            blobs.append(blob.ljust(padded, b"\0"))
        rel += padded
    if sparse:
        head = encode_gguf(kvs, tensors, version=g.version, alignment=alignment, data=b"")
        with open(dst, "wb") as f:
            f.write(head)
            f.truncate(len(head) + rel)
        return Path(dst)
    out = encode_gguf(kvs, tensors, version=g.version, alignment=alignment, data=b"".join(blobs))
    Path(dst).write_bytes(out)
    return Path(dst)


# -- crafted worst cases ------------------------------------------------------------------


def look_alike_tokens(n: int) -> list[bytes]:
    """``n`` (at most 64**3 = 262,144) distinct 3-byte tokens made of UTF-8 continuation
    bytes only: all invalid UTF-8, all decoding to the same text (three U+FFFD), all
    different to llama.cpp. The worst case for a check that compares decoded texts."""
    if n > 64**3:
        raise ValueError("at most 262,144 look-alike tokens")
    return [bytes(c) for c in itertools.islice(itertools.product(range(0x80, 0xC0), repeat=3), n)]


def write_big_vocab_llama(path: str | Path, tokens: list[bytes], base: str | Path | None = None) -> Path:
    """A complete tiny BPE llama model whose vocabulary is ``tokens``: token types,
    vocab_size and token_embd's shape follow. The tensor data is a sparse hole (header
    checks never read it)."""
    path = Path(path)
    if base is None:
        base = write_tiny_llama(path.with_suffix(".base.gguf"), TinySpec(tokenizer="bpe"))
    n = len(tokens)
    return rebuild_gguf(
        base, path, sparse=True,
        set_kv={"tokenizer.ggml.tokens": (VT.ARRAY, (VT.STRING, tokens)),
                "tokenizer.ggml.token_type": (VT.ARRAY, (VT.INT32, [1] * n)),
                "llama.vocab_size": (VT.UINT32, n)},
        tensor_map=lambda t: (t.name, (t.shape[0], n) if t.name == "token_embd.weight" else t.shape, t.ggml_type),
    )
