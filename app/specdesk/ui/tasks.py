"""Long work off the Qt thread.

A Task runs a plain Python function in its own QThread. The function gets the task
as its argument: it calls ``task.report(message, fraction)`` for progress,
``task.emit_step(obj)`` for streaming results, and checks ``task.cancelled`` (or
passes ``task.is_cancelled`` as a cancel callback) between units of work. Views
only subscribe to the signals; no view code runs on the worker thread.

Streamed results are not signalled one by one: ``emit_step`` only appends to a
buffer, and the Qt thread takes what has arrived (``take_steps``) at its own pace,
on the frame clock it repaints by. A signal per step woke the Qt thread 30 times a
second during an answer, and on a small machine each wake-up takes a core from
llama.cpp's threads, which then wait for each other at their next barrier.

Every running task is registered, so the window can stop them all on close and the
tests can check that none is left behind.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import deque
from typing import Any, Callable

from PySide6.QtCore import QThread, Signal

from ..errors import Cancelled, SpecDeskError

log = logging.getLogger(__name__)

_live: "weakref.WeakSet[Task]" = weakref.WeakSet()
_strong: set["Task"] = set()  # keep running tasks alive even if the caller drops them
_lock = threading.Lock()


def running_tasks() -> list["Task"]:
    """The tasks still working (an abandoned one is not waited for)."""
    with _lock:
        return [t for t in _live if t.isRunning() and not t.abandoned]


class Task(QThread):
    progress = Signal(str, float)
    succeeded = Signal(object)
    failed = Signal(str)
    was_cancelled = Signal()

    def __init__(self, fn: Callable[["Task"], Any], name: str = "task", parent=None,
                 keep_result_on_cancel: bool = False) -> None:
        """``keep_result_on_cancel``: a cancelled run still reports its result through
        ``succeeded`` (a stopped answer keeps what it wrote). Otherwise cancelling is
        final: only ``was_cancelled`` is emitted, and a result that holds resources
        (anything with ``close()``, e.g. a Session loaded just as Cancel was pressed)
        is closed instead of being handed over."""
        super().__init__(parent)
        self._fn = fn
        self.keep_result_on_cancel = keep_result_on_cancel
        self._cancel = threading.Event()
        self.name = name
        self.setObjectName(name)
        self.result: Any = None
        self.error: str | None = None
        self._steps: deque[Any] = deque()  # streamed results not yet taken (appends and pops are atomic)
        #: its thread is stuck for good (parked inside llama.cpp after an RPC server
        #: was lost): its outcome was delivered by hand, and nobody waits for it
        self.abandoned = False
        with _lock:
            _live.add(self)
            _strong.add(self)
        self.finished.connect(self._release)

    def _release(self) -> None:
        with _lock:
            _strong.discard(self)

    # -- called from the worker thread -------------------------------------------------

    def report(self, message: str, fraction: float) -> bool:
        self.progress.emit(message, float(fraction))
        return not self._cancel.is_set()

    def emit_step(self, obj: Any) -> None:
        """Hand ``obj`` to the Qt thread, which takes it with the next ``take_steps``
        (no signal, so no wake-up of its own)."""
        self._steps.append(obj)

    def is_cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def run(self) -> None:  # worker thread
        try:
            self.result = self._fn(self)
        except Cancelled:
            self.was_cancelled.emit()
            return
        except SpecDeskError as e:
            self.error = str(e)
            self.failed.emit(str(e))
            return
        except Exception as e:  # noqa: BLE001 - a bug must reach the user as a message, not kill the app
            log.exception("%s failed", self.name)
            self.error = f"unexpected error in {self.name}: {type(e).__name__}: {e}"
            self.failed.emit(self.error)
            return
        if self._cancel.is_set() and not self.keep_result_on_cancel:
            self._discard(self.result)
            self.result = None
            self.was_cancelled.emit()
            return
        self.succeeded.emit(self.result)

    @staticmethod
    def _discard(result: Any) -> None:
        close = getattr(result, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001 - freeing a result nobody wants must not fail the task
                log.exception("could not close a cancelled task's result")

    # -- called from the Qt thread -----------------------------------------------------

    def cancel(self) -> None:
        self._cancel.set()

    def take_steps(self) -> list[Any]:
        """The streamed results that arrived since the last call, oldest first. Every
        result emitted before the task's outcome signal is here by the time that
        signal is handled."""
        out = []
        pop = self._steps.popleft
        try:
            while True:
                out.append(pop())
        except IndexError:
            return out

    def abandon(self, message: str) -> None:
        """Its thread will never come back (parked inside llama.cpp on a lost RPC
        server): report ``message`` as its failure now, and stop counting it as running
        (closing the window does not wait for it; the process exits without it)."""
        if self.abandoned or not self.isRunning():
            return
        self.abandoned = True
        self._cancel.set()
        self.error = message
        self.failed.emit(message)

    def stop_and_wait(self, ms: int = 30000) -> bool:
        self.cancel()
        return self.wait(ms)
