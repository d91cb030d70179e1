"""A stand-in for the Hugging Face Hub: a small threaded HTTP server on 127.0.0.1.

It serves the endpoints huggingface_hub 2.4.0 calls to list and download model files,
so that tests can run the real client over real HTTP without reaching huggingface.co::

    with FakeHub({"org/repo": {"model-Q4_K_M.gguf": Path(...), "README.md": b"..."}}) as hub:
        os.environ["HF_ENDPOINT"] = hub.url      # or pass endpoint=hub.url
        ...
        hub.requests                              # what the client asked for
        hub.fail_after("model-Q4_K_M.gguf", 1_000_000)   # drop the connection there
        hub.set_status("model-Q4_K_M.gguf", 404)          # or a repo id, or 401, ...

Endpoints (``{rev}`` is ``main`` or the repo's 40-hex commit, anything else is
RevisionNotFound):

``GET /api/models/{repo}`` and ``GET /api/models/{repo}/revision/{rev}``
    ``HfApi.model_info``: ``id``, ``sha`` and ``siblings``; with ``?blobs=true``
    (``files_metadata=True``) each sibling has ``size``, ``blobId`` and, for LFS files,
    ``lfs: {size, sha256, pointerSize}``.
``GET /api/models/{repo}/tree/{rev}[/{path}]``
    ``HfApi.list_repo_tree``: ``{"type": "file", "path", "size", "oid", "lfs": {"oid",
    "size", "pointerSize"}}`` and ``{"type": "directory", ...}`` entries, one page;
    ``?recursive=true`` lists the whole tree.
``HEAD``/``GET /{repo}/resolve/{rev}/{filename}``
    ``hf_hub_download``/``get_hf_file_metadata``: ``X-Repo-Commit``, ``ETag`` (the git
    blob sha1, or for LFS files the sha256), ``X-Linked-Etag`` and ``X-Linked-Size`` for
    LFS files, ``Content-Length``, ``Accept-Ranges``. With ``lfs_redirect=True`` (the
    default, like the real Hub) an LFS file answers ``302`` with a ``Location`` on
    another origin (``http://localhost:{port}/cdn/...``, a "CDN"), which the client
    downloads from without the Authorization header.
``HEAD``/``GET /cdn/{repo}/{sha256}``
    The "CDN": the file's bytes.
``GET /api/agent-harnesses``
    An empty registry (huggingface_hub fetches it once a day for its user agent).

File bodies honour ``Range: bytes=a-`` / ``bytes=a-b`` with ``206 Partial Content`` and
``Content-Range`` (``416`` past the end). Errors carry the ``X-Error-Code`` /
``X-Error-Message`` headers huggingface_hub turns into typed exceptions
(``RepoNotFound``, ``EntryNotFound``, ``RevisionNotFound``, ``GatedRepo``).

Fault switches: ``fail_after`` (drop the connection once a body reaches a byte offset),
``set_status`` (answer every request for a repo or file with an error status),
``gate`` (require a token), ``corrupt`` (serve wrong bytes of the right size while the
listing and headers still give the true sha256; ``from_byte`` spares the header, so only
the tensor data is wrong), ``oversend`` (a body that goes on past the file's listed size),
``unsized`` (no size anywhere: no ``X-Linked-Size``, bodies sent chunked without
``Content-Length``, as a mirror may serve them), ``set_rate`` (slow bodies down) and
``hold``/``release`` (pause a body at a byte offset), ``override_header`` (a hostile
``ETag``, ``X-Linked-Etag`` or ``X-Repo-Commit`` on ``/resolve``, as a malicious mirror
would send) and ``replace_after_download`` (the file changes once it was sent whole);
``clear_faults`` removes them all. Every request is logged in
``requests`` (method, path, headers, status, range, body bytes sent, dropped).

Only the standard library is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = ["FakeHub", "HubRequest"]

_CHUNK = 1 << 20
_TEXT_SUFFIXES = (".md", ".json", ".txt", ".gitattributes", ".py", ".yaml", ".yml", ".jinja")
_POINTER_SIZE = 134  # the size of a git-lfs pointer file, as the Hub reports it
_SHA_CACHE: dict[tuple[str, int, int], str] = {}
_SHA_LOCK = threading.Lock()
_FLIP = bytes(b ^ 0x5A for b in range(256))  # what ``corrupt`` does to every byte


def _file_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _SHA_LOCK:
        if key in _SHA_CACHE:
            return _SHA_CACHE[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    digest = h.hexdigest()
    with _SHA_LOCK:
        _SHA_CACHE[key] = digest
    return digest


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class _Entry:
    """One file of a fake repo: bytes in memory or a file on disk."""

    def __init__(self, name: str, source: str | os.PathLike[str] | bytes) -> None:
        self.name = name
        if isinstance(source, (bytes, bytearray)):
            self.data: bytes | None = bytes(source)
            self.path: Path | None = None
            self.size = len(self.data)
        else:
            self.data = None
            self.path = Path(source)
            self.size = self.path.stat().st_size
        self.lfs = not name.lower().endswith(_TEXT_SUFFIXES)
        self._sha256: str | None = None
        self._sha1: str | None = None

    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            self._sha256 = hashlib.sha256(self.data).hexdigest() if self.data is not None else _file_sha256(self.path)
        return self._sha256

    @property
    def git_oid(self) -> str:
        """The git blob id: of the content for regular files, of the pointer for LFS files."""
        if self._sha1 is None:
            if self.lfs:
                pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {self.size}\n"
                self._sha1 = _git_blob_sha1(pointer.encode())
            else:
                self._sha1 = _git_blob_sha1(self.read(0, self.size))
        return self._sha1

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.git_oid

    def read(self, start: int, n: int) -> bytes:
        if self.data is not None:
            return self.data[start : start + n]
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(n)


class _Repo:
    def __init__(self, repo_id: str, files: dict[str, str | os.PathLike[str] | bytes]) -> None:
        self.repo_id = repo_id
        self.commit = hashlib.sha1(f"fakehub:{repo_id}".encode()).hexdigest()
        self.files: dict[str, _Entry] = {name: _Entry(name, src) for name, src in files.items()}

    def by_sha(self, sha: str) -> _Entry | None:
        for e in self.files.values():
            if e.lfs and e.sha256 == sha:
                return e
        return None


@dataclass
class HubRequest:
    """One request as the server saw it."""

    method: str
    path: str  # decoded, without the query
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    status: int = 0
    repo: str | None = None
    filename: str | None = None
    range_start: int | None = None  # from a Range header
    range_end: int | None = None
    bytes_sent: int = 0  # body bytes written to the socket (updated while the body is sent)
    dropped: bool = False  # the server cut the connection on purpose
    kind: str = ""  # "api", "tree", "resolve", "cdn" or ""

    @property
    def range(self) -> str | None:
        return self.headers.get("range")


@dataclass
class _Fault:
    offset: int
    times: int | None  # None: every time
    hits: int = 0


@dataclass
class _Status:
    status: int
    error_code: str | None
    message: str | None


@dataclass
class _State:
    rate: float | None = None  # bytes per second for file bodies
    holds: dict[str, tuple[int, threading.Event]] = field(default_factory=dict)
    faults: dict[tuple[str | None, str], _Fault] = field(default_factory=dict)
    statuses: dict[str, _Status] = field(default_factory=dict)
    gates: dict[str, str] = field(default_factory=dict)
    corrupt: dict[tuple[str | None, str], int] = field(default_factory=dict)  # -> first byte flipped
    extra: dict[tuple[str | None, str], int] = field(default_factory=dict)  # -> bytes sent past the end
    headers: dict[tuple[str | None, str], dict[str, str]] = field(default_factory=dict)
    unsized: set[tuple[str | None, str]] = field(default_factory=set)
    swaps: dict[tuple[str, str], "_Entry"] = field(default_factory=dict)  # -> what the file becomes
    swapped: dict[tuple[str, str], "_Entry"] = field(default_factory=dict)  # -> what it was (clear_faults restores)


class FakeHub:
    """A fake Hub serving ``{repo_id: {filename: path | bytes}}``; see the module doc."""

    def __init__(
        self,
        repos: dict[str, dict[str, str | os.PathLike[str] | bytes]],
        *,
        lfs_redirect: bool = True,
        cdn_host: str = "localhost",
    ) -> None:
        self._repos: dict[str, _Repo] = {rid: _Repo(rid, files) for rid, files in repos.items()}
        self.lfs_redirect = lfs_redirect
        self.cdn_host = cdn_host
        self._lock = threading.Lock()
        self._log: list[HubRequest] = []
        self._state = _State()
        self._releases: dict[str, threading.Event] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> "FakeHub":
        hub = self

        class Handler(_Handler):
            fakehub = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="FakeHub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeHub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "FakeHub is not running"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """The endpoint to give huggingface_hub (HF_ENDPOINT or endpoint=)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def cdn_url(self) -> str:
        return f"http://{self.cdn_host}:{self.port}"

    # -- content -----------------------------------------------------------------------

    def commit(self, repo_id: str) -> str:
        return self._repos[repo_id].commit

    def sha256(self, repo_id: str, filename: str) -> str:
        return self._repos[repo_id].files[filename].sha256

    def add_file(self, repo_id: str, filename: str, source: str | os.PathLike[str] | bytes) -> None:
        with self._lock:
            repo = self._repos.setdefault(repo_id, _Repo(repo_id, {}))
            repo.files[filename] = _Entry(filename, source)

    # -- request log -------------------------------------------------------------------

    @property
    def requests(self) -> list[HubRequest]:
        with self._lock:
            return list(self._log)

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()

    def downloads(self, filename: str, repo_id: str | None = None) -> list[HubRequest]:
        """The GET requests that (tried to) transfer the bytes of ``filename``."""
        return [
            r for r in self.requests
            if r.method == "GET" and r.filename == filename and r.kind in ("resolve", "cdn")
            and (repo_id is None or r.repo == repo_id) and r.status in (200, 206)
        ]

    def bytes_sent(self, filename: str, repo_id: str | None = None) -> int:
        return sum(r.bytes_sent for r in self.downloads(filename, repo_id))

    # -- fault switches ----------------------------------------------------------------

    def fail_after(self, filename: str, n_bytes: int, *, times: int | None = None, repo_id: str | None = None) -> None:
        """Drop the connection when a GET of ``filename`` reaches byte ``n_bytes`` of the
        file (a resumed request starting at or past it is dropped before any byte).
        ``times``: how many requests to cut (None = all, until ``clear_faults``)."""
        with self._lock:
            self._state.faults[(repo_id, filename)] = _Fault(n_bytes, times)

    def set_status(self, target: str, status: int | None, *, error_code: str | None = None,
                   message: str | None = None) -> None:
        """Answer every request for ``target`` (a repo id, or a filename in any repo) with
        ``status``; None removes the switch. Default headers make huggingface_hub raise
        what the real Hub would cause: 404 on a repo -> RepoNotFound, 404 on a file ->
        EntryNotFound, 403 -> GatedRepo; 401 has no error code (an HTTP 401 error)."""
        with self._lock:
            if status is None:
                self._state.statuses.pop(target, None)
            else:
                self._state.statuses[target] = _Status(status, error_code, message)

    def gate(self, repo_id: str, token: str | None) -> None:
        """Require ``Authorization: Bearer <token>`` for ``repo_id`` (None: open it
        again). No token: 401 GatedRepo; another token: 403 GatedRepo."""
        with self._lock:
            if token is None:
                self._state.gates.pop(repo_id, None)
            else:
                self._state.gates[repo_id] = token

    def corrupt(self, filename: str, *, repo_id: str | None = None, from_byte: int = 0) -> None:
        """Serve ``filename`` with its bytes from ``from_byte`` on flipped (same size;
        listing and headers unchanged)."""
        with self._lock:
            self._state.corrupt[(repo_id, filename)] = from_byte

    def oversend(self, filename: str, n_bytes: int, *, repo_id: str | None = None) -> None:
        """GETs of ``filename`` send ``n_bytes`` of zeros after the file (their
        Content-Length counts them), while the listing and ``HEAD`` give the true size."""
        with self._lock:
            self._state.extra[(repo_id, filename)] = n_bytes

    def unsized(self, filename: str, *, repo_id: str | None = None) -> None:
        """Give no size for ``filename``: no ``X-Linked-Size`` on ``/resolve`` (nor a
        ``Content-Length`` on its ``HEAD``), and its bodies sent with ``Transfer-Encoding:
        chunked``. The listing's size is the test's to leave out."""
        with self._lock:
            self._state.unsized.add((repo_id, filename))

    def _unsized(self, repo_id: str, filename: str) -> bool:
        with self._lock:
            return (repo_id, filename) in self._state.unsized or (None, filename) in self._state.unsized

    def set_rate(self, bytes_per_second: float | None) -> None:
        """Serve file bodies at about this speed (None: as fast as possible), e.g. to
        have time to watch or cancel a download in a GUI test."""
        with self._lock:
            self._state.rate = bytes_per_second

    def hold(self, filename: str, n_bytes: int) -> threading.Event:
        """Pause GETs of ``filename`` at byte ``n_bytes`` until ``release(filename)`` (or
        30 s). Returns an event that is set once a request reached the pause. Note that
        huggingface_hub reports progress per 10 MiB chunk (constants.DOWNLOAD_CHUNK_SIZE):
        hold on a multiple of it to see the bytes before the pause reported."""
        reached = threading.Event()
        with self._lock:
            self._state.holds[filename] = (n_bytes, reached)
            self._releases.setdefault(filename, threading.Event()).clear()
        return reached

    def release(self, filename: str | None = None) -> None:
        """End ``hold`` for ``filename`` (None: all)."""
        with self._lock:
            names = [filename] if filename is not None else list(self._state.holds)
            for name in names:
                self._state.holds.pop(name, None)
                self._releases.setdefault(name, threading.Event()).set()

    def override_header(self, filename: str, header: str, value: str, *, repo_id: str | None = None) -> None:
        """Send ``header: value`` instead of the true one on ``/resolve`` for ``filename``
        (e.g. ``ETag``/``X-Linked-Etag`` of ``"../../x"``); the bytes stay the true ones."""
        with self._lock:
            self._state.headers.setdefault((repo_id, filename), {})[header] = value

    def replace_after_download(self, repo_id: str, filename: str, source: str | os.PathLike[str] | bytes) -> None:
        """Once a GET has sent the whole of ``filename``, the repo's file becomes ``source``
        (same commit; new ETag, size and bytes), as a repo updated during a download or a
        mirror that changes its answer would serve it. The listing keeps the old sha256;
        ``clear_faults`` brings the old file back."""
        with self._lock:
            self._state.swaps[(repo_id, filename)] = _Entry(filename, source)

    def _swap_after(self, repo_id: str, filename: str) -> None:
        with self._lock:
            entry = self._state.swaps.pop((repo_id, filename), None)
            if entry is not None:
                files = self._repos[repo_id].files
                self._state.swapped.setdefault((repo_id, filename), files[filename])
                files[filename] = entry

    def clear_faults(self) -> None:
        """Remove every switch (faults, statuses, gates, corruption, rate, holds, headers)."""
        self.release()
        with self._lock:
            for (repo_id, filename), entry in self._state.swapped.items():
                self._repos[repo_id].files[filename] = entry
            self._state = _State()

    # -- used by the handler -----------------------------------------------------------

    def _record(self, req: HubRequest) -> None:
        with self._lock:
            self._log.append(req)

    def _take_fault(self, repo_id: str, filename: str) -> int | None:
        """The byte offset at which to drop this GET, counting it as one hit; or None."""
        with self._lock:
            fault = self._state.faults.get((repo_id, filename)) or self._state.faults.get((None, filename))
            if fault is None or (fault.times is not None and fault.hits >= fault.times):
                return None
            fault.hits += 1
            return fault.offset

    def _header_overrides(self, repo_id: str, filename: str) -> dict[str, str]:
        with self._lock:
            return {**self._state.headers.get((None, filename), {}),
                    **self._state.headers.get((repo_id, filename), {})}

    def _corrupt_from(self, repo_id: str, filename: str) -> int | None:
        """The first byte served flipped, or None."""
        with self._lock:
            c = self._state.corrupt
            return c.get((repo_id, filename), c.get((None, filename)))

    def _extra(self, repo_id: str, filename: str) -> int:
        with self._lock:
            x = self._state.extra
            return x.get((repo_id, filename), x.get((None, filename), 0))

    def _forced_status(self, repo_id: str | None, filename: str | None) -> tuple[_Status, str] | None:
        with self._lock:
            if repo_id is not None and repo_id in self._state.statuses:
                return self._state.statuses[repo_id], "repo"
            if filename is not None and filename in self._state.statuses:
                return self._state.statuses[filename], "file"
        return None

    def _gate_token(self, repo_id: str) -> str | None:
        with self._lock:
            return self._state.gates.get(repo_id)

    def _rate(self) -> float | None:
        with self._lock:
            return self._state.rate

    def _hold_for(self, filename: str) -> tuple[int, threading.Event, threading.Event] | None:
        with self._lock:
            h = self._state.holds.get(filename)
            if h is None:
                return None
            return h[0], h[1], self._releases.setdefault(filename, threading.Event())


