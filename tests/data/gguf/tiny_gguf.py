"""Test helpers: a tiny but complete llama-architecture GGUF, and byte-level mutations.

``write_tiny_llama`` writes a 2-layer llama model (about 100 KB) with gguf-py's
GGUFWriter: real-looking metadata, a SentencePiece ("llama") or byte-level BPE ("gpt2")
tokenizer with a chat template, Q8_0/F16/F32 tensors with seeded random data. llama.cpp
loads it in milliseconds.

``header_fields`` lists where the interesting fields of a *valid* file are (length
fields, type fields, tensor dimensions, scalar values, ...), so that mutations can aim at
them; ``apply_mutations`` applies a list of mutation operations to the file bytes.
Used by tests/unit/test_gguf_fuzz.py and tests/integration/test_gguf_llama_agreement.py.
"""

from __future__ import annotations

import itertools
import random
import struct
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as VT

CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_WORDS = (
    "the of and to in is that it for was on are as with his they at be this from have or by one had "
    "not but what all were when we there can an your which their said if do will each about how up out "
    "them then she many some so these would other into has more her two like him see time could no make"
).split()


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable unicode character map (byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def spm_vocab() -> tuple[list[str], list[float], list[int]]:
    """A small SentencePiece-style vocabulary: <unk> <s> </s>, 256 byte tokens, words."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [2, 3, 3]  # UNKNOWN, CONTROL, CONTROL
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(6)  # BYTE
    for w in _WORDS:
        tokens.append("\u2581" + w)
        types.append(1)
    for c in "abcdefghijklmnopqrstuvwxyz":
        tokens.append(c)
        types.append(1)
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(tokens) - 259)]
    return tokens, scores, types


def bpe_vocab() -> tuple[list[str], list[int], list[str]]:
    """A small byte-level BPE vocabulary (SmolLM2/GPT-2 style) with merges."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = list(specials)
    types = [3, 3, 3]
    b2u = _bytes_to_unicode()
    for b in range(256):
        tokens.append(b2u[b])
        types.append(1)
    merges: list[str] = []
    have = set(tokens)
    for w in _WORDS:
        text = "Ġ" + w
        cur = text[0]
        for ch in text[1:]:
            nxt = cur + ch
            if nxt not in have:
                merges.append(f"{cur} {ch}")
                tokens.append(nxt)
                types.append(1)
                have.add(nxt)
            cur = nxt
    return tokens, types, merges


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


# --------------------------------------------------------------------------------------
# Field map of a valid file
# --------------------------------------------------------------------------------------

_SIZES = {VT.UINT8: 1, VT.INT8: 1, VT.UINT16: 2, VT.INT16: 2, VT.UINT32: 4, VT.INT32: 4,
          VT.FLOAT32: 4, VT.BOOL: 1, VT.UINT64: 8, VT.INT64: 8, VT.FLOAT64: 8}


@dataclass
class Fields:
    """Offsets of the fields of a valid GGUF header, by kind.

    u64_len: string/array length fields; u32_type: value type fields (metadata and array
    element types); scalar: (offset, size) of scalar metadata values; str_data: (offset,
    length) of string bytes (keys, values and the first strings of string arrays);
    counts: the two header counts; n_dims / dims / ggml_type / tensor_offset: tensor
    info fields.
    """

    u64_len: list[int]
    u32_type: list[int]
    scalar: list[tuple[int, int]]
    str_data: list[tuple[int, int]]
    counts: list[int]
    n_dims: list[int]
    dims: list[int]
    ggml_type: list[int]
    tensor_offset: list[int]
    header_end: int


def header_fields(data: bytes, g, max_array_strings: int = 64) -> Fields:
    """Walk the (valid) header ``data`` using the offsets recorded by read_gguf."""
    f = Fields([], [], [], [], [8, 16], [], [], [], [], g.header_end)
    u64 = struct.Struct("<Q").unpack_from
    u32 = struct.Struct("<I").unpack_from
    for start in g.kv_offsets.values():
        klen = u64(data, start)[0]
        f.u64_len.append(start)
        f.str_data.append((start + 8, klen))
        p = start + 8 + klen
        f.u32_type.append(p)
        vtype = u32(data, p)[0]
        p += 4
        if vtype == VT.STRING:
            f.u64_len.append(p)
            f.str_data.append((p + 8, u64(data, p)[0]))
        elif vtype == VT.ARRAY:
            f.u32_type.append(p)
            etype = u32(data, p)[0]
            f.u64_len.append(p + 4)
            n = u64(data, p + 4)[0]
            q = p + 12
            picked = set(range(min(n, max_array_strings // 2))) | set(range(max(0, n - 4), n))
            picked |= set(range(0, n, max(1, n // (max_array_strings // 2))))
            if etype == VT.STRING:
                for i in range(n):
                    ln = u64(data, q)[0]
                    if i in picked:
                        f.u64_len.append(q)
                        f.str_data.append((q + 8, ln))
                    q += 8 + ln
            elif etype in _SIZES:
                for i in sorted(picked):
                    f.scalar.append((q + i * _SIZES[etype], _SIZES[etype]))
        else:
            f.scalar.append((p, _SIZES[vtype]))
    for t in g.tensors:
        p = t.info_offset
        nlen = u64(data, p)[0]
        f.u64_len.append(p)
        f.str_data.append((p + 8, nlen))
        p += 8 + nlen
        f.n_dims.append(p)
        nd = u32(data, p)[0]
        p += 4
        for _ in range(nd):
            f.dims.append(p)
            p += 8
        f.ggml_type.append(p)
        f.tensor_offset.append(p + 4)
    return f


# --------------------------------------------------------------------------------------
# Mutations
# --------------------------------------------------------------------------------------

INTERESTING_U64 = [0, 1, 2, 3, 7, 8, 31, 32, 63, 64, 255, 256, 4096, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1,
                   2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1]
INTERESTING_U32 = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 24, 26, 28, 30, 31, 34, 39, 41, 42,
                   255, 2**31 - 1, 2**31, 2**32 - 1]


def apply_mutations(data: bytes, ops: list[tuple]) -> bytes:
    """Apply mutation ops in order. Positions are taken modulo the current length.

    ("flip", pos, xor) ("set", pos, byte) ("insert", pos, bytes) ("delete", pos, n)
    ("truncate", n) ("u64", pos, value) ("u64add", pos, delta) ("u32", pos, value)
    ("raw", pos, bytes). The fixed-width writes are skipped if they do not fit.
    """
    b = bytearray(data)
    for op in ops:
        kind = op[0]
        if not b and kind != "insert":
            continue
        if kind == "flip":
            pos = op[1] % len(b)
            b[pos] ^= op[2] or 1
        elif kind == "set":
            b[op[1] % len(b)] = op[2] & 0xFF
        elif kind == "insert":
            pos = op[1] % (len(b) + 1)
            b[pos:pos] = op[2]
        elif kind == "delete":
            pos = op[1] % len(b)
            del b[pos : pos + op[2]]
        elif kind == "truncate":
            del b[op[1] % (len(b) + 1) :]
        elif kind == "u64add":
            pos = op[1]
            if 0 <= pos <= len(b) - 8:
                cur = struct.unpack_from("<Q", b, pos)[0]
                b[pos : pos + 8] = struct.pack("<Q", (cur + op[2]) % 2**64)
        elif kind in ("u64", "u32", "raw"):
            raw = {"u64": lambda v: struct.pack("<Q", v % 2**64), "u32": lambda v: struct.pack("<I", v % 2**32),
                   "raw": lambda v: bytes(v)}[kind](op[2])
            pos = op[1]
            if 0 <= pos <= len(b) - len(raw):
                b[pos : pos + len(raw)] = raw
    return bytes(b)


def random_ops(rng: random.Random, data: bytes, fields: Fields, *, header_only: bool = True) -> list[tuple]:
    """One to three random mutation ops aimed mostly at structural fields.

    Used by the llama.cpp agreement test (a seeded random.Random, no hypothesis).
    """
    limit = fields.header_end if header_only else len(data)
    ops: list[tuple] = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        kind = rng.choice(("flip", "flip", "flip", "len", "type", "scalar", "scalar", "scalar", "text", "dims",
                           "gtype", "toff", "count", "insert", "delete", "truncate"))
        if kind == "flip":
            ops.append(("flip", rng.randrange(limit), 1 << rng.randrange(8)))
        elif kind == "len":
            pos = rng.choice(fields.u64_len)
            cur = struct.unpack_from("<Q", data, pos)[0]
            ops.append(("u64", pos, rng.choice([cur + 1, cur - 1, cur + 8, 0, *rng.sample(INTERESTING_U64, 3)])))
        elif kind == "type":
            ops.append(("u32", rng.choice(fields.u32_type), rng.choice(INTERESTING_U32[:14])))
        elif kind == "scalar" and fields.scalar:
            pos, size = rng.choice(fields.scalar)
            if rng.random() < 0.5:
                val = rng.choice((0, 1, 2, 3, 4, 8, 16, 32, 63, 64, 128, 255, 256, 512, 513, 1 << (8 * size - 1)))
                ops.append(("raw", pos, (val % (1 << (8 * size))).to_bytes(size, "little")))
            else:
                ops.append(("flip", pos + rng.randrange(size), 1 << rng.randrange(8)))
        elif kind == "text" and fields.str_data:
            pos, ln = rng.choice(fields.str_data)
            if ln:
                ops.append(("set", pos + rng.randrange(ln), rng.choice((0, 0x20, 0x2E, 0x30, 0x41, 0x5F, 0x61, 0x7A, 0x80, 0xFF))))
        elif kind == "dims" and fields.dims:
            pos = rng.choice(fields.dims)
            cur = struct.unpack_from("<Q", data, pos)[0]
            ops.append(("u64", pos, rng.choice((0, 1, cur * 2, cur // 2, cur + 32, cur - 32, 2**63))))
        elif kind == "gtype" and fields.ggml_type:
            ops.append(("u32", rng.choice(fields.ggml_type), rng.choice(INTERESTING_U32)))
        elif kind == "toff" and fields.tensor_offset:
            pos = rng.choice(fields.tensor_offset)
            cur = struct.unpack_from("<Q", data, pos)[0]
            ops.append(("u64", pos, rng.choice((0, cur + 32, cur - 32, cur + 1, 2**63))))
        elif kind == "count":
            pos = rng.choice(fields.counts)
            cur = struct.unpack_from("<Q", data, pos)[0]
            ops.append(("u64", pos, rng.choice((cur - 1, cur + 1, 0, 2**64 - 1))))
        elif kind == "insert":
            ops.append(("insert", rng.randrange(limit), bytes(rng.randrange(256) for _ in range(rng.choice((1, 4, 8))))))
        elif kind == "delete":
            ops.append(("delete", rng.randrange(limit), rng.choice((1, 4, 8))))
        else:
            ops.append(("truncate", rng.randrange(len(data))))
    return ops


# --------------------------------------------------------------------------------------
# A tiny hand-written encoder, for files GGUFWriter refuses to write
# --------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------
# Crafted worst cases
# --------------------------------------------------------------------------------------


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
