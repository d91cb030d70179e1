"""Safe reading, validation and inspection of GGUF model files.

GGUF files come from the internet and are untrusted, and llama.cpp's loader has had
crashes on malformed files. Every model therefore goes through this module before it
reaches llama.cpp:

``read_gguf``
    A bounded parser for the header (metadata and tensor infos). It never reads tensor
    data, never allocates more than the file can hold, and checks every count, length,
    type and offset before using it. Structural problems raise ``ModelFileError``.
``validate_gguf``
    ``read_gguf`` plus the semantic checks llama.cpp's loader makes (key types,
    hyper-parameters, the exact tensor set of the common architectures, the
    vocabulary), so that a file that passes is not then rejected -- or crashed on -- by
    llama.cpp. ``tests/integration/test_gguf_llama_agreement.py`` checks that claim
    against the real loader on mutated files.
``inspect_gguf``
    A JSON-serialisable summary for ``specdesk models inspect``.
``vocab_from_gguf`` / ``estimate_memory``
    The tokenizer and an estimate of the RAM/VRAM a model needs.

Every error message is one line of the form ``"<file name>: <problem>"``; anything taken
from the file itself is escaped and shortened before it goes into a message.

The parser is pure Python + numpy. The ``gguf`` package is used only for constants
(value types, quantization block sizes, key names, architecture names).
"""

from __future__ import annotations

import math
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, BinaryIO

import gguf
import numpy as np

from ..errors import ModelFileError

__all__ = [
    "GGUFArray",
    "GGUFFile",
    "SUPPORTED_ARCHITECTURES",
    "TensorInfo",
    "estimate_memory",
    "inspect_gguf",
    "load_array",
    "read_gguf",
    "validate_gguf",
    "vocab_from_gguf",
]

# --------------------------------------------------------------------------------------
# Limits and constants
# --------------------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)  # v1 used 32-bit lengths and is no longer loaded by llama.cpp
DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT

MAX_TENSORS = 1_000_000
MAX_KV = 1_000_000
DEFAULT_MAX_ARRAY_LEN = 1 << 24  # 16.7 M elements; the largest real vocabularies are ~260 k
MAX_STRING_BYTES = 64 << 20  # one metadata string (a chat template is ~10 KB)
MAX_ARRAY_DEPTH = 4  # arrays of arrays of ... (llama.cpp itself reads none)
LAZY_ARRAY_MIN = 1024  # read_gguf(lazy_arrays=True) leaves arrays longer than this unread

GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64  # tensor names are at most 63 bytes (+ NUL) in ggml
GGML_TENSOR_ALIGNMENT = 32  # ggml-backend's TENSOR_ALIGNMENT for buffers made from pointers
LLAMA_MAX_LAYERS = 512
LLAMA_MAX_EXPERTS = 512
INT64_MAX = (1 << 63) - 1

# Smallest possible encoding of one key/value pair: u64 key length, a 1-byte key,
# u32 value type and a 1-byte value. And of one tensor info: u64 name length, a 1-byte
# name, u32 n_dims, one u64 dimension, u32 type and u64 offset.
_MIN_KV_BYTES = 8 + 1 + 4 + 1
_MIN_TENSOR_INFO_BYTES = 8 + 1 + 4 + 8 + 4 + 8

_CHUNK = 1 << 20

VT = gguf.GGUFValueType
_SCALAR_FORMATS: dict[int, str] = {
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
_SCALAR_STRUCTS = {t: struct.Struct(f) for t, f in _SCALAR_FORMATS.items()}
_NUMPY_DTYPES = {
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
_KNOWN_VALUE_TYPES = frozenset(int(t) for t in VT)
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def _type_name(vtype: int, etype: int | None = None) -> str:
    name = VT(vtype).name.lower() if vtype in _KNOWN_VALUE_TYPES else f"type {vtype}"
    if etype is not None:
        inner = VT(etype).name.lower() if etype in _KNOWN_VALUE_TYPES else f"type {etype}"
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
_INTEGER_GGML_TYPES = frozenset(
    int(getattr(gguf.GGMLQuantizationType, n)) for n in ("I8", "I16", "I32", "I64", "F64")
)

#: Architectures llama.cpp can load as a main model. gguf-py's MODEL_ARCH_NAMES mirrors
#: llama.cpp's LLM_ARCH_NAMES; "clip" is only a vision projector ("CLIP cannot be used
#: as main model"). The agreement test checks every name against the installed libllama.
SUPPORTED_ARCHITECTURES: frozenset[str] = frozenset(gguf.MODEL_ARCH_NAMES.values()) - {"clip"}

#: tokenizer.ggml.model values llama.cpp knows ("unknown tokenizer" otherwise).
TOKENIZER_MODELS = frozenset({"no_vocab", "none", "llama", "bert", "gpt2", "t5", "rwkv", "plamo2"})

#: tokenizer.ggml.pre values llama.cpp accepts for "gpt2" (BPE) vocabularies; any other
#: value makes it throw "unknown pre-tokenizer type". Taken from llama-vocab.cpp; the
#: agreement test loads a BPE vocabulary with each of them in the installed llama.cpp.
BPE_PRE_TOKENIZERS = frozenset({
    "default", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
    "midm-2.0", "lfm2", "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon", "mpt",
    "starcoder", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
    "jina-v2-de", "a.x-4.0", "mellum", "jina-v1-en", "jina-v2-code", "roberta-bpe",
    "refact", "command-r", "qwen2", "deepseek-r1-qwen", "kormo", "stablelm2", "olmo",
    "dbrx", "smaug-bpe", "poro-chat", "glm4", "chatglm-bpe", "viking", "jais", "tekken",
    "smollm", "codeshell", "bloom", "gpt3-finnish", "exaone", "exaone4", "chameleon",
    "minerva-7b", "megrez", "gpt-4o", "llama4", "superbpe", "trillion", "granite-docling",
    "bailingmoe", "bailingmoe2", "llada-moe", "seed-coder", "hunyuan", "hunyuan-dense",
    "kimi-k2", "grok-2", "afmoe", "minimax-m2",
})

ROPE_SCALING_TYPES = frozenset({"none", "linear", "yarn", "longrope"})

# llama_token_type values
TOKEN_TYPE_BYTE = 6

# Architectures whose layers need no attention heads (recurrent or non-transformer).
_NO_HEADS_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7",
                             "wavtokenizer-dec"})
# Architectures whose token_embd is not {embedding_length, n_vocab}.
_EMBD_SHAPE_EXEMPT = frozenset({"wavtokenizer-dec"})
# llama.cpp checks rope.dimension_count == head size for these ("invalid n_rot").
_NROT_MUST_MATCH = frozenset({"llama", "deci", "falcon"})
# Architectures for which validate_gguf knows the exact tensor set llama.cpp creates.
_EXACT_LAYOUT_ARCHS = frozenset({"llama", "qwen2"})

_BLK_RE = re.compile(r"^blk\.([0-9]+)\.")


# --------------------------------------------------------------------------------------
# Data classes
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's header entry. ``offset`` is absolute (from the start of the file)."""

    name: str
    shape: tuple[int, ...]  # ggml order: shape[0] is the row length (ne[0])
    ggml_type: int
    type_name: str
    offset: int
    n_bytes: int
    info_offset: int = -1  # where this tensor's info record starts in the header

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class GGUFArray:
    """A metadata array that ``read_gguf(lazy_arrays=True)`` left unread.

    ``offset`` is where its first element starts; ``load_array`` reads it.
    """

    element_type: int
    length: int
    offset: int

    def __len__(self) -> int:
        return self.length


