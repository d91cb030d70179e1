"""A sequential reader over an untrusted file that checks every length before using it.

The building block of :func:`~.reader.read_gguf`: every read first checks that the
bytes exist, lengths read from the file are checked against the bytes left before
anything is allocated, long arrays come out compact (numpy, StringArray) or as
references, and ``cancel`` is checked in the long loops.
"""

from __future__ import annotations

import array
from collections.abc import Callable
from typing import BinaryIO

import numpy as np

from ...errors import Cancelled, ModelFileError
from .arrays import GGUFArray, StringArray
from .spec import (
    KNOWN_VALUE_TYPES,
    LAZY_ARRAY_MIN,
    MAX_ARRAY_DEPTH,
    MAX_NESTED_ARRAYS,
    MAX_STRING_BYTES,
    MAX_STRINGS,
    NUMPY_DTYPES,
    SCALAR_STRUCTS,
    U32,
    U64,
    VT,
)
from .text import n as _n
from .text import show as _show

Cancel = Callable[[], bool]

_CHUNK = 1 << 20  # the read-ahead window
CANCEL_EVERY = 1 << 12  # entries/tensors between cancel checks
_CANCEL_EVERY_ELEMENTS = 1 << 16  # array elements between cancel checks
# need(n) reads max(n, _CHUNK) bytes and no caller needs more than MAX_STRING_BYTES, so the
# window never holds more: the string loops (here and in records.py) rely on it.
assert _CHUNK <= MAX_STRING_BYTES

