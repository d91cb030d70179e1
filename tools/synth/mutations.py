"""Byte-level mutations of a valid GGUF, aimed at its structural fields.

``header_fields`` lists where the interesting fields of a *valid* file are (length
fields, type fields, tensor dimensions, scalar values, ...), so that mutations can aim at
them; ``random_ops`` draws one to three mutations from a seeded ``random.Random``, and
``apply_mutations`` applies a list of them to the file's bytes. Used by
tests/unit/test_gguf_fuzz.py, tests/integration/test_gguf_llama_agreement.py and
tools/gguf_fuzz_report.py.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass

from gguf import GGUFValueType as VT

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


# -- mutations ----------------------------------------------------------------------------

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
