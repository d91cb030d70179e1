"""One generation at a time over a Session, in the order the requests came.

A :class:`GenerationQueue` is a fair FIFO in front of the one pair: ``submit`` takes a
place in line (or raises :class:`QueueFull` when ``capacity`` requests already wait),
and ``run`` waits for the ticket's turn on the caller's own thread, then streams the
generation step by step. The HTTP server runs each request this way; the app's chat
answers wait in the same line while it serves. No web framework here.

A ticket cancelled while it waits leaves the line at once; one cancelled while it runs
ends at the next step boundary (``Session.generate`` checks between propose/verify
passes), and the next ticket starts when that step is done. ``steps_after_cancel``
counts the steps that still came after the cancel, so that bound is checked, not
assumed.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from ..errors import Cancelled, SpecDeskError
from ..session import GenerationConfig, Session
from ..speculative.decoder import Step
from ..speculative.stats import Stats

log = logging.getLogger(__name__)

#: Finished tickets kept for the request list and ``/requests``.
RECENT = 200
#: How often a waiting ticket with a cancel callback looks at it.
POLL_S = 0.05

QUEUED, RUNNING, DONE, CANCELLED, FAILED = "queued", "running", "done", "cancelled", "failed"
#: What a failed ticket says (``/requests``, the request list) and a client is told of a
#: generation that failed for a reason nobody foresaw: its own text may name files.
UNEXPECTED = "unexpected error in the generation (the server's log says why)"

Listener = Callable[[str, "Ticket", "Step | None"], None]


class QueueFull(SpecDeskError):
    """Every place in the line is taken; try again after ``retry_after`` seconds."""

    def __init__(self, waiting: int, capacity: int, retry_after: int) -> None:
        super().__init__(f"the server is busy: {waiting} request(s) already wait for the one running "
                         f"(queue of {capacity}); retry in {retry_after} s")
        self.waiting = waiting
        self.capacity = capacity
        self.retry_after = retry_after


@dataclass(eq=False)
class Ticket:
    """One request's place in the line, and what became of it."""

    id: int
    client: str
    kind: str
    prompt_tokens: int
    config: GenerationConfig | None
    queue: "GenerationQueue" = field(repr=False)
    submitted_at: float = field(default_factory=time.time)  # wall clock, for people
    state: str = QUEUED
    started_at: float | None = None
    finished_at: float | None = None
    stats: Stats | None = None
    stop_reason: str | None = None
    error: str | None = None
    #: why it was cancelled ("client gone", "stop string", ...), None if it was not
    cancel_reason: str | None = None
    steps_after_cancel: int = 0
    #: whose prompt it is, for the KV cache (``Session.generate``): None for the app's own chat
    owner: str | None = field(default=None, repr=False)
    _t_submit: float = field(default_factory=time.monotonic, repr=False)
    _t_start: float | None = field(default=None, repr=False)
    _t_end: float | None = field(default=None, repr=False)

    def cancel(self, reason: str = "cancelled") -> None:
        """Leave the line at once, or stop at the next step boundary when running."""
        q = self.queue
        with q._cond:
            if self.cancel_reason is None:
                self.cancel_reason = reason
            waiting = self in q._waiting
            if waiting:
                q._waiting.remove(self)
            q._cond.notify_all()
        if waiting:
            q._end(self, CANCELLED, "cancelled")

    @property
    def cancelled(self) -> bool:
        return self.cancel_reason is not None

    @property
    def queue_seconds(self) -> float:
        """Time spent waiting in line (so far, while it still waits)."""
        end = self._t_start if self._t_start is not None else (self._t_end or time.monotonic())
        return max(0.0, end - self._t_submit)

    @property
    def run_seconds(self) -> float | None:
        if self._t_start is None:
            return None
        return max(0.0, (self._t_end or time.monotonic()) - self._t_start)

    @property
    def finished(self) -> bool:
        return self.state in (DONE, CANCELLED, FAILED)

    def to_dict(self) -> dict:
        st = self.stats
        return {
            "id": self.id,
            "client": self.client,
            "kind": self.kind,
            "state": self.state,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "queue_ms": round(1000 * self.queue_seconds, 3),
            "run_ms": None if self.run_seconds is None else round(1000 * self.run_seconds, 3),
            "prompt_tokens": self.prompt_tokens,
            "generated": st.generated if st else 0,
            "steps": st.steps if st else 0,
            "tokens_per_second": st.tokens_per_second if st else None,
            "acceptance_rate": st.acceptance_rate if st else None,
            "config": self.config.describe() if self.config else None,
            "stop_reason": self.stop_reason,
            "error": self.error,
            "cancel_reason": self.cancel_reason,
            "steps_after_cancel": self.steps_after_cancel,
        }


