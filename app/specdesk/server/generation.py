"""One admitted request: its generation runs on a thread of its own (waiting its turn
in the queue first), and the async handler reads what it produced as events.

Events, in order: ``("started",)`` when its turn came, ``("text", str)`` for each
piece that is safe to send (stop strings held back and cut), then one of
``("end", finish_reason, Stats, queue_seconds)``, ``("cancelled",)``,
``("unloaded", message)`` (the models were unloaded before it ran: a 503) or
``("error", message)`` (an unexpected one's cause is logged, never sent).
Cancelling (the client went away) stops the generation at the next step boundary,
or takes the request out of the line if it still waits.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Sequence

from ..errors import Cancelled, SpecDeskError
from ..session import GenerationConfig, ModelsUnloaded, Session
from ..speculative.stats import Stats
from .queue import UNEXPECTED, GenerationQueue, Ticket
from .responses import FINISH
from .stops import StopMatcher

log = logging.getLogger(__name__)

TERMINAL = ("end", "cancelled", "unloaded", "error")


@dataclass
class Outcome:
    """How a request ended, for the metrics: "finished", "cancelled" or "failed"."""

    outcome: str
    ticket: Ticket
    stats: Stats | None


class Run:
    def __init__(self, queue: GenerationQueue, session: Session, ticket: Ticket, prompt: Sequence[int],
                 config: GenerationConfig, stops: Sequence[str] = (), on_end: Callable[[Outcome], None] | None = None,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.queue = queue
        self.session = session
        self.ticket = ticket
        self.prompt = list(prompt)
        self.config = config
        self.stops = list(stops)
        self.on_end = on_end
        self.loop = loop or asyncio.get_running_loop()
        self._events: asyncio.Queue = asyncio.Queue()
        self.ended = False
        self._thread = threading.Thread(target=self._work, name=f"specdesk-request-{ticket.id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cancel(self, reason: str = "client gone") -> None:
        self.ticket.cancel(reason)

    # -- the worker thread ----------------------------------------------------------

    def _put(self, *event) -> None:
        try:
            self.loop.call_soon_threadsafe(self._events.put_nowait, event)
        except RuntimeError:  # the server's loop is gone (it stopped): nobody reads any more
            pass

    def _work(self) -> None:
        matcher = StopMatcher(self.stops)
        last = None
        outcome, stats = "failed", None
        try:
            for step in self.queue.run(self.ticket, self.session, self.prompt, self.config):
                if last is None:
                    self._put("started")
                last = step
                stats = step.stats
                text = matcher.feed(step.text)
                if step.done:
                    text += matcher.flush()
                if text:
                    self._put("text", text)
                if matcher.hit is not None and not self.ticket.cancelled:
                    self.ticket.cancel("stop string")  # ends at this step: nothing after it is sent
            reason = "stop" if matcher.hit is not None else (last.stop_reason if last else None)
            if reason == "cancelled":
                outcome = "cancelled"
                self._put("cancelled")
            else:
                outcome = "finished"
                self._put("end", FINISH.get(reason or "", "stop"), stats, self.ticket.queue_seconds)
        except Cancelled:
            outcome = "cancelled"
            self._put("cancelled")
        except ModelsUnloaded as e:
            self._put("unloaded", str(e))
        except SpecDeskError as e:
            self._put("error", str(e))
        except Exception:  # noqa: BLE001 - one failing request must not take the server down
            log.exception("request %s failed", self.ticket.id)
            self._put("error", UNEXPECTED)  # its text may name files: the log has it
        finally:
            if self.on_end is not None:
                try:
                    self.on_end(Outcome(outcome, self.ticket, stats))
                except Exception:  # noqa: BLE001
                    log.exception("recording request %s failed", self.ticket.id)

    # -- the handler's side -----------------------------------------------------------

    async def events(self, poll: float | None = None) -> AsyncIterator[tuple | None]:
        """The events until the last one; with ``poll``, None every ``poll`` seconds
        without one (for the handler to see whether its client is still there)."""
        while True:
            if poll is None:
                ev = await self._events.get()
            else:
                try:
                    ev = await asyncio.wait_for(self._events.get(), poll)
                except asyncio.TimeoutError:
                    yield None
                    continue
            if ev[0] in TERMINAL:
                self.ended = True
            yield ev
            if self.ended:
                return
