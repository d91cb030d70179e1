"""Compact forms of long metadata arrays: unread references and raw string arrays.

A Python list costs about 8 bytes per element plus an object per element (40 to 80
bytes), many times what the element takes in the file. Arrays longer than
``LAZY_ARRAY_MIN`` are therefore never lists: numbers become read-only numpy arrays
(exactly their file bytes), strings a :class:`StringArray` (their file bytes plus 8
bytes per string, and each string takes at least 8 bytes in the file), or, when read
lazily, a :class:`GGUFArray` reference to where they are in the file.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

#: How many strings an iteration converts at a time (bounds its temporary memory).
ITER_CHUNK = 1 << 16


@dataclass(frozen=True)
class GGUFArray:
    """A metadata array left unread; ``offset`` is where its first element starts.

    ``load_array`` reads it.
    """

    element_type: int
    length: int
    offset: int

    def __len__(self) -> int:
        return self.length


class StringArray(Sequence[str]):
    """A metadata array of strings, held as the raw bytes of its region of the file.

    ``data`` is the region (each string's u64 length, then its bytes); ``bounds[i]`` is
    where string ``i``'s length field starts in it, ``bounds[len]`` is ``len(data)``.
    Items are decoded when read (UTF-8, invalid bytes replaced); :meth:`raw` gives the
    bytes as stored, which is what llama.cpp uses.
    """

    __slots__ = ("_data", "_bounds", "offset")

    def __init__(self, data: bytes, bounds: np.ndarray, offset: int = -1) -> None:
        self._data = data
        self._bounds = bounds
        self.offset = offset  # where the first element starts in the file (-1: unknown)

    @classmethod
    def from_raw(cls, items: Sequence[bytes]) -> "StringArray":
        """Build one from raw strings (tests and small hand-made arrays)."""
        parts = []
        bounds = np.zeros(len(items) + 1, dtype=np.int64)
        pos = 0
        for i, raw in enumerate(items):
            bounds[i] = pos
            parts.append(len(raw).to_bytes(8, "little") + raw)
            pos += 8 + len(raw)
        bounds[len(items)] = pos
        return cls(b"".join(parts), bounds)

    def buffers(self) -> tuple[bytes, np.ndarray]:
        """(data, bounds), for loops that must be fast."""
        return self._data, self._bounds

    @property
    def nbytes(self) -> int:
        """Memory held: the raw region and the bounds."""
        return len(self._data) + self._bounds.nbytes

    def __len__(self) -> int:
        return len(self._bounds) - 1

    def raw(self, i: int) -> bytes:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("string index out of range")
        return self._data[int(self._bounds[i]) + 8 : int(self._bounds[i + 1])]

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.raw(i).decode("utf-8", "replace")

    def iter_raw(self, start: int = 0) -> Iterator[bytes]:
        """The raw strings from ``start`` on, converted a chunk at a time."""
        data, bounds = self._data, self._bounds
        n = len(self)
        for lo in range(start, n, ITER_CHUNK):
            b = bounds[lo : min(n, lo + ITER_CHUNK) + 1].tolist()
            for a, z in zip(b, b[1:]):
                yield data[a + 8 : z]

    def __iter__(self) -> Iterator[str]:
        for raw in self.iter_raw():
            yield raw.decode("utf-8", "replace")

    def tolist(self) -> list[str]:
        return list(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StringArray):
            return len(self) == len(other) and all(a == b for a, b in zip(self.iter_raw(), other.iter_raw()))
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        head = ", ".join(repr(s) for s in self[:3])
        return f"StringArray([{head}{', ...' if len(self) > 3 else ''}], len={len(self):,})"


def is_array(value: object) -> bool:
    """A metadata array in any of its forms (list, numpy, StringArray, GGUFArray)."""
    return isinstance(value, (list, np.ndarray, StringArray, GGUFArray))
