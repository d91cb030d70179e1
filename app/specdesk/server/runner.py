"""uvicorn, on a socket bound first (so a port in use is one clear line, and port 0
picks a free one): in the foreground for ``specdesk serve``, or on a thread for the
app's Serve switch. Stopping cancels the server's generations first, so open streams
end within a step instead of holding the shutdown."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import sys
import threading

import uvicorn

from ..errors import SpecDeskError
from . import REQUEST_TIMEOUT_S
from .deadline import deadline_protocol

log = logging.getLogger(__name__)

#: Seconds the shutdown waits for open connections after the generations were cancelled.
GRACE_S = 3


def listen_options(platform: str = sys.platform) -> list[tuple[str, int]]:
    """The SOL_SOCKET options (name, value) a listening socket gets on ``platform``.

    POSIX: SO_REUSEADDR, so a restart binds while the last run's connections sit in
    TIME_WAIT. On Windows SO_REUSEADDR means something else: another process may bind
    the same port and take the connections (with their keys and prompts), so there
    SO_EXCLUSIVEADDRUSE keeps the port ours alone (Python's ``socket.create_server``
    sets SO_REUSEADDR on POSIX only, for the same reason). Only the choice is tested:
    the tests run on Linux."""
    if platform == "win32":
        return [("SO_EXCLUSIVEADDRUSE", 1)]
    return [("SO_REUSEADDR", 1)]


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one), or one clear SpecDeskError."""
    if not 0 <= port <= 65535:
        raise SpecDeskError(f"port must be from 0 to 65535, got {port}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise SpecDeskError(f"cannot listen on {host!r}: {e.strerror or e}") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        for name, value in listen_options():
            sock.setsockopt(socket.SOL_SOCKET, getattr(socket, name), value)
        sock.bind(addr)
        sock.listen(128)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise SpecDeskError(f"port {port} on {host} is in use: stop what listens there or choose another --port") from None
        raise SpecDeskError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


def endpoint(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


class _Server(uvicorn.Server):
    """uvicorn's server, whose exit (Ctrl+C, or ``stop``) first cancels the generations."""

    def __init__(self, config: uvicorn.Config, on_exit) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig, frame) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)


def _config(app, request_timeout: float) -> uvicorn.Config:
    # h11, with a deadline for reading each request (uvicorn has none: see deadline.py); its 408s
    # count in /metrics with the app's own responses
    metrics = getattr(getattr(app, "state", None), "metrics", None)
    protocol = deadline_protocol(request_timeout, count=metrics.response if metrics is not None else None)
    return uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", loop="asyncio",
                          http=protocol, timeout_graceful_shutdown=GRACE_S, server_header=False)


def serve_forever(app, sock: socket.socket, on_exit, request_timeout: float = REQUEST_TIMEOUT_S) -> None:
    """Serve on this thread until Ctrl+C (or SIGTERM): then ``on_exit()``, and return."""
    server = _Server(_config(app, request_timeout), on_exit)
    server.run(sockets=[sock])


class ServerThread:
    """The server on a background thread: ``start()``, then ``stop()`` from any thread."""

    def __init__(self, app, sock: socket.socket, on_exit, request_timeout: float = REQUEST_TIMEOUT_S) -> None:
        self.sock = sock
        self.url = endpoint(sock)
        self._on_exit = on_exit
        self._server = _Server(_config(app, request_timeout), on_exit)
        self._thread = threading.Thread(target=self._run, name="specdesk-serve", daemon=True)
        self.error: str | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self._server.serve(sockets=[self.sock]))
        except BaseException as e:  # noqa: BLE001 - reported to the app, which says so
            self.error = f"{type(e).__name__}: {e}"
            log.exception("the server stopped")

    def start(self) -> None:
        self._thread.start()

    @property
    def started(self) -> bool:
        return self._server.started

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> bool:
        """Cancel the generations, stop serving, wait for the thread; True once it ended."""
        self._on_exit()
        self._server.should_exit = True
        self._thread.join(timeout)
        try:
            self.sock.close()
        except OSError:
            pass
        return not self._thread.is_alive()
