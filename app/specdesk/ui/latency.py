"""The answer's frame clock, which also measures event-loop latency.

While an answer runs, the Qt thread wakes on this one periodic timer: each tick takes
the steps the worker has streamed and shows them (the chat's text, the side panel's
figures), and records how late the tick fired. A responsive UI handles each tick
within a few milliseconds; if model work ran on the Qt thread, ticks would come
hundreds of milliseconds late.

One timer does both jobs because on a small machine every wake-up of the Qt thread
takes a core from llama.cpp's threads (which then wait for each other at their next
barrier): a probe of its own at 50 Hz and a signal per step added about 80 wake-ups
a second to the 12 the stream needs.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, Qt, QTimer, Signal

#: The frame interval: the streamed text is written at most this often. Fast enough
#: to read as a stream, slow enough to leave the cores to llama.cpp.
FRAME_MS = 80


class LatencyProbe(QObject):
    #: one frame: show what has arrived since the last one
    tick = Signal()

    def __init__(self, parent: QObject | None = None, interval_ms: int = FRAME_MS) -> None:
        super().__init__(parent)
        self.interval_ms = interval_ms
        self._timer = QTimer(self)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)
        self._last = 0.0
        self.samples: list[float] = []  # lateness in ms per tick

    def start(self) -> None:
        self.samples = []
        self._last = time.perf_counter()
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def _tick(self) -> None:
        now = time.perf_counter()
        self.samples.append(max(0.0, (now - self._last) * 1000.0 - self.interval_ms))
        self._last = now
        self.tick.emit()

    @property
    def max_ms(self) -> float:
        return max(self.samples, default=0.0)

    def percentile(self, q: float) -> float:
        if not self.samples:
            return 0.0
        xs = sorted(self.samples)
        return xs[min(len(xs) - 1, int(q * len(xs)))]