@dataclass
class GGUFFile:
    """The parsed header of a GGUF file."""

    path: Path
    file_size: int
    version: int
    alignment: int
    data_offset: int
    metadata: dict[str, object]
    tensors: list[TensorInfo]
    #: key -> (GGUFValueType, element GGUFValueType for arrays else None)
    value_types: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    #: key -> byte offset where its key/value record starts
    kv_offsets: dict[str, int] = field(default_factory=dict)
    #: end of the tensor infos (the data section starts at the next aligned offset)
    header_end: int = 0

    def get(self, key: str, default: object = None) -> object:
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    def tensor(self, name: str) -> TensorInfo | None:
        for t in self.tensors:
            if t.name == name:
                return t
        return None


# --------------------------------------------------------------------------------------
# Message helpers
# --------------------------------------------------------------------------------------


def _show(text: object, limit: int = 80) -> str:
    """A file-derived string made safe for a one-line message: non-printable characters
    (newlines, escape sequences, ...) escaped, quotes escaped, shortened."""
    out = []
    for ch in str(text):
        if ch == "'" or ch == "\\":
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape", errors="backslashreplace").decode("ascii"))
    s = "".join(out)
    if len(s) > limit:
        s = s[: limit - 3] + "..."
    return s


def _label(path: Path) -> str:
    return _show(path.name or str(path), 200)


def _n(x: int) -> str:
    return f"{x:,}"


def _describe_magic(head: bytes) -> str:
    """Say what a file that is not a GGUF looks like, from its first bytes."""
    shown = repr(head[:8])
    hints = [
        (b"PK\x03\x04", "a zip archive"),
        (b"PK\x05\x06", "an empty zip archive"),
        (b"\x1f\x8b", "a gzip file"),
        (b"BZh", "a bzip2 file"),
        (b"\xfd7zXZ", "an xz file"),
        (b"7z\xbc\xaf", "a 7z archive"),
        (b"\x28\xb5\x2f\xfd", "a zstd file"),
        (b"lmgg", "an old GGML model (convert it to GGUF)"),
        (b"fmgg", "an old GGMF model (convert it to GGUF)"),
        (b"tjgg", "an old GGJT model (convert it to GGUF)"),
        (b"\x89HDF", "an HDF5 file"),
        (b"\x80", "a Python pickle"),
        (b"version https://git-lfs", "a Git LFS pointer, not the model itself"),
        (b"\x7fELF", "an executable"),
        (b"%PDF", "a PDF document"),
    ]
    for sig, what in hints:
        if head.startswith(sig):
            return f"magic {shown}: looks like {what}"
    low = head.lstrip()[:16].lower()
    if low.startswith((b"<!doctype", b"<html", b"<head", b"<?xml", b"<body")):
        return f"magic {shown}: looks like an HTML page (a failed download?)"
    if low.startswith((b"{", b"[")):
        return f"magic {shown}: looks like JSON"
    if len(head) >= 10 and head[8:10] == b'{"':
        return f"magic {shown}: looks like a safetensors file"
    if head and all(32 <= c < 127 or c in (9, 10, 13) for c in head[:16]):
        return f"magic {shown}: looks like a text file"
    return f"magic {shown}"


# --------------------------------------------------------------------------------------
# The bounded reader
# --------------------------------------------------------------------------------------


class _Reader:
    """Sequential reader over an open file with a sliding read-ahead window.

    Every read first checks that the bytes exist (``pos + n <= size``); lengths read
    from the file are checked against the bytes left before anything is allocated.
    ``where`` names what is being read, for error messages.
    """

    def __init__(self, f: BinaryIO, size: int, label: str, max_array_len: int) -> None:
        self.f = f
        self.size = size
        self.label = label
        self.max_array_len = max_array_len
        self.buf = b""
        self.base = 0
        self.pos = 0
        self.where = "the header"

    # -- errors -------------------------------------------------------------------------

    def fail(self, problem: str) -> ModelFileError:
        return ModelFileError(f"{self.label}: {problem}")

    def _truncated(self, n: int) -> ModelFileError:
        return self.fail(
            f"truncated: {self.where} needs {_n(n)} bytes at byte {_n(self.pos)} "
            f"but the file has {_n(self.size)} bytes"
        )

    @property
    def left(self) -> int:
        return self.size - self.pos

    # -- raw access -----------------------------------------------------------------------

    def need(self, n: int) -> int:
        """Make ``n`` bytes at ``pos`` available in ``buf``; return their index there."""
        if n > self.size - self.pos:
            raise self._truncated(n)
        lo = self.pos - self.base
        if 0 <= lo and lo + n <= len(self.buf):
            return lo
        self.f.seek(self.pos)
        want = min(max(n, _CHUNK), self.size - self.pos)
        data = self.f.read(want)
        if len(data) < n:
            raise self.fail(f"the file changed while it was read (ended early at byte {_n(self.pos + len(data))})")
        self.buf = data
        self.base = self.pos
        return 0

    def u32(self) -> int:
        lo = self.need(4)
        self.pos += 4
        return _U32.unpack_from(self.buf, lo)[0]

    def u64(self) -> int:
        lo = self.need(8)
        self.pos += 8
        return _U64.unpack_from(self.buf, lo)[0]

    def check_length(self, n: int, item_bytes: int, what: str, at: int) -> None:
        """A length read at byte ``at`` must fit (``n * item_bytes``) in the bytes left."""
        if n * item_bytes > self.left:
            raise self.fail(
                f"corrupt or truncated: {what} at byte {_n(at)} in {self.where} is {_n(n)}, "
                f"but only {_n(self.left)} bytes are left in the file"
            )

    def raw_string(self) -> bytes:
        at = self.pos
        n = self.u64()
        self.check_length(n, 1, "string length", at)
        if n > MAX_STRING_BYTES:
            raise self.fail(f"string of {_n(n)} bytes at byte {_n(at)} in {self.where} exceeds the limit of {_n(MAX_STRING_BYTES)}")
        lo = self.need(n)
        self.pos += n
        return self.buf[lo : lo + n]

    # -- values ---------------------------------------------------------------------------

    def scalar(self, vtype: int) -> object:
        s = _SCALAR_STRUCTS[vtype]
        lo = self.need(s.size)
        self.pos += s.size
        v = s.unpack_from(self.buf, lo)[0]
        return v != 0 if vtype == VT.BOOL else v

    def value(self, vtype: int, lazy: bool) -> tuple[object, int | None]:
        """Read one value of ``vtype``; return it and the array element type (or None)."""
        if vtype == VT.STRING:
            return self.raw_string().decode("utf-8", "replace"), None
        if vtype == VT.ARRAY:
            etype, value = self.array(1, lazy)
            return value, etype
        return self.scalar(vtype), None

    def array(self, depth: int, lazy: bool) -> tuple[int, object]:
        at = self.pos
        etype = self.u32()
        if etype not in _KNOWN_VALUE_TYPES:
            raise self.fail(f"{self.where} is an array of unknown value type {etype} (at byte {_n(at)})")
        if etype == VT.ARRAY and depth >= MAX_ARRAY_DEPTH:
            raise self.fail(f"{self.where} nests arrays deeper than {MAX_ARRAY_DEPTH} levels")
        at = self.pos
        n = self.u64()
        if n > self.max_array_len:
            raise self.fail(f"{self.where} is an array of {_n(n)} elements (at byte {_n(at)}); the limit is {_n(self.max_array_len)}")
        if etype == VT.STRING:
            self.check_length(n, 8, "array length", at)
            return etype, self.string_array(n, lazy and n > LAZY_ARRAY_MIN)
        if etype == VT.ARRAY:
            self.check_length(n, 12, "array length", at)
            return etype, [self.array(depth + 1, lazy)[1] for _ in range(n)]
        size = _SCALAR_STRUCTS[etype].size
        self.check_length(n, size, "array length", at)
        if lazy and n > LAZY_ARRAY_MIN:
            ref = GGUFArray(etype, n, self.pos)
            self.pos += n * size
            return etype, ref
        return etype, self.numeric_array(etype, n)

    def numeric_array(self, etype: int, n: int) -> list:
        size = _SCALAR_STRUCTS[etype].size
        lo = self.need(n * size)
        arr = np.frombuffer(self.buf, dtype=_NUMPY_DTYPES[etype], count=n, offset=lo)
        self.pos += n * size
        if etype == VT.BOOL:
            return (arr != 0).tolist()
        return arr.tolist()

    def string_array(self, n: int, lazy: bool) -> list[str] | GGUFArray:
        """Read ``n`` length-prefixed strings (the hot loop for vocabularies).

        The fast path handles strings wholly inside the read-ahead window; the slow path
        checks the length against the file and the string limit, then refills.
        """
        start = self.pos
        out: list[str] = []
        append = out.append
        unpack = _U64.unpack_from
        buf, base = self.buf, self.base
        blen = len(buf)
        pos = self.pos
        for i in range(n):
            lo = pos - base
            if lo + 8 > blen:
                self.pos = pos
                lo = self.need(8)
                buf, base, blen = self.buf, self.base, len(self.buf)
            ln = unpack(buf, lo)[0]
            lo += 8
            end = lo + ln
            if end > blen or ln > MAX_STRING_BYTES:
                left = self.size - pos - 8
                if ln > left:
                    self.pos = pos
                    raise self.fail(
                        f"corrupt or truncated: string length at byte {_n(pos)} in {self.where} (element {i}) "
                        f"is {_n(ln)}, but only {_n(left)} bytes are left in the file"
                    )
                if ln > MAX_STRING_BYTES:
                    raise self.fail(f"string of {_n(ln)} bytes at byte {_n(pos)} in {self.where} exceeds the limit of {_n(MAX_STRING_BYTES)}")
                if not lazy:
                    self.pos = pos + 8
                    lo = self.need(ln)
                    buf, base, blen = self.buf, self.base, len(self.buf)
                    end = lo + ln
            if not lazy:
                append(buf[lo:end].decode("utf-8", "replace"))
            pos += 8 + ln
        self.pos = pos
        if lazy:
            return GGUFArray(VT.STRING, n, start)
        return out


