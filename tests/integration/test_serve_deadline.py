"""``specdesk serve --request-timeout``: a client that sends half a request, or none,
gets a 408 (or, having sent nothing, a closed connection) once the deadline passes,
instead of holding a connection for ever; requests that arrive in time, and answers
that take longer than the deadline, are untouched; and what is not HTTP/1.1 at all gets
a 400 in OpenAI's format, as every other refusal. Over real sockets, against the real
server on SmolLM2."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from urllib.parse import urlsplit

import pytest
from serving import PY, isolated_env, start_serve

KEY = "deadline-key"
TIMEOUT_S = 2.0
HANG_S = 60  # what would count as the old hang: far past the deadline, on a loaded machine too


@pytest.fixture(scope="module")
def server(smol_path, tmp_path_factory):
    s = start_serve(["--target", smol_path, "--proposer", "none", "--ctx", "512", "--threads", "1",
                     "--request-timeout", str(TIMEOUT_S)], tmp_path_factory.mktemp("serve"), key=KEY)
    yield s
    assert s.stop() == 0, s.stderr()
    assert "Traceback" not in s.stderr(), s.stderr()


def connect(server) -> socket.socket:
    u = urlsplit(server.url)
    sock = socket.create_connection((u.hostname, u.port), timeout=HANG_S)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a socket timeout
    here is the hang this deadline removes)."""
    out = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return out
        out += chunk


def chat_request(body: bytes, content_length: int | None = None) -> bytes:
    n = len(body) if content_length is None else content_length
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n" % n + body)


def assert_408(reply: bytes) -> dict:
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), reply[:200]
    assert b"connection: close" in head.lower()
    err = json.loads(body)["error"]
    assert err["code"] == "request_timeout" and f"{TIMEOUT_S:g} s" in err["message"], err
    return err


def test_half_sent_headers_get_a_408_and_the_connection_closes(server):
    with connect(server) as sock:
        t0 = time.monotonic()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: appl")
        reply = read_until_closed(sock)
        assert time.monotonic() - t0 >= TIMEOUT_S * 0.9  # not before the deadline
    assert_408(reply)


def test_a_body_shorter_than_its_length_gets_a_408(server):
    with connect(server) as sock:
        sock.sendall(chat_request(b'{"model": "x", "messa', content_length=400))
        assert_408(read_until_closed(sock))


def test_a_connection_that_sends_nothing_is_closed_without_a_word(server):
    with connect(server) as sock:
        assert read_until_closed(sock) == b""


def test_a_request_sent_slowly_but_within_the_deadline_is_answered(server):
    body = json.dumps({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 3}).encode()
    req = chat_request(body)
    with connect(server) as sock:
        for part in (req[:20], req[20:90], req[90:]):
            sock.sendall(part)
            time.sleep(TIMEOUT_S / 5)
        reply = b""
        while b"\r\n\r\n" not in reply or len(reply.partition(b"\r\n\r\n")[2]) < _length(reply):
            chunk = sock.recv(65536)
            assert chunk, reply
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200 "), reply[:300]
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["usage"]["completion_tokens"] == 3


def _length(reply: bytes) -> int:
    for line in reply.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise AssertionError(f"no content-length in {reply[:300]!r}")


def test_an_answer_longer_than_the_deadline_is_not_cut(server):
    """The deadline is for reading the request: an answer may take longer (here the
    client holds the stream past the deadline before reading on), and it ends as usual."""
    client = server.client()
    t0 = time.monotonic()
    stream = client.chat.completions.create(
        model=client.models.list().data[0].id, messages=[{"role": "user", "content": "Count from 1 to 50, separated by commas."}],
        max_tokens=40, temperature=0, stream=True)
    chunks = [next(stream)]
    time.sleep(TIMEOUT_S * 1.5)
    chunks += list(stream)
    assert time.monotonic() - t0 > TIMEOUT_S
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish in (["length"], ["stop"]), finish
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "1" in text, text


def _timeouts_counted(server) -> dict[str, float]:
    return {path: n for (path, status), n in _status_counts(server).items() if status == "408"}


def test_timeouts_are_counted_in_metrics(server):
    """A 408 is written below the app, which never sees the request: /metrics still
    counts it, by path where the headers had arrived."""
    before = _timeouts_counted(server)
    with connect(server) as sock:
        sock.sendall(b"GET /hea")
        assert_408(read_until_closed(sock))
    with connect(server) as sock:
        sock.sendall(chat_request(b'{"messa', content_length=100))
        assert_408(read_until_closed(sock))
    after = _timeouts_counted(server)
    assert after.get("other", 0) == before.get("other", 0) + 1, (before, after)
    assert after.get("/v1/chat/completions", 0) == before.get("/v1/chat/completions", 0) + 1, (before, after)


def _status_counts(server) -> dict[tuple[str, str], float]:
    r = server.get("/metrics")
    assert r.status == 200, r.text
    out = {}
    for line in r.text.splitlines():
        if line.startswith("specdesk_http_requests_total{"):
            path = line.split('path="', 1)[1].split('"', 1)[0]
            status = line.split('status="', 1)[1].split('"', 1)[0]
            out[(path, status)] = float(line.rsplit(" ", 1)[1])
    return out


@pytest.mark.parametrize("what, raw", [
    ("a request line that is not HTTP", b"HELLO THERE\r\n\r\n"),
    ("a header line without a colon", b"GET /health HTTP/1.1\r\nHost: x\r\nnot a header\r\n\r\n"),
    # h11 holds at most 16 KiB of a header block still unfinished (a whole one read at once may be longer)
    ("headers over 16 KiB, unfinished", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000),
    ("a Content-Length that is not a number", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: lots\r\n\r\n"),
])
def test_a_request_that_is_not_http_gets_one_json_error(server, what, raw):
    """What h11 cannot parse is refused like every other bad request: a 400 in
    OpenAI's format with a line a person can act on (uvicorn's own was plain text,
    "Invalid HTTP request received."), counted in /metrics, the connection closed."""
    before = _status_counts(server).get(("other", "400"), 0)
    with connect(server) as sock:
        sock.sendall(raw)
        reply = read_until_closed(sock)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), (what, reply[:300])
    assert b"application/json" in head.lower() and b"connection: close" in head.lower()
    err = json.loads(body)["error"]
    assert err["code"] == "bad_http" and "not valid HTTP/1.1" in err["message"] and "16 KiB" in err["message"], err
    assert _status_counts(server).get(("other", "400"), 0) == before + 1


def test_the_server_still_answers_after_the_timeouts(server):
    r = server.get("/health")
    assert r.status == 200, r.text


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon"])
def test_a_bad_request_timeout_is_one_line(value, smol_path, tmp_path):
    r = subprocess.run([PY, "-m", "specdesk", "serve", "--target", smol_path, "--port", "0", "--request-timeout", value],
                       capture_output=True, text=True, env=isolated_env(tmp_path), timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines and "request timeout" in lines[-1] and "Traceback" not in r.stderr, r.stderr
    assert r.stdout == ""
