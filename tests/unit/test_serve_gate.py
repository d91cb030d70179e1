"""Which Host and Origin a request may carry (guard.Gate: DNS rebinding, issue 42), and
what ``--allow-host`` takes: the rules alone, no model, no socket."""

from __future__ import annotations

import pytest

from specdesk.server.guard import Gate, allowed_host_error, host_name, is_loopback_name, parse_origin

LOOPBACK = Gate(None, hosts=(), origins=("http://localhost:3000",))
ALLOWING = Gate(None, hosts=("llm.home", "[fe80::1]"), origins=())
UNCHECKED = Gate(None, hosts=None, origins=())  # a non-loopback bind
ANY_ORIGIN = Gate(None, hosts=(), origins=("*",))


def refused(gate: Gate, host: str | None, origin: str | None = None) -> str | None:
    r = gate.refusal(None if host is None else host.encode("latin-1"), None if origin is None else origin.encode("latin-1"))
    return None if r is None else r[1]


@pytest.mark.parametrize("value,name", [
    ("localhost", "localhost"), ("LocalHost:8080", "localhost"), ("127.0.0.1:80", "127.0.0.1"), ("[::1]:8080", "::1"),
    ("[::1]", "::1"), ("llm.home:", "llm.home"),
    ("[::1", None), ("[nope]:80", None), (":8080", None), ("localhost:80@evil", None), ("localhost:8o", None),
    ("[::1]x", None), ("", None),
])
def test_host_name(value, name):
    assert host_name(value) == name


@pytest.mark.parametrize("host", ["localhost", "localhost:8080", "127.0.0.1:8080", "127.9.9.9", "[::1]:8080",
                                  "[::ffff:127.0.0.1]:8080", None])
def test_a_loopback_bind_serves_its_loopback_names(host):
    assert refused(LOOPBACK, host) is None


@pytest.mark.parametrize("host", ["rebind.attacker.example:8080", "127.0.0.1.nip.io", "localhost.attacker.example",
                                  "0.0.0.0:8080", "192.168.1.20", "localhost.", ":8080", "[::1]x:8080", "", "llm.home"])
def test_a_loopback_bind_refuses_other_hosts(host):
    assert refused(LOOPBACK, host) == "forbidden_host"


def test_allowed_hosts_and_an_unchecked_bind():
    assert refused(ALLOWING, "LLM.HOME:8080") is None and refused(ALLOWING, "[fe80::1]:80") is None
    assert refused(ALLOWING, "localhost:8080") is None  # loopback names always
    assert refused(ALLOWING, "other.home") == "forbidden_host"
    assert refused(UNCHECKED, "my-desktop.lan:8080") is None


@pytest.mark.parametrize("gate,host,origin,code", [
    (LOOPBACK, "127.0.0.1:8080", None, None),  # curl, the SDKs
    (LOOPBACK, "127.0.0.1:8080", "http://localhost:3000", None),  # named
    (LOOPBACK, "127.0.0.1:8080", "http://127.0.0.1:8080", None),  # the server's own
    (LOOPBACK, "localhost:8080", "http://LOCALHOST:8080", None),
    (LOOPBACK, "[::1]:8080", "http://[::1]:8080", None),
    (LOOPBACK, "127.0.0.1:8080", "http://localhost:8080", "forbidden_origin"),  # another origin, if the same machine
    (LOOPBACK, "127.0.0.1:8080", "http://127.0.0.1:9999", "forbidden_origin"),
    (LOOPBACK, "127.0.0.1:8080", "https://127.0.0.1:8080", "forbidden_origin"),
    (LOOPBACK, "127.0.0.1:8080", "http://localhost:3000/", "forbidden_origin"),  # origins are compared exactly
    (LOOPBACK, "127.0.0.1:8080", "null", "forbidden_origin"),  # a sandboxed frame, a file:// page
    (LOOPBACK, "127.0.0.1:8080", "http://evil.example", "forbidden_origin"),
    (LOOPBACK, None, "http://evil.example", "forbidden_origin"),
    (ANY_ORIGIN, "127.0.0.1:8080", "http://evil.example", None),
    (ANY_ORIGIN, "rebind.attacker.example", "http://rebind.attacker.example", "forbidden_host"),  # * names origins only
    (ALLOWING, "llm.home:8080", "http://llm.home:8080", None),
    # where no Host is checked, a page on "its own" origin may be a rebound one: only loopback names are trusted
    (UNCHECKED, "rebind.attacker.example:8080", "http://rebind.attacker.example:8080", "forbidden_origin"),
    (UNCHECKED, "192.168.1.20:8080", None, None),
    (UNCHECKED, "localhost:8080", "http://localhost:8080", None),
])
def test_origins(gate, host, origin, code):
    assert refused(gate, host, origin) == code


