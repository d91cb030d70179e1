"""The GGUF format and ggml's tensor types: limits, value types, block sizes.

Pure constants (from the ``gguf`` package where it has them). The llama.cpp-specific
tables (architectures, tokenizers, key types) are in :mod:`.rules`.
"""

from __future__ import annotations

import struct

import gguf
import numpy as np

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)  # v1 used 32-bit lengths and is no longer loaded by llama.cpp
DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT

#: Caps on the header's record counts, checked before any record is read. Each record
#: costs a few microseconds of Python, so the caps bound validation time: at both caps
#: together validate_gguf stays well under a second (tools/gguf_fuzz_report.py measures
#: it). Real models are far below them: the largest have a few thousand tensors
#: (DeepSeek-V3 ~1,800; split-expert Mixtrals under 1,000) and a few hundred keys at most.
MAX_TENSORS = 32_768
MAX_KV = 16_384
#: Arrays held in other arrays, counted over the whole header: llama.cpp reads none, and
#: each costs as much as a record, so they need a cap of their own.
MAX_NESTED_ARRAYS = 4_096
#: String elements of arrays, counted over the whole header (nested arrays included) and
#: checked against each array's declared length before its strings are read. Each costs
#: about a tenth of a microsecond to step over (more to decode into a list), and the
#: record caps do not bound them: a 100 MiB array of 1-byte strings holds 11 million.
#: Real models have about half a million at most (tokens: up to 262,144 in Gemma 3;
#: tokens and merges: BLOOM 250k + 250k, Llama 3 128k + 280k), so the cap is twice
#: that. At the cap, strings read lazily take about a tenth of a second, and decoded
#: into short lists or hashed as a vocabulary under a second on two slow cores
#: (tools/gguf_fuzz_report.py --caps-only measures it).
MAX_STRINGS = 1 << 20  # 1,048,576
DEFAULT_MAX_ARRAY_LEN = 1 << 24  # 16.7 M elements; the largest real vocabularies are ~260 k
MAX_STRING_BYTES = 64 << 20  # one metadata string (a chat template is ~10 KB)
MAX_ARRAY_DEPTH = 4  # arrays of arrays of ... (llama.cpp itself reads none)
#: Arrays longer than this are never Python lists: read_gguf(lazy_arrays=True) leaves
#: them unread (GGUFArray), otherwise they become a StringArray or a read-only numpy array.
LAZY_ARRAY_MIN = 1024

GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64  # tensor names are at most 63 bytes (+ NUL) in ggml
GGML_TENSOR_ALIGNMENT = 32  # ggml-backend's TENSOR_ALIGNMENT for buffers made from pointers
LLAMA_MAX_LAYERS = 512
LLAMA_MAX_EXPERTS = 512
INT64_MAX = (1 << 63) - 1

# Smallest possible encoding of one key/value pair: u64 key length, a 1-byte key,
# u32 value type and a 1-byte value. And of one tensor info: u64 name length, a 1-byte
# name, u32 n_dims, one u64 dimension, u32 type and u64 offset.
MIN_KV_BYTES = 8 + 1 + 4 + 1
MIN_TENSOR_INFO_BYTES = 8 + 1 + 4 + 8 + 4 + 8

VT = gguf.GGUFValueType
SCALAR_FORMATS: dict[int, str] = {
    VT.UINT8: "<B",
    VT.INT8: "<b",
    VT.UINT16: "<H",
    VT.INT16: "<h",
    VT.UINT32: "<I",
    VT.INT32: "<i",
    VT.FLOAT32: "<f",
    VT.BOOL: "<B",
    VT.UINT64: "<Q",
    VT.INT64: "<q",
    VT.FLOAT64: "<d",
}
SCALAR_STRUCTS = {t: struct.Struct(f) for t, f in SCALAR_FORMATS.items()}
NUMPY_DTYPES = {
    VT.UINT8: np.dtype("<u1"),
    VT.INT8: np.dtype("<i1"),
    VT.UINT16: np.dtype("<u2"),
    VT.INT16: np.dtype("<i2"),
    VT.UINT32: np.dtype("<u4"),
    VT.INT32: np.dtype("<i4"),
    VT.FLOAT32: np.dtype("<f4"),
    VT.BOOL: np.dtype("<u1"),
    VT.UINT64: np.dtype("<u8"),
    VT.INT64: np.dtype("<i8"),
    VT.FLOAT64: np.dtype("<f8"),
}
KNOWN_VALUE_TYPES = frozenset(int(t) for t in VT)
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")


def type_name(vtype: int, etype: int | None = None) -> str:
    """``uint32``, ``array of string``, ``type 13``: a value type for a message."""
    name = VT(vtype).name.lower() if vtype in KNOWN_VALUE_TYPES else f"type {vtype}"
    if etype is not None:
        inner = VT(etype).name.lower() if etype in KNOWN_VALUE_TYPES else f"type {etype}"
        return f"array of {inner}"
    return name


def _ggml_type_table() -> dict[int, tuple[str, int, int]]:
    """ggml type id -> (name, elements per block, bytes per block).

    Taken from ``gguf.GGML_QUANT_SIZES`` with one correction: gguf-py still lists Q8_1
    with its old 40-byte block while ggml's ``block_q8_1`` is 36 bytes (two halves and
    32 int8). Types ggml has removed (Q4_2, Q4_0_4_4, ...) are absent, so a tensor using
    them is rejected as llama.cpp does. The agreement test compares this table with
    ``ggml_blck_size``/``ggml_type_size`` of the installed ggml.
    """
    table: dict[int, tuple[str, int, int]] = {}
    for qtype in gguf.GGMLQuantizationType:
        sizes = gguf.GGML_QUANT_SIZES.get(qtype)
        if sizes is not None:
            table[int(qtype)] = (qtype.name, int(sizes[0]), int(sizes[1]))
    q8_1 = int(gguf.GGMLQuantizationType.Q8_1)
    if q8_1 in table:
        table[q8_1] = ("Q8_1", 32, 36)
    return table


GGML_TYPES = _ggml_type_table()
INTEGER_GGML_TYPES = frozenset(
    int(getattr(gguf.GGMLQuantizationType, n)) for n in ("I8", "I16", "I32", "I64", "F64")
)