# --------------------------------------------------------------------------------------
# read_gguf
# --------------------------------------------------------------------------------------


def _open(path: Path, label: str) -> tuple[BinaryIO, int]:
    """Open ``path`` for reading; turn OS problems into one-line ModelFileErrors."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ModelFileError(f"{label}: no such file") from None
    except NotADirectoryError:
        raise ModelFileError(f"{label}: no such file (a parent in the path is not a directory)") from None
    except PermissionError:
        raise ModelFileError(f"{label}: permission denied") from None
    except OSError as e:
        raise ModelFileError(f"{label}: cannot read the file ({_show(e.strerror or e)})") from None
    except ValueError:  # e.g. a NUL byte in the path
        raise ModelFileError(f"{label}: invalid file name") from None
    if stat.S_ISDIR(st.st_mode):
        raise ModelFileError(f"{label}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise ModelFileError(f"{label}: is not a regular file")
    if st.st_size == 0:
        raise ModelFileError(f"{label}: file is empty (0 bytes)")
    try:
        f = open(path, "rb")
    except PermissionError:
        raise ModelFileError(f"{label}: permission denied") from None
    except IsADirectoryError:
        raise ModelFileError(f"{label}: is a directory, not a file") from None
    except FileNotFoundError:
        raise ModelFileError(f"{label}: no such file") from None
    except OSError as e:
        raise ModelFileError(f"{label}: cannot read the file ({_show(e.strerror or e)})") from None
    return f, st.st_size


def read_gguf(
    path: str | os.PathLike[str],
    *,
    max_array_len: int = DEFAULT_MAX_ARRAY_LEN,
    lazy_arrays: bool = False,
) -> GGUFFile:
    """Parse and structurally validate the header of the GGUF file at ``path``.

    Checks, in file order (each failure raises ``ModelFileError``):

    * the path exists, is a readable regular file and is not empty;
    * the magic is ``GGUF`` (otherwise the message shows the first bytes and what they
      look like) and the version is 2 or 3 (v1 and big-endian files are named as such);
    * the tensor and key/value counts are at most 1,000,000 each and the file is large
      enough to hold that many minimal records -- before any loop runs;
    * every key is non-empty, has no NUL byte and appears once; every value type is a
      known ``GGUFValueType``; every string and array length fits in the bytes left in
      the file (strings at most ``MAX_STRING_BYTES``, arrays at most ``max_array_len``
      elements, arrays nested at most ``MAX_ARRAY_DEPTH`` deep);
    * ``general.alignment``, if present, is a uint32 power of two;
    * every tensor name is 1..63 bytes without NUL and unique; it has 1..4 dimensions,
      each >= 1, whose product fits in int64; its ggml type is known and ``ne[0]`` is a
      multiple of the type's block size; its data offset is a multiple of the alignment;
    * the data section (the aligned offset after the tensor infos) starts inside the
      file, every tensor's data lies inside the file, and no two tensors overlap.

    Tensor data is never read. With ``lazy_arrays=True`` arrays longer than
    ``LAZY_ARRAY_MIN`` are skipped (still bounds-checked) and stored as ``GGUFArray``.
    """
    path = Path(path)
    label = _label(path)
    f, size = _open(path, label)
    try:
        return _parse(f, path, size, label, max_array_len, lazy_arrays)
    except OSError as e:
        raise ModelFileError(f"{label}: cannot read the file ({_show(e.strerror or e)})") from None
    finally:
        f.close()


def _parse(f: BinaryIO, path: Path, size: int, label: str, max_array_len: int, lazy: bool) -> GGUFFile:
    r = _Reader(f, size, label, max_array_len)

    # -- magic and version ------------------------------------------------------------------
    head = f.read(min(size, 64))
    if not head.startswith(GGUF_MAGIC):
        if len(head) < len(GGUF_MAGIC) and GGUF_MAGIC.startswith(head):
            raise r.fail(f"truncated: the file has only {len(head)} bytes")
        raise r.fail(f"not a GGUF file ({_describe_magic(head)})")
    r.pos = 4
    r.where = "the header"
    version = r.u32()
    if version == 1:
        raise r.fail("GGUF version 1 is no longer supported by llama.cpp; re-convert the model")
    if version != 0 and version & 0xFFFF == 0:
        raise r.fail(f"GGUF version field is {version:#x}: a big-endian file, which llama.cpp cannot load here")
    if version not in SUPPORTED_VERSIONS:
        raise r.fail(f"unsupported GGUF version {version} (supported: 2 and 3)")

    n_tensors = r.u64()
    n_kv = r.u64()
    if n_tensors > MAX_TENSORS:
        raise r.fail(f"header claims {_n(n_tensors)} tensors; the limit is {_n(MAX_TENSORS)} (corrupt header)")
    if n_kv > MAX_KV:
        raise r.fail(f"header claims {_n(n_kv)} metadata entries; the limit is {_n(MAX_KV)} (corrupt header)")
    need = n_kv * _MIN_KV_BYTES + n_tensors * _MIN_TENSOR_INFO_BYTES
    if need > r.left:
        raise r.fail(
            f"corrupt or truncated: header claims {_n(n_kv)} metadata entries and {_n(n_tensors)} tensors, "
            f"which need at least {_n(need)} bytes, but only {_n(r.left)} bytes follow"
        )

    # -- metadata -------------------------------------------------------------------------
    metadata: dict[str, object] = {}
    value_types: dict[str, tuple[int, int | None]] = {}
    kv_offsets: dict[str, int] = {}
    for i in range(n_kv):
        start = r.pos
        r.where = f"metadata entry #{i}"
        raw = r.raw_string()
        if not raw:
            raise r.fail(f"metadata entry #{i} has an empty key (at byte {_n(start)})")
        if b"\0" in raw:
            raise r.fail(f"metadata key '{_show(raw.decode('utf-8', 'replace'))}' contains a NUL byte")
        key = raw.decode("utf-8", "replace")
        if key in metadata:
            raise r.fail(f"duplicate metadata key '{_show(key)}'")
        r.where = f"metadata key '{_show(key)}'"
        at = r.pos
        vtype = r.u32()
        if vtype not in _KNOWN_VALUE_TYPES:
            raise r.fail(f"metadata key '{_show(key)}' has unknown value type {vtype} (at byte {_n(at)})")
        value, etype = r.value(vtype, lazy)
        metadata[key] = value
        value_types[key] = (vtype, etype)
        kv_offsets[key] = start

    alignment = DEFAULT_ALIGNMENT
    akey = gguf.Keys.General.ALIGNMENT
    if akey in metadata:
        if value_types[akey] != (VT.UINT32, None):
            raise r.fail(f"{akey} must be a uint32, not {_type_name(*value_types[akey])}")
        alignment = int(metadata[akey])  # type: ignore[arg-type]
        if alignment == 0 or alignment & (alignment - 1):
            raise r.fail(f"{akey} is {alignment}, which is not a power of two")

    # -- tensor infos ---------------------------------------------------------------------
    rel: list[tuple[str, tuple[int, ...], int, str, int, int, int]] = []
    seen: set[str] = set()
    for i in range(n_tensors):
        start = r.pos
        r.where = f"tensor info #{i}"
        raw = r.raw_string()
        if not raw:
            raise r.fail(f"tensor #{i} has an empty name (at byte {_n(start)})")
        if len(raw) >= GGML_MAX_NAME:
            raise r.fail(f"tensor #{i} name '{_show(raw.decode('utf-8', 'replace'))}' is {len(raw)} bytes; ggml allows at most {GGML_MAX_NAME - 1}")
        if b"\0" in raw:
            raise r.fail(f"tensor #{i} name '{_show(raw.decode('utf-8', 'replace'))}' contains a NUL byte")
        name = raw.decode("utf-8", "replace")
        if name in seen:
            raise r.fail(f"duplicate tensor name '{_show(name)}'")
        seen.add(name)
        r.where = f"tensor '{_show(name)}'"
        n_dims = r.u32()
        if not 1 <= n_dims <= GGML_MAX_DIMS:
            raise r.fail(f"tensor '{_show(name)}' has {n_dims} dimensions; ggml supports 1 to {GGML_MAX_DIMS}")
        dims = []
        n_elements = 1
        for _ in range(n_dims):
            d = r.u64()
            if d < 1 or d > INT64_MAX:
                raise r.fail(f"tensor '{_show(name)}' has an invalid dimension {_n(d)}")
            dims.append(d)
            n_elements *= d
            if n_elements >= INT64_MAX:
                raise r.fail(f"tensor '{_show(name)}' has too many elements ({' x '.join(_n(x) for x in dims)}...)")
        at = r.pos
        ttype = r.u32()
        if ttype not in GGML_TYPES:
            raise r.fail(f"tensor '{_show(name)}' has unknown ggml type {ttype} (at byte {_n(at)})")
        tname, block, tsize = GGML_TYPES[ttype]
        if dims[0] % block:
            raise r.fail(f"tensor '{_show(name)}' of type {tname} has rows of {_n(dims[0])} elements, not a multiple of the block size {block}")
        n_bytes = n_elements // block * tsize
        offset = r.u64()
        if offset % alignment:
            raise r.fail(f"tensor '{_show(name)}' data offset {_n(offset)} is not a multiple of the alignment {alignment}")
        rel.append((name, tuple(dims), ttype, tname, offset, n_bytes, start))
    header_end = r.pos

    # -- data section ---------------------------------------------------------------------
    data_offset = header_end
    if n_tensors:
        data_offset = (header_end + alignment - 1) // alignment * alignment
    if data_offset > size:
        raise r.fail(f"truncated: the tensor data section starts at byte {_n(data_offset)} but the file has {_n(size)} bytes")
    tensors = [
        TensorInfo(name, dims, ttype, tname, data_offset + off, n_bytes, start)
        for name, dims, ttype, tname, off, n_bytes, start in rel
    ]
    for t in tensors:
        if t.offset + t.n_bytes > size:
            if t.offset >= size:
                raise r.fail(f"truncated: tensor '{_show(t.name)}' data starts at byte {_n(t.offset)} but the file has {_n(size)} bytes")
            raise r.fail(f"truncated: tensor '{_show(t.name)}' data ends at byte {_n(t.offset + t.n_bytes)} but the file has {_n(size)} bytes")
    ordered = sorted(tensors, key=lambda t: t.offset)
    for a, b in zip(ordered, ordered[1:]):
        if b.offset < a.offset + a.n_bytes:
            raise r.fail(f"tensors '{_show(a.name)}' and '{_show(b.name)}' overlap in the file")

    return GGUFFile(
        path=path,
        file_size=size,
        version=version,
        alignment=alignment,
        data_offset=data_offset,
        metadata=metadata,
        tensors=tensors,
        value_types=value_types,
        kv_offsets=kv_offsets,
        header_end=header_end,
    )


def load_array(g: GGUFFile, key: str) -> object:
    """The value of ``key``, reading it from the file if it was left lazy."""
    value = g.metadata.get(key)
    if not isinstance(value, GGUFArray):
        return value
    label = _label(g.path)
    f, size = _open(g.path, label)
    try:
        if size != g.file_size:
            raise ModelFileError(f"{label}: the file changed since it was read")
        r = _Reader(f, size, label, max(DEFAULT_MAX_ARRAY_LEN, value.length))
        r.pos = value.offset
        r.where = f"metadata key '{_show(key)}'"
        if value.element_type == VT.STRING:
            return r.string_array(value.length, False)
        return r.numeric_array(value.element_type, value.length)
    except OSError as e:
        raise ModelFileError(f"{label}: cannot read the file ({_show(e.strerror or e)})") from None
    finally:
        f.close()


# --------------------------------------------------------------------------------------
# validate_gguf
# --------------------------------------------------------------------------------------

# Expected metadata types of the keys llama.cpp reads. llama.cpp's getters require the
# exact GGUF type (a uint32 key stored as int32 is "key ... has wrong type"), and some
# (tokenizer arrays read through gguf_get_arr_*) abort the process on a wrong type.
# Specs: "u16", "u32", "f32", "bool", "str", "layers" (uint32 or an int32/uint32 array
# with one value per layer), "ints" (int32/uint32 array), "arr_str", "arr_f32",
# "arr_i32", "arr_bytes" (array of any non-string type).
_K = gguf.Keys
_GENERAL_KEY_TYPES: dict[str, str] = {
    _K.General.ARCHITECTURE: "str",
    _K.General.NAME: "str",
    _K.General.FILE_TYPE: "u32",
    _K.General.ALIGNMENT: "u32",
    "split.count": "u16",
    _K.Tokenizer.MODEL: "str",
    _K.Tokenizer.PRE: "str",
    _K.Tokenizer.TOKEN_TYPE_COUNT: "u32",
    _K.Tokenizer.ADD_PREFIX: "bool",
    _K.Tokenizer.REMOVE_EXTRA_WS: "bool",
    _K.Tokenizer.LIST: "arr_str",
    _K.Tokenizer.SCORES: "arr_f32",
    _K.Tokenizer.TOKEN_TYPE: "arr_i32",
    _K.Tokenizer.MERGES: "arr_str",
    _K.Tokenizer.ADD_BOS: "bool",
    _K.Tokenizer.ADD_EOS: "bool",
    _K.Tokenizer.ADD_SEP: "bool",
    _K.Tokenizer.PRECOMPILED_CHARSMAP: "arr_bytes",
    _K.Tokenizer.CHAT_TEMPLATE: "str",
}
_SPECIAL_TOKEN_KEYS = (
    _K.Tokenizer.BOS_ID, _K.Tokenizer.EOS_ID, _K.Tokenizer.EOT_ID, _K.Tokenizer.EOM_ID,
    _K.Tokenizer.UNK_ID, _K.Tokenizer.SEP_ID, _K.Tokenizer.PAD_ID, _K.Tokenizer.MASK_ID,
    _K.Tokenizer.FIM_PRE_ID, _K.Tokenizer.FIM_SUF_ID, _K.Tokenizer.FIM_MID_ID,
    _K.Tokenizer.FIM_PAD_ID, _K.Tokenizer.FIM_REP_ID, _K.Tokenizer.FIM_SEP_ID,
    _K.Tokenizer.PREFIX_ID, _K.Tokenizer.SUFFIX_ID, _K.Tokenizer.MIDDLE_ID,
)
for _key in _SPECIAL_TOKEN_KEYS:
    _GENERAL_KEY_TYPES[_key] = "u32"

_ARCH_KEY_TYPES: dict[str, str] = {
    _K.LLM.CONTEXT_LENGTH: "u32",
    _K.LLM.EMBEDDING_LENGTH: "u32",
    _K.LLM.BLOCK_COUNT: "u32",
    _K.LLM.VOCAB_SIZE: "u32",
    _K.LLM.FEED_FORWARD_LENGTH: "layers",
    _K.LLM.EXPERT_COUNT: "u32",
    _K.LLM.EXPERT_USED_COUNT: "u32",
    _K.LLM.EXPERT_SHARED_COUNT: "u32",
    _K.LLM.EXPERT_GROUP_COUNT: "u32",
    _K.LLM.EXPERT_GROUP_USED_COUNT: "u32",
    _K.LLM.EXPERT_FEED_FORWARD_LENGTH: "u32",
    _K.LLM.EXPERT_WEIGHTS_SCALE: "f32",
    _K.LLM.EXPERT_WEIGHTS_NORM: "bool",
    _K.LLM.EXPERT_GATING_FUNC: "u32",
    _K.LLM.POOLING_TYPE: "u32",
    _K.LLM.LOGIT_SCALE: "f32",
    _K.LLM.DECODER_START_TOKEN_ID: "u32",
    _K.LLM.ATTN_LOGIT_SOFTCAPPING: "f32",
    _K.LLM.FINAL_LOGIT_SOFTCAPPING: "f32",
    _K.LLM.RESIDUAL_SCALE: "f32",
    _K.LLM.EMBEDDING_SCALE: "f32",
    _K.LLM.USE_PARALLEL_RESIDUAL: "bool",
    _K.LLM.LEADING_DENSE_BLOCK_COUNT: "u32",
    _K.LLM.NEXTN_PREDICT_LAYERS: "u32",
    _K.Attention.HEAD_COUNT: "layers",
    _K.Attention.HEAD_COUNT_KV: "layers",
    _K.Attention.KEY_LENGTH: "u32",
    _K.Attention.VALUE_LENGTH: "u32",
    _K.Attention.LAYERNORM_EPS: "f32",
    _K.Attention.LAYERNORM_RMS_EPS: "f32",
    _K.Attention.CAUSAL: "bool",
    _K.Attention.SLIDING_WINDOW: "u32",
    _K.Attention.CLAMP_KQV: "f32",
    _K.Attention.MAX_ALIBI_BIAS: "f32",
    _K.Attention.Q_LORA_RANK: "u32",
    _K.Attention.KV_LORA_RANK: "u32",
    _K.Attention.SCALE: "f32",
    _K.Rope.DIMENSION_COUNT: "u32",
    _K.Rope.DIMENSION_SECTIONS: "ints",
    _K.Rope.FREQ_BASE: "f32",
    _K.Rope.FREQ_BASE_SWA: "f32",
    _K.Rope.SCALING_TYPE: "str",
    _K.Rope.SCALING_FACTOR: "f32",
    "{arch}.rope.scale_linear": "f32",
    _K.Rope.SCALING_ATTN_FACTOR: "f32",
    _K.Rope.SCALING_ORIG_CTX_LEN: "u32",
    _K.Rope.SCALING_FINETUNED: "bool",
    _K.Rope.SCALING_YARN_LOG_MUL: "f32",
}

# Architecture-specific keys llama.cpp requires (get_key without "required = false").
_ARCH_REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "llama": (_K.Attention.LAYERNORM_RMS_EPS,),
    "qwen2": (_K.Attention.LAYERNORM_RMS_EPS,),
}

_INT_ARRAY_TYPES = (VT.INT32, VT.UINT32)


class _Validator:
    """The semantic checks of ``validate_gguf`` over a parsed header."""

    def __init__(self, g: GGUFFile) -> None:
        self.g = g
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
            return vtype == VT.UINT32 or (vtype == VT.ARRAY and etype in _INT_ARRAY_TYPES)
        if spec == "ints":
            return vtype == VT.ARRAY and etype in _INT_ARRAY_TYPES
        if spec == "arr_str":
            return vtype == VT.ARRAY and etype == VT.STRING
        if spec == "arr_f32":
            return vtype == VT.ARRAY and etype == VT.FLOAT32
        if spec == "arr_i32":
            return vtype == VT.ARRAY and etype == VT.INT32
        if spec == "arr_bytes":
            return vtype == VT.ARRAY and etype not in (VT.STRING, VT.ARRAY)
        raise AssertionError(spec)

    _SPEC_NAMES = {
        "u32": "a uint32", "u16": "a uint16", "f32": "a float32",
        "bool": "a bool", "str": "a string", "layers": "a uint32 or an array of int32/uint32",
        "ints": "an array of int32/uint32", "arr_str": "an array of strings",
        "arr_f32": "an array of float32", "arr_i32": "an array of int32",
        "arr_bytes": "an array of numbers",
    }

    def check_type(self, key: str, spec: str) -> None:
        if key in self.md and not self.type_ok(key, spec):
            raise self.fail(
                f"metadata key '{_show(key)}' is {_type_name(*self.types[key])}; "
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
        if isinstance(value, list):
            if len(value) != self.n_layer:
                raise self.fail(f"metadata key '{_show(key)}' has {len(value)} values but the model has {self.n_layer} layers")
            if any(v < 0 for v in value):
                raise self.fail(f"metadata key '{_show(key)}' has a negative value")
            return [int(v) for v in value]
        return [int(value)] * self.n_layer  # type: ignore[call-overload]

    # -- the checks -------------------------------------------------------------------------

    def run(self) -> None:
        self.check_layout()
        self.check_nested_arrays()
        self.check_split()
        self.check_architecture()
        self.check_key_types()
        self.check_hparams()
        self.check_vocab()
        self.check_tensors()

    def check_layout(self) -> None:
        """llama.cpp requires tensor data in header order, each padded to the alignment
        (gguf_init_from_file: "tensor 'x' has offset N, expected M"), and ggml requires
        memory-mapped tensor data at 32-byte aligned addresses (an assertion, i.e. a
        crash, with general.alignment < 32).
        """
        g = self.g
        expected = 0
        for t in g.tensors:
            rel = t.offset - g.data_offset
            if rel != expected:
                raise self.fail(
                    f"tensor '{_show(t.name)}' data is at offset {_n(rel)} of the data section; llama.cpp "
                    f"requires {_n(expected)} (tensors stored in header order, padded to {g.alignment} bytes)"
                )
            expected += (t.n_bytes + g.alignment - 1) // g.alignment * g.alignment
            if t.offset % GGML_TENSOR_ALIGNMENT:
                raise self.fail(
                    f"tensor '{_show(t.name)}' data starts at byte {_n(t.offset)}, not a multiple of "
                    f"{GGML_TENSOR_ALIGNMENT}; llama.cpp aborts on such memory-mapped weights"
                )

    def check_nested_arrays(self) -> None:
        """llama.cpp's GGUF reader rejects arrays of arrays ("invalid GGUF type")."""
        for key, (vtype, etype) in self.types.items():
            if vtype == VT.ARRAY and etype == VT.ARRAY:
                raise self.fail(f"metadata key '{_show(key)}' is an array of arrays, which llama.cpp cannot read")

    def check_split(self) -> None:
        """A part of a split model cannot be loaded on its own."""
        self.check_type("split.count", "u16")
        count = self.md.get("split.count")
        if isinstance(count, int) and count > 1:
            raise self.fail(f"is one part of a model split into {count} files; merge the parts into one GGUF first")

    def check_architecture(self) -> None:
        """general.architecture is a string naming an architecture llama.cpp knows."""
        key = _K.General.ARCHITECTURE
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
        for key, spec in _GENERAL_KEY_TYPES.items():
            self.check_type(key, spec)
        for template, spec in _ARCH_KEY_TYPES.items():
            self.check_type(self.key(template), spec)
        rope = self.md.get(self.key(_K.Rope.SCALING_TYPE))
        if rope is not None and rope not in ROPE_SCALING_TYPES:
            raise self.fail(f"unknown rope scaling type '{_show(rope)}' (llama.cpp knows {', '.join(sorted(ROPE_SCALING_TYPES))})")

    def check_hparams(self) -> None:
        """The hyper-parameters llama.cpp's load_hparams requires, with sane values."""
        why = f" (required for {self.arch})"
        self.require(self.key(_K.LLM.CONTEXT_LENGTH), "u32", why)
        self.n_embd = int(self.require(self.key(_K.LLM.EMBEDDING_LENGTH), "u32", why))  # type: ignore[call-overload]
        self.n_layer = int(self.require(self.key(_K.LLM.BLOCK_COUNT), "u32", why))  # type: ignore[call-overload]
        for key in _ARCH_REQUIRED_KEYS.get(self.arch, ()):
            self.require(self.key(key), _ARCH_KEY_TYPES[key], why)
        if self.n_embd < 1:
            raise self.fail(f"{self.key(_K.LLM.EMBEDDING_LENGTH)} is 0")
        if not 1 <= self.n_layer <= LLAMA_MAX_LAYERS:
            raise self.fail(f"{self.key(_K.LLM.BLOCK_COUNT)} is {self.n_layer}; llama.cpp supports 1 to {LLAMA_MAX_LAYERS} layers")

        n_expert = int(self.md.get(self.key(_K.LLM.EXPERT_COUNT), 0))  # type: ignore[call-overload]
        n_used = int(self.md.get(self.key(_K.LLM.EXPERT_USED_COUNT), 0))  # type: ignore[call-overload]
        if n_expert > LLAMA_MAX_EXPERTS:
            raise self.fail(f"{self.key(_K.LLM.EXPERT_COUNT)} is {n_expert}; llama.cpp supports at most {LLAMA_MAX_EXPERTS}")
        if n_used > n_expert or (n_expert > 0) != (n_used > 0):
            raise self.fail(f"inconsistent expert counts: {n_used} used of {n_expert}")
        self.n_expert = n_expert

        head_key = self.key(_K.Attention.HEAD_COUNT)
        if self.arch not in _NO_HEADS_ARCHS and head_key not in self.md:
            raise self.fail(f"missing metadata key '{head_key}'{why}")
        self.n_ff = self.per_layer(self.key(_K.LLM.FEED_FORWARD_LENGTH), [0] * self.n_layer)
        self.n_head = self.per_layer(head_key, [0] * self.n_layer)
        self.n_head_kv = self.per_layer(self.key(_K.Attention.HEAD_COUNT_KV), list(self.n_head))
        n_head0 = self.n_head[0]  # llama.cpp derives the head size from layer 0
        if self.arch not in _NO_HEADS_ARCHS and not any(self.n_head):
            raise self.fail(f"{head_key} is 0")
        key_len = self.md.get(self.key(_K.Attention.KEY_LENGTH))
        val_len = self.md.get(self.key(_K.Attention.VALUE_LENGTH))
        self.head_k = self.head_v = 0
        if n_head0 > 0:
            if key_len is None and self.n_embd % n_head0:
                raise self.fail(f"{head_key} ({n_head0}) does not divide the embedding length ({self.n_embd})")
            self.head_k = int(key_len) if key_len is not None else self.n_embd // n_head0  # type: ignore[call-overload]
            self.head_v = int(val_len) if val_len is not None else self.n_embd // n_head0  # type: ignore[call-overload]
            if self.head_k < 1 or self.head_v < 1:
                raise self.fail("attention key/value length is 0")
        for il, (h, hkv) in enumerate(zip(self.n_head, self.n_head_kv)):
            if h and hkv and h % hkv:
                raise self.fail(f"layer {il}: {self.key(_K.Attention.HEAD_COUNT_KV)} ({hkv}) does not divide {head_key} ({h})")
            if hkv > h:
                raise self.fail(f"layer {il}: more key/value heads ({hkv}) than attention heads ({h})")
        self.n_rot = self.head_k
        rot = self.md.get(self.key(_K.Rope.DIMENSION_COUNT))
        if rot is not None:
            self.n_rot = int(rot)  # type: ignore[call-overload]
        if n_head0 and self.arch in _NROT_MUST_MATCH and self.n_rot != self.head_k:
            raise self.fail(f"{self.key(_K.Rope.DIMENSION_COUNT)} is {self.n_rot} but the head size is {self.head_k} (llama.cpp: invalid n_rot)")

    def check_vocab(self) -> None:
        """The tokenizer metadata llama.cpp's vocabulary loader reads (and can abort on)."""
        T = _K.Tokenizer
        model = self.require(T.MODEL, "str", " (llama.cpp needs a tokenizer)")
        if model not in TOKENIZER_MODELS:
            raise self.fail(f"unknown tokenizer model '{_show(model)}' (tokenizer.ggml.model)")
        vocab_size = self.md.get(self.key(_K.LLM.VOCAB_SIZE))
        if model in ("none", "no_vocab"):
            self.n_vocab = int(vocab_size) if vocab_size is not None else None  # type: ignore[call-overload]
            return
        tokens = self.require(T.LIST, "arr_str", " (the vocabulary)")
        assert isinstance(tokens, list)
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
        if model == "t5" and T.PRECOMPILED_CHARSMAP in self.md and len(self.md[T.PRECOMPILED_CHARSMAP]) < 4:  # type: ignore[arg-type]
            raise self.fail(f"{T.PRECOMPILED_CHARSMAP} is too short")
        self.check_token_texts(tokens, str(model))
        if model == "plamo2":
            self.check_plamo2_bytes(tokens)
        for key in (T.BOS_ID, T.EOS_ID):
            tid = self.md.get(key)
            if tid is not None and tid >= n_tokens:  # type: ignore[operator]
                raise self.fail(f"{key} is {tid} but the vocabulary has {_n(n_tokens)} tokens")
        self.n_vocab = int(vocab_size) if vocab_size is not None else n_tokens  # type: ignore[call-overload]
        if vocab_size is not None and vocab_size != n_tokens:
            raise self.fail(f"{self.key(_K.LLM.VOCAB_SIZE)} is {_n(vocab_size)} but tokenizer.ggml.tokens has {_n(n_tokens)} tokens")  # type: ignore[arg-type]

    def check_token_texts(self, tokens: list[str], model: str) -> None:
        """Token texts must be unique (llama.cpp asserts id_to_token.size() ==
        token_to_id.size() and aborts otherwise); byte tokens must look like <0xNN>.

        llama.cpp reads each token as a C string, so a text ends at its first NUL byte,
        and an empty text becomes "[EMPTY_<id>]".
        """
        texts = tokens
        if any("\0" in t or not t for t in tokens):
            texts = [t.partition("\0")[0] for t in tokens]
            texts = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(texts)]
        if len(set(texts)) != len(texts):
            first: dict[str, int] = {}
            for i, t in enumerate(texts):
                if t in first:
                    if "\ufffd" in t and self.raw_tokens_differ(first[t], i):
                        continue
                    raise self.fail(f"duplicate token '{_show(t)}' (ids {first[t]} and {i}) in tokenizer.ggml.tokens")
                first[t] = i
        types = self.md.get(_K.Tokenizer.TOKEN_TYPE)
        if isinstance(types, list) and TOKEN_TYPE_BYTE in types:
            for i, ttype in enumerate(types):
                if ttype != TOKEN_TYPE_BYTE:
                    continue
                if model == "bert":
                    raise self.fail(f"token {i} is a byte token, which a bert vocabulary cannot have")
                if model in ("llama", "t5") and len(texts[i].encode("utf-8", "surrogatepass")) < 3:
                    raise self.fail(f"byte token {i} '{_show(texts[i])}' is not of the form <0xNN>")

    def check_plamo2_bytes(self, tokens: list[str]) -> None:
        """The plamo2 tokenizer needs a byte token <0x00>..<0xFF> for every byte."""
        types = self.md.get(_K.Tokenizer.TOKEN_TYPE)
        have = set()
        if isinstance(types, list):
            have = {t for t, ty in zip(tokens, types) if ty == TOKEN_TYPE_BYTE}
        for b in range(256):
            if f"<0x{b:02X}>" not in have:
                raise self.fail(f"the plamo2 vocabulary has no byte token <0x{b:02X}>")

    def raw_tokens_differ(self, a: int, b: int) -> bool:
        """Compare two tokens' raw bytes (they decoded to the same text with U+FFFD)."""
        offset = self.g.kv_offsets[_K.Tokenizer.LIST]
        label = self.label
        f, size = _open(self.g.path, label)
        try:
            r = _Reader(f, size, label, DEFAULT_MAX_ARRAY_LEN)
            r.pos = offset
            r.raw_string()
            r.u32()
            r.u32()
            r.u64()
            raws = {}
            for i in range(max(a, b) + 1):
                s = r.raw_string()
                if i in (a, b):
                    raws[i] = s.partition(b"\0")[0]
            return raws[a] != raws[b]
        finally:
            f.close()

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
        if embd is None:
            raise self.fail("missing tensor 'token_embd.weight'")
        if self.arch not in _EMBD_SHAPE_EXEMPT:
            if embd.shape[0] != self.n_embd:
                raise self.fail(f"token_embd.weight has rows of {_n(embd.shape[0])} but the embedding length is {_n(self.n_embd)}")
            if self.n_vocab is not None:
                if len(embd.shape) < 2 or embd.shape[1] != self.n_vocab:
                    cols = embd.shape[1] if len(embd.shape) > 1 else 1
                    raise self.fail(f"token_embd.weight has {_n(cols)} rows but the vocabulary has {_n(self.n_vocab)} tokens")
                out = names.get("output.weight")
                if out is not None and (len(out.shape) < 2 or out.shape[1] != self.n_vocab):
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
        if self.arch in _EXACT_LAYOUT_ARCHS and self.n_expert == 0:
            self.check_exact_layout(names)

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
            rope_type = self.md.get(self.key(_K.Rope.SCALING_TYPE))
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
            if t.ggml_type in _INTEGER_GGML_TYPES:
                raise self.fail(f"tensor '{name}' has type {t.type_name}, which is not a weight type")
        for name in names:
            if name not in exp:
                raise self.fail(f"unexpected tensor '{_show(name)}' for the {self.arch} architecture (llama.cpp rejects unused tensors)")