class _Drop(Exception):
    """Cut the connection now."""


class _Chunked:
    """A response body in HTTP/1.1 chunks (``Transfer-Encoding: chunked``)."""

    def __init__(self, raw) -> None:
        self.raw = raw

    def write(self, data: bytes) -> int:
        if data:
            self.raw.write(b"%x\r\n" % len(data) + data + b"\r\n")
        return len(data)

    def end(self) -> None:
        self.raw.write(b"0\r\n\r\n")
        self.raw.flush()

    def __getattr__(self, name):
        return getattr(self.raw, name)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeHub/1.0"
    fakehub: FakeHub  # set by FakeHub.start

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - silence the default stderr log
        pass

    # -- entry points ------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_GET(self) -> None:
        self._handle("GET")

    def _handle(self, method: str) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        req = HubRequest(
            method=method,
            path=path,
            query=parse_qs(parts.query),
            headers={k.lower(): v for k, v in self.headers.items()},
        )
        # logged when it arrives (not when it ends), so that clear_log() also clears a
        # request whose client has gone away while the server is still finishing it
        self.fakehub._record(req)
        try:
            self._route(req)
        except _Drop:
            self.close_connection = True
            try:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (a cancelled download)

    # -- routing -----------------------------------------------------------------------

    def _route(self, req: HubRequest) -> None:
        path = req.path
        if path == "/api/agent-harnesses":
            # huggingface_hub fetches this registry once a day for its user-agent; nothing to detect
            return self._json(req, {"standardEnvVars": [], "harnesses": {}})
        if path.startswith("/api/models/"):
            rest = path[len("/api/models/"):]
            req.kind = "api"
            if "/tree/" in rest:
                repo_id, tail = rest.split("/tree/", 1)
                rev, _, sub = tail.partition("/")
                req.kind = "tree"
                return self._tree(req, repo_id, rev, sub)
            if "/revision/" in rest:
                repo_id, rev = rest.split("/revision/", 1)
            else:
                repo_id, rev = rest, "main"
            return self._model_info(req, repo_id, rev)
        if path.startswith("/cdn/"):
            req.kind = "cdn"
            repo_id, _, sha = path[len("/cdn/"):].rpartition("/")
            return self._cdn(req, repo_id, sha)
        if "/resolve/" in path:
            req.kind = "resolve"
            repo_id, tail = path.lstrip("/").split("/resolve/", 1)
            rev, _, filename = tail.partition("/")
            return self._resolve(req, repo_id, rev, filename)
        return self._error(req, 404, None, "Not Found")

    # -- checks shared by the endpoints --------------------------------------------------

    def _check_repo(self, req: HubRequest, repo_id: str, rev: str | None, filename: str | None) -> _Repo | None:
        """Forced statuses, gates, unknown repo/revision/file. Returns the repo or None
        when an error response was sent."""
        hub = self.fakehub
        req.repo, req.filename = repo_id, filename
        repo = hub._repos.get(repo_id)
        forced = hub._forced_status(repo_id, filename)
        if forced is not None:
            st, level = forced
            code = st.error_code
            if code is None:
                if st.status == 404:
                    code = "RepoNotFound" if level == "repo" else "EntryNotFound"
                elif st.status == 403:
                    code = "GatedRepo"
            defaults = {
                401: "Invalid username or password.",
                403: f"Access to model {repo_id} is restricted and you are not in the authorized list.",
                404: "Repository not found" if level == "repo" else "Entry not found",
            }
            msg = st.message or defaults.get(st.status, "Error")
            commit = repo.commit if repo is not None and code == "EntryNotFound" else None
            self._error(req, st.status, code, msg, commit=commit)
            return None
        if repo is None:
            self._error(req, 404, "RepoNotFound", "Repository not found")
            return None
        token = hub._gate_token(repo_id)
        if token is not None:
            auth = req.headers.get("authorization", "")
            if not auth:
                self._error(req, 401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access "
                            "to it and be authenticated to access it. Please log in.")
                return None
            if auth != f"Bearer {token}":
                self._error(req, 403, "GatedRepo",
                            f"Access to model {repo_id} is restricted and you are not in the authorized list.")
                return None
        if rev is not None and rev not in ("main", repo.commit):
            self._error(req, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return None
        if filename is not None and filename not in repo.files:
            self._error(req, 404, "EntryNotFound", f"{filename} does not exist on \"{rev}\"", commit=repo.commit)
            return None
        return repo

    # -- endpoints ---------------------------------------------------------------------

    def _model_info(self, req: HubRequest, repo_id: str, rev: str) -> None:
        repo = self._check_repo(req, repo_id, rev, None)
        if repo is None:
            return
        blobs = req.query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for e in repo.files.values():
            s: dict = {"rfilename": e.name}
            if blobs:
                s["size"] = e.size
                s["blobId"] = e.git_oid
                if e.lfs:
                    s["lfs"] = {"size": e.size, "sha256": e.sha256, "pointerSize": _POINTER_SIZE}
            siblings.append(s)
        body = {
            "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],
            "id": repo_id,
            "modelId": repo_id,
            "author": repo_id.split("/")[0] if "/" in repo_id else None,
            "sha": repo.commit,
            "lastModified": "2025-01-01T00:00:00.000Z",
            "private": False,
            "gated": "auto" if self.fakehub._gate_token(repo_id) else False,
            "disabled": False,
            "library_name": "gguf",
            "tags": ["gguf"],
            "siblings": siblings,
        }
        self._json(req, body)

    def _tree(self, req: HubRequest, repo_id: str, rev: str, sub: str) -> None:
        repo = self._check_repo(req, repo_id, rev, None)
        if repo is None:
            return
        recursive = req.query.get("recursive", ["false"])[0].lower() == "true"
        prefix = sub.strip("/") + "/" if sub.strip("/") else ""
        out: list[dict] = []
        dirs: set[str] = set()
        for e in repo.files.values():
            if not e.name.startswith(prefix):
                continue
            rest = e.name[len(prefix):]
            segments = rest.split("/")
            for i in range(1, len(segments)):
                d = prefix + "/".join(segments[:i])
                if (recursive or i == 1) and d not in dirs:
                    dirs.add(d)
                    out.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d})
            if len(segments) > 1 and not recursive:
                continue
            item: dict = {"type": "file", "oid": e.git_oid, "size": e.size, "path": e.name}
            if e.lfs:
                item["lfs"] = {"oid": e.sha256, "size": e.size, "pointerSize": _POINTER_SIZE}
            out.append(item)
        if prefix and not out:
            self._error(req, 404, "EntryNotFound", f"{sub} does not exist on \"{rev}\"", commit=repo.commit)
            return
        self._json(req, out)

    def _resolve(self, req: HubRequest, repo_id: str, rev: str, filename: str) -> None:
        repo = self._check_repo(req, repo_id, rev, filename)
        if repo is None:
            return
        e = repo.files[filename]
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{e.etag}"', "Accept-Ranges": "bytes"}
        if e.lfs:
            headers["X-Linked-Etag"] = f'"{e.sha256}"'
            headers["X-Linked-Size"] = str(e.size)
        headers.update(self.fakehub._header_overrides(repo_id, filename))
        unsized = self.fakehub._unsized(repo_id, filename)
        if unsized:
            headers.pop("X-Linked-Size", None)
        if e.lfs:
            if self.fakehub.lfs_redirect:
                location = f"{self.fakehub.cdn_url}/cdn/{quote(repo_id)}/{e.sha256}"
                body = f"Found. Redirecting to {location}".encode()
                req.status = 302
                self.send_response(302)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Location", location)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                if not (unsized and req.method == "HEAD"):  # else the client takes this body's length for the file's
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if req.method == "GET":
                    self.wfile.write(body)
                return
        self._body(req, repo, e, headers)

    def _cdn(self, req: HubRequest, repo_id: str, sha: str) -> None:
        hub = self.fakehub
        repo = hub._repos.get(repo_id)
        e = repo.by_sha(sha) if repo is not None else None
        if e is None:
            req.repo = repo_id
            self._error(req, 404, None, "NoSuchKey")
            return
        # the CDN sees the file: statuses set on the file (not on the repo) apply here too
        req.repo, req.filename = repo_id, e.name
        forced = hub._forced_status(None, e.name)
        if forced is not None:
            self._error(req, forced[0].status, forced[0].error_code, forced[0].message or "Error")
            return
        headers = {"ETag": f'"{e.sha256}"', "Accept-Ranges": "bytes",
                   "Content-Disposition": f'inline; filename="{e.name.rsplit("/", 1)[-1]}"'}
        self._body(req, repo, e, headers)

    # -- responses ---------------------------------------------------------------------

    def _body(self, req: HubRequest, repo: _Repo, e: _Entry, headers: dict[str, str]) -> None:
        size = e.size
        start, end = 0, size - 1
        status = 200
        rng = req.headers.get("range")
        if rng:
            parsed = _parse_range(rng, size)
            if parsed is None:
                req.status = 416
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, end = parsed
            req.range_start, req.range_end = start, end
            status = 206
        length = end - start + 1 if size else 0
        extra = self.fakehub._extra(repo.repo_id, e.name) if req.method == "GET" else 0
        length += extra
        unsized = self.fakehub._unsized(repo.repo_id, e.name)
        req.status = status
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/octet-stream")
        if unsized:
            if req.method != "HEAD":
                self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{'*' if unsized else size}")
        self.end_headers()
        if req.method == "HEAD":
            return
        out = _Chunked(self.wfile) if unsized else self.wfile
        offset = self.fakehub._take_fault(repo.repo_id, e.name)
        stop = None if offset is None else max(offset, start)
        corrupt = self.fakehub._corrupt_from(repo.repo_id, e.name)
        hold = self.fakehub._hold_for(e.name)
        pos = start
        while pos <= end:
            n = min(_CHUNK, end + 1 - pos)
            if stop is not None:
                n = min(n, stop - pos)
                if n <= 0:
                    req.dropped = True
                    raise _Drop()
            if hold is not None:
                if pos >= hold[0]:
                    self.wfile.flush()
                    hold[1].set()
                    hold[2].wait(30)
                    hold = None
                else:
                    n = min(n, hold[0] - pos)
            data = e.read(pos, n)
            if corrupt is not None and pos + len(data) > corrupt:
                k = max(0, corrupt - pos)
                data = data[:k] + data[k:].translate(_FLIP)
            req.bytes_sent += len(data)  # counted first: the client may have it before write() returns
            try:
                out.write(data)
            except OSError:
                req.bytes_sent -= len(data)
                raise
            pos += len(data)
            rate = self.fakehub._rate()
            if rate:
                time.sleep(len(data) / rate)
        if stop is not None and stop <= end:
            req.dropped = True
            raise _Drop()
        zeros = bytes(_CHUNK)
        while extra > 0:
            out.write(zeros[:extra])
            req.bytes_sent += min(extra, _CHUNK)
            extra -= _CHUNK
        if unsized:
            out.end()
        if start == 0 and end == size - 1:
            self.wfile.flush()
            self.fakehub._swap_after(repo.repo_id, e.name)

    def _json(self, req: HubRequest, obj) -> None:
        body = json.dumps(obj).encode()
        req.status = 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if req.method == "GET":
            self.wfile.write(body)

    def _error(self, req: HubRequest, status: int, code: str | None, message: str, *,
               commit: str | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        req.status = status
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if req.method == "GET":
            self.wfile.write(body)


def _parse_range(value: str, size: int) -> tuple[int, int] | None:
    """``bytes=a-``, ``bytes=a-b`` or ``bytes=-n`` -> (start, end) inclusive; None if unsatisfiable."""
    value = value.strip()
    if not value.startswith("bytes=") or "," in value:
        return None
    a, _, b = value[len("bytes="):].partition("-")
    try:
        if a == "":
            n = int(b)
            if n <= 0:
                return None
            return max(0, size - n), size - 1
        start = int(a)
        end = int(b) if b else size - 1
    except ValueError:
        return None
    if start >= size or end < start:
        return None
    return start, min(end, size - 1)
