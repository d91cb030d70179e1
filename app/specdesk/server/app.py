"""The FastAPI app: OpenAI's ``/v1/models``, ``/v1/chat/completions`` and
``/v1/completions`` over one loaded pair, with ``/health``, ``/metrics`` and
``/requests`` (the running, waiting and recent requests, as llama-server's ``/slots``).

A request is validated (pydantic, strict), its prompt rendered and tokenized off the
event loop, checked against the context, and only then admitted to the queue, so a
bad request never takes a place in line; beyond the queue's capacity it gets a 503
with ``Retry-After``. Every error is one line in OpenAI's error format; an
unexpected one says only that it happened (the cause, which may name files, goes to
the server's log).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import time
from dataclasses import dataclass, field, replace

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware

from .. import __version__
from ..errors import ContextOverflowError, SpecDeskError
from ..session import GenerationConfig, ModelsUnloaded, Session
from ..session.remote import is_loopback
from ..speculative.sampling import SamplingParams
from .errors import APIError, error_body
from .generation import Outcome, Run
from .guard import Gate, Guard
from .metrics import Metrics
from .queue import GenerationQueue, QueueFull
from .responses import Answer
from .schemas import (
    ChatRequest,
    CompletionRequest,
    chat_messages,
    completion_prompt,
    refuse_unsupported,
    stop_strings,
)
from .validation import validation_error

log = logging.getLogger(__name__)

#: What a client is told of an error nobody foresaw (its cause goes to the server's log).
UNEXPECTED = "unexpected error: the server could not answer this request (its log says why)"
#: A client that is gone is noticed this often while its non-streamed answer is made.
DISCONNECT_POLL_S = 0.25
#: Bytes of request body allowed per token of context (a token is a few bytes of text;
#: JSON escapes can make it a dozen): with a floor for small contexts.
BODY_BYTES_PER_TOKEN = 32
MIN_BODY_BYTES = 256 * 1024


def body_limit(n_ctx: int) -> int:
    return max(MIN_BODY_BYTES, BODY_BYTES_PER_TOKEN * n_ctx + 64 * 1024)


@dataclass
class ServeOptions:
    """What the server was started with; a request's own fields override the sampling."""

    defaults: GenerationConfig = field(default_factory=GenerationConfig)
    #: None: up to the rest of the context (as llama-server's n_predict -1)
    default_max_tokens: int | None = None
    #: the key every request but /health must give, or several: one per client (each keeps
    #: its own cached prompt, whatever address it comes from)
    api_key: str | tuple[str, ...] | None = None
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int | None = None
    #: the address the server's socket is bound to (``sock.getsockname()[0]``): on a loopback
    #: one, only loopback Host names are served
    host: str = "127.0.0.1"
    #: Host names served besides localhost and the loopback addresses ("*": any; see guard.Gate)
    allowed_hosts: tuple[str, ...] = ()


def served_hosts(opts: ServeOptions) -> frozenset[str] | None:
    """The Host names the Gate lets in beyond the loopback ones, or None to check no
    Host: on a loopback bind, or wherever ``allowed_hosts`` names some, the Host is
    checked (DNS rebinding); elsewhere other machines call by names this one cannot
    know, and the API key is what protects it."""
    if "*" in opts.allowed_hosts:
        return None
    if opts.allowed_hosts or is_loopback(opts.host):
        return frozenset(opts.allowed_hosts)
    return None


def model_id(session: Session) -> str:
    return session.target.spec.path.stem


def client_label(request: Request) -> str:
    host = request.client.host if request.client else "?"
    ua = request.headers.get("user-agent", "").split(" ")[0][:40]
    return f"{host} · {ua}" if ua else host


#: Headers a reverse proxy adds to say whom it forwards a request for.
FORWARDED_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")


def client_owner(request: Request) -> str:
    """Whose prompt a request's tokens are, for the KV cache and the history lookups
    (``Session.generate``'s ``owner``): what clients cannot share by accident.

    - The API key it gave, where the server has several (``--api-key`` repeated: one
      per client). Clients given the same key share one owner, as they share the key.
    - Its address; and the clients a reverse proxy says it forwards for (``Forwarded``,
      ``X-Forwarded-For``, ``X-Real-IP``, as received): behind a proxy every client
      comes from the proxy's address, and only these tell them apart.

    A client can split itself off with those headers but never join another's owner:
    it would need that one's address (and key) too, and a proxy adds the address it saw.
    Clients on one address that send the same headers (every program of one machine
    talking to the server directly) share one owner."""
    parts = ["http", request.client.host if request.client else "?"]
    key = getattr(request.state, "key_index", None)
    if key is not None:
        parts.append(f"key {key}")
    forwarded = [f"{h}: {v}" for h in FORWARDED_HEADERS for v in request.headers.getlist(h)]
    if forwarded:  # bounded by the header limit; kept short as a digest
        parts.append("via " + hashlib.sha256("\n".join(forwarded).encode("utf-8", "replace")).hexdigest()[:16])
    return " ".join(parts)


