"""The bounded GGUF header parser.

GGUF files come from the internet and are untrusted, and llama.cpp's loader has had
crashes on malformed files. :func:`read_gguf` reads the header (metadata and tensor
infos) and checks every count, length, type and offset before using it; it never reads
tensor data. Structural problems raise a one-line ``ModelFileError``.

Bounds, for any input:

* Time: one pass over the header. Each header byte is read once (plus once more for
  a string array kept as a :class:`StringArray`); tensor data is never read. Each
  record costs a few microseconds of Python however small it is, so the counts are
  capped before any record is read -- ``MAX_KV`` metadata entries, ``MAX_TENSORS``
  tensor infos, ``MAX_NESTED_ARRAYS`` arrays held in arrays, ``MAX_STRINGS`` string
  elements of arrays (each array's length is counted before its strings are read) --
  and runs of plain
  records go through the fast path of :mod:`.records`. A header at both caps, of the
  costliest small records, validates in about a quarter of a second on two slow cores
  (``tools/gguf_fuzz_report.py --caps-only`` measures it).
* Memory: nothing is allocated before its length has been checked against the bytes
  left in the file. Arrays longer than ``LAZY_ARRAY_MIN`` stay compact (numpy or a
  StringArray: at most 2 bytes per file byte). What remains are the Python objects per
  metadata entry, short array and tensor info, so the peak is linear in the header's
  size: at most 16 bytes per header byte plus 1 MiB (measured worst: 11x, for a header
  of 16,384 one-byte entries; real headers: well under 1x, the tensor data is never
  read). The fuzz test checks this bound on every case.
* ``cancel`` (a callable returning True to stop) is checked every few thousand
  entries, tensors or array elements; a cancelled read raises ``Cancelled``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection
from pathlib import Path
from typing import BinaryIO

import gguf

from ...errors import ModelFileError
from .arrays import GGUFArray
from .header import GGUFFile, TensorInfo
from .spec import (
    DEFAULT_ALIGNMENT,
    DEFAULT_MAX_ARRAY_LEN,
    GGML_MAX_DIMS,
    GGML_MAX_NAME,
    GGML_TYPES,
    GGUF_MAGIC,
    INT64_MAX,
    KNOWN_VALUE_TYPES,
    MAX_KV,
    MAX_TENSORS,
    MIN_KV_BYTES,
    MIN_TENSOR_INFO_BYTES,
    SUPPORTED_VERSIONS,
    VT,
    type_name,
)
from .records import KV_WINDOW, TENSOR_INFO_MAX, decode_kvs, decode_tensor_infos
from .stream import CANCEL_EVERY, Cancel, Reader
from .text import describe_magic
from .text import label as _label
from .text import n as _n
from .text import show as _show

# --------------------------------------------------------------------------------------
# read_gguf
# --------------------------------------------------------------------------------------


def open_gguf(path: Path, label: str) -> tuple[BinaryIO, os.stat_result]:
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
    return f, st


def read_gguf(
    path: str | os.PathLike[str],
    *,
    max_array_len: int = DEFAULT_MAX_ARRAY_LEN,
    lazy_arrays: bool = False,
    load: Collection[str] = (),
    cancel: Cancel | None = None,
) -> GGUFFile:
    """Parse and structurally validate the header of the GGUF file at ``path``.

    Checks, in file order (each failure raises ``ModelFileError``):

    * the path exists, is a readable regular file and is not empty;
    * the magic is ``GGUF`` (otherwise the message shows the first bytes and what they
      look like) and the version is 2 or 3 (v1 and big-endian files are named as such);
    * the tensor and key/value counts are at most ``MAX_TENSORS`` (32,768) and ``MAX_KV``
      (16,384) and the file is large enough to hold that many minimal records -- before
      any loop runs; at most ``MAX_NESTED_ARRAYS`` (4,096) arrays are held in arrays, and
      the arrays hold at most ``MAX_STRINGS`` (1,048,576) strings in all;
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

    Arrays of up to ``LAZY_ARRAY_MIN`` elements become lists. Longer ones become a
    ``StringArray`` or a read-only numpy array, or with ``lazy_arrays=True`` are
    skipped (still bounds-checked) and stored as a ``GGUFArray`` for ``load_array``.
    Arrays under the keys in ``load`` are always read in the compact form (whatever
    their length), so a caller can get the raw bytes of a short string array.
    Tensor data is never read. See the module docstring for the time/memory bounds.
    """
    path = Path(path)
    label = _label(path)
    f, st = open_gguf(path, label)
    try:
        return _parse(f, path, st, label, max_array_len, lazy_arrays, frozenset(load), cancel)
    except OSError as e:
        raise ModelFileError(f"{label}: cannot read the file ({_show(e.strerror or e)})") from None
    finally:
        f.close()


def _parse(f: BinaryIO, path: Path, st: os.stat_result, label: str, max_array_len: int, lazy: bool,
           load: frozenset[str], cancel: Cancel | None) -> GGUFFile:
    """The header, in the order the file holds it: preamble, metadata, tensor infos,
    then the data section's place and every tensor's range in it."""
    size = st.st_size
    r = Reader(f, size, label, max_array_len, cancel)
    version, n_tensors, n_kv = _read_preamble(r, f, size)
    metadata, value_types, kv_offsets, arrays = _read_metadata(r, n_kv, lazy, load)
    alignment = _alignment(r, metadata, value_types)
    infos = _read_tensor_infos(r, n_tensors, alignment)
    header_end = r.pos
    data_offset, tensors = _place_tensors(r, infos, header_end, alignment, size)
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
        mtime_ns=st.st_mtime_ns,
        arrays=arrays,
    )


def _read_preamble(r: Reader, f: BinaryIO, size: int) -> tuple[int, int, int]:
    """Magic, version and the two counts, refused before any record is read when they
    cannot be right: (version, n_tensors, n_kv)."""
    head = f.read(min(size, 64))
    if not head.startswith(GGUF_MAGIC):
        if len(head) < len(GGUF_MAGIC) and GGUF_MAGIC.startswith(head):
            raise r.fail(f"truncated: the file has only {len(head)} bytes")
        raise r.fail(f"not a GGUF file ({describe_magic(head)})")
    r.pos = 4
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
        raise r.fail(f"the header declares {_n(n_tensors)} tensors; SpecDesk reads at most {_n(MAX_TENSORS)} "
                     f"(real models have a few thousand)")
    if n_kv > MAX_KV:
        raise r.fail(f"the header declares {_n(n_kv)} metadata entries; SpecDesk reads at most {_n(MAX_KV)} "
                     f"(real models have a few hundred)")
    need = n_kv * MIN_KV_BYTES + n_tensors * MIN_TENSOR_INFO_BYTES
    if need > r.left:
        raise r.fail(
            f"corrupt or truncated: header claims {_n(n_kv)} metadata entries and {_n(n_tensors)} tensors, "
            f"which need at least {_n(need)} bytes, but only {_n(r.left)} bytes follow"
        )
    return version, n_tensors, n_kv


def _read_metadata(r: Reader, n_kv: int, lazy: bool, load: frozenset[str]):
    """Every metadata entry: runs of plain entries by the fast path (records.py), each
    entry it leaves by the checked reads, which name its problem."""
    metadata: dict[str, object] = {}
    value_types: dict[str, tuple[int, int | None]] = {}
    kv_offsets: dict[str, int] = {}
    arrays: dict[str, GGUFArray] = {}
    type_pairs: dict[tuple[int, int | None], tuple[int, int | None]] = {}  # share the tuples
    i = 0
    while i < n_kv:
        if i and not i % CANCEL_EVERY:
            r.check_cancel()
        # the fast path takes runs of plain entries, up to the next cancel check
        r.window(KV_WINDOW)
        stop = min(n_kv, (i // CANCEL_EVERY + 1) * CANCEL_EVERY)
        j = decode_kvs(r, i, stop, lazy, load, metadata, value_types, kv_offsets, arrays, type_pairs)
        if j > i:
            i = j
            continue
        start = r.pos
        r.place = ("entry", i)
        raw = r.raw_string()
        if not raw:
            raise r.fail(f"metadata entry #{i} has an empty key (at byte {_n(start)})")
        if b"\0" in raw:
            raise r.fail(f"metadata key '{_show(raw.decode('utf-8', 'replace'))}' contains a NUL byte")
        key = raw.decode("utf-8", "replace")
        if key in metadata:
            raise r.fail(f"duplicate metadata key '{_show(key)}'")
        r.place = ("key", key)
        at = r.pos
        vtype = r.u32()
        if vtype not in KNOWN_VALUE_TYPES:
            raise r.fail(f"metadata key '{_show(key)}' has unknown value type {vtype} (at byte {_n(at)})")
        value, etype, ref = r.value(vtype, lazy, key in load)
        metadata[key] = value
        pair = (vtype, etype)
        value_types[key] = type_pairs.setdefault(pair, pair)
        kv_offsets[key] = start
        if ref is not None:
            arrays[key] = ref
        i += 1
    return metadata, value_types, kv_offsets, arrays


def _alignment(r: Reader, metadata: dict, value_types: dict) -> int:
    alignment = DEFAULT_ALIGNMENT
    akey = gguf.Keys.General.ALIGNMENT
    if akey in metadata:
        if value_types[akey] != (VT.UINT32, None):
            raise r.fail(f"{akey} must be a uint32, not {type_name(*value_types[akey])}")
        alignment = int(metadata[akey])  # type: ignore[arg-type]
        if alignment == 0 or alignment & (alignment - 1):
            raise r.fail(f"{akey} is {alignment}, which is not a power of two")
    return alignment


def _read_tensor_infos(r: Reader, n_tensors: int, alignment: int) -> list:
    """Every tensor info as (name, dims, type, type name, relative offset, n_bytes, info
    offset): runs by the fast path, the rest by :func:`_checked_tensor_info`."""
    infos: list = []
    seen: set[str] = set()
    i = 0
    while i < n_tensors:
        if i and not i % CANCEL_EVERY:
            r.check_cancel()
        r.window(TENSOR_INFO_MAX)  # as for the metadata: the fast path, then the checked reads
        j = decode_tensor_infos(r, i, min(n_tensors, (i // CANCEL_EVERY + 1) * CANCEL_EVERY), seen, alignment, infos)
        if j > i:
            i = j
            continue
        infos.append(_checked_tensor_info(r, i, seen, alignment))
        i += 1
    return infos


def _checked_tensor_info(r: Reader, i: int, seen: set[str], alignment: int) -> tuple:
    start = r.pos
    r.place = ("info", i)
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
    r.place = ("tensor", name)
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
    return (name, tuple(dims), ttype, tname, offset, n_bytes, start)


def _place_tensors(r: Reader, infos: list, header_end: int, alignment: int, size: int) -> tuple[int, list[TensorInfo]]:
    """Where the data section starts, and every tensor's range in it: inside the file,
    no two overlapping."""
    data_offset = header_end
    if infos:
        data_offset = (header_end + alignment - 1) // alignment * alignment
    if data_offset > size:
        raise r.fail(f"truncated: the tensor data section starts at byte {_n(data_offset)} but the file has {_n(size)} bytes")
    tensors: list[TensorInfo] = infos  # replaced in place, one at a time
    for i, (name, dims, ttype, tname, off, n_bytes, start) in enumerate(infos):
        tensors[i] = TensorInfo(name, dims, ttype, tname, data_offset + off, n_bytes, start)
    for t in tensors:
        if t.offset + t.n_bytes > size:
            if t.offset >= size:
                raise r.fail(f"truncated: tensor '{_show(t.name)}' data starts at byte {_n(t.offset)} but the file has {_n(size)} bytes")
            raise r.fail(f"truncated: tensor '{_show(t.name)}' data ends at byte {_n(t.offset + t.n_bytes)} but the file has {_n(size)} bytes")
    ordered = sorted(tensors, key=lambda t: t.offset)
    for a, b in zip(ordered, ordered[1:]):
        if b.offset < a.offset + a.n_bytes:
            raise r.fail(f"tensors '{_show(a.name)}' and '{_show(b.name)}' overlap in the file")
    return data_offset, tensors


def load_array(g: GGUFFile, key: str, cancel: Cancel | None = None) -> object:
    """The value of ``key``, reading it from the file if it was left lazy (a
    StringArray or a read-only numpy array); other values are returned as they are."""
    value = g.metadata.get(key)
    if not isinstance(value, GGUFArray):
        return value
    label = _label(g.path)
    f, st = open_gguf(g.path, label)
    try:
        if st.st_size != g.file_size or (g.mtime_ns and st.st_mtime_ns != g.mtime_ns):
            raise ModelFileError(f"{label}: the file changed since it was read")
        r = Reader(f, st.st_size, label, max(DEFAULT_MAX_ARRAY_LEN, value.length), cancel)
        r.pos = value.offset
        r.place = ("key", key)
        if value.element_type == VT.STRING:
            return r.string_array(value.length)
        return r.numeric_array(value.element_type, value.length)
    except OSError as e:
        raise ModelFileError(f"{label}: cannot read the file ({_show(e.strerror or e)})") from None
    finally:
        f.close()
