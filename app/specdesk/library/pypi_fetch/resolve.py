"""Finding the wheel: where pip would look, in its order, and what it picks.

For each exact ``name==version``, :func:`find_wheel`:

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
3. picks the ``py3-none-any`` wheel of exactly that version, with the hash the index or
   page gives (URL fragment or ``hashes``) and its size, for :mod:`.transfer` to download.
   A wheel's own URL must be one the index's host policy allows: https, or http on a
   local or trusted host (any host under ``$SPECDESK_PYPI_URL``, as for its pages); a
   ``file:`` URL only on a page read from this computer (a local index or find-links
   file or folder the user configured); no other scheme (ftp:, data:, ...). A remote
   page that lists anything else is answered as one that does not have the wheel.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ...errors import FetchError
from ..pip_settings import ENV_OVERRIDE, Index, PipSettings, pip_settings, redact
from .net import _TIMEOUT, SCHEMES, _Net, _Tried
from .pages import (
    _FRAGMENT_HASH,
    _HTML_SUFFIXES,
    _folder,
    _is_pure_py3,
    _local_page,
    _Miss,
    _Page,
    _parse_html,
    _parse_json,
    _same_version,
    _wheel_parts,
    normalize_name,
    parse_requirement,
)

# the package's name, not this module's: the logger's name (shown in log lines) stays as it was
log = logging.getLogger(__package__)

_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
_JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_HTML_TYPES = ("application/vnd.pypi.simple.v1+html", "text/html")
#: The most bytes read of one page of links: a project's page on PyPI is a few MiB at most,
#: and a page that goes on (a broken or hostile index) must not fill the memory.
MAX_PAGE_BYTES = 64 << 20
# pip's preference: strong hashes first; it also accepts the weak ones an old index may give
_HASHES = ("sha256", "sha384", "sha512", "sha224", "sha1", "md5")


@dataclass
class WheelInfo:
    filename: str
    url: str
    hash_name: str | None  # e.g. "sha256"; None when the index gives no hash
    hash_value: str | None
    size: int | None
    index: Index
    local: bool = False  # a file: URL on a page the user configured: copied without the network

    @property
    def sha256(self) -> str | None:
        return self.hash_value if self.hash_name == "sha256" else None


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
        with net.open(url, _ACCEPT, any_host=source.setting == ENV_OVERRIDE) as r:
            # one byte past the limit is all that is ever read
            body = r.read(MAX_PAGE_BYTES + 1)
            return body, r.headers.get_content_type(), r.headers.get_content_charset() or "utf-8", r.geturl()

    try:
        body, ctype, charset, final = net.retrying(get)
    except _Tried as t:
        e, tries = t.error, (net.tried(t.tries) if t.retried else "")
        if isinstance(e, urllib.error.HTTPError):
            if e.code == 404:
                raise _Miss(missing) from None
            raise _Miss(f"answered HTTP {e.code} {e.reason}{subject}{net.via(url)}{net.refused(url, e.code)}{tries}") from None
        raise _Miss(f"could not be reached{net.via(url)}: {net.why(e)}{tries}") from None
    if len(body) > MAX_PAGE_BYTES:
        raise _Miss(f"answered a page larger than {MAX_PAGE_BYTES >> 20} MiB{subject}, the most SpecDesk reads of a "
                    "page of links; stopped there")
    try:
        if ctype == _JSON_TYPE:
            return _parse_json(json.loads(body.decode("utf-8")), final)
        if ctype in _HTML_TYPES:
            return _parse_html(body.decode(charset, errors="replace"), final)
    except (ValueError, LookupError) as e:
        raise _Miss(f"answered a page that cannot be read ({ctype}: {str(e)[:100]})") from None
    raise _Miss(f"answered {ctype}, not a simple repository page")


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


def _one_file(net: _Net, location: str) -> _Page:
    """A find-links entry that names one archive (a path or URL): that file alone."""
    url = location if "://" in location or location.startswith("file:") else Path(location).resolve().as_uri()
    url, frag = urllib.parse.urldefrag(net.strip_credentials(url))
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    m = _FRAGMENT_HASH.match(frag)
    return _Page(files=[{"filename": name, "url": url, "hashes": {m.group(1): m.group(2).lower()} if m else {},
                         "size": None}], local=urllib.parse.urlsplit(url).scheme == "file")


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


def _refused_link(url: str, page: _Page, index: Index, settings: PipSettings) -> str | None:
    """Why the wheel at ``url`` listed by ``page`` must not be fetched, or None."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme == "file":
        return None if page.local else "at a file: URL, which only a local index or find-links folder may list"
    if scheme not in SCHEMES:
        return f"at a URL that is not http or https ({scheme or 'no scheme'}:)"
    if index.setting != ENV_OVERRIDE and not settings.secure_origin(url):
        host = urllib.parse.urlsplit(url).hostname or url
        return (f"at {redact(url)[:100]}, not a trusted or secure host: use https, or add {host} to "
                + (settings.trusted_setting or "PIP_TRUSTED_HOST or trusted-host in pip.conf"))
    return None


def _pick(page: _Page, name: str, version: str, index: Index, settings: PipSettings) -> WheelInfo:
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
        refused = _refused_link(f["url"], page, index, settings)
        if refused:
            raise _Miss(f"lists {fn} {refused}, refused")
        hash_name = next((h for h in _HASHES if f["hashes"].get(h)), None)
        return WheelInfo(fn, f["url"], hash_name, f["hashes"].get(hash_name) if hash_name else None, f["size"], index,
                         local=urllib.parse.urlsplit(f["url"]).scheme.lower() == "file")
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
            return _pick(page(), name, version, source, settings)
        except _Miss as miss:
            answers.append(f"{source.shown} ({source.setting}) {miss}")
    if not settings.find_links:
        where = "on the package index"
    elif settings.no_index:
        where = f"in find-links (package indexes are off: {settings.no_index})"
    else:
        where = "in find-links or on the package index"
    raise FetchError(f"{requirement}: not found {where}: {'; '.join(answers)}; {settings.hint()}")
