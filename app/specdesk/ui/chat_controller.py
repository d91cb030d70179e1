"""The chats and their answers: what the Chat tab shows and what the chat database keeps.

One answer at a time. The chat template and the context check run on the worker, so
a hostile template cannot freeze the window. What is stored follows what happened:
- the user's message is stored once its answer has started (it fits the context);
  if nothing started, the text goes back to the message box;
- an answer that ends, is stopped, or is cut short by closing the window is stored
  with what it wrote; one that fails keeps its partial text (``stop_reason`` "error");
- Regenerate replaces the old answer in one transaction, only once the new one exists.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QGuiApplication

from ..session import Generation, GenerationConfig, Session
from ..session.chatstore import ChatStore, Message
from ..session.fit import fit_chat
from ..session.text import auto_estimate_text
from ..session.text import for_the_app as text_for_app
from ..speculative.stats import Stats
from .chat_panel import ChatPanel, ChatSidebar
from .chat_view import Span
from .latency import LatencyProbe
from .settings import ChatSettings
from .stats_panel import StatsPanel
from .tasks import Task

#: auto's estimate in words is shown at most this often: as often as the side panel's
#: figures, since a new text re-lays out its word-wrapped label
ESTIMATE_EVERY_S = 0.5

#: How an answer's steps are made, on its worker: ``(session, prompt, config, cancel)``
#: -> the decoder's steps. The window passes the serve queue's (ServeController.chat_steps),
#: so a chat answer takes its place in line with the requests the app serves.
StepsOf = Callable[[Session, Sequence[int], GenerationConfig, Callable[[], bool]], Iterator]

STOP_REASONS = {"eos": "finished", "max_tokens": "max tokens reached", "cancelled": "stopped", "context": "context full"}


class ChatHost(Protocol):
    """What the chats need from the window."""

    session: Session | None
    settings: ChatSettings

    def busy_elsewhere(self) -> bool:
        """A load or a comparison runs: no answer may start."""

    def show_error(self, text: str) -> None: ...

    def clear_error(self) -> None: ...

    def set_status(self, text: str) -> None: ...

    def measured_speed(self, tokens_per_second: float) -> None:
        """Target alone's speed, measured by an answer without a draft."""

    def show_reference(self) -> None: ...


