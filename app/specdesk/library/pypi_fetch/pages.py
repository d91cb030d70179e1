"""Pages of links, read into candidate files, and the names they are matched by.

A PEP 503 HTML page (an index's project page, a find-links page or HTML file) or a
PEP 691 JSON page becomes a :class:`_Page` of files (name, URL, hashes, size); so does a
find-links folder of wheels. Also here: exact ``name==version`` requirements, PEP 503
name normalization, version equality and wheel file names. Nothing here uses the network.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from ...errors import FetchError

_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.!+_-]+)\s*$")
_FRAGMENT_HASH = re.compile(r"^(sha1|sha224|sha384|sha256|sha512|md5)=([0-9a-fA-F]+)$")
_NUMERIC_VERSION = re.compile(r"^\d+(\.\d+)*$")
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


@dataclass
class _Page:
    files: list[dict] = field(default_factory=list)  # {"filename", "url", "hashes", "size"}
    versions: list[str] | None = None
    #: read from this computer (a file: index, a find-links file or folder the user
    #: configured): only such a page may link local (file:) archives, as pip trusts them
    local: bool = False


class _Miss(Exception):
    """What one index answered, when it did not give the wheel (a message fragment)."""


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


def _local_page(path: Path) -> _Page:
    """A local HTML file of links (a ``file://`` index's page or a find-links file)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise _Miss(f"has no {path.name} ({path} does not exist)") from None
    except OSError as e:
        raise _Miss(f"cannot be read: {e.strerror or e}") from None
    page = _parse_html(text, path.as_uri())
    page.local = True
    return page


def _folder(path: Path, listing: list[Path]) -> _Page:
    """The files of a find-links folder, as a page (pip's _FlatDirectorySource)."""
    page = _Page(local=True)
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