class GenerationQueue:
    """A bounded FIFO of generations over one pair: one runs, up to ``capacity`` wait."""

    def __init__(self, capacity: int = 8) -> None:
        if capacity < 0:
            raise SpecDeskError(f"the queue must hold 0 or more requests, got {capacity}")
        self.capacity = capacity
        self._cond = threading.Condition()
        self._waiting: deque[Ticket] = deque()
        self._running: Ticket | None = None
        self._recent: deque[Ticket] = deque(maxlen=RECENT)
        self._ids = itertools.count(1)
        self._listeners: list[Listener] = []
        self._durations: deque[float] = deque(maxlen=8)

    # -- what is in it --------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Tickets waiting (the running one not counted)."""
        with self._cond:
            return len(self._waiting)

    @property
    def running(self) -> Ticket | None:
        with self._cond:
            return self._running

    def waiting(self) -> list[Ticket]:
        with self._cond:
            return list(self._waiting)

    def recent(self) -> list[Ticket]:
        """Finished tickets, oldest first."""
        with self._cond:
            return list(self._recent)

    def position(self, ticket: Ticket) -> int | None:
        """How many tickets are ahead of ``ticket`` (the running one included); None
        once it runs or ended."""
        with self._cond:
            if ticket not in self._waiting:
                return None
            return self._waiting.index(ticket) + (1 if self._running is not None else 0)

    def retry_after(self) -> int:
        """Seconds until a place is likely free: the recent generations' mean length
        times the line ahead, at least 1."""
        with self._cond:
            mean = sum(self._durations) / len(self._durations) if self._durations else 1.0
            ahead = len(self._waiting) + (1 if self._running is not None else 0)
        return max(1, min(600, math.ceil(mean * max(1, ahead))))

    # -- listeners ------------------------------------------------------------------

    def subscribe(self, fn: Listener) -> None:
        """``fn(event, ticket, step)`` for "queued", "started", "step", "finished" and
        "rejected", called on the thread where it happened (never under the lock)."""
        self._listeners.append(fn)

    def unsubscribe(self, fn: Listener) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

    def _notify(self, event: str, ticket: Ticket, step: Step | None = None) -> None:
        for fn in list(self._listeners):
            try:
                fn(event, ticket, step)
            except Exception:  # noqa: BLE001 - a view that fails must not stop a generation
                log.exception("a queue listener failed on %s", event)

    # -- taking a place -------------------------------------------------------------

    def submit(self, client: str, kind: str = "chat", prompt_tokens: int = 0, config: GenerationConfig | None = None,
               bounded: bool = True, owner: str | None = None) -> Ticket:
        """A place at the end of the line. ``bounded``: refused with QueueFull when
        ``capacity`` tickets already wait (the app's own chat answers are not refused:
        they wait like the rest). ``owner``: the served client whose prompt it is (its
        generation reuses no other owner's cached tokens); None for the app's own."""
        with self._cond:
            busy = self._running is not None or bool(self._waiting)
            if bounded and busy and len(self._waiting) >= self.capacity:
                full = QueueFull(len(self._waiting), self.capacity, 0)
            else:
                full = None
                t = Ticket(next(self._ids), client, kind, prompt_tokens, config, self, owner=owner)
                self._waiting.append(t)
        if full is not None:
            full = QueueFull(full.waiting, full.capacity, self.retry_after())
            self._notify("rejected", Ticket(0, client, kind, prompt_tokens, config, self, state=FAILED))
            raise full
        self._notify("queued", t)
        return t

    def _wait_turn(self, ticket: Ticket, cancel: Callable[[], bool] | None) -> None:
        with self._cond:
            while True:
                if ticket.cancel_reason is None and cancel is not None and cancel():
                    ticket.cancel_reason = "cancelled"
                if ticket.cancelled:
                    if ticket in self._waiting:
                        self._waiting.remove(ticket)
                    self._cond.notify_all()
                    break
                if self._running is None and self._waiting and self._waiting[0] is ticket:
                    self._waiting.popleft()
                    self._running = ticket
                    ticket.state = RUNNING
                    ticket._t_start = time.monotonic()
                    ticket.started_at = time.time()
                    return
                self._cond.wait(POLL_S if cancel is not None else None)
        self._end(ticket, CANCELLED, "cancelled")
        raise Cancelled(f"request {ticket.id} was cancelled while it waited")

    def run(self, ticket: Ticket, session: Session, prompt: Sequence[int], config: GenerationConfig,
            cancel: Callable[[], bool] | None = None) -> Iterator[Step]:
        """Wait for ``ticket``'s turn, then stream its generation. Raises Cancelled when
        it is cancelled before its turn; the generation's own errors pass through, and
        the next ticket starts whatever happened."""
        self._wait_turn(ticket, cancel)
        self._notify("started", ticket)
        state, reason = FAILED, None

        def stop() -> bool:
            if ticket.cancel_reason is None and cancel is not None and cancel():
                ticket.cancel("cancelled")
            return ticket.cancelled

        try:
            for step in session.generate(prompt, config, cancel=stop, owner=ticket.owner):
                ticket.stats = step.stats
                if ticket.cancelled and step.tokens:
                    ticket.steps_after_cancel += 1
                self._notify("step", ticket, step)
                yield step
                if step.done:
                    reason = step.stop_reason
            state = CANCELLED if reason == "cancelled" else DONE
        except (GeneratorExit, Cancelled):  # closed by its reader, or stopped inside a long prompt
            state, reason = CANCELLED, "cancelled"
            raise
        except SpecDeskError as e:  # worded for users: a prompt too long, the models unloaded, ...
            ticket.error = str(e) or type(e).__name__
            raise
        except BaseException:
            ticket.error = UNEXPECTED  # what went wrong is logged where it is caught, never shown
            raise
        finally:
            self._end(ticket, state, reason)

    def _end(self, ticket: Ticket, state: str, reason: str | None) -> None:
        with self._cond:
            if ticket._t_end is not None:
                return  # forsaken earlier, and its thread came back after all
            ticket.state = state
            ticket.stop_reason = reason
            ticket._t_end = time.monotonic()
            ticket.finished_at = time.time()
            if self._running is ticket:
                self._running = None
                if ticket.run_seconds is not None:
                    self._durations.append(ticket.run_seconds)
            self._recent.append(ticket)
            self._cond.notify_all()
        self._notify("finished", ticket)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until nothing runs or waits; True if so within ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: self._running is None and not self._waiting, timeout)

    def forsake_running(self, why: str) -> Ticket | None:
        """The running generation's thread will never come back (parked inside llama.cpp
        on a lost RPC server): give its place up, so the next ticket can run on
        another pair. Returns the forsaken ticket."""
        with self._cond:
            t, self._running = self._running, None
            if t is not None:
                t.cancel_reason = t.cancel_reason or why
                t.error = why
            self._cond.notify_all()
        if t is not None:
            self._end(t, FAILED, "error")
        return t

    def cancel_all(self, keep: Callable[[Ticket], bool] | None = None, reason: str = "the server stopped") -> None:
        """Cancel every waiting and running ticket (but those ``keep`` keeps)."""
        with self._cond:
            tickets = list(self._waiting) + ([self._running] if self._running is not None else [])
        for t in tickets:
            if keep is None or not keep(t):
                t.cancel(reason)