def validate_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """``read_gguf`` plus the semantic checks llama.cpp's loader makes.

    A file that passes should load in llama.cpp (the agreement test checks this on
    hundreds of mutated files). On top of the structural checks of ``read_gguf``:

    * tensor data is laid out in header order, each tensor padded to the alignment
      (llama.cpp rejects any other layout); no metadata array holds arrays; the file is
      not one part of a split model;
    * ``general.architecture`` is a string naming an architecture llama.cpp knows;
    * every metadata key llama.cpp reads has the exact type it expects (uint32 block
      count, float32 rms epsilon, string array of tokens, ...); a rope scaling type is
      one llama.cpp knows;
    * ``{arch}.context_length``, ``.embedding_length`` and ``.block_count`` exist (and
      ``.attention.head_count`` for attention models); 1 <= block_count <= 512; per-layer
      arrays have one value per layer; head_count divides embedding_length (without an
      explicit key_length); head_count_kv divides head_count; expert counts are
      consistent; for llama the rope dimension equals the head size;
    * the tokenizer model is one llama.cpp knows; the tokens exist, are unique (llama.cpp
      aborts on duplicates) and scores/token types have one entry per token; a BPE
      vocabulary has merges and a known pre-tokenizer; byte tokens look like <0xNN>;
      bos/eos ids are inside the vocabulary; ``{arch}.vocab_size`` matches;
    * ``token_embd.weight`` exists with shape {embedding_length, n_vocab}; output.weight
      matches the vocabulary; the blk.N indices are exactly 0..block_count-1; for llama
      and qwen2 the exact tensor set and shapes llama.cpp creates, and nothing else.
    """
    g = read_gguf(path)
    _Validator(g).run()
    return g


