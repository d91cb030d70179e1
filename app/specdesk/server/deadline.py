"""A deadline for reading each request, which uvicorn's HTTP/1.1 protocol lacks; and
a request that is not HTTP/1.1 refused in OpenAI's error format, as every other one.

uvicorn (0.54, h11) closes a keep-alive connection left idle after a response, but a
connection that never sends a request, or sends half of one (headers without their
blank line, a body shorter than its Content-Length), stays open for ever: a client that
stalled, or one that opens connections to hold them (slowloris), until the process
runs out of file descriptors. llama-server has the same rule (its ``--timeout``).

Here each request must arrive whole, headers and body, within ``timeout`` seconds of
its first byte (on a new connection: of the connection's opening). A client past it
gets ``408 Request Timeout`` with an error in OpenAI's format, and the connection
closes; one that never sent a byte is closed without a word (as a keep-alive
connection is). Answers are not timed: a generation takes as long as it takes, and a
client that stops reading one is handled by the server itself.
"""

from __future__ import annotations

import asyncio
import json
from typing import Callable

import h11
from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE  # as uvicorn's protocol takes it
from uvicorn.protocols.http.h11_impl import H11Protocol

from . import REQUEST_TIMEOUT_S
from .errors import error_body
from .guard import ROUTES

_READING = (h11.IDLE, h11.SEND_BODY)  # the client's states while a request is still arriving


#: What a request that is not HTTP/1.1 gets (uvicorn's own words: "Invalid HTTP request received.", in plain text).
BAD_HTTP = ("the request is not valid HTTP/1.1: a malformed request line or header, or headers over "
            f"{DEFAULT_MAX_INCOMPLETE_EVENT_SIZE // 1024} KiB")


def error_response(status: int, reason: bytes, message: str, code: str) -> bytes:
    """A whole HTTP/1.1 error response in OpenAI's format that closes the connection,
    as bytes for the socket: h11 cannot answer a request whose headers never ended."""
    body = json.dumps(error_body(message, code=code)).encode()
    head = (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % (status, reason, len(body)))
    return head + body


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline per request (``timeout``, seconds)."""

    timeout: float = REQUEST_TIMEOUT_S
    #: Called with the path (or "other", as /metrics labels it) and the status of each refusal made here (408, 400).
    count: Callable[[str, int], None] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            self._disarm()
        elif self.conn.their_state in _READING:
            if self._deadline is None:  # the first bytes of a request on a kept-alive connection
                self._arm()
        else:  # the request is whole (or the connection is done with): the answer is not timed
            self._disarm()

    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot parse: 400 in OpenAI's error format, like every other
        refusal (uvicorn's own was plain text), counted in /metrics."""
        self._refuse(400, b"Bad Request", BAD_HTTP, "bad_http", "other")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._deadline = self.loop.call_later(self.timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self.conn.their_state not in _READING:
            return
        # bytes of a request arrived (in h11's buffer, or its headers already parsed): say why it is closed
        if self.conn.their_state is h11.SEND_BODY or self.conn.trailing_data[0]:
            path = self.scope.get("path", "") if self.conn.their_state is h11.SEND_BODY and self.scope else ""
            self._refuse(408, b"Request Timeout", f"the request did not arrive whole within {self.timeout:g} s "
                         "(headers and body): the connection is closed", "request_timeout", path)
        else:
            self.transport.close()

    def _refuse(self, status: int, reason: bytes, message: str, code: str, path: str) -> None:
        """Answer ``status`` and close, counted in /metrics under ``path``; only close
        where a response to an earlier request is already under way (a bad request
        pipelined behind it), which the bytes would corrupt."""
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self.transport.write(error_response(status, reason, message, code))
            if self.count is not None:
                self.count(path if path in ROUTES else "other", status)
        self.transport.close()  # the app, if it was reading the body, sees the client gone


def deadline_protocol(timeout: float, count: Callable[[str, int], None] | None = None) -> type[DeadlineH11Protocol]:
    """The protocol class for uvicorn's ``http=`` with this deadline; ``count`` (the
    app's per-status response counter) hears of every 408 and 400 made here, which the app never sees."""
    if not timeout > 0:
        raise ValueError(f"the request timeout must be positive, got {timeout}")
    return type("DeadlineH11Protocol", (DeadlineH11Protocol,), {"timeout": float(timeout), "count": staticmethod(count)
                                                                if count is not None else None})
