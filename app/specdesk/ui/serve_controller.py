"""Serving from the app: the Serve switch, the server on a background thread, and the
one queue that the served requests and the chat answers share.

- Every chat answer goes through ``chat_steps``: it takes a place in the same line as
  the requests (never refused for a full queue), so the pair never runs two
  generations at once, and while a request runs the chat shows that its answer waits.
- Each running request's statistics go live to the side panel (with a line saying
  which request they are), and the Serve tab lists every request.
- The server starts and stops off the Qt thread; it is restarted on a newly loaded
  pair and stopped when the models are unloaded or the window closes.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Iterator, Protocol, Sequence

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel

from ..errors import SpecDeskError
from ..server.queue import GenerationQueue, Ticket
from ..session import GenerationConfig, Session
from .chat_panel import ChatPanel
from .latency import FRAME_MS
from .serve_panel import ServeSettings, ServeTab
from .settings import ChatSettings
from .stats_panel import StatsPanel
from .tasks import Task

log = logging.getLogger(__name__)

APP_KIND = "app"
APP_CLIENT = "this app (chat)"
#: A running request's row in the list follows its steps at most this often.
ROW_EVERY_S = 0.25
START_WAIT_S = 15.0


class ServeHost(Protocol):
    session: Session | None
    settings: ChatSettings

    def show_error(self, text: str) -> None: ...

    def set_status(self, text: str) -> None: ...

    def show_reference(self) -> None: ...

    def can_serve(self) -> str | None:
        """Why serving cannot start now (a comparison runs, a load), or None."""


class ServeController(QObject):
    #: serving started or stopped
    changed = Signal()
    #: a queue event, carried from the thread where it happened to the Qt thread
    _event = Signal(str, object, object)

    def __init__(self, host: ServeHost, tab: ServeTab, stats: StatsPanel, chat_panel: ChatPanel,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.tab = tab
        self.stats = stats
        self.chat_panel = chat_panel
        self.queue = GenerationQueue(tab.settings().queue)
        self.queue.subscribe(self._listen)
        self._event.connect(self._on_event)
        # A served request's steps wait here for the next frame (at most FRAME_MS apart
        # while a request runs), not a signal each: see _listen.
        self._steps: deque[tuple[Ticket, object]] = deque()
        self._frames = QTimer(self)
        self._frames.setInterval(FRAME_MS)
        self._frames.timeout.connect(self._frame)
        self.server = None  # runner.ServerThread while serving
        self.served: Session | None = None
        self._starting: Task | None = None
        self._stopping: Task | None = None
        self._row_shown: dict[int, float] = {}
        self._chat_waiting: Ticket | None = None
        self._trace: list = []  # the running request's statistics, step by step (to show them again)
        self._run_info = ""
        self.toggle = QAction("Serve", self)
        self.toggle.setObjectName("serveToggle")
        self.toggle.setCheckable(True)
        self.toggle.toggled.connect(self.set_serving)
        tab.switched.connect(self.set_serving)
        # the switch on the model bar says what it exposes, as the Serve tab does
        for changed in (tab.others.toggled, tab.port.valueChanged, tab.key.textChanged):
            changed.connect(self._label_toggle)
        self._label_toggle()
        # which request the side panel shows, above its figures
        self.source = QLabel("")
        self.source.setObjectName("statsSource")
        self.source.setWordWrap(True)
        self.source.setStyleSheet("color:#1c7ed6; font-size: 11px;")
        self.source.setVisible(False)
        stats.layout().insertWidget(0, self.source)

    # -- state ------------------------------------------------------------------------

    @property
    def serving(self) -> bool:
        """From the switch until serving has stopped (starting and stopping included)."""
        return self.server is not None or self._starting is not None

    @property
    def url(self) -> str | None:
        return self.server.url if self.server is not None else None

    def _label_toggle(self) -> None:
        """The model bar's switch: "Serve (network)" and the Serve tab's warning when other
        machines may connect, so that one click there never exposes more than it says."""
        s = self.tab.settings()
        if s.others:
            self.toggle.setText("Serve (network)")
            self.toggle.setToolTip(f"Serve the loaded pair to every machine that can reach this one (port {s.port}), "
                                   f"{self.tab.key_words().replace(' here', ' on the Serve tab')}; requests and answers "
                                   "travel unencrypted (plain HTTP)")
        else:
            self.toggle.setText("Serve")
            self.toggle.setToolTip(f"Serve the loaded pair at an OpenAI-compatible endpoint on this machine only "
                                   f"(127.0.0.1:{s.port}); settings on the Serve tab")

    def _show_switch(self, on: bool) -> None:
        self.toggle.blockSignals(True)
        self.toggle.setChecked(on)
        self.toggle.blockSignals(False)
        self.tab.set_switch(on)

    # -- chat answers in the same line ----------------------------------------------------

    def chat_steps(self, session: Session, prompt: Sequence[int], config: GenerationConfig, cancel) -> Iterator:
        """A chat answer's steps, after the requests ahead of it (on the answer's worker thread)."""
        ticket = self.queue.submit(APP_CLIENT, APP_KIND, len(prompt), config, bounded=False)
        yield from self.queue.run(ticket, session, prompt, config, cancel)

    # -- the switch -------------------------------------------------------------------------

    def set_serving(self, on: bool) -> None:
        if on and not self.serving:
            if self._stopping is None:
                self.start()
            else:
                self._show_switch(True)  # starts once the last server has stopped
                return
        elif not on and self.serving:
            self.stop()
        self._show_switch(self.serving if on else False)

    def start(self) -> None:
        session = self.host.session
        why = "Load a pair first: serving exposes the loaded models." if session is None else self.host.can_serve()
        if why:
            self.host.show_error(why)
            self._show_switch(False)
            return
        s = self.tab.start_settings()  # never other machines without a key: one is made if need be
        self.queue.capacity = s.queue
        cfg, _ = session.choose(self.host.settings.generation_config())
        task = Task(lambda _t: _start_server(session, self.queue, s, cfg), "start server")
        self._starting = task
        task.succeeded.connect(lambda srv: self._started(srv, session, s))
        task.failed.connect(self._start_failed)
        self.tab.set_serving(None, f"starting on port {s.port}…")
        task.start()
        self.changed.emit()

    def _started(self, server, session: Session, s: ServeSettings) -> None:
        self._starting = None
        if not self.toggle.isChecked() or self.host.session is not session:
            server.stop()  # switched off, or another pair loaded, while it started
            if self.toggle.isChecked() and self.host.session is not None:
                self.start()
            self.changed.emit()
            return
        self.server, self.served = server, session
        d = session.draft
        model = session.target.spec.path.stem
        self.tab.set_serving(server.url, f"serving {model!r}{f' with draft {d.name}' if d else ''} at {server.url}/v1"
                             + ("" if s.api_key else " · no API key") + (" · other machines may connect" if s.others else ""))
        self.host.set_status(f"serving at {server.url}/v1")
        self.changed.emit()

    def _start_failed(self, msg: str) -> None:
        self._starting = None
        self._show_switch(False)
        self.tab.set_serving(None, "not serving")
        self.host.show_error(msg)
        self.changed.emit()

    def stop(self, wait: bool = False) -> None:
        """Stop serving: the server's requests are cancelled (the chat's are kept)."""
        server, self.server, self.served = self.server, None, None
        self._show_switch(False)
        self.tab.set_serving(None, "not serving")
        if server is None:
            return  # still starting: _started stops it
        if wait:
            server.stop()
        else:
            task = Task(lambda _t: server.stop(), "stop server")
            self._stopping = task
            task.finished.connect(lambda: self._stopped(task))
            task.start()
        self.host.set_status("stopped serving")
        self.changed.emit()

    def _stopped(self, task: Task) -> None:
        if self._stopping is task:
            self._stopping = None
            if self.toggle.isChecked() and not self.serving:
                self.start()  # switched on again while it stopped

    def session_changed(self, session: Session | None) -> None:
        """A pair was loaded (or unloaded): serve the new one, or stop."""
        if self.server is None or session is self.served:
            return
        self.stop(wait=True)
        if session is None:
            self.host.set_status("stopped serving: the models were unloaded")
            return
        self._show_switch(True)
        self.start()

    def forsake_running(self, why: str) -> None:
        """The running answer's thread is lost for good (see MainWindow.rpc_lost): the
        next answer or request must not wait for it, and serving stops: the pair is gone."""
        self.queue.forsake_running(why)
        if self.server is not None:
            self.stop(wait=True)
            self.host.set_status("stopped serving: " + why)

    def close(self) -> None:
        """The window closes: stop serving and wait for it."""
        self.toggle.blockSignals(True)
        self.stop(wait=True)

    # -- what the queue says -----------------------------------------------------------------

    def _listen(self, event: str, t: Ticket, step) -> None:
        """The queue's listener, on the thread where the event happened. A step wakes
        nobody: the chat's own steps reach its view through its task, and a served
        request's wait for the next frame. Only the rare events (queued, started,
        finished, rejected) are signalled to the Qt thread."""
        if event == "step":
            if t.kind != APP_KIND:
                self._steps.append((t, step))
            return
        self._event.emit(event, t, step)

    def _frame(self) -> None:
        """Show the served requests' steps that arrived since the last frame."""
        pop = self._steps.popleft
        shown: dict[int, Ticket] = {}
        now = time.monotonic()
        while self._steps:
            t, step = pop()
            self._trace.append(step.stats)
            self.stats.update_stats(step.stats)
            if now - self._row_shown.get(t.id, 0.0) >= ROW_EVERY_S:
                shown[t.id] = t
        for t in shown.values():
            self._row_shown[t.id] = now
            self.tab.show_ticket(t)

    def _on_event(self, event: str, t: Ticket, step) -> None:
        if t.kind == APP_KIND:
            self._chat_event(event, t)
            return
        self._frame()  # its steps come before what ended it
        if event == "started":
            self._frames.start()
        elif event == "finished" and self.queue.running is None:
            self._frames.stop()
        self._row_shown[t.id] = time.monotonic()
        self.tab.show_ticket(t)
        if event == "started":
            self._trace = []
            self.stats.reset()
            self.host.show_reference()
            self.source.setText(f"Statistics of request #{t.id} from {t.client} ({t.config.describe() if t.config else ''})")
            self.source.setVisible(True)
        elif event == "finished":
            self._trace = []
            self._row_shown.pop(t.id, None)
            if t.stats is not None and self.source.isVisible():
                self.stats.update_stats(t.stats, live=False)
        self._show_chat_wait()

    def _chat_event(self, event: str, t: Ticket) -> None:
        if event == "queued":
            self._chat_waiting = t
            self._run_info = self.chat_panel.run_info.text()
            self._show_chat_wait()
            if self._trace:  # the chat cleared the panel for its answer: the running request's figures come back
                self.stats.reset()
                for st in self._trace:
                    self.stats.update_stats(st)
        elif event in ("started", "finished") and self._chat_waiting is t:
            self._chat_waiting = None
            self.chat_panel.run_info.setText(self._run_info)
            self.chat_panel.run_info.setToolTip("")
            self.chat_panel.run_info.setStyleSheet("color:#868e96;")
            if event == "started":
                self.host.set_status("")
        if event == "started":
            self.source.setVisible(False)  # the panel shows the chat's answer again
        if event in ("queued", "started", "finished"):
            self.tab.show_ticket(t)

    def _show_chat_wait(self) -> None:
        t = self._chat_waiting
        if t is None:
            return
        ahead = self.queue.position(t)
        if not ahead:
            return
        requests = f"{ahead} request{'s' if ahead > 1 else ''}"
        self.chat_panel.run_info.setText(f"queued behind {requests}")
        self.chat_panel.run_info.setToolTip("The pair answers one request at a time: this answer starts when the "
                                            "requests ahead of it end. Stop takes it out of the line.")
        self.chat_panel.run_info.setStyleSheet("color:#e8590c; font-weight: 600;")
        self.host.set_status(f"queued: the answer waits for {requests} the server is answering (Stop leaves the line)")


def _start_server(session: Session, queue: GenerationQueue, s: ServeSettings, cfg: GenerationConfig):
    """Import the web stack, bind the port and start serving (on a worker thread)."""
    from ..server.app import ServeOptions, body_limit, create_app
    from ..server.runner import ServerThread, bind

    if s.others and not s.api_key:  # start_settings makes one: this is the last line of defence
        raise SpecDeskError("refusing to serve to other machines without an API key")

    sock = bind(s.host, s.port)
    app = create_app(session, queue, ServeOptions(defaults=cfg, default_max_tokens=cfg.max_tokens, api_key=s.api_key or None,
                                                  max_body_bytes=body_limit(session.target.ctx.n_ctx), host=s.host))
    server = ServerThread(app, sock, on_exit=lambda: queue.cancel_all(keep=lambda t: t.kind == APP_KIND))
    server.start()
    end = time.monotonic() + START_WAIT_S
    while not server.started:
        if not server.alive or time.monotonic() > end:
            server.stop()
            raise SpecDeskError(f"the server did not start on port {s.port}: {server.error or 'no answer'}")
        time.sleep(0.02)
    return server
