"""``specdesk serve``: the pair behind an OpenAI-compatible HTTP endpoint."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from ..errors import SpecDeskError
from ..server import REQUEST_TIMEOUT_S
from ..server.queue import GenerationQueue
from .args import (add_model_options, add_sampling_options, add_warmup_option, config_from_args, float_in, int_at_least,
                   load_session)

API_KEY_ENV = "SPECDESK_API_KEY"
DEFAULT_PORT = 8080
DEFAULT_QUEUE = 8


def add_parser(sub) -> None:
    s = sub.add_parser("serve", help="serve the pair at an OpenAI-compatible endpoint (/v1/chat/completions, ...)")
    add_model_options(s)
    g = s.add_argument_group("generation defaults (a request's own temperature, top_p, max_tokens, seed win)")
    add_sampling_options(g, max_tokens_default=None)
    add_warmup_option(g)
    n = s.add_argument_group("server")
    n.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 for every network)")
    n.add_argument("--port", type=int_at_least("port", 0, "a port from 0 to 65535"), default=DEFAULT_PORT,
                   help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    n.add_argument("--api-key", action="append", default=None, metavar="KEY",
                   help=f"require 'Authorization: Bearer KEY' on every endpoint but /health (default: ${API_KEY_ENV}, else "
                        "none); repeat to give each client its own key, which also keeps each client's cached prompt "
                        "apart from the others' (behind a reverse proxy, every client comes from its address)")
    n.add_argument("--queue", type=int_at_least("queue", 0, "an integer >= 0"), default=DEFAULT_QUEUE, metavar="N",
                   help=f"requests that may wait while one generates; beyond them 503 with Retry-After (default {DEFAULT_QUEUE})")
    n.add_argument("--cors-origin", action="append", default=[], type=_cors_origin, metavar="ORIGIN",
                   help="allow browser pages from ORIGIN (e.g. http://localhost:3000; repeat for more, * for any); "
                        "a page from any other origin is refused (403)")
    n.add_argument("--allow-host", action="append", default=[], type=_allowed_host, metavar="NAME",
                   help="also answer requests whose Host header is NAME (a name of this machine, or a reverse proxy's; "
                        "repeat for more, * for any). By default a loopback --host answers to localhost, 127.0.0.1 and "
                        "[::1] only (403 otherwise: a web page that points its own name at this machine, DNS rebinding, "
                        "sends its own), and another --host checks no Host")
    n.add_argument("--request-timeout", type=float_in("request timeout", 0.0, None, lo_open=True),
                   default=REQUEST_TIMEOUT_S, metavar="SECONDS",
                   help=f"a client must send each request whole (headers and body) within this; past it 408 and the "
                        f"connection closes, so stalled or idle clients hold no connection (default "
                        f"{REQUEST_TIMEOUT_S:g}; answers are not timed)")


def cmd_serve(args) -> int:
    # FastAPI, uvicorn and pydantic take about a second to import: only this command pays it
    from ..server.app import ServeOptions, body_limit, create_app
    from ..server.runner import bind, serve_forever

    if args.port > 65535:
        raise SpecDeskError(f"port must be a port from 0 to 65535, got {args.port}")
    keys = list(args.api_key) if args.api_key is not None else [k for k in [os.environ.get(API_KEY_ENV)] if k]
    if any(not k.strip() for k in keys):
        raise SpecDeskError("an API key is empty: give one with --api-key or leave it out")
    if len(set(keys)) < len(keys):
        raise SpecDeskError("an API key is given twice: give each client its own (--api-key KEY, once per client)")
    key = keys[0] if len(keys) == 1 else (tuple(keys) or None)
    defaults = config_from_args(args, max_tokens=args.max_tokens or 1)
    sock = bind(args.host, args.port)  # before loading: a port in use fails at once
    signal.signal(signal.SIGTERM, _interrupt)  # stop as on Ctrl+C: the answers end, the models are freed
    try:
        with load_session(args, need_draft=defaults.needs_draft) as s:
            if s.warmup:
                s.warm_up(defaults)  # before "ready": the first request pays no first call
            queue = GenerationQueue(args.queue)
            opts = ServeOptions(defaults=defaults, default_max_tokens=args.max_tokens, api_key=key,
                                cors_origins=tuple(args.cors_origin), max_body_bytes=body_limit(s.target.ctx.n_ctx),
                                host=sock.getsockname()[0], allowed_hosts=tuple(args.allow_host))
            app = create_app(s, queue, opts)
            _announce(s, sock, args, defaults, key, queue)

            def stopping() -> None:
                queue.cancel_all(reason="the server stopped")

            try:
                serve_forever(app, sock, stopping, request_timeout=args.request_timeout)
            finally:
                stopping()
                queue.wait_idle(30)  # each generation ends within a step; then the models are freed
    except KeyboardInterrupt:
        pass  # uvicorn re-raises Ctrl+C once it has shut down
    finally:
        sock.close()
    print("specdesk serve: stopped", file=sys.stderr, flush=True)
    return 0


def _allowed_host(value: str) -> str:
    from ..server.guard import allowed_host_error  # plain Python: no web stack imported for it

    why = allowed_host_error(value)
    if why:
        raise argparse.ArgumentTypeError(why)
    return value.strip().lower()


def _cors_origin(value: str) -> str:
    from ..server.guard import parse_origin  # plain Python: no web stack imported for it

    origin, why = parse_origin(value)
    if why:
        raise argparse.ArgumentTypeError(why)
    return origin


def _interrupt(_sig, _frame) -> None:
    raise KeyboardInterrupt


def _announce(s, sock, args, defaults, key, queue) -> None:
    from ..server.app import model_id
    from ..server.runner import endpoint
    from ..session.remote import is_loopback

    url = endpoint(sock)
    if not is_loopback(sock.getsockname()[0]):  # what was bound, however --host spelt it
        print(f"WARNING: specdesk serve listens on {args.host}: every machine that can reach this one can use the models"
              + ("" if key else ", without any key (add --api-key)") + ". Requests and answers travel unencrypted (plain HTTP).",
              file=sys.stderr, flush=True)
    draft = f" with draft {s.draft.name}" + (" (translated)" if s.translated else "") if s.draft and defaults.needs_draft else ""
    print(f"specdesk serve: {url}/v1 serves {model_id(s)!r} ({s.target.name}{draft}; {defaults.describe()}, "
          f"context {s.target.ctx.n_ctx})", flush=True)
    print(f"  OpenAI API: {url}/v1/chat/completions, {url}/v1/completions, {url}/v1/models; "
          f"also {url}/health, {url}/metrics, {url}/requests", flush=True)
    keys = f"{len(key)} API keys, one per client" if isinstance(key, tuple) else "API key required"
    print(f"  one generation at a time; up to {queue.capacity} wait, beyond them 503 with Retry-After; "
          + (keys if key else "no API key"), flush=True)
    print("ready (Ctrl+C stops)", flush=True)
