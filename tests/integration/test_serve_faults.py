"""``specdesk serve`` under load and abuse: a queue of four with more clients than
places, a client killed mid-stream, bad requests and failing ones. The target is
SmolLM2 with a strict chat template (roles must alternate, as Mistral's or Gemma's),
so a template can refuse a request."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from urllib.parse import urlsplit

import openai
import pytest
from gguf import GGUFValueType as VT
from serving import PY, isolated_env, start_serve

from synth.tiny_llama import rebuild_gguf  # noqa: E402

KEY = "faults-key"
QUEUE = 4
STRICT = ("{% for m in messages if m['role'] != 'system' %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% endfor %}")
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"
HOLDER_TOKENS = 900
ORIGIN = "http://localhost:3000"
AS_TYPED = "HTTP://LocalHost:3000/"  # as a person may write ORIGIN: the server matches the browser's form


@pytest.fixture(scope="module")
def strict_model(smol_path, tmp_path_factory):
    from specdesk.library.gguf import read_gguf

    template = read_gguf(smol_path, load=["tokenizer.chat_template"]).metadata["tokenizer.chat_template"]
    dst = tmp_path_factory.mktemp("strict") / "smol-strict.gguf"
    return rebuild_gguf(smol_path, dst, set_kv={"tokenizer.chat_template": (VT.STRING, STRICT + template)})


@pytest.fixture(scope="module")
def server(strict_model, smol_draft_path, tmp_path_factory):
    s = start_serve(["--target", strict_model, "--draft", smol_draft_path, "--ctx", "1024", "--threads", "1", "--k", "3",
                     "--queue", str(QUEUE), "--cors-origin", AS_TYPED], tmp_path_factory.mktemp("serve"), key=KEY)
    yield s
    assert s.stop() == 0, s.stderr()
    assert "Traceback" not in s.stderr(), s.stderr()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def hello(client, **kw):
    kw.setdefault("messages", [{"role": "user", "content": "Say hello."}])
    return client.chat.completions.create(model="smol-strict", max_tokens=kw.pop("max_tokens", 6), temperature=0, **kw)


def assert_serving(client) -> None:
    r = hello(client)
    assert r.choices[0].finish_reason in ("length", "stop") and r.usage.completion_tokens > 0


def one_error(reply, status: int, *needles, param: str | None = "any"):
    assert reply.status == status, (reply.status, reply.text)
    err = reply.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    msg = err["message"]
    assert msg and "\n" not in msg and "Traceback" not in msg, msg
    for n in needles:
        assert n in msg, msg
    if param != "any":
        assert err["param"] == param, err
    return err


def msgs(content="Hi"):
    return [{"role": "user", "content": content}]


BAD = [
    # (what, body, status, param, words in the message)
    ("no messages", {"messages": []}, 400, "messages", ["empty"]),
    ("messages missing", {"max_tokens": 4}, 400, "messages", ["required"]),
    ("messages not a list", {"messages": "Hi"}, 400, "messages", ["list"]),
    ("content a number", {"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content", []),
    ("unknown role", {"messages": [{"role": "wizard", "content": "Hi"}]}, 400, "messages[0].role", []),
    ("temperature a word", {"messages": msgs(), "temperature": "hot"}, 400, "temperature", ["number", "'hot'"]),
    ("temperature past 2", {"messages": msgs(), "temperature": 7}, 400, "temperature", ["2"]),
    ("max_tokens a string", {"messages": msgs(), "max_tokens": "10"}, 400, "max_tokens", ["integer"]),
    ("max_tokens zero", {"messages": msgs(), "max_tokens": 0}, 400, "max_tokens", []),
    ("stream a number", {"messages": msgs(), "stream": 1}, 400, "stream", ["bool"]),
    ("n = 2", {"messages": msgs(), "n": 2}, 400, "n", ["'n'", "not supported"]),
    ("tools", {"messages": msgs(), "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools", ["not supported"]),
    ("logprobs", {"messages": msgs(), "logprobs": True}, 400, "logprobs", ["not supported"]),
    ("an image", {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                                              {"type": "image_url", "image_url": {"url": "data:,"}}]}]},
     400, "messages[0].content[1].type", ["images are not supported"]),
    ("penalty", {"messages": msgs(), "presence_penalty": 0.5}, 400, "presence_penalty", ["not supported"]),
    ("unknown field", {"messages": msgs(), "model_path": "/etc/passwd"}, 400, "model_path", ["unsupported field"]),
    ("another model", {"messages": msgs(), "model": "/models/other.gguf"}, 404, "model", ["not served here"]),
    ("max_tokens past the context", {"messages": msgs(), "max_tokens": 5000}, 400, "max_tokens",
     ["runs past the context", "1024"]),
    ("tool message", {"messages": [{"role": "tool", "content": "42", "tool_call_id": "x"}]}, 400, "messages[0].role",
     ["not supported"]),
    # JSON's \ud800 escape decodes to a lone surrogate, which is not text: it reached the tokenizer, a 500
    ("lone surrogate", {"messages": msgs("hi \ud800 there")}, 400, "messages[0].content", ["surrogate", "\\ud800"]),
    ("a part's text a number", {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, 400,
     "messages[0].content[0].text", ["string", "got 5"]),
    ("lone surrogate in a part", {"messages": [{"role": "user", "content": [{"type": "text", "text": "a\udfff"}]}]}, 400,
     "messages[0].content[0].text", ["surrogate"]),
]


@pytest.mark.parametrize("what,body,status,param,words", BAD, ids=[b[0] for b in BAD])
def test_bad_request_gets_one_clear_error(server, what, body, status, param, words):
    one_error(server.post("/v1/chat/completions", body), status, *words, param=param)


def test_malformed_bodies_keys_and_sizes(server, client):
    one_error(server.post("/v1/chat/completions", b'{"messages": [', {**server.headers(), "Content-Type": "application/json"}),
              400, "not valid JSON")
    one_error(server.post("/v1/chat/completions", b"[1, 2]", {**server.headers(), "Content-Type": "application/json"}),
              400, "JSON object")
    one_error(server.post("/v1/completions", {"prompt": 42}), 400, param="prompt")
    one_error(server.post("/v1/completions", {"prompt": ""}), 400, "empty", param="prompt")
    one_error(server.post("/v1/completions", {"prompt": "\ud800 hi"}), 400, "surrogate", param="prompt")
    one_error(server.post("/v1/chat/completions", b"", {**server.headers(), "Content-Type": "application/json"}),
              400, "body is empty")
    for unreadable in (b'{"messages": "a\xff\xfeb"}', b"[" * 100_000 + b"]" * 100_000,
                       b'{"max_tokens": ' + b"9" * 5000 + b"}"):  # not UTF-8, nested too deep, a number too long
        one_error(server.post("/v1/chat/completions", unreadable, {**server.headers(), "Content-Type": "application/json"}),
                  400, "could not be read as JSON")
    # the key: missing, wrong, or almost right (a prefix: compared in full, in constant time)
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Bearer {KEY[:-1]}"}, {"Authorization": KEY}):
        r = server.request("POST", "/v1/chat/completions", {"messages": msgs()}, headers=headers)
        one_error(r, 401, "API key")
        assert r.headers["www-authenticate"] == "Bearer"
    one_error(server.request("GET", "/metrics", headers={}), 401)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.v1, api_key="wrong", max_retries=0).models.list()
    # a prompt of 1 MB is refused by its size, before it is parsed or tokenized
    big = {"messages": msgs("word " * 200_000)}
    assert len(json.dumps(big)) > 1_000_000
    one_error(server.post("/v1/chat/completions", big), 413, "at most 256 KiB", "--ctx")
    one_error(server.get("/v1/nothing-here"), 404, "no such endpoint")
    wrong = server.get("/v1/chat/completions")
    one_error(wrong, 405, "method")
    assert wrong.headers["allow"] == "POST"  # what it does take, as HTTP asks of a 405
    head = server.request("HEAD", "/health", headers={})  # a health checker's HEAD, with no key
    assert head.status == 200 and head.body == b""
    assert_serving(client)


def test_cors_answers_the_allowed_origin_only(server):
    pre = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization,content-type"}
    r = server.request("OPTIONS", "/v1/chat/completions", headers=pre)  # a browser's preflight carries no key
    assert r.status == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    r = server.request("OPTIONS", "/v1/chat/completions", headers={**pre, "Origin": "http://evil.example"})
    one_error(r, 403, "--cors-origin")  # refused before CORS: in OpenAI's format, as every refusal
    assert "access-control-allow-origin" not in r.headers
    r = server.request("GET", "/v1/models", headers={**server.headers(), "Origin": ORIGIN})
    assert r.status == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    r = server.request("GET", "/v1/models", headers={"Origin": ORIGIN})  # no key: refused, and the page can read why
    assert r.status == 401 and r.headers["access-control-allow-origin"] == ORIGIN


def test_a_foreign_host_or_origin_is_refused_and_clients_still_work(server, client):
    """DNS rebinding (issue 42): a page whose own name was pointed at 127.0.0.1 sends its
    name as Host; a page on another origin sends its Origin. Both get 403 in OpenAI's
    format, counted in /metrics; the SDK, curl and a page on the server's own origin
    still work."""
    import shutil

    def refused() -> float:
        want = 'specdesk_http_requests_total{path="/v1/chat/completions",status="403"} '
        return next((float(x.rsplit(" ", 1)[1]) for x in server.get("/metrics").text.splitlines() if x.startswith(want)), 0.0)

    before = refused()
    port = urlsplit(server.url).port
    rebound = f"rebind.attacker.example:{port}"
    page = {**server.headers(), "Host": rebound, "Origin": f"http://{rebound}"}
    err = one_error(server.post("/v1/chat/completions", {"messages": msgs()}, headers=page), 403, "Host", "--allow-host")
    assert err["code"] == "forbidden_host"
    for path in ("/requests", "/metrics", "/v1/models", "/health"):
        one_error(server.request("GET", path, headers={**server.headers(), "Host": rebound}), 403)
    err = one_error(server.post("/v1/chat/completions", {"messages": msgs()},
                                headers={**server.headers(), "Origin": "http://evil.example"}), 403, "--cors-origin")
    assert err["code"] == "forbidden_origin"
    assert refused() == before + 2
    assert_serving(client)
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
        r = server.post("/v1/chat/completions", {"messages": msgs(), "max_tokens": 2},
                        headers={**server.headers(), "Host": host, "Origin": f"http://{host}"})  # the server's own origin
        assert r.status == 200, (host, r.text)
    curl = shutil.which("curl")
    assert curl, "curl is part of the test machine"
    out = subprocess.run([curl, "-sS", f"{server.url}/v1/models", "-H", f"Authorization: Bearer {KEY}"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and json.loads(out.stdout)["data"][0]["id"] == "smol-strict", out


def test_allow_host_lets_that_name_in(strict_model, tmp_path):
    s = start_serve(["--target", strict_model, "--proposer", "none", "--ctx", "256", "--threads", "1",
                     "--allow-host", "LLM.home"], tmp_path)
    try:
        port = urlsplit(s.url).port
        assert s.request("GET", "/v1/models", headers={"Host": f"llm.home:{port}"}).status == 200
        one_error(s.request("GET", "/v1/models", headers={"Host": f"other.home:{port}"}), 403, "--allow-host")
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("option, value, says", [
    *(("--allow-host", v, "Host header") for v in ("http://llm.home", "llm.home:8080", "llm.home/v1", "")),
    # each would never match what a browser sends (or, null, match any sandboxed page)
    *(("--cors-origin", v, "scheme://host[:port]")
      for v in ("localhost:3000", "http://localhost:3000/app", "null", "file:///srv/page.html", "")),
])
def test_a_bad_host_or_origin_is_one_line_before_loading(option, value, says, strict_model, tmp_path):
    r = subprocess.run([PY, "-m", "specdesk", "serve", "--target", strict_model, "--port", "0", option, value],
                       capture_output=True, text=True, timeout=120, env=isolated_env(tmp_path))
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert option in lines[0] and says in lines[0] and repr(value) in lines[0], lines[0]


def test_failed_requests_fail_alone(server, client):
    # a chat template that refuses the roles: the template's own message, one line
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})
    one_error(r, 400, "chat template failed", "roles must alternate")
    assert_serving(client)
    # a prompt within the size limit that does not fit the context
    r = server.post("/v1/chat/completions", {"messages": msgs("lorem ipsum dolor " * 700)})
    one_error(r, 400, "context holds 1024", param="messages")
    r = server.post("/v1/completions", {"prompt": "lorem ipsum dolor " * 700})
    one_error(r, 400, "context holds 1024", param="prompt")
    assert_serving(client)
    h = server.get("/health").json()
    assert h["running"] == 0 and h["queued"] == 0


HOLDER = """
import sys, openai
c = openai.OpenAI(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0, timeout=600)
for chunk in c.completions.create(model="smol-strict", prompt=sys.argv[3], max_tokens=int(sys.argv[4]), stream=True):
    print(repr(chunk.choices[0].text), flush=True)