# --------------------------------------------------------------------------------------
# Vocabulary, memory estimate, inspection
# --------------------------------------------------------------------------------------


def vocab_from_gguf(g: GGUFFile) -> dict:
    """The tokenizer described by the metadata (lazy arrays are read from the file)."""
    T = _K.Tokenizer
    tokens = load_array(g, T.LIST)
    token_list = [str(t) for t in tokens] if isinstance(tokens, list) else []

    def as_int(key: str) -> int | None:
        v = g.metadata.get(key)
        return int(v) if isinstance(v, int) and not isinstance(v, bool) else None

    def as_bool(key: str) -> bool | None:
        v = g.metadata.get(key)
        return bool(v) if isinstance(v, bool) else None

    model = g.metadata.get(T.MODEL)
    return {
        "type": model if isinstance(model, str) else None,
        "n_tokens": len(token_list),
        "tokens": token_list,
        "bos": as_int(T.BOS_ID),
        "eos": as_int(T.EOS_ID),
        "add_bos": as_bool(T.ADD_BOS),
        "add_eos": as_bool(T.ADD_EOS),
    }


def _layer_of(name: str) -> int | None:
    m = _BLK_RE.match(name)
    return int(m.group(1)) if m else None


def _md_int(g: GGUFFile, key: str) -> int | None:
    v = g.metadata.get(key)
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    return None


