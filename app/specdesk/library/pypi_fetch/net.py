"""The network: urllib with pip's TLS, trusted-host, proxy, credentials and retries.

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

Only http and https are fetched: the opener has no file, ftp or data handler, a URL of
another scheme is refused before anything is opened, and so is a redirect to one (a
remote index must not make the fetcher read local files or reach other protocols; a
local index or find-links folder the user configured is read by :mod:`.pages` and
:mod:`.transfer` directly, without the network). A redirect must also lead where a
listed link may (``PipSettings.secure_origin``: https, or http on a local or trusted
host), unless the URL asked came from ``$SPECDESK_PYPI_URL`` (``open(any_host=True)``):
an https index or file host could otherwise send the download to plain http on any host,
where the same URL listed on the page is refused.

:class:`_Net` also words what went wrong reaching a host (``via``, ``why``, ``refused``).
"""

from __future__ import annotations

import base64
import http.client
import netrc
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from ... import __version__
from ...errors import FetchError
from ..pip_settings import DEFAULT_RETRIES, PipSettings, redact

_TIMEOUT = 60.0
_BACKOFF = 0.5  # seconds times the try's number, slept before the next try
_RETRY_STATUS = {500, 502, 503, 504, 520, 527}
# system CA bundles, tried when the default store is empty (an OpenSSL built elsewhere)
_SYSTEM_CA_FILES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                    "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem", "/usr/local/etc/openssl/cert.pem")
_NETRC_FILES = (".netrc", "_netrc")  # what requests looks for in the home folder
SCHEMES = ("http", "https")  # the only URL schemes fetched over the network


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
        scheme = urllib.parse.urlsplit(newurl).scheme.lower()
        if scheme not in SCHEMES:  # urllib itself would follow a redirect to ftp:
            raise FetchError(f"{redact(req.full_url)} redirected to a URL that is not http or https "
                             f"({redact(newurl)[:100]}), refused")
        any_host = getattr(req, "any_host", False)
        if not any_host and not self._net.settings.secure_origin(newurl):
            host = urllib.parse.urlsplit(newurl).hostname or newurl
            raise FetchError(f"{redact(req.full_url)[:100]} redirected to {redact(newurl)[:100]}, not a trusted or secure "
                             f"host, refused as a link to it would be: use https, or add {host} to "
                             + (self._net.settings.trusted_setting or "PIP_TRUSTED_HOST or trusted-host in pip.conf"))
        self._net.last_url = newurl
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            new.any_host = any_host  # the next redirect of the chain is held to the same rule
        return new


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

    def _build_opener(self) -> urllib.request.OpenerDirector:
        """urllib's opener with http and https only: no file, ftp or data handler (what
        ``build_opener`` adds), so nothing can make it read a local file."""
        if self.settings.proxy:
            p = self.settings.proxy[0]
            proxies = urllib.request.ProxyHandler({"http": p, "https": p})
        else:  # urllib's ProxyHandler reads *_proxy / no_proxy
            proxies = urllib.request.ProxyHandler()
        opener = urllib.request.OpenerDirector()
        for handler in (proxies, urllib.request.UnknownHandler(), urllib.request.HTTPHandler(), _HTTPSHandler(self),
                        urllib.request.HTTPDefaultErrorHandler(), _Redirects(self), urllib.request.HTTPErrorProcessor()):
            opener.add_handler(handler)
        return opener

    def open(self, url: str, accept: str | None = None, any_host: bool = False):
        """``url``, following redirects only to http(s) and, unless ``any_host`` (a URL
        from ``$SPECDESK_PYPI_URL``), only to secure or trusted origins."""
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme not in SCHEMES:
            raise FetchError(f"refusing to fetch {redact(url)[:100]}: only http and https URLs are fetched")
        if self._opener is None:
            self._opener = self._build_opener()
        headers = {"User-Agent": f"specdesk/{__version__}", "Accept-Encoding": "identity"}
        if accept:
            headers["Accept"] = accept
        req = urllib.request.Request(url, headers=headers)
        req.any_host = any_host
        self.last_url = url
        auth = self.auth.get(_host_key(url))
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