"""


def _holder(server, tmp_path):
    """A client process that streams a long answer (counting), to be killed mid-stream."""
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    p = subprocess.Popen([PY, str(script), server.v1, KEY, COUNTING, str(HOLDER_TOKENS)], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, env=isolated_env(tmp_path / "holder"))
    first = p.stdout.readline()  # its first streamed piece: the holder's generation runs
    assert first, "the holder streamed nothing"
    return p


def _wait_for(cond, what: str, limit_s: float = 300):
    end = time.monotonic() + limit_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"never saw: {what}")
        time.sleep(0.05)


def test_six_clients_with_a_queue_of_four_and_a_killed_one(server, client, tmp_path):
    holder = _holder(server, tmp_path)
    results: list = [None] * 6
    barrier = threading.Barrier(6)

    def one(i: int) -> None:
        c = server.client()
        barrier.wait()
        try:
            results[i] = c.chat.completions.with_raw_response.create(
                model="smol-strict", messages=msgs(f"Say hello to client {i}."), max_tokens=8, temperature=0)
        except openai.APIStatusError as e:
            results[i] = e
        except Exception as e:  # noqa: BLE001 - any other outcome fails the test below
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    # the holder runs: four wait in line, two are turned away at once
    _wait_for(lambda: server.get("/health").json()["queued"] == QUEUE, "four requests in line")
    _wait_for(lambda: sum(isinstance(r, openai.APIStatusError) for r in results) == 2, "two refusals")
    refused = [r for r in results if isinstance(r, openai.APIStatusError)]
    for e in refused:
        assert e.status_code == 503 and int(e.response.headers["retry-after"]) >= 1
        assert e.body["code"] == "queue_full" and "queue of 4" in e.body["message"]
    assert holder.poll() is None, "the holder was still streaming when all six had their place"

    holder.send_signal(signal.SIGKILL)  # a client killed mid-stream
    holder.wait(30)
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a request hung"
    answers = [r.parse() for r in results if not isinstance(r, (openai.APIStatusError, Exception, type(None)))]
    assert len(answers) == 4 and len(refused) == 2, results
    for a in answers:
        assert a.choices[0].finish_reason in ("length", "stop") and a.usage.completion_tokens > 0
        assert a.model_extra["timings"]["queue_ms"] > 0

    recent = server.get("/requests").json()["recent"]
    held = next(t for t in recent if t["kind"] == "completion" and t["prompt_tokens"] > 10)
    assert held["state"] == "cancelled" and held["cancel_reason"] == "client gone"
    assert held["steps_after_cancel"] <= 1, held  # it stopped within one propose/verify step
    assert held["generated"] < HOLDER_TOKENS
    queued = [t for t in recent if t["id"] > held["id"] and t["kind"] == "chat"][:4]
    assert len(queued) == 4 and all(t["state"] == "done" for t in queued)
    # first come, first served: the freed slot went to the next in line, once the killed one had ended
    assert [t["id"] for t in sorted(queued, key=lambda t: t["started_at"])] == sorted(t["id"] for t in queued)
    assert min(t["started_at"] for t in queued) >= held["finished_at"]
    assert_serving(client)
    h = server.get("/health").json()
    assert h["running"] == 0 and h["queued"] == 0


def test_a_waiting_client_that_leaves_gives_its_place_back(server, client, tmp_path):
    holder = _holder(server, tmp_path)
    waiting_client = server.client(timeout=1.5)  # gives up while it waits in line
    with pytest.raises(openai.APITimeoutError):
        hello(waiting_client)
    _wait_for(lambda: server.get("/health").json()["queued"] == 0, "the line empty again")
    holder.send_signal(signal.SIGKILL)
    holder.wait(30)
    recent = server.get("/requests").json()["recent"]
    gone = [t for t in recent if t["kind"] == "chat"][-1]
    assert gone["state"] == "cancelled" and gone["generated"] == 0 and gone["run_ms"] is None
    assert_serving(client)


def test_non_loopback_host_warns(strict_model, tmp_path):
    s = start_serve(["--target", strict_model, "--proposer", "none", "--ctx", "256", "--threads", "1", "--host", "0.0.0.0"],
                    tmp_path)
    try:
        warning = [x for x in s.stderr().splitlines() if x.startswith("WARNING")]
        assert len(warning) == 1 and "0.0.0.0" in warning[0] and "without any key" in warning[0], s.stderr()
        assert s.get("/health").json()["status"] == "ok"
        # other machines call it by names it cannot know: no Host check there (no key is the danger, as the warning says)
        assert s.request("GET", "/health", headers={"Host": "my-desktop.lan:8080"}).status == 200
    finally:
        assert s.stop() == 0


def _hostname_on_loopback() -> str:
    """This machine's own name, where it resolves to loopback alone (Debian maps it to
    127.0.1.1 in /etc/hosts); skipped elsewhere."""
    name = socket.gethostname()
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(name, None)}
    except OSError:
        addresses = set()
    if not addresses or not all(a.startswith("127.") or a == "::1" for a in addresses):
        pytest.skip(f"{name} does not resolve to loopback alone here ({sorted(addresses)})")
    return name


@pytest.mark.parametrize("spelt", ["LOCALHOST", "127.1", "hostname"])
def test_loopback_however_it_is_spelt_checks_the_host_and_does_not_warn(spelt, strict_model, tmp_path):
    """Issue 51, defect 3: --host LOCALHOST, 127.1 or $(hostname) bind loopback, but the
    string comparison took them for another address: the Host check was off (a rebound
    page's Host got 200) and the CLI warned that every machine could use the models.
    Now both follow the bound socket's address."""
    host = _hostname_on_loopback() if spelt == "hostname" else spelt
    s = start_serve(["--target", strict_model, "--proposer", "none", "--ctx", "256", "--threads", "1", "--host", host],
                    tmp_path)
    try:
        assert not [x for x in s.stderr().splitlines() if x.startswith("WARNING")], s.stderr()
        port = urlsplit(s.url).port
        one_error(s.request("GET", "/requests", headers={"Host": f"attacker.example:{port}"}), 403, "--allow-host")
        assert s.request("GET", "/requests", headers={"Host": f"localhost:{port}"}).status == 200
    finally:
        assert s.stop() == 0


def test_a_key_per_client(strict_model, tmp_path):
    """--api-key repeated: each key is let in (and keeps its client's cached prompt apart:
    test_serve_hostile.py); a key given twice is one line before anything loads."""
    r = subprocess.run([PY, "-m", "specdesk", "serve", "--target", strict_model, "--port", "0", "--api-key", "k1",
                        "--api-key", "k1"], capture_output=True, text=True, timeout=120, env=isolated_env(tmp_path))
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "given twice" in lines[0], r.stderr
    s = start_serve(["--target", strict_model, "--proposer", "none", "--ctx", "256", "--threads", "1",
                     "--api-key", "key-of-a", "--api-key", "key-of-b"], tmp_path)
    try:
        assert any("2 API keys, one per client" in x for x in s.stdout), s.stdout
        for key in ("key-of-a", "key-of-b"):
            assert s.request("GET", "/v1/models", headers={"Authorization": f"Bearer {key}"}).status == 200
        one_error(s.request("GET", "/v1/models", headers={"Authorization": "Bearer key-of-c"}), 401, "wrong API key")
    finally:
        assert s.stop() == 0


def test_port_in_use_is_one_line(strict_model, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = subprocess.run([PY, "-m", "specdesk", "serve", "--target", strict_model, "--proposer", "none",
                            "--port", str(port)], capture_output=True, text=True, timeout=120, env=isolated_env(tmp_path))
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"port {port} on 127.0.0.1 is in use" in lines[0]


def test_a_client_that_leaves_a_whole_answer_unread_stops_it(server, client):
    """A non-streamed request whose client disconnects while the tokens flow is
    cancelled within a poll, not run to its end with the next request waiting behind it."""
    from urllib.parse import urlsplit

    body = json.dumps({"model": "smol-strict", "prompt": COUNTING, "max_tokens": HOLDER_TOKENS, "temperature": 0}).encode()
    u = urlsplit(server.url)
    sock = socket.create_connection((u.hostname, u.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    _wait_for(lambda: [r for r in server.get("/requests").json()["running"] if r["generated"] > 4], "the answer running")
    sock.close()
    _wait_for(lambda: not server.get("/requests").json()["running"], "the answer stopped")
    left = [t for t in server.get("/requests").json()["recent"] if t["kind"] == "completion"][-1]
    assert left["state"] == "cancelled" and left["cancel_reason"] == "client gone", left
    assert left["steps_after_cancel"] <= 1 and left["generated"] < HOLDER_TOKENS, left
    assert_serving(client)