def _md_layers(g: GGUFFile, key: str, n_layer: int) -> list[int] | None:
    v = g.metadata.get(key)
    if isinstance(v, list) and len(v) == n_layer and all(isinstance(x, int) for x in v):
        return [int(x) for x in v]
    if isinstance(v, int) and not isinstance(v, bool):
        return [v] * n_layer
    return None


def estimate_memory(
    g: GGUFFile,
    n_ctx: int,
    n_gpu_layers: int = 0,
    cache_type_bytes: float = 2.0,
    n_batch: int = 512,
    repack_types: Iterable[str] = (),
) -> dict:
    """Estimate the memory llama.cpp needs for this model, split into RAM and VRAM.

    * Repacked weights: on CPUs where llama.cpp repacks some quantizations into an
      interleaved layout for faster matrix products (``repack_types``, e.g. Q4_0 and
      Q4_K with AVX2; see ``specdesk.engine.model.repack_types``), it keeps a second,
      repacked copy of every such 2-D weight that stays on the CPU (token_embd is
      not repacked). The mapped file stays resident too, so this is extra RAM.

    * Weights: the sum of the tensors' sizes. Like llama.cpp, the last ``n_gpu_layers``
      layers (``blk.i`` with ``i >= n_layer - n_gpu_layers``) go to the GPU; the output
      layer (output.weight, output_norm and other global tensors) goes too when
      ``n_gpu_layers > n_layer``; token_embd always stays in RAM. A model with tied
      embeddings (no output.weight) gets a second copy of token_embd on the GPU as its
      output layer when that is offloaded. A negative ``n_gpu_layers`` means all layers.
    * KV cache: ``n_ctx x (n_embd_k_gqa + n_embd_v_gqa) x cache_type_bytes`` per layer,
      ``n_embd_k_gqa = key_length x head_count_kv`` (key_length defaults to
      embedding_length / head_count; value_length likewise); on the GPU for offloaded
      layers.
    * Compute buffers, an approximation of llama.cpp's worst-case graph: with
      ``n_out = min(n_batch, n_ctx)`` tokens in a batch, ``logits = 4 x n_vocab x n_out``
      (float32 logits of every batch token; in RAM unless the output layer is offloaded)
      plus the activations of one layer, ``4 x n_out x (n_head x n_ctx + 4 x n_embd +
      2 x n_ff)`` (attention scores over the context, residual/norm/attention outputs and
      the feed-forward intermediates; on the GPU when any layer is offloaded).

    Returns integers: weights_bytes, kv_bytes, compute_bytes, ram_bytes, vram_bytes,
    n_ctx, n_gpu_layers.
    """
    arch = g.architecture or ""

    def key(template: str) -> str:
        return template.format(arch=arch)

    layer_ids = {i for i in (_layer_of(t.name) for t in g.tensors) if i is not None}
    n_layer = _md_int(g, key(_K.LLM.BLOCK_COUNT)) or 0
    if not 0 < n_layer <= LLAMA_MAX_LAYERS:  # missing or implausible: count the layers
        n_layer = len(layer_ids)
    ngl = n_layer + 1 if n_gpu_layers < 0 else min(n_gpu_layers, n_layer + 1)
    first_gpu_layer = n_layer - ngl
    output_on_gpu = ngl > n_layer

    w_ram = w_vram = 0
    repack = 0
    repackable = set(repack_types)
    embd_bytes = 0
    for t in g.tensors:
        layer = _layer_of(t.name)
        if layer is not None:
            on_gpu = ngl > 0 and layer >= first_gpu_layer
        elif t.name.startswith("token_embd"):
            on_gpu = False
            if t.name == "token_embd.weight":
                embd_bytes = t.n_bytes
        else:
            on_gpu = output_on_gpu
        if on_gpu:
            w_vram += t.n_bytes
        else:
            w_ram += t.n_bytes
            if t.type_name in repackable and len(t.shape) == 2 and not t.name.startswith("token_embd"):
                repack += t.n_bytes
    if output_on_gpu and g.tensor("output.weight") is None:
        w_vram += embd_bytes  # tied embeddings: the output layer gets its own copy

    n_embd = _md_int(g, key(_K.LLM.EMBEDDING_LENGTH)) or 0
    n_head = _md_layers(g, key(_K.Attention.HEAD_COUNT), n_layer) or [0] * n_layer
    n_head_kv = _md_layers(g, key(_K.Attention.HEAD_COUNT_KV), n_layer) or list(n_head)
    n_ff = _md_layers(g, key(_K.LLM.FEED_FORWARD_LENGTH), n_layer) or [0] * n_layer
    head0 = max(n_head) if n_head else 0
    head_k = _md_int(g, key(_K.Attention.KEY_LENGTH)) or (n_embd // head0 if head0 else 0)
    head_v = _md_int(g, key(_K.Attention.VALUE_LENGTH)) or (n_embd // head0 if head0 else 0)

    kv_ram = kv_vram = 0.0
    for il in range(n_layer):
        layer_bytes = n_ctx * (head_k + head_v) * max(0, n_head_kv[il]) * cache_type_bytes
        if ngl > 0 and il >= first_gpu_layer:
            kv_vram += layer_bytes
        else:
            kv_ram += layer_bytes

    n_vocab = _md_int(g, key(_K.LLM.VOCAB_SIZE))
    if n_vocab is None:
        tokens = g.metadata.get(_K.Tokenizer.LIST)
        n_vocab = len(tokens) if isinstance(tokens, (list, GGUFArray)) else 0
    n_out = max(0, min(n_batch, n_ctx))
    logits = 4 * n_vocab * n_out
    activations = 4 * n_out * (head0 * n_ctx + 4 * n_embd + 2 * (max(n_ff) if n_ff else 0))
    c_ram = c_vram = 0
    if output_on_gpu:
        c_vram += logits
    else:
        c_ram += logits
    if ngl > 0:
        c_vram += activations
    else:
        c_ram += activations

    weights = w_ram + w_vram
    kv = int(kv_ram + kv_vram)
    compute = c_ram + c_vram
    return {
        "weights_bytes": int(weights),
        "repack_bytes": int(repack),
        "kv_bytes": kv,
        "compute_bytes": int(compute),
        "ram_bytes": int(w_ram + repack + kv_ram + c_ram),
        "vram_bytes": int(w_vram + kv_vram + c_vram),
        "n_ctx": int(n_ctx),
        "n_gpu_layers": int(ngl),
    }


def _file_type_name(value: object) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    try:
        return gguf.LlamaFileType(value).name
    except ValueError:
        return f"UNKNOWN_{value}"


def inspect_gguf(path: str | os.PathLike[str]) -> dict:
    """A JSON-serialisable report about a model file (structure checked, arrays lazy)."""
    g = read_gguf(path, lazy_arrays=True)
    arch = g.architecture or ""
    T = _K.Tokenizer

    def key(template: str) -> str:
        return template.format(arch=arch)

    def int_or_list(k: str) -> int | list[int] | None:
        v = g.metadata.get(k)
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v
        if isinstance(v, list) and all(isinstance(x, int) for x in v):
            return [int(x) for x in v]
        return None

    tensor_types: dict[str, int] = {}
    for t in g.tensors:
        tensor_types[t.type_name] = tensor_types.get(t.type_name, 0) + 1
    tokens = g.metadata.get(T.LIST)
    vocab_size = len(tokens) if isinstance(tokens, (list, GGUFArray)) else _md_int(g, key(_K.LLM.VOCAB_SIZE))
    template = g.metadata.get(T.CHAT_TEMPLATE)
    name = g.metadata.get(_K.General.NAME)
    vocab_type = g.metadata.get(T.MODEL)
    return {
        "path": str(g.path),
        "file_size": g.file_size,
        "version": g.version,
        "architecture": g.architecture,
        "name": name if isinstance(name, str) else None,
        "parameters": sum(t.n_elements for t in g.tensors),
        "file_type": _file_type_name(g.metadata.get(_K.General.FILE_TYPE)),
        "tensor_types": dict(sorted(tensor_types.items())),
        "layers": _md_int(g, key(_K.LLM.BLOCK_COUNT)),
        "embedding_length": _md_int(g, key(_K.LLM.EMBEDDING_LENGTH)),
        "head_count": int_or_list(key(_K.Attention.HEAD_COUNT)),
        "head_count_kv": int_or_list(key(_K.Attention.HEAD_COUNT_KV)),
        "context_length": _md_int(g, key(_K.LLM.CONTEXT_LENGTH)),
        "vocab_type": vocab_type if isinstance(vocab_type, str) else None,
        "vocab_size": vocab_size,
        "has_chat_template": isinstance(template, str) and bool(template),
        "chat_template_chars": len(template) if isinstance(template, str) else 0,
        "bos_token_id": _md_int(g, T.BOS_ID),
        "eos_token_id": _md_int(g, T.EOS_ID),
        "memory": estimate_memory(g, 4096),
    }