def test_the_message_names_the_way_in_and_stays_one_short_line():
    msg, _ = LOOPBACK.refusal(b"x" * 5000, None)
    assert "--allow-host" in msg and len(msg) < 400 and "\n" not in msg
    msg, _ = LOOPBACK.refusal(b"localhost", b"http://evil.example")
    assert "--cors-origin" in msg and "http://evil.example" in msg


@pytest.mark.parametrize("value", ["llm.home", "LLM.Home", "my_box", "192.168.1.20", "fe80::1", "[fe80::1]", "*", "localhost"])
def test_allow_host_takes_names_and_addresses(value):
    assert allowed_host_error(value) is None


@pytest.mark.parametrize("value", ["http://llm.home", "llm.home:8080", "llm.home/v1", "", " ", "a b", "-bad.home",
                                   "x" * 300, "llm..home", "[fe80::1]:80"])
def test_allow_host_refuses_the_rest_in_one_line(value):
    why = allowed_host_error(value)
    assert why and "\n" not in why and repr(value) in why and "Host header" in why


@pytest.mark.parametrize("value, origin", [
    ("http://localhost:3000", "http://localhost:3000"), ("HTTP://LocalHost:3000/", "http://localhost:3000"),
    ("http://localhost:80", "http://localhost"), ("https://chat.example:443", "https://chat.example"),
    ("https://chat.example:8443", "https://chat.example:8443"), ("http://[::1]:5173", "http://[::1]:5173"),
    (" * ", "*"),
])
def test_cors_origin_takes_the_form_browsers_send(value, origin):
    # a browser sends scheme://host[:port], lower-case, without its scheme's default port
    assert parse_origin(value) == (origin, None)
    gate = Gate(LOOPBACK.app, hosts=(), origins=(origin,))
    assert gate.refusal(b"localhost", b"http://localhost:3000" if origin == "*" else origin.encode()) is None


@pytest.mark.parametrize("value", ["localhost:3000", "http://localhost:3000/app", "http://x?a=1", "null", "", "ftp://x",
                                   "file:///srv/page.html", "http://user:pw@x", "http://x:99999", "http://-x", "http://a b"])
def test_cors_origin_refuses_what_never_matches_in_one_line(value):
    origin, why = parse_origin(value)
    assert origin is None and why and "\n" not in why and repr(value) in why and "scheme://host[:port]" in why


def test_loopback_names():
    assert is_loopback_name("localhost") and is_loopback_name("127.0.0.1") and is_loopback_name("::1")
    assert not is_loopback_name("0.0.0.0") and not is_loopback_name("localhost.") and not is_loopback_name("10.0.0.1")


@pytest.mark.parametrize("host,loopback", [
    ("127.0.0.1", True), ("LOCALHOST", True), ("localhost", True), ("127.1", True), ("127.0.1.1", True),
    ("::1", True), ("[::1]", True), ("::ffff:127.0.0.1", True),
    ("0.0.0.0", False), ("", False), ("::", False), ("192.168.1.20", False), ("no-such-host.invalid", False),
])
def test_loopback_is_decided_by_the_address_not_the_spelling(host, loopback):
    """Issue 51, defect 3: is_loopback compared strings (LOCALHOST, 127.1 were not loopback)."""
    from specdesk.session.remote import is_loopback

    assert is_loopback(host) is loopback
