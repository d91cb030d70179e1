"""What every request passes before a handler sees it, as plain ASGI middleware.

:class:`Gate`, first of all (before CORS and the key), refuses what a web page must not
reach (DNS rebinding, cross-site calls), 403 in OpenAI's error format:

- the Host: on a loopback bind only ``localhost`` and loopback addresses (127.0.0.1,
  ``[::1]``), with any port, and the names ``--allow-host`` adds. A page on
  ``attacker.example`` whose name was pointed at 127.0.0.1 reaches the port, but its
  browser sends ``Host: attacker.example``; with no key, that page could otherwise run
  generations and read the answers, ``/requests`` and ``/metrics``. Another bind checks
  no Host (other machines call it by names it cannot know: the key protects it), unless
  ``--allow-host`` lists them. No Host at all (HTTP/1.0) is no browser: let through.
- the Origin, which browsers send on every cross-origin call: one that ``--cors-origin``
  did not name is refused (``*`` names all), but for the server's own origin
  (``http://`` + the Host, where the Host is trusted: a page on this very server). No
  Origin (curl, the SDKs, a same-origin GET) passes.

:class:`Guard` then:

- the API key (``Authorization: Bearer KEY``), compared in constant time with each of
  the server's keys (one per client where it has several); ``/health`` and CORS
  preflights need none (``/health`` learns from the scope's state whether the key was
  given, to say more only then; the handlers learn which key, ``key_index``, to keep
  each key's cached prompt apart);
- the body size: a declared ``Content-Length`` over the limit is refused before a byte
  is read, a chunked body as soon as it passes the limit (so the body is read at most
  once, and never more than the limit);
- a count of every response by path and status, for ``/metrics``.

Starlette's ``TrustedHostMiddleware`` is not used: its refusal is a plain-text 400
written inside it (every refusal here is a 403 in OpenAI's format, counted in
``/metrics``), and it matches listed names only, not the loopback range.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
from typing import Callable, Iterable
from urllib.parse import urlsplit

from ..fmt import format_bytes
from .errors import error_body

PUBLIC = ("/health",)
ROUTES = ("/health", "/metrics", "/requests", "/v1/models", "/v1/chat/completions", "/v1/completions")


#: Names a loopback bind answers to, besides the loopback addresses.
LOOPBACK_NAMES = frozenset({"localhost"})
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
_DIGITS = re.compile(r"[0-9]*")


def host_name(value: str) -> str | None:
    """The name in a Host header (``name``, ``name:port``, ``[v6]``, ``[v6]:port``),
    lower-cased, an IPv6 address without its brackets; None when it is no such thing."""
    v = value.strip().lower()
    if v.startswith("["):
        name, closed, rest = v[1:].partition("]")
        if not closed:
            return None
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return None
    else:
        name, colon, port = v.partition(":")
        rest = colon + port
    if rest and not (rest[0] == ":" and _DIGITS.fullmatch(rest[1:])):
        return None
    return name or None


def is_loopback_name(name: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1, ::ffff:127.x): names a web
    page elsewhere cannot take (its own name is what its browser sends)."""
    if name in LOOPBACK_NAMES:
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def allowed_host_error(value: str) -> str | None:
    """Why ``value`` cannot be given to ``--allow-host`` (one line), or None: a host
    name or an IP address as a Host header carries it, without scheme, port or path;
    ``*`` for any."""
    v = value.strip().lower()
    if v == "*":
        return None
    try:
        ipaddress.ip_address(v[1:-1] if v.startswith("[") and v.endswith("]") else v)
        return None
    except ValueError:
        pass
    if v and len(v) <= 253 and all(_LABEL.fullmatch(label) for label in v.split(".")):
        return None
    return (f"must be a host name or address as a browser sends it in the Host header, without scheme, port or path "
            f"(e.g. llm.home or 192.168.1.20; * for any), got {value!r}")


_DEFAULT_PORTS = {"http": 80, "https": 443}


def parse_origin(value: str) -> tuple[str | None, str | None]:
    """``--cors-origin``'s value as a browser sends it in the Origin header, or why it
    cannot be one (one line): ``scheme://host[:port]``, lower-case, without the
    scheme's default port; a trailing ``/`` is dropped. A path, a query, user
    credentials or ``null`` (what sandboxed pages and files send, which any page can
    claim) would never match, or match too much: refused. ``*`` for any."""
    v = value.strip()
    if v == "*":
        return v, None
    why = (f"must be an origin as a browser sends it, scheme://host[:port] without a path "
           f"(e.g. http://localhost:3000; * for any), got {value!r}")
    try:
        u = urlsplit(v)
        port = u.port
    except ValueError:
        return None, why
    if u.scheme.lower() not in _DEFAULT_PORTS or not u.hostname or u.username is not None or u.password is not None \
            or u.path not in ("", "/") or u.query or u.fragment or v.endswith(("?", "#")):
        return None, why
    scheme, host = u.scheme.lower(), u.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    elif not all(_LABEL.fullmatch(label) for label in host.split(".")):
        return None, why
    shown = f"{scheme}://{host}"
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        shown += f":{port}"
    return shown, None


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


