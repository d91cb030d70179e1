"""The server as a hostile web page, a careless user and a racing unload find it
(issue 42, server side), on SmolLM2 over real sockets. The server runs in this
process exactly as the app's Serve switch starts it (``runner.bind``,
``app.create_app``, ``runner.ServerThread``); ``specdesk serve`` runs the same code
(its own checks: test_serve_faults.py).

- DNS rebinding: a page on another name that resolves to 127.0.0.1 sends its own Host
  (and Origin); on a loopback bind only localhost and loopback addresses are served,
  and an Origin that ``cors_origins`` did not name is refused, 403 in OpenAI's format;
- ``/v1/models`` once the model file has gone, and an unexpected error: no 500 with a
  path, no exception text;
- ``/health`` without the key says only that the server is up;
- one client cannot learn another's prompt from ``cached_tokens`` (a prefix oracle);
- a request that races an unload gets a 503, not an AttributeError.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass

import openai
import pytest

KEY = "hostile-key"
REBIND = "rebind.attacker.example"
MAX = 4


@pytest.fixture(scope="module")
def session(smol_path):
    """SmolLM2 as target and as its own draft (the proposer that reads the draft's context)."""
    from specdesk.session import ModelSpec, Session

    s = Session.load(ModelSpec(smol_path, n_ctx=512, threads=1), ModelSpec(smol_path, n_ctx=512, threads=1),
                     remember_costs=False)
    yield s
    s.close()


@dataclass
class Reply:
    status: int
    headers: dict
    body: bytes

    def json(self):
        return json.loads(self.body)


@dataclass
class Local:
    url: str
    port: int
    queue: object
    key: str | None

    def request(self, method: str, path: str, body: dict | None = None, headers: dict | None = None,
                key: bool = True) -> Reply:
        """One request with the standard library's client; ``headers`` may set Host."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        h = {"Authorization": f"Bearer {self.key}"} if key and self.key else {}
        h.update(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def client(self, source: str | None = None) -> openai.OpenAI:
        """The openai SDK, connecting from ``source`` (another loopback address: another client)."""
        kw = {}
        if source is not None:
            import httpx2  # the openai SDK's HTTP client

            kw["http_client"] = openai.DefaultHttpxClient(transport=httpx2.HTTPTransport(local_address=source))
        return openai.OpenAI(base_url=self.url + "/v1", api_key=self.key or "none", max_retries=0, timeout=300, **kw)


@contextlib.contextmanager
def serving(session, key: str | None = KEY, **options):
    """The server on a thread, as the app's Serve switch runs it."""
    from specdesk.server.app import ServeOptions, create_app
    from specdesk.server.queue import GenerationQueue
    from specdesk.server.runner import ServerThread, bind
    from specdesk.session import GenerationConfig

    sock = bind("127.0.0.1", 0)
    queue = GenerationQueue(4)
    defaults = GenerationConfig(proposer="draft", k=2, max_tokens=MAX)
    app = create_app(session, queue, ServeOptions(defaults=defaults, default_max_tokens=MAX, api_key=key, **options))
    server = ServerThread(app, sock, on_exit=queue.cancel_all)
    server.start()
    end = time.monotonic() + 60
    while not server.started:  # uvicorn says so by a flag only (the app waits the same way)
        assert server.alive and time.monotonic() < end, server.error
        time.sleep(0.01)
    try:
        yield Local(server.url, sock.getsockname()[1], queue, key)
    finally:
        assert server.stop()


@pytest.fixture(scope="module")
def local(session):
    with serving(session, cors_origins=("http://localhost:3000",)) as s:
        yield s


def one_error(reply: Reply, status: int, code: str | None = None, *needles: str) -> dict:
    assert reply.status == status, (reply.status, reply.body[:300])
    assert reply.headers["content-type"] == "application/json"
    err = reply.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    msg = err["message"]
    assert msg and "\n" not in msg and "Traceback" not in msg, msg
    if code is not None:
        assert err["code"] == code, err
    for n in needles:
        assert n in msg, msg
    return err


def counted(local: Local, path: str, status: int) -> float:
    text = local.request("GET", "/metrics").body.decode()
    want = f'specdesk_http_requests_total{{path="{path}",status="{status}"}} '
    return next((float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(want)), 0.0)


def chat(content: str = "Say hello.", max_tokens: int = MAX) -> dict:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0}


