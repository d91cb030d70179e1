"""Count what a GGUF reader does to the file: opens, bytes read, how far it got.

``CountingOpen`` stands in for ``open`` in ``specdesk.library.gguf.reader`` (monkeypatch
``reader.open``). A structural bound -- "each byte the reader touches is read at most k
times" -- catches a quadratic reader without timing anything, and ``budget`` makes it
fail fast instead of running for hours. Used by tests/unit/test_gguf_bounds.py,
tests/unit/test_gguf_fuzz.py and tools/gguf_fuzz_report.py.
"""

from __future__ import annotations

import builtins


class CountingOpen:
    def __init__(self, budget: float = float("inf")) -> None:
        self.budget = budget
        self.reset()

    def reset(self) -> None:
        self.opened = 0
        self.bytes_read = 0
        self.extent = 0  # the furthest byte any read reached

    @property
    def reread(self) -> float:
        """Bytes read per byte of the file the reader touched."""
        return self.bytes_read / self.extent if self.extent else 0.0

    def __call__(self, path, mode="r", *args, **kwargs):
        f = builtins.open(path, mode, *args, **kwargs)
        self.opened += 1
        return _Counted(f, self)


class _Counted:
    def __init__(self, f, counter: CountingOpen) -> None:
        self._f = f
        self._c = counter

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        c = self._c
        c.bytes_read += len(data)
        c.extent = max(c.extent, self._f.tell())
        if c.bytes_read > c.budget:
            raise AssertionError(f"read {c.bytes_read:,} bytes, over the budget of {c.budget:,.0f}")
        return data

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()

    def __getattr__(self, name):
        return getattr(self._f, name)
