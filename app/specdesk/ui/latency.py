"""Event-loop latency: how late a periodic QTimer fires while the app works.

A responsive UI handles each event within a few milliseconds; if model work ran
on the Qt thread, the timer would fire hundreds of milliseconds late.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, Qt, QTimer


class LatencyProbe(QObject):
    def __init__(self, parent: QObject | None = None, interval_ms: int = 20) -> None:
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

    @property
    def max_ms(self) -> float:
        return max(self.samples, default=0.0)

    def percentile(self, q: float) -> float:
        if not self.samples:
            return 0.0
        xs = sorted(self.samples)
        return xs[min(len(xs) - 1, int(q * len(xs)))]