class Reader:
    """Sequential reader over an open file with a sliding read-ahead window.

    Every read first checks that the bytes exist (``pos + n <= size``); lengths read
    from the file are checked against the bytes left before anything is allocated.
    ``where`` names what is being read, for error messages.
    """

    def __init__(self, f: BinaryIO, size: int, label: str, max_array_len: int, cancel: Cancel | None = None) -> None:
        self.f = f
        self.size = size
        self.label = label
        self.max_array_len = max_array_len
        self.cancel = cancel
        self.buf = b""
        self.base = 0
        self.pos = 0
        self.place: tuple[str, object] = ("the header", None)  # rendered only for a message
        self.nested = 0  # arrays read inside other arrays so far (at most MAX_NESTED_ARRAYS)
        self.strings = 0  # string elements of the arrays read so far (at most MAX_STRINGS)

    @property
    def where(self) -> str:
        """What is being read, for messages: "metadata key 'x'", "tensor info #3", ..."""
        kind, what = self.place
        if kind == "key":
            return f"metadata key '{_show(what)}'"
        if kind == "tensor":
            return f"tensor '{_show(what)}'"
        if kind == "entry":
            return f"metadata entry #{what}"
        if kind == "info":
            return f"tensor info #{what}"
        return kind

    # -- errors -------------------------------------------------------------------------

    def fail(self, problem: str) -> ModelFileError:
        return ModelFileError(f"{self.label}: {problem}")

    def _truncated(self, n: int) -> ModelFileError:
        return self.fail(
            f"truncated: {self.where} needs {_n(n)} bytes at byte {_n(self.pos)} "
            f"but the file has {_n(self.size)} bytes"
        )

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel():
            raise Cancelled(f"{self.label}: checking the file was cancelled")

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
        self.buf = b""  # let the old window go before reading the new one
        data = self.f.read(want)
        if len(data) < n:
            raise self.fail(f"the file changed while it was read (ended early at byte {_n(self.pos + len(data))})")
        self.buf = data
        self.base = self.pos
        return 0

    def window(self, n: int) -> int:
        """Make the next ``n`` bytes -- fewer at the end of the file -- available in
        ``buf``; return their index there. For decoders that check every field they read
        against ``len(buf)`` themselves (``buf`` never holds bytes past the file's size)."""
        left = self.size - self.pos
        return self.need(n if n < left else left)

    def read_exact(self, start: int, n: int) -> bytes:
        """``n`` bytes at ``start`` (already bounds-checked), read directly."""
        self.f.seek(start)
        data = self.f.read(n)
        if len(data) < n:
            raise self.fail(f"the file changed while it was read (ended early at byte {_n(start + len(data))})")
        return data

    def u32(self) -> int:
        lo = self.need(4)
        self.pos += 4
        return U32.unpack_from(self.buf, lo)[0]

    def u64(self) -> int:
        lo = self.need(8)
        self.pos += 8
        return U64.unpack_from(self.buf, lo)[0]

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
        s = SCALAR_STRUCTS[vtype]
        lo = self.need(s.size)
        self.pos += s.size
        v = s.unpack_from(self.buf, lo)[0]
        return v != 0 if vtype == VT.BOOL else v

    def value(self, vtype: int, lazy: bool, full: bool = False) -> tuple[object, int | None, GGUFArray | None]:
        """Read one value of ``vtype``: (value, array element type or None, the array's
        reference when it is a long array)."""
        if vtype == VT.STRING:
            return self.raw_string().decode("utf-8", "replace"), None, None
        if vtype == VT.ARRAY:
            etype, value, ref = self.array(1, lazy, full)
            return value, etype, ref
        return self.scalar(vtype), None, None

    def array(self, depth: int, lazy: bool, full: bool = False) -> tuple[int, object, GGUFArray | None]:
        """An array: short ones as lists; long ones as a reference (``lazy``) or compact
        (StringArray, numpy). ``full``: compact whatever the length (never a list)."""
        at = self.pos
        etype = self.u32()
        if etype not in KNOWN_VALUE_TYPES:
            raise self.fail(f"{self.where} is an array of unknown value type {etype} (at byte {_n(at)})")
        if etype == VT.ARRAY and depth >= MAX_ARRAY_DEPTH:
            raise self.fail(f"{self.where} nests arrays deeper than {MAX_ARRAY_DEPTH} levels")
        at = self.pos
        n = self.u64()
        if n > self.max_array_len:
            raise self.fail(f"{self.where} is an array of {_n(n)} elements (at byte {_n(at)}); the limit is {_n(self.max_array_len)}")
        ref = GGUFArray(etype, n, self.pos) if n > LAZY_ARRAY_MIN and etype != VT.ARRAY else None
        if etype == VT.STRING:
            self.count_strings(n, at)
            self.check_length(n, 8, "array length", at)
            if full or (n > LAZY_ARRAY_MIN and not lazy):
                return etype, self.string_array(n), ref
            if n > LAZY_ARRAY_MIN:
                self.skip_strings(n)
                return etype, ref, ref
            return etype, self.string_list(n), ref
        if etype == VT.ARRAY:
            self.check_length(n, 12, "array length", at)
            self.nested += n
            if self.nested > MAX_NESTED_ARRAYS:  # each costs as much as a record: refused before any is read
                raise self.fail(
                    f"{self.where} holds {_n(n)} arrays (at byte {_n(at)}), which makes {_n(self.nested)} arrays "
                    f"nested in other arrays; SpecDesk reads at most {_n(MAX_NESTED_ARRAYS)} (llama.cpp reads none)"
                )
            items = []
            for i in range(n):
                if i and not i % CANCEL_EVERY:
                    self.check_cancel()
                items.append(self.array(depth + 1, lazy)[1])
            return etype, items, ref
        size = SCALAR_STRUCTS[etype].size
        self.check_length(n, size, "array length", at)
        if full or n > LAZY_ARRAY_MIN:
            if lazy and not full:
                self.pos += n * size
                return etype, ref, ref
            return etype, self.numeric_array(etype, n), ref
        return etype, self.numeric_list(etype, n), ref

    def count_strings(self, n: int, at: int) -> None:
        """Count an array of ``n`` strings (its length read at byte ``at``) before any of
        them is read: each costs a loop step, so their total over the header is capped."""
        total = self.strings + n
        if total > MAX_STRINGS:
            raise self.fail(
                f"{self.where} is an array of {_n(n)} strings (at byte {_n(at)}), which makes {_n(total)} strings "
                f"in the header's arrays; SpecDesk reads at most {_n(MAX_STRINGS)} (real models have about half a million at most)"
            )
        self.strings = total

    def numeric_array(self, etype: int, n: int) -> np.ndarray:
        """``n`` numbers as a read-only numpy array (bool as numpy bool)."""
        size = SCALAR_STRUCTS[etype].size
        if n * size > _CHUNK:
            data = self.read_exact(self.pos, n * size)
            arr = np.frombuffer(data, dtype=NUMPY_DTYPES[etype], count=n)
        else:
            lo = self.need(n * size)
            arr = np.frombuffer(self.buf, dtype=NUMPY_DTYPES[etype], count=n, offset=lo).copy()
        self.pos += n * size
        if etype == VT.BOOL:
            arr = arr != 0
        arr.flags.writeable = False
        return arr

    def numeric_list(self, etype: int, n: int) -> list:
        size = SCALAR_STRUCTS[etype].size
        lo = self.need(n * size)
        arr = np.frombuffer(self.buf, dtype=NUMPY_DTYPES[etype], count=n, offset=lo)
        self.pos += n * size
        if etype == VT.BOOL:
            return (arr != 0).tolist()
        return arr.tolist()

    def walk_strings(self, n: int, record: array.array | None, decode: list[str] | None) -> None:
        """Step over ``n`` length-prefixed strings (the hot loop for vocabularies).

        Every length is checked against the bytes left and the string limit: in the
        inner loops, which run over the strings whose length field is inside the
        read-ahead window, a bad length always takes the next position past the window
        (the window never holds bytes past the file's end, nor more than
        ``MAX_STRING_BYTES``), so the loop stops right after it and only the string it
        stepped over last needs the full check. ``record`` gets each string's start
        relative to the first; ``decode`` gets the decoded strings. ``cancel`` is
        checked between batches.
        """
        start = pos = self.pos
        size = self.size
        unpack = U64.unpack_from
        limit = MAX_STRING_BYTES
        append = record.append if record is not None else None
        add = decode.append if decode is not None else None
        i = 0
        while i < n:
            if i and not i % _CANCEL_EVERY_ELEMENTS:
                self.check_cancel()
            self.pos = pos
            self.need(8)
            buf, base = self.buf, self.base
            hi = len(buf)  # a string that ends inside the window is within the file and the limit
            last = hi - 8  # the last position whose length field is in the window
            stop = min(n, (i // _CANCEL_EVERY_ELEMENTS + 1) * _CANCEL_EVERY_ELEMENTS)
            p = q = pos - base
            j = i
            if add is not None:
                for j in range(i, stop):  # noqa: B007 (j is the loop's result)
                    if p > last:
                        break
                    q = p
                    p = q + 8 + unpack(buf, q)[0]
                    if p > hi:  # past the window: bad, or a string the window cuts
                        break
                    add(buf[q + 8 : p].decode("utf-8", "replace"))
                else:
                    j = stop
                if p > hi:  # string j was stepped over but not read
                    ln = p - q - 8
                    pos = base + q
                    if ln > size - pos - 8 or ln > limit:
                        self._bad_string(pos, ln, j)
                    self.pos = pos + 8
                    lo = self.need(ln)
                    add(self.buf[lo : lo + ln].decode("utf-8", "replace"))
                    pos += 8 + ln
                    i = j + 1
                    continue
                pos = base + p
                i = j
                continue
            if append is not None:
                rel = base - start
                for j in range(i, stop):  # noqa: B007 (j is the loop's result)
                    if p > last:
                        break
                    q = p
                    append(q + rel)
                    p = q + 8 + unpack(buf, q)[0]
                else:
                    j = stop
            else:
                for j in range(i, stop):  # noqa: B007 (j is the loop's result)
                    if p > last:
                        break
                    q = p
                    p = q + 8 + unpack(buf, q)[0]
                else:
                    j = stop
            if p > hi:  # only the string stepped over last (j - 1) can be bad
                ln = p - q - 8
                if ln > size - base - q - 8 or ln > limit:
                    self._bad_string(base + q, ln, j - 1)
            pos = base + p
            i = j
        self.pos = pos

    def _bad_string(self, pos: int, ln: int, i: int) -> None:
        self.pos = pos
        if ln > self.size - pos - 8:
            raise self.fail(
                f"corrupt or truncated: string length at byte {_n(pos)} in {self.where} (element {i}) "
                f"is {_n(ln)}, but only {_n(self.size - pos - 8)} bytes are left in the file"
            )
        raise self.fail(f"string of {_n(ln)} bytes at byte {_n(pos)} in {self.where} exceeds the limit of {_n(MAX_STRING_BYTES)}")

    def skip_strings(self, n: int) -> None:
        self.walk_strings(n, None, None)

    def string_list(self, n: int) -> list[str]:
        out: list[str] = []
        self.walk_strings(n, None, out)
        return out

    def string_array(self, n: int) -> StringArray:
        """``n`` strings as a StringArray: walk them once to find their bounds, then
        read their region in one piece."""
        start = self.pos
        bounds = array.array("q")
        self.walk_strings(n, bounds, None)
        end = self.pos
        bounds.append(end - start)
        data = self.read_exact(start, end - start)
        return StringArray(data, np.frombuffer(bounds, dtype=np.int64), start)


