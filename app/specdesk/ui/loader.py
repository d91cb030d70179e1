"""Loading a pair in the app: one load at a time, the newest request wins.

A request is checked first (files, pair, memory: ``session.preflight``), then, if the
memory is short, the user is asked, then the pair is loaded; each stage runs as a
Task off the UI thread. Load while a load runs cancels it and the newest request runs
when it has ended. A cancelled or superseded load never hands over its session: the
session is closed instead.

The loader owns no session: it hands a loaded one to the window (``loaded``), which
installs it, or closes it when it cannot be used any more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from PySide6.QtCore import QObject, Signal

from ..session import GenerationConfig, ModelSpec, Session
from ..session.preflight import Preflight, preflight
from .tasks import Task


@dataclass(frozen=True)
class LoadRequest:
    target: ModelSpec
    draft: ModelSpec | None
    confirm_memory: bool
    #: the configuration to warm the loaded pair for (from the session: whether a draft
    #: loaded, whether its heads can draft), before it is handed over; None: no warm-up,
    #: neither then nor before its answers (the setting off)
    warm: Callable[[Session], GenerationConfig] | None = None


def load_and_warm(task, req: LoadRequest, plan, offload) -> Session | None:
    """``Session.load`` then, unless the load was cancelled, the warm-up (in the same
    task, off the UI thread): the first answer pays no first call."""
    session = Session.load(req.target, req.draft, progress=task.report, translate=True, placement=plan,
                           offload=offload)
    session.warmup = req.warm is not None
    if req.warm is None or task.is_cancelled():
        return session
    try:
        task.report("warming up the models (untimed)…", 1.0)
        session.warm_up(req.warm(session))
    except BaseException:
        session.close()
        raise
    return session


class PairLoader(QObject):
    #: (message, fraction or None): a stage is running
    busy = Signal(str, object)
    #: (message): no load runs any more (cancelled, declined, or failed before loading)
    idle = Signal(str)
    #: (message): the check failed (a bad file, an unusable pair); nothing was loaded
    check_failed = Signal(str)
    #: (message): loading failed
    load_failed = Signal(str)
    #: (message): the check's summary (sizes, memory, vocabulary)
    checked = Signal(str)
    #: (Session): loaded; the receiver installs it or closes it
    loaded = Signal(object)
    #: the loading state changed (the window enables and disables what depends on it)
    changed = Signal()

    def __init__(self, confirm_memory: Callable[[list[str]], bool], parent: QObject | None = None) -> None:
        """``confirm_memory(shortfalls)`` asks whether to load when more memory is
        needed than is free (a modal question on the UI thread)."""
        super().__init__(parent)
        self._confirm = confirm_memory
        self._task: Task | None = None  # the check, then the load
        self._pending: LoadRequest | None = None
        self._closing = False

    # Loading lasts until the task's outcome has been handled on this thread, not while
    # its thread runs: a thread ends a moment before its queued result arrives, and
    # work started in that moment would meet a result meant for the old request.
    @property
    def loading(self) -> bool:
        """From ``request`` until the outcome of its check or load has been handled."""
        return self._task is not None

    @property
    def task(self) -> Task | None:
        """The running check or load, if any."""
        return self._task

    @property
    def pending(self) -> LoadRequest | None:
        """The newest request, waiting for the running one to end."""
        return self._pending

    def request(self, req: LoadRequest) -> None:
        if self._closing:
            return
        if self.loading:
            self._pending = req
            self._task.cancel()
            return
        self._start_check(req)

    def cancel(self) -> None:
        """Cancel the running load and forget the waiting one."""
        self._pending = None
        if self._task is not None and self._task.isRunning():
            self._task.cancel()

    def close(self) -> None:
        """The window closes: nothing new starts, and a session that still arrives is closed."""
        self._closing = True
        self._pending = None

    # -- stages --------------------------------------------------------------------

    def _start_check(self, req: LoadRequest) -> None:
        task = Task(lambda t: preflight(req.target, req.draft, progress=t.report), "model check")
        self._task = task
        task.progress.connect(lambda m, f: self.busy.emit(m, None))
        task.failed.connect(lambda msg: (self._finish(task), self.idle.emit(""), self.check_failed.emit(msg)))
        task.was_cancelled.connect(lambda: (self._finish(task), self.idle.emit("cancelled")))
        task.succeeded.connect(lambda res: self._after_check(res, req, task))
        task.finished.connect(self.changed)
        task.start()
        self.changed.emit()

    def _finish(self, task: Task) -> None:
        """The request ``task`` served has its outcome (loaded, failed, cancelled or
        declined): the next load may start, and the newest request that waited runs.
        Called from the outcome's handler, not from ``finished``."""
        if task is not self._task:
            return
        self._task = None
        if self._closing:
            return
        req, self._pending = self._pending, None
        if req is not None:
            self._start_check(req)
        self.changed.emit()

    def _after_check(self, pre: Preflight | None, req: LoadRequest, check: Task) -> None:
        if self._closing:
            return
        if pre is None or self._pending is not None or self._task is not check:
            self._finish(check)  # a newer request runs next
            return
        msg = pre.summary()
        if pre.compat is not None and not pre.compat:
            # another vocabulary: the pair loads translated (Session.load(translate=True))
            msg += f" · translated draft: {pre.compat.reason}"
        self.checked.emit(msg + ("" if pre.fits else " — more than is free"))
        if req.confirm_memory and not pre.fits:
            yes = self._confirm(list(pre.shortfalls))
            if self._closing:
                return
            if not yes or self._pending is not None:
                self._finish(check)  # declined, or asked again meanwhile: the newer request runs
                self.idle.emit("")
                return
        self._start_load(req, msg, pre)  # the check's request goes on as this load, with its plan

    def _start_load(self, req: LoadRequest, estimate_msg: str, pre: Preflight) -> None:
        tspec, plan, offload = req.target, pre.plan, pre.offload
        # a draft with another vocabulary drafts translated text (the picker marks it);
        # the target goes where the check planned (each RPC server registered once), and
        # auto GPU layers as the check fitted them
        task = Task(lambda t: load_and_warm(t, req, plan, offload), "model load")
        self._task = task
        task.progress.connect(lambda m, f: self.busy.emit(f"{m}  ({estimate_msg})", f))
        task.succeeded.connect(lambda session: self._load_succeeded(task, session))
        task.failed.connect(lambda msg: (self._finish(task), self.load_failed.emit(msg)))
        task.was_cancelled.connect(lambda: (self._finish(task), self.idle.emit("loading cancelled")))
        task.finished.connect(self.changed)
        self.busy.emit(f"loading {tspec.path.name}…", 0.0)
        task.start()
        self.changed.emit()

    def _load_succeeded(self, task: Task, session: Session | None) -> None:
        if session is None:
            self._finish(task)
            return
        if self._closing or self._pending is not None or task is not self._task:
            session.close()  # the window closes, or a newer request replaces it at once
            self._finish(task)
            return
        self._task = None  # loaded: ready before the window announces the new pair
        self.loaded.emit(session)
