"""The fast path of :func:`~.reader.read_gguf`: runs of well-formed records decoded
straight from the read-ahead window.

A header is made of small records (metadata entries, tensor infos), and with one checked
read -- a method call -- per field, a record costs several microseconds of Python; a
crafted header of tiny records multiplies that by the record caps. These decoders read
the fields of consecutive records directly from ``Reader.buf`` instead.

They accept only what the checked reads in ``reader`` accept and produce the same values.
They never raise: they stop at the first record that is not plainly valid, that runs
past the window, or that they do not handle (arrays of arrays, long string arrays,
arrays kept in compact form), having consumed nothing of it. ``reader`` then reads that
one record with the checked reads, which name any problem, and tries the fast path again
after it. So the messages are the checked reads' own, and the records left to the
checked reads are few: bad ones (the first raises), one per window crossed, and kinds
that are bounded otherwise (``MAX_NESTED_ARRAYS``, or thousands of bytes per record).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Container

import numpy as np

from .arrays import GGUFArray
from .spec import (
    GGML_MAX_DIMS,
    GGML_MAX_NAME,
    GGML_TYPES,
    INT64_MAX,
    LAZY_ARRAY_MIN,
    MAX_STRING_BYTES,
    MAX_STRINGS,
    NUMPY_DTYPES,
    SCALAR_FORMATS,
    SCALAR_STRUCTS,
    U32,
    U64,
    VT,
)
from .stream import Reader

#: Bytes made available before a run of metadata entries: a small entry fits, a longer
#: one may end the run at the window's end (then the checked reads take it).
KV_WINDOW = 256
#: The longest valid tensor info: name length, a 63-byte name, n_dims, 4 dimensions,
#: ggml type and offset.
TENSOR_INFO_MAX = 8 + GGML_MAX_NAME - 1 + 4 + 8 * GGML_MAX_DIMS + 4 + 8

#: Short numeric arrays are unpacked with struct (numpy costs a microsecond a call).
SHORT_LIST = 16
SHORT_STRUCTS = {(t, n): struct.Struct(f"<{n}{f[1:]}") for t, f in SCALAR_FORMATS.items() for n in range(SHORT_LIST + 1)}
_DIMS = {n: struct.Struct(f"<{n}Q") for n in range(1, GGML_MAX_DIMS + 1)}
_TYPE_OFFSET = struct.Struct("<IQ")
_ARRAY_HEAD = struct.Struct("<IQ")
_STRING, _ARRAY, _BOOL = int(VT.STRING), int(VT.ARRAY), int(VT.BOOL)


def decode_kvs(
    r: Reader,
    i: int,
    stop: int,
    lazy: bool,
    load: Container[str],
    metadata: dict[str, object],
    value_types: dict[str, tuple[int, int | None]],
    kv_offsets: dict[str, int],
    arrays: dict[str, GGUFArray],
    type_pairs: dict[tuple[int, int | None], tuple[int, int | None]],
) -> int:
    """Decode metadata entries ``i``, ``i + 1``, ... (before ``stop``) at ``r.pos`` into
    the dicts, as the checked reads would; return the index of the first one left.

    Handled: a non-empty key without NUL that is new and not in ``load``, and a scalar,
    a string, an empty array, or an array of scalars or strings of up to
    ``LAZY_ARRAY_MIN`` elements (a list) -- or, when ``lazy``, a longer array of scalars
    (skipped: a GGUFArray reference). Everything must lie in the window, except a
    skipped array, which must lie in the file. String arrays count towards
    ``r.strings`` as in the checked reads; one that would pass ``MAX_STRINGS`` is left
    to them (they refuse it).
    """
    buf, base = r.buf, r.base
    hi = len(buf)  # the window never holds bytes past the file's end
    file_left = r.size - base  # bytes from the window's start to the end of the file
    max_len = r.max_array_len
    unpack_u64 = U64.unpack_from
    scalars = SCALAR_STRUCTS
    n_strings = r.strings
    p = r.pos - base
    while i < stop:
        start = p
        if p + 8 > hi:
            break
        n = unpack_u64(buf, p)[0]
        q = p + 8 + n
        if not 0 < n <= MAX_STRING_BYTES or q + 4 > hi:
            break
        raw = buf[p + 8 : q]
        if b"\0" in raw:
            break
        key = raw.decode("utf-8", "replace")
        if key in metadata or key in load:
            break
        vtype = U32.unpack_from(buf, q)[0]
        q += 4
        etype: int | None = None
        ref: GGUFArray | None = None
        counted = 0
        s = scalars.get(vtype)
        if s is not None:
            if q + s.size > hi:
                break
            value: object = s.unpack_from(buf, q)[0]
            if vtype == _BOOL:
                value = value != 0
            q += s.size
        elif vtype == _STRING:
            if q + 8 > hi:
                break
            n = unpack_u64(buf, q)[0]
            if n > MAX_STRING_BYTES or q + 8 + n > hi:
                break
            value = buf[q + 8 : q + 8 + n].decode("utf-8", "replace")
            q += 8 + n
        elif vtype == _ARRAY:
            got = _fast_array(buf, q, hi, file_left, base, max_len, lazy, n_strings)
            if got is None:
                break
            value, etype, ref, q, counted = got
        else:
            break
        metadata[key] = value
        pair = (vtype, etype)
        value_types[key] = type_pairs.setdefault(pair, pair)
        kv_offsets[key] = base + start
        if ref is not None:
            arrays[key] = ref
        n_strings += counted
        p = q
        i += 1
    r.pos = base + p
    r.strings = n_strings
    return i


def _fast_array(buf, q: int, hi: int, file_left: int, base: int, max_len: int, lazy: bool,
                n_strings: int) -> tuple | None:
    """An array value at ``q`` in the window, as :func:`decode_kvs` takes them:
    (value, element type, GGUFArray reference or None, the offset after it, strings
    counted), or None to leave the entry to the checked reads."""
    if q + 12 > hi:
        return None
    etype, n = _ARRAY_HEAD.unpack_from(buf, q)
    q += 12
    if n > max_len:
        return None
    es = SCALAR_STRUCTS.get(etype)
    ref = None
    if n == 0 and (es is not None or etype == _STRING or etype == _ARRAY):
        return [], etype, None, q, 0
    if es is not None:
        size = es.size
        if n > LAZY_ARRAY_MIN:
            if not lazy or q + n * size > file_left:
                return None
            value = ref = GGUFArray(etype, n, base + q)
        elif q + n * size > hi:
            return None
        elif n <= SHORT_LIST:
            items = SHORT_STRUCTS[etype, n].unpack_from(buf, q)
            value = [v != 0 for v in items] if etype == _BOOL else list(items)
        else:
            arr = np.frombuffer(buf, dtype=NUMPY_DTYPES[etype], count=n, offset=q)
            value = (arr != 0).tolist() if etype == _BOOL else arr.tolist()
        return value, etype, ref, q + n * size, 0
    if etype == _STRING and n <= LAZY_ARRAY_MIN:
        if n_strings + n > MAX_STRINGS:
            return None
        # a string that ends inside the window is within the file and, as the
        # window holds at most MAX_STRING_BYTES, within the string limit
        strings = []
        add = strings.append
        last = hi - 8
        unpack_u64 = U64.unpack_from
        for _ in range(n):
            if q > last:
                return None
            a = q + 8
            q = a + unpack_u64(buf, q)[0]
            if q > hi:
                return None
            add(buf[a:q].decode("utf-8", "replace"))
        return strings, etype, None, q, n
    return None


def decode_tensor_infos(r: Reader, i: int, stop: int, seen: set[str], alignment: int, infos: list) -> int:
    """Decode tensor infos ``i``, ``i + 1``, ... (before ``stop``) at ``r.pos`` that pass
    every check of the checked reads and lie in the window, appending (name, dims, type,
    type name, relative offset, n_bytes, info offset) to ``infos``; return the index of
    the first one left."""
    buf, base = r.buf, r.base
    hi = len(buf)
    unpack_u64 = U64.unpack_from
    p = r.pos - base
    while i < stop:
        if p + 8 > hi:
            break
        n = unpack_u64(buf, p)[0]
        q = p + 8 + n
        if not 0 < n < GGML_MAX_NAME or q + 4 > hi:
            break
        raw = buf[p + 8 : q]
        if b"\0" in raw:
            break
        name = raw.decode("utf-8", "replace")
        if name in seen:
            break
        n_dims = U32.unpack_from(buf, q)[0]
        q += 4
        if not 1 <= n_dims <= GGML_MAX_DIMS or q + 8 * n_dims + 12 > hi:
            break
        dims = _DIMS[n_dims].unpack_from(buf, q)
        q += 8 * n_dims
        if 0 in dims:
            break
        # every dimension >= 1, so the product is at least each of them: this one check
        # is the checked reads' "each dimension <= INT64_MAX" and running product check
        n_elements = math.prod(dims)
        if n_elements >= INT64_MAX:
            break
        ttype, offset = _TYPE_OFFSET.unpack_from(buf, q)
        known = GGML_TYPES.get(ttype)
        if known is None or dims[0] % known[1] or offset % alignment:
            break
        tname, block, tsize = known
        seen.add(name)
        infos.append((name, dims, ttype, tname, offset, n_elements // block * tsize, base + p))
        p = q + 12
        i += 1
    r.pos = base + p
    return i