def _label(scope) -> str:
    path = scope.get("path", "")
    return path if path in ROUTES else "other"


def _counted(send, label: str, count: Callable[[str, int], None] | None):
    async def counted(msg):
        if msg["type"] == "http.response.start" and count is not None:
            count(label, msg["status"])
        await send(msg)

    return counted


class Gate:
    """The Host and the Origin, checked before anything else (see the module's docstring).

    ``hosts``: the names served beyond localhost and the loopback addresses, or None
    to check no Host (a non-loopback bind, or ``--allow-host '*'``). ``origins``: the
    origins ``--cors-origin`` named (``*``: every one)."""

    def __init__(self, app, hosts: Iterable[str] | None, origins: Iterable[str] = (),
                 count: Callable[[str, int], None] | None = None) -> None:
        self.app = app
        self.hosts = None if hosts is None else frozenset(h.strip().lower().removeprefix("[").removesuffix("]") for h in hosts)
        self.origins = tuple(origins)
        self.any_origin = "*" in self.origins
        self.count = count

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        refusal = self.refusal(_header(scope, b"host"), _header(scope, b"origin"))
        if refusal is None:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        await send_error(_counted(send, _label(scope), self.count), 403, *refusal)

    def refusal(self, host: bytes | None, origin: bytes | None) -> tuple[str, str] | None:
        """(message, code) for a request with these headers that must be refused, or None."""
        h = host.decode("latin-1") if host is not None else None
        name = host_name(h) if h is not None else None
        if h is not None and self.hosts is not None and not (name and (is_loopback_name(name) or name in self.hosts)):
            shown = h if len(h) <= 80 else h[:80] + "…"
            return (f"the Host header {shown!r} is not a name of this server: it answers to localhost, 127.0.0.1 and [::1] "
                    "only, as a page on another site whose name was pointed at this machine would send its own; connect by "
                    "one of those, or start `specdesk serve` with --allow-host NAME", "forbidden_host")
        if origin is None or self.any_origin:
            return None
        o = origin.decode("latin-1")
        if o in self.origins or self._own(o, h, name):
            return None
        shown = o if len(o) <= 80 else o[:80] + "…"
        return (f"a web page from {shown!r} may not call this server: only pages from the origins `specdesk serve` was "
                "started with --cors-origin ORIGIN may (and the server's own)", "forbidden_origin")

    def _own(self, origin: str, host: str | None, name: str | None) -> bool:
        """``origin`` is the server's own: ``http://`` + a Host that is trusted (a
        loopback name, or one the Host check lets in), so a same-origin page."""
        if host is None or not name:
            return False
        trusted = is_loopback_name(name) or (self.hosts is not None and name in self.hosts)
        return trusted and origin.lower() == "http://" + host.strip().lower()


class Guard:
    def __init__(self, app, api_key: str | Iterable[str] | None, max_body: int,
                 count: Callable[[str, int], None] | None = None) -> None:
        self.app = app
        keys = [api_key] if isinstance(api_key, str) else list(api_key or ())
        #: every key the server takes (several: one per client), or None for no key at all
        self.api_keys = tuple(k.encode() for k in keys if k) or None
        self.max_body = max_body
        self.count = count

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        counted = _counted(send, _label(scope), self.count)
        refusal, index = self._check_key(_header(scope, b"authorization")) if self.api_keys is not None else (None, None)
        # /health says more to those who give the key (or to everyone where no key is set)
        state = scope.setdefault("state", {})
        state["authorized"], state["key_index"] = refusal is None, index
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

    def _check_key(self, header: bytes | None) -> tuple[str | None, int | None]:
        """(why the key is refused, None) or (None, which of the server's keys it is)."""
        if not header:
            return "no API key: send it as 'Authorization: Bearer KEY' (the key `specdesk serve` was started with)", None
        scheme, _, given = header.partition(b" ")
        given = given.strip()
        # every key compared, in constant time each: which one matched takes no less time to learn
        matches = [hmac.compare_digest(given, key) for key in self.api_keys or ()]
        if scheme.lower() != b"bearer" or not any(matches):
            return "wrong API key: send the key `specdesk serve` was started with, as 'Authorization: Bearer KEY'", None
        return None, matches.index(True)

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
