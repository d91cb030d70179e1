"""Stop strings (OpenAI's ``stop``) cut out of streamed text.

Text that may be the start of a stop string is held back until the next piece shows
whether it is; the stop string itself and everything after it are never sent."""

from __future__ import annotations

from typing import Sequence


class StopMatcher:
    def __init__(self, stops: Sequence[str] = ()) -> None:
        self.stops = [s for s in stops if s]
        self._hold = max((len(s) for s in self.stops), default=1) - 1
        self._pending = ""
        self.hit: str | None = None

    def feed(self, text: str) -> str:
        """The part of ``text`` (after what was held back) that is safe to send. Once a
        stop string appears, ``hit`` is set and nothing more is returned."""
        if self.hit is not None:
            return ""
        buf = self._pending + text
        if not self.stops:
            self._pending = ""
            return buf
        first = None
        for s in self.stops:
            i = buf.find(s)
            if i >= 0 and (first is None or i < first[0]):
                first = (i, s)
        if first is not None:
            self.hit = first[1]
            self._pending = ""
            return buf[: first[0]]
        keep = 0
        for n in range(min(self._hold, len(buf)), 0, -1):
            tail = buf[-n:]
            if any(s.startswith(tail) for s in self.stops):
                keep = n
                break
        self._pending = buf[len(buf) - keep:] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """At the end of the answer: what was held back, since no stop string came."""
        out, self._pending = ("" if self.hit is not None else self._pending), ""
        return out