# -- 1. DNS rebinding: Host and Origin ------------------------------------------------------------------------------


@pytest.mark.parametrize("host", [f"{REBIND}:{{port}}", REBIND, "127.0.0.1.nip.io:{port}", "localhost.attacker.example",
                                  "192.168.1.20:{port}", "localhost:{port}@evil.example", "[::1]x:{port}", ":{port}"])
def test_a_foreign_host_is_refused_with_403(local, host):
    """A page whose name was rebound to 127.0.0.1 sends its own name as Host (and its
    own origin): no generation, no /requests, no /metrics, no /health for it."""
    host = host.format(port=local.port)
    before = counted(local, "/v1/chat/completions", 403)
    ran = len(local.queue.recent())
    page = {"Host": host, "Origin": f"http://{host}"}
    err = one_error(local.request("POST", "/v1/chat/completions", chat(), headers=page), 403, "forbidden_host")
    assert "Host" in err["message"] and "--allow-host" in err["message"], err
    for path in ("/requests", "/metrics", "/v1/models", "/health"):
        one_error(local.request("GET", path, headers={"Host": host}), 403, "forbidden_host")
        one_error(local.request("GET", path, headers={"Host": host}, key=False), 403, "forbidden_host")
    assert len(local.queue.recent()) == ran  # nothing was generated for it
    assert counted(local, "/v1/chat/completions", 403) == before + 1  # counted as every refusal


@pytest.mark.parametrize("host", ["localhost", "localhost:{port}", "LocalHost:{port}", "127.0.0.1", "127.0.0.1:{port}",
                                  "[::1]", "[::1]:{port}", "127.0.0.2:{port}"])
def test_this_machine_by_any_of_its_loopback_names_is_served(local, host):
    r = local.request("GET", "/v1/models", headers={"Host": host.format(port=local.port)})
    assert r.status == 200, r.body


@pytest.mark.parametrize("origin", ["http://evil.example", "http://localhost:8000", "null", "https://127.0.0.1:{port}",
                                    "http://127.0.0.1:{port}.evil.example"])