def _file_time(session: Session) -> int:
    """The model file's time, read once: the file may move or go while it is served."""
    try:
        return int(session.target.spec.path.stat().st_mtime)
    except OSError:
        return int(time.time())


def create_app(session: Session, queue: GenerationQueue, options: ServeOptions | None = None) -> FastAPI:
    opts = options or ServeOptions()
    metrics = Metrics(queue)
    n_ctx = session.target.ctx.n_ctx
    served = model_id(session)
    draft_name = session.draft.name if session.draft is not None else None
    created = _file_time(session)
    app = FastAPI(title="SpecDesk", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.session, app.state.queue, app.state.metrics, app.state.options = session, queue, metrics, opts
    app.state.n_ctx = n_ctx
    _install_error_handlers(app)

    @app.api_route("/health", methods=["GET", "HEAD"])  # health checkers ask with HEAD too
    async def health(request: Request):
        if not getattr(request.state, "authorized", False):  # no key needed to learn it is up, but no more
            return {"status": "ok"}
        return {"status": "ok", "model": served, "running": 1 if queue.running is not None else 0,
                "queued": queue.depth, "capacity": queue.capacity}

    @app.get("/v1/models")
    async def models():
        d = opts.defaults
        return {"object": "list", "data": [{
            "id": served, "object": "model", "created": created, "owned_by": "specdesk",
            "meta": {"target": session.target.name, "draft": draft_name, "proposer": d.proposer, "k": d.k,
                     "translated": session.translated, "n_ctx": n_ctx},
        }]}

    @app.get("/metrics")
    async def prometheus():
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.get("/requests")
    async def requests():
        run = queue.running
        return {"running": [run.to_dict()] if run else [], "queued": [t.to_dict() for t in queue.waiting()],
                "recent": [t.to_dict() for t in queue.recent()[-50:]]}

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest, request: Request):
        refuse_unsupported(body)
        _check_model(body.model, served)
        messages = chat_messages(body)
        prompt = await run_in_threadpool(_tokens, session, lambda: session.chat_prompt(messages))
        return await _answer(app, request, "chat", body, prompt, "messages")

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        refuse_unsupported(body)
        _check_model(body.model, served)
        text = completion_prompt(body)
        if not text:
            raise APIError(400, "the prompt is empty", param="prompt")
        prompt = await run_in_threadpool(_tokens, session, lambda: session.raw_prompt(text, parse_special=body.parse_special))
        return await _answer(app, request, "completion", body, prompt, "prompt")

    # the last added runs first: Gate (Host, Origin), then CORS, then Guard (key, size)
    app.add_middleware(Guard, api_key=opts.api_key, max_body=opts.max_body_bytes or body_limit(n_ctx), count=metrics.response)
    if opts.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(opts.cors_origins), allow_methods=["GET", "POST", "OPTIONS"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(Gate, hosts=served_hosts(opts), origins=opts.cors_origins, count=metrics.response)
    return app


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(_request, e: APIError):
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request, e: RequestValidationError):
        err = validation_error(e.errors())
        return JSONResponse(err.body(), status_code=err.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request, e: StarletteHTTPException):
        msg = {404: "no such endpoint: this server has /v1/chat/completions, /v1/completions, /v1/models, /health, "
                    "/metrics and /requests", 405: "this endpoint does not take that method"}.get(e.status_code, str(e.detail))
        if e.status_code == 400 and e.detail == "There was an error parsing the body":  # FastAPI's, from json.loads
            msg = ("the body could not be read as JSON: it is not UTF-8, or nested too deep, or holds a number too long "
                   "to read")
        return JSONResponse(error_body(msg), status_code=e.status_code, headers=e.headers)  # a 405's Allow

    @app.exception_handler(Exception)
    async def unexpected(request: Request, e: Exception):
        # its text may name files or the machine: the log has it, the client is told only that it happened
        log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=e)
        return JSONResponse(error_body(UNEXPECTED, "server_error"), status_code=500)


def _check_model(name: str | None, served: str) -> None:
    if name is not None and name != served:
        raise APIError(404, f"model {name!r} is not served here: this server serves {served!r} (or leave 'model' out)",
                       param="model", code="model_not_found")


def _tokens(session: Session, make) -> list[int]:
    """The prompt's tokens (the chat template runs here, off the event loop), while
    the models cannot be freed."""
    lease = session.lease()
    try:
        lease.__enter__()
    except ModelsUnloaded as e:  # the app's pair was replaced: not the request's fault
        raise APIError(503, str(e), code="unloaded") from None
    try:
        return make()
    except SpecDeskError as e:  # the chat template refused the messages, or went over its budget
        raise APIError(400, str(e)) from None
    finally:
        lease.__exit__(None, None, None)