class ChatController(QObject):
    #: an answer is complete (or stopped): the Generation
    generation_finished = Signal(object)
    #: the answer is stored: the window is ready for the next one
    delivered = Signal()
    #: what can run now changed
    changed = Signal()
    #: a chat was opened with these settings (a chat keeps its own)
    settings_opened = Signal(object)
    #: the answer's worker has ended; give the message box the focus back
    ended = Signal()
    #: a step of the running answer, once it is shown (on the Qt thread, a frame's
    #: steps together, oldest first)
    step = Signal(object)

    def __init__(self, store: ChatStore, panel: ChatPanel, sidebar: ChatSidebar, stats: StatsPanel,
                 latency: LatencyProbe, host: ChatHost, steps_of: StepsOf, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.panel = panel
        self.view = panel.chat_view
        self.sidebar = sidebar
        self.stats = stats
        self.latency = latency
        self.host = host
        self.chat_id: int | None = None
        self.task: Task | None = None
        self.closing = False
        self._last_mem = 0.0
        self._last_estimate = 0.0
        self._auto = False  # the answer running lets auto choose k
        latency.tick.connect(self._frame)
        self._steps_of = steps_of

    # Lasts until the task's outcome has been handled on this thread, not while its
    # thread runs: a thread ends a moment before its queued result arrives.
    @property
    def generating(self) -> bool:
        """From Send until the answer is stored (``delivered``)."""
        return self.task is not None

    # -- chats ---------------------------------------------------------------------

    def refresh_list(self) -> None:
        self.sidebar.show_chats(self.store.chats(), self.chat_id)

    def select_or_create(self) -> None:
        chats = self.store.chats()
        if chats:
            self.open_chat(chats[0].id)
        else:
            self.new_chat()

    def new_chat(self) -> bool:
        if self.generating:
            return False
        c = self.store.create_chat("New chat", self.host.settings.to_dict())
        self.open_chat(c.id)
        return True

    def delete_chat(self) -> None:
        if self.chat_id is None or self.generating:
            return
        self.store.delete_chat(self.chat_id)
        self.chat_id = None
        self.select_or_create()

    def chosen(self, chat_id: int) -> None:
        if self.generating:
            self.refresh_list()  # the list stays on the chat being answered
            return
        if chat_id != self.chat_id:
            self.open_chat(chat_id)

    def open_chat(self, chat_id: int) -> None:
        chat = self.store.chat(chat_id)
        if chat is None:
            return
        self.chat_id = chat_id
        msgs = []
        last_stats = None
        for m in self.store.messages(chat_id):
            spans = [Span.from_list(x) for x in m.spans] if m.spans else None
            msgs.append((m.role, m.content, spans))
            if m.stats:
                last_stats = m.stats
        self.view.set_messages(msgs)
        if last_stats:
            self.stats.update_stats(Stats.from_dict(last_stats), live=False)
        self.refresh_list()
        self.settings_opened.emit(ChatSettings.from_dict(chat.settings) if chat.settings else self.host.settings)
        self.changed.emit()

    def save_settings(self, settings: ChatSettings) -> None:
        if self.chat_id is not None:
            self.store.save_settings(self.chat_id, settings.to_dict())

    def clear_chat(self) -> None:
        if self.chat_id is None or self.generating:
            return
        self.store.clear_messages(self.chat_id)
        self.view.set_messages([])
        self.changed.emit()

    def copy_answer(self) -> None:
        text = self.view.last_answer() or self.view.transcript()
        QGuiApplication.clipboard().setText(text)
        self.host.set_status("copied the last answer" if self.view.last_answer() else "copied the chat")

    # -- answers -------------------------------------------------------------------

    def send(self, text: str) -> bool:
        """Answer ``text`` in the current chat. The message is stored only once the
        answer starts (it fits the context); returns False when nothing was started."""
        if self.host.session is None:
            self.host.show_error("Load a target model first (Open… or fetch the default pair).")
            return False
        if self.generating or self.host.busy_elsewhere() or self.chat_id is None:
            return False
        self.host.clear_error()
        history = self._history() + [{"role": "user", "content": text}]
        return self._generate(history, new_user_text=text)

    def regenerate(self) -> None:
        """Answer the last question again; the old answer stays until the new one exists."""
        if self.host.session is None or self.generating or self.host.busy_elsewhere() or self.chat_id is None:
            return
        msgs = self.store.messages(self.chat_id)
        replaces = None
        if msgs and msgs[-1].role == "assistant":
            replaces = msgs[-1].id
            msgs = msgs[:-1]
        if not any(m.role == "user" for m in msgs):
            return
        self._generate([{"role": m.role, "content": m.content} for m in msgs], replaces=replaces)

    def stop(self, wait: bool = False) -> None:
        t = self.task
        if t is not None and t.isRunning():
            t.cancel()
            if wait:
                t.wait()
                QGuiApplication.processEvents()

    def _history(self) -> list[dict]:
        return [{"role": m.role, "content": m.content} for m in self.store.messages(self.chat_id)]

    def _generate(self, history: list[dict], new_user_text: str | None = None, replaces: int | None = None) -> bool:
        s = self.host.session
        cfg, instead = s.choose(self.host.settings.generation_config())
        chat_id = self.chat_id
        steps_of = self._steps_of

        def run(task: Task) -> Generation:
            # The chat template runs here, off the UI thread, in its bounded helper process;
            # Stop (and closing the window) cancels the render too.
            prompt, dropped = fit_chat(s, history, cfg.max_tokens, cancel=task.is_cancelled)
            s.check_fits(prompt, cfg.max_tokens)
            task.report("started", float(dropped))
            steps = []
            for step in steps_of(s, prompt, cfg, task.is_cancelled):
                steps.append(step)
                task.emit_step(step)
            return Generation(steps=steps, config=cfg, prompt=prompt)

        task = Task(run, "generation", keep_result_on_cancel=True)
        self.task = task
        state = {"started": False}

        def started(_msg: str, dropped: float) -> None:
            state["started"] = True
            if new_user_text is not None:  # stored even while the window closes: the answer follows
                self.store.add_message(chat_id, Message("user", new_user_text))
                chat = self.store.chat(chat_id)
                if chat and chat.title == "New chat":
                    self.store.rename_chat(chat_id, new_user_text.splitlines()[0][:48])
                    if not self.closing:
                        self.refresh_list()
            if dropped and not self.closing:
                self.host.set_status(f"the chat is longer than the context: the oldest {int(dropped)} message(s) were left out")

        task.progress.connect(started)
        task.succeeded.connect(lambda gen: self._on_generated(gen, chat_id, replaces))
        task.failed.connect(lambda msg: self._on_failed(msg, chat_id, replaces, new_user_text, state["started"]))
        task.was_cancelled.connect(lambda: self._on_failed("", chat_id, replaces, new_user_text, state["started"]))
        task.finished.connect(self.ended)
        if new_user_text is not None:
            self.view.add_message("user", new_user_text)
        self.stats.reset()
        self._auto = cfg.k == "auto"
        self.host.show_reference()
        self.view.begin_answer()
        self.panel.run_info.setText(f"{cfg.describe()} · T={cfg.sampling.temperature:g}" + (f" · {instead}" if instead else ""))
        self.latency.start()
        task.start()
        self.changed.emit()
        return True

    def _frame(self) -> None:
        """One frame of the running answer (the frame clock's tick): show the steps
        its worker streamed since the last frame."""
        task = self.task
        steps = task.take_steps() if task is not None else []
        if not steps:
            return
        view = self.view
        for step in steps:
            if step.tokens:
                view.append_tokens(step.tokens)  # also while closing: the stored answer comes from the view
        view.flush()
        if self.closing:
            return
        for step in steps:
            self.stats.update_stats(step.stats)  # every step is a point of the speed chart
        now = time.monotonic()
        if self._auto and now - self._last_estimate > ESTIMATE_EVERY_S:
            self._last_estimate = now
            self._show_estimate()
        session = self.host.session
        if session is not None and now - self._last_mem > 1.0:
            self._last_mem = now
            self.stats.set_memory(session.memory())
        for step in steps:
            self.step.emit(step)

    def _show_estimate(self) -> None:
        """auto's current estimate and why it drafts or not (read as one object: the
        worker replaces it whole at each step)."""
        session = self.host.session
        estimate = session.auto_estimate() if session is not None else None
        self.stats.set_estimate(auto_estimate_text(estimate) if estimate is not None else "")

    def _store_answer(self, chat_id: int, gen: Generation | None, replaces: int | None) -> str:
        """Store what the view shows of the answer; returns its text ("" when it wrote nothing)."""
        if self.view.live_text:
            text, spans = self.view.end_answer()
        else:
            # stopped before its first token: nothing is stored, so nothing is shown
            # (an empty answer in the view would enable Regenerate and Copy on nothing)
            self.view.discard_answer()
            text, spans = "", []
        stats = None
        if gen is not None and gen.steps:
            stats = gen.stats.to_dict()
            stats["stop_reason"] = gen.stop_reason
            stats["config"] = gen.config.describe()
        if text:
            self.store.replace_answer(chat_id, Message("assistant", text, [sp.to_list() for sp in spans], stats), replaces)
        return text

    def _on_generated(self, gen: Generation | None, chat_id: int, replaces: int | None) -> None:
        self._frame()  # the steps streamed since the last frame
        self.latency.stop()
        if gen is None:
            self._delivered()
            return
        self._store_answer(chat_id, gen, replaces)
        if self.closing:
            return  # stored; nothing more to show
        if gen.steps:
            self.stats.update_stats(gen.stats, live=False)
            if self._auto:
                self._show_estimate()
        if replaces is not None and chat_id == self.chat_id:
            self.open_chat(chat_id)  # shows the new answer in place of the old one
        if gen.config.baseline and gen.steps and gen.stats.generated >= 16 and gen.stats.tokens_per_second:
            self.host.measured_speed(gen.stats.tokens_per_second)
        self.host.show_reference()  # the estimate follows the target steps this answer timed
        if self.host.session is not None:
            self.stats.set_memory(self.host.session.memory())
        self.host.set_status(f"{STOP_REASONS.get(gen.stop_reason, gen.stop_reason or '')} · "
                             f"event loop lag max {self.latency.max_ms:.0f} ms")
        self.refresh_list()
        self._delivered()
        self.generation_finished.emit(gen)

    def _on_failed(self, msg: str, chat_id: int, replaces: int | None, new_user_text: str | None,
                   started: bool) -> None:
        """The answer failed (``msg``) or was stopped before its first step (no ``msg``)."""
        self._frame()  # the steps streamed since the last frame
        self.latency.stop()
        text, spans = self.view.end_answer()
        if started and text and replaces is None:
            # keep what was written before the failure
            self.store.add_message(chat_id, Message("assistant", text, [sp.to_list() for sp in spans],
                                                    {"stop_reason": "error", "error": msg}))
        if self.closing:
            return
        if not started and new_user_text is not None and not self.panel.input.toPlainText().strip():
            self.panel.input.setPlainText(new_user_text)  # nothing was sent: the message is back in the box
        if chat_id == self.chat_id:
            self.open_chat(chat_id)
        if msg:
            self.host.show_error(text_for_app(msg))
        else:
            self.host.set_status("stopped")
        self._delivered()

    def _delivered(self) -> None:
        """The answer is stored: the window is ready for the next one (the worker
        thread may take a moment more to end; closing still waits for it)."""
        self.task = None
        self.delivered.emit()