def test_an_origin_not_named_is_refused_with_403(local, origin):
    """A page on another origin (another site, another local port, a sandboxed frame)
    is refused, whatever the Host: browsers always send Origin on a cross-origin call."""
    origin = origin.format(port=local.port)
    err = one_error(local.request("POST", "/v1/chat/completions", chat(), headers={"Origin": origin}), 403, "forbidden_origin")
    assert "--cors-origin" in err["message"], err
    one_error(local.request("GET", "/requests", headers={"Origin": origin}), 403, "forbidden_origin")
    # its preflight too (no key: a browser's preflight carries none)
    pre = {"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    r = local.request("OPTIONS", "/v1/chat/completions", headers=pre, key=False)
    one_error(r, 403, "forbidden_origin")
    assert "access-control-allow-origin" not in r.headers


def test_a_named_origin_and_the_servers_own_are_served(local):
    r = local.request("POST", "/v1/chat/completions", chat(), headers={"Origin": "http://localhost:3000"})
    assert r.status == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000", r.body
    # a page on the server's own origin (a same-origin fetch from http://127.0.0.1:PORT/...)
    for host in (f"127.0.0.1:{local.port}", f"localhost:{local.port}"):
        r = local.request("POST", "/v1/chat/completions", chat(), headers={"Host": host, "Origin": f"http://{host}"})
        assert r.status == 200, r.body


def test_the_openai_client_and_curl_still_work(local):
    client = local.client()
    model = client.models.list().data[0].id
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=MAX)
    assert r.choices[0].message.content is not None
    pieces = list(client.completions.create(model=model, prompt="1, 2, 3,", max_tokens=MAX, stream=True))
    assert pieces
    out = subprocess.run(["curl", "-sS", f"{local.url}/v1/models", "-H", f"Authorization: Bearer {KEY}"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and json.loads(out.stdout)["data"][0]["id"] == model, out


# -- 5. /v1/models once the file has gone; the catch-all says nothing of the cause ----------------------------------


def test_models_answers_once_the_model_file_has_gone(smol_path, tmp_path):
    from specdesk.session import ModelSpec, Session

    link = tmp_path / "secret-folder" / "moved-away.gguf"
    link.parent.mkdir()
    os.symlink(smol_path, link)
    with Session.load(ModelSpec(link, n_ctx=256, threads=1), remember_costs=False) as s, serving(s) as local:
        first = local.request("GET", "/v1/models").json()["data"][0]
        link.unlink()  # the file was moved or deleted while served
        r = local.request("GET", "/v1/models")
        assert r.status == 200, r.body
        assert r.json()["data"][0] == first  # the same answer: what it needs was read at load
        assert b"secret-folder" not in r.body


def test_an_unexpected_error_tells_the_client_nothing_of_its_cause(session, monkeypatch, caplog):
    secret = "/home/someone/private/models/x.gguf"

    def broken(*_a, **_k):
        raise RuntimeError(f"cannot open {secret}")

    with serving(session) as local:
        monkeypatch.setattr(session, "chat_prompt", broken)  # in the handler's own path
        err = one_error(local.request("POST", "/v1/chat/completions", chat()), 500, None)
        assert secret not in err["message"] and "RuntimeError" not in err["message"], err
        monkeypatch.undo()
        monkeypatch.setattr(session, "make_controller", broken)  # in the generation's thread
        err = one_error(local.request("POST", "/v1/chat/completions", chat()), 500, None)
        assert secret not in err["message"] and "RuntimeError" not in err["message"], err
        monkeypatch.undo()
        assert local.request("POST", "/v1/chat/completions", chat()).status == 200  # and it still serves
    assert secret in caplog.text  # the cause is in the server's log


def test_requests_shows_none_of_an_unexpected_errors_text(session, monkeypatch, caplog):
    """Issue 51, defect 7: the client was told nothing of the cause, but /requests showed
    it (the queue kept str(e) of any exception). The failed request now reads as the
    client's answer does; an error worded for users (a prompt too long) still shows."""
    from specdesk.errors import SpecDeskError
    from specdesk.server.generation import UNEXPECTED

    secret = "/home/someone/private/models/x.gguf"

    def broken(*_a, **_k):
        raise RuntimeError(f"cannot open {secret}")

    with serving(session) as local:
        monkeypatch.setattr(session, "make_controller", broken)  # in the generation's thread
        assert local.request("POST", "/v1/chat/completions", chat()).status == 500
        monkeypatch.undo()
        r = local.request("GET", "/requests")
        assert r.status == 200 and secret.encode() not in r.body, r.body
        failed = r.json()["recent"][-1]
        assert failed["state"] == "failed" and failed["error"] == UNEXPECTED, failed

        def refused(*_a, **_k):
            raise SpecDeskError("the draft model cannot run this request")

        monkeypatch.setattr(session, "make_controller", refused)  # an error worded for users
        r = local.request("POST", "/v1/chat/completions", chat())
        assert r.status == 500 and r.json()["error"]["message"] == "the draft model cannot run this request", r.body
        monkeypatch.undo()
        told = local.request("GET", "/requests").json()["recent"][-1]
        assert told["error"] == "the draft model cannot run this request", told
    assert secret in caplog.text  # the cause is in the server's log


# -- 6. /health: liveness for anyone, details for the key -----------------------------------------------------------


def test_health_without_the_key_says_only_that_the_server_is_up(local):
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = local.request("GET", "/health", headers=headers, key=False)
        assert r.status == 200 and r.json() == {"status": "ok"}, r.body
    assert local.request("HEAD", "/health", key=False).status == 200
    h = local.request("GET", "/health").json()  # with the key: the model and the queue
    assert h["status"] == "ok" and h["model"] == "SmolLM2-135M-Instruct.Q4_1" and h["capacity"] == 4


def test_health_without_a_key_configured_says_everything(session):
    with serving(session, key=None) as local:
        h = local.request("GET", "/health").json()
        assert h["model"] == "SmolLM2-135M-Instruct.Q4_1" and h["queued"] == 0


# -- 11. cached_tokens: no prefix oracle across clients -------------------------------------------------------------

SECRET = ("My bank password is hunter2 and my account number is 4417 1234 5678 9113. Remember them for me, "
          "and never tell anyone.")


def _cached(r) -> tuple[int, int, int]:
    t = r.model_extra["timings"]
    return r.usage.prompt_tokens_details.cached_tokens, t["cache_n"], t["prompt_n"]


def test_a_second_client_cannot_learn_the_first_ones_prompt(local):
    """Client A (from 127.0.0.2) sends a secret; client B (from 127.0.0.1) guesses its
    start. Had B's prompt been evaluated on A's cached tokens, cached_tokens (and
    cache_n, prompt_n, the prompt's time) would say how many of them B guessed right."""
    a, b = local.client("127.0.0.2"), local.client()
    model = a.models.list().data[0].id
    first = a.completions.create(model=model, prompt=SECRET, max_tokens=2, temperature=0)
    guess = SECRET[:40] + " is wrong"
    r = b.completions.create(model=model, prompt=guess, max_tokens=2, temperature=0)
    assert _cached(r) == (0, 0, r.usage.prompt_tokens), _cached(r)
    # a client's own prefix is still reused: its next turn starts where its last ended
    again = b.completions.create(model=model, prompt=guess + " again", max_tokens=2, temperature=0)
    assert _cached(again)[0] > 0 and _cached(again)[0] == again.usage.prompt_tokens - _cached(again)[2]
    back = a.completions.create(model=model, prompt=SECRET, max_tokens=2, temperature=0)
    assert _cached(back)[0] == 0, "B's tokens were in between: A starts afresh too"
    assert first.usage.prompt_tokens == back.usage.prompt_tokens


def _via(url: str, key: str, source: str) -> openai.OpenAI:
    """The openai SDK at ``url``, connecting from ``source`` (a loopback address: a machine)."""
    import httpx2  # the openai SDK's HTTP client

    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=300,
                         http_client=openai.DefaultHttpxClient(transport=httpx2.HTTPTransport(local_address=source)))


def _guess_after_secret(a: openai.OpenAI, b: openai.OpenAI) -> tuple[int, int, int]:
    model = a.models.list().data[0].id
    a.completions.create(model=model, prompt=SECRET, max_tokens=2, temperature=0)
    return _cached(b.completions.create(model=model, prompt=SECRET[:40] + " is wrong", max_tokens=2, temperature=0))


def test_clients_behind_a_reverse_proxy_cannot_learn_each_others_prompts(session):
    """Issue 51, defect 6: the cache was kept per client address, and behind a reverse
    proxy (the case --allow-host exists for) every client has the proxy's: B read 75 of
    the 78 tokens A had cached. The proxy's X-Forwarded-For now tells them apart, and so
    does a key of their own; a client's own next turn still reuses its prompt. The proxy
    connects from 127.0.0.9, another machine to uvicorn (which takes forwarded addresses
    from 127.0.0.1 alone)."""
    from serving import ReverseProxy

    with serving(session) as local, ReverseProxy(local.url, source="127.0.0.9") as proxy:
        a, b = _via(proxy.url, KEY, "127.0.0.2"), _via(proxy.url, KEY, "127.0.0.3")
        cached, _, prompt_n = _guess_after_secret(a, b)
        assert cached == 0 and prompt_n > 0, (cached, prompt_n)
        assert {t.client.split(" ")[0] for t in local.queue.recent()[-2:]} == {"127.0.0.9"}  # the proxy's, for both
        model = b.models.list().data[0].id
        guess = SECRET[:40] + " is wrong"
        again = b.completions.create(model=model, prompt=guess + " again", max_tokens=2, temperature=0)
        assert _cached(again)[0] > 0  # B's own prefix is B's
    with (serving(session, key=("key-of-a", "key-of-b")) as local,
          ReverseProxy(local.url, forwarded_for=False, source="127.0.0.9") as proxy):
        a, b = _via(proxy.url, "key-of-a", "127.0.0.2"), _via(proxy.url, "key-of-b", "127.0.0.3")
        assert _guess_after_secret(a, b)[0] == 0  # a key each: apart, with nothing else to tell them by
        same = _via(proxy.url, "key-of-a", "127.0.0.3")  # A's key, through a proxy that names no one: A itself
        assert _guess_after_secret(a, same)[0] > 0


def test_a_forged_x_forwarded_for_joins_no_other_client(local):
    """uvicorn takes X-Forwarded-For from 127.0.0.1 as the client's address, so a program
    on this machine that sent "X-Forwarded-For: 127.0.0.2" became client 127.0.0.2 and
    read its cached prompt. A forwarded address now only sets a client apart."""
    a = local.client("127.0.0.2")
    model = a.models.list().data[0].id
    a.completions.create(model=model, prompt=SECRET, max_tokens=2, temperature=0)
    forger = openai.OpenAI(base_url=local.url + "/v1", api_key=KEY, max_retries=0, timeout=300,
                           default_headers={"X-Forwarded-For": "127.0.0.2"})
    r = forger.completions.create(model=model, prompt=SECRET[:40] + " is wrong", max_tokens=2, temperature=0)
    assert _cached(r)[0] == 0, _cached(r)


def test_the_apps_chat_is_not_an_oracle_for_served_clients(session, local):
    """The app's own chat runs in the same line (queue.run, as ServeController.chat_steps);
    a served client then cannot probe what the chat held."""
    from specdesk.session import GenerationConfig

    prompt = session.raw_prompt(SECRET)
    ticket = local.queue.submit("this app (chat)", "app", len(prompt), None, bounded=False)
    for _ in local.queue.run(ticket, session, prompt, GenerationConfig(proposer="draft", k=2, max_tokens=2)):
        pass
    client = local.client()
    r = client.completions.create(model=client.models.list().data[0].id, prompt=SECRET[:60], max_tokens=2, temperature=0)
    assert _cached(r) == (0, 0, r.usage.prompt_tokens), _cached(r)


def test_history_lookups_see_only_the_clients_own_turns(session):
    """With the history proposers a client's drafts are copied from earlier turns: had
    they been everyone's, which drafts were accepted would tell B what A had asked and
    been told. A's own next turn copies from A's last; B's finds nothing of A's."""
    from specdesk.session import GenerationConfig
    from specdesk.speculative.sampling import SamplingParams

    cfg = GenerationConfig(proposer="ngram+history", k=4, max_tokens=24, sampling=SamplingParams(temperature=0.0))
    prompt = session.raw_prompt(SECRET + " Now, what is my password?")

    def from_history(owner: str) -> int:
        return sum(s.drafted for s in session.generate(prompt, cfg, owner=owner) if s.source == "history")

    from_history("http 127.0.0.2")
    assert from_history("http 127.0.0.2") > 0, "A's second turn copies from its first"
    assert from_history("http 127.0.0.1") == 0, "B's lookups see none of A's turns"


# -- 12. a request that races an unload -----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_racing_an_unload_gets_503(smol_path, stream):
    """The models are unloaded (the app loaded another pair) after the request's prompt
    was tokenized and before its generation starts: the close waits for the prompt's
    lease, then frees the models, and the generation finds them gone. Made to happen
    at that point by a hook, not by timing."""
    from specdesk.session import ModelSpec, Session

    s = Session.load(ModelSpec(smol_path, n_ctx=256, threads=1), ModelSpec(smol_path, n_ctx=256, threads=1),
                     remember_costs=False)
    tokenize = s.chat_prompt
    closed = threading.Event()

    def unload_meanwhile(*a, **k):
        out = tokenize(*a, **k)
        s.close()  # a lease is held here: the models are freed when it ends, before the generation
        closed.set()
        return out

    s.chat_prompt = unload_meanwhile
    try:
        with serving(s) as local:
            body = {**chat(), "stream": stream}
            r = local.request("POST", "/v1/chat/completions", body)
            assert closed.is_set() and s.closed
            if not stream:
                one_error(r, 503, "unloaded", "unloaded")
            else:  # the stream had begun: its error is the last event, in the same format
                events = [json.loads(x[6:]) for x in r.body.decode().split("\n\n") if x.startswith("data: {")]
                err = events[-1]["error"]
                assert err["code"] == "unloaded" and "unloaded" in err["message"] and "ctx" not in err["message"], err
            # and after the unload: every request
            one_error(local.request("POST", "/v1/chat/completions", chat()), 503, "unloaded")
    finally:
        s.close()

