"""What every request passes before a handler sees it, as plain ASGI middleware:

- the API key (``Authorization: Bearer KEY``), compared in constant time; ``/health``
  and CORS preflights need none (``/health`` learns from the scope's state whether the
  key was given, to say more only then);
- the body size: a declared ``Content-Length`` over the limit is refused before a byte
  is read, a chunked body as soon as it passes the limit (so the body is read at most
  once, and never more than the limit);
- a count of every response by path and status, for ``/metrics``.
"""

from __future__ import annotations

import hmac
import json
from typing import Callable

from ..fmt import format_bytes
from .errors import error_body

PUBLIC = ("/health",)
ROUTES = ("/health", "/metrics", "/requests", "/v1/models", "/v1/chat/completions", "/v1/completions")


def _header(scope, name: bytes) -> bytes | None:
    for k, v in scope.get("headers") or ():
        if k.lower() == name:
            return v
    return None


async def send_error(send, status: int, message: str, code: str | None = None, headers: dict | None = None) -> None:
    body = json.dumps(error_body(message, "invalid_request_error", None, code)).encode()
    h = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    h += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": h})
    await send({"type": "http.response.body", "body": body})


class Guard:
    def __init__(self, app, api_key: str | None, max_body: int, count: Callable[[str, int], None] | None = None) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None
        self.max_body = max_body
        self.count = count

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        label = path if path in ROUTES else "other"

        async def counted(msg):
            if msg["type"] == "http.response.start" and self.count is not None:
                self.count(label, msg["status"])
            await send(msg)

        refusal = self._check_key(_header(scope, b"authorization")) if self.api_key is not None else None
        # /health says more to those who give the key (or to everyone where no key is set)
        scope.setdefault("state", {})["authorized"] = refusal is None
        if refusal and path not in PUBLIC and scope.get("method") != "OPTIONS":
            return await send_error(counted, 401, refusal, "invalid_api_key", {"WWW-Authenticate": "Bearer"})
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                n = int(declared)
            except ValueError:
                return await send_error(counted, 400, "the Content-Length header is not a number")
            if n > self.max_body:
                return await send_error(counted, 413, self._too_big(f"{n:,} bytes"), "request_too_large")
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            body, over = await self._read(receive)
            if over:
                return await send_error(counted, 413, self._too_big("over the limit"), "request_too_large")
            receive = _replay(body, receive)
        return await self.app(scope, receive, counted)

    def _check_key(self, header: bytes | None) -> str | None:
        if not header:
            return "no API key: send it as 'Authorization: Bearer KEY' (the key `specdesk serve` was started with)"
        scheme, _, given = header.partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self.api_key):
            return "wrong API key: send the key `specdesk serve` was started with, as 'Authorization: Bearer KEY'"
        return None

    def _too_big(self, size: str) -> str:
        return (f"the request body is {size}; this server takes at most {format_bytes(self.max_body)} "
                "(a longer prompt would not fit the context: start the server with a larger --ctx)")

    async def _read(self, receive) -> tuple[bytes, bool]:
        chunks, total = [], 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                return b"".join(chunks), False  # the client left: the handler sees the disconnect
            part = msg.get("body", b"")
            total += len(part)
            if total > self.max_body:
                return b"", True
            chunks.append(part)
            if not msg.get("more_body", False):
                return b"".join(chunks), False


def _replay(body: bytes, receive):
    sent = False

    async def again():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # then the real channel: a disconnect still arrives

    return again