def _config(app: FastAPI, body, prompt: list[int], what: str) -> GenerationConfig:
    session: Session = app.state.session
    opts: ServeOptions = app.state.options
    d = opts.defaults
    n_ctx = app.state.n_ctx  # as loaded: the contexts may be freed meanwhile (an unload: 503 when it runs)
    if len(prompt) >= n_ctx:
        raise APIError(400, f"the prompt is {len(prompt)} tokens but the context holds {n_ctx}; shorten it "
                            "(or start the server with a larger --ctx)", param=what, code="context_length_exceeded")
    asked = getattr(body, "max_completion_tokens", None) or body.max_tokens
    if asked is not None:
        try:
            session.check_fits(prompt, asked)
        except ContextOverflowError as e:
            param = "max_completion_tokens" if getattr(body, "max_completion_tokens", None) else "max_tokens"
            raise APIError(400, str(e), param=param, code="context_length_exceeded") from None
        max_tokens = asked
    else:
        max_tokens = min(opts.default_max_tokens or n_ctx, n_ctx - len(prompt))
    s = d.sampling
    try:
        sampling = SamplingParams(
            temperature=s.temperature if body.temperature is None else body.temperature,
            top_k=s.top_k if body.top_k is None else body.top_k,
            top_p=s.top_p if body.top_p is None else body.top_p,
            min_p=s.min_p if body.min_p is None else body.min_p,
        )
    except ValueError as e:
        raise APIError(400, str(e)) from None
    seed = d.seed if body.seed is None else body.seed
    if seed < 0:
        seed = secrets.randbits(63)  # as llama.cpp: a negative seed (-1) draws a random one
    # the server's defaults (proposer, k, p_min, ...) with the request's sampling, seed and length
    return replace(d, sampling=sampling, seed=seed, max_tokens=max_tokens)


async def _answer(app: FastAPI, request: Request, kind: str, body, prompt: list[int], what: str):
    session: Session = app.state.session
    queue: GenerationQueue = app.state.queue
    metrics: Metrics = app.state.metrics
    config = _config(app, body, prompt, what)
    try:
        ticket = queue.submit(client_label(request), kind, len(prompt), config, owner=client_owner(request))
    except QueueFull as e:
        metrics.rejected(kind)
        raise APIError(503, str(e), code="queue_full", headers={"Retry-After": str(e.retry_after)}) from None

    def ended(o: Outcome) -> None:
        metrics.observe(kind, o)

    try:
        run = Run(queue, session, ticket, prompt, config, stop_strings(body), on_end=ended)
        answer = Answer(kind, model_id(session), config, session.draft.name if session.draft else None, session.translated)
        run.start()
    except BaseException:
        ticket.cancel("not started")  # its place goes back at once: the line never waits for it
        raise
    if body.stream:
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return EventSourceResponse(_stream(run, answer, usage), sep="\n", ping=15)
    return await _collect(run, answer, request)


async def _collect(run: Run, answer: Answer, request: Request):
    """The whole answer, as one response. Whether the client is still there is asked
    every DISCONNECT_POLL_S, while tokens flow too (asked only in the gaps between
    them, a client that left mid-answer was noticed only once the answer was done,
    and the next request waited in line behind an answer nobody read)."""
    parts: list[str] = []
    clock = asyncio.get_running_loop().time
    asked = clock()
    async for ev in run.events(poll=DISCONNECT_POLL_S):
        if ev is None or clock() - asked >= DISCONNECT_POLL_S:
            asked = clock()
            if await request.is_disconnected():
                run.cancel("client gone")
        if ev is None:
            continue
        if ev[0] == "text":
            parts.append(ev[1])
        elif ev[0] == "end":
            _, finish, stats, queued = ev
            return JSONResponse(answer.complete("".join(parts), finish, stats, queued))
        elif ev[0] == "cancelled":
            reason = run.ticket.cancel_reason or "cancelled"
            raise APIError(503, f"the request was cancelled ({reason})", code="cancelled")
        elif ev[0] == "unloaded":  # the models were unloaded before its turn: not the request's fault
            raise APIError(503, ev[1], code="unloaded")
        elif ev[0] == "error":
            raise APIError(500, ev[1], code="generation_failed")
    raise APIError(500, "the generation ended without an answer")


def _dump(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


async def _stream(run: Run, answer: Answer, usage: bool):
    done = False
    try:
        async for ev in run.events():
            if ev[0] == "started":
                yield _dump(answer.chunk("", first=True, with_usage=usage))
            elif ev[0] == "text":
                yield _dump(answer.chunk(ev[1], with_usage=usage))
            elif ev[0] == "end":
                _, finish, stats, queued = ev
                yield _dump(answer.final_chunk(finish, stats, queued, usage))
                if usage:
                    yield _dump(answer.usage_chunk(stats, queued))
                done = True
                yield "[DONE]"
            else:
                msg = ev[1] if ev[0] != "cancelled" else f"the request was cancelled ({run.ticket.cancel_reason or 'cancelled'})"
                done = True
                code = {"error": "generation_failed", "unloaded": "unloaded"}.get(ev[0], "cancelled")
                yield _dump(error_body(msg, "server_error", None, code))
    finally:
        if not done:
            run.cancel("client gone")  # the client went away mid-stream: stop at the next step
