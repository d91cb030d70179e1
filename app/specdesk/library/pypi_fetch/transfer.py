"""Downloading the picked wheels, verified, with progress and cancel.

Each wheel is downloaded (following redirects to the file host; a local wheel, listed
by a local index or find-links folder the user configured, is copied without the
network) into a unique temporary file beside its final name while hashing it; the hash
the index or page gives and the size are checked, and only then is it moved into place
with :func:`os.replace`. A wheel whose size is listed is never written past that size:
a host that sends more is stopped at the first byte too many. One whose size is not
listed (a PEP 503 HTML page has none) is never written past ``UNSIZED_LIMIT`` (4 GiB,
far above PyPI's 100 MB per file unless raised for a project): a host that sends a body
that does not end cannot fill the disk.

An interrupted or corrupt download never leaves a wheel in ``dest``; two processes
downloading the same wheel never share a temporary file; a wheel already there with the
right digest is not downloaded again.
"""

from __future__ import annotations

import hashlib
import http.client
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ...errors import FetchError
from ...files import atomic_file, sha256_file
from ...fmt import format_bytes
from ..pip_settings import ENV_OVERRIDE, PipSettings, pip_settings
from .net import _BACKOFF, _RETRY_STATUS, _TIMEOUT, _Net
from .resolve import WheelInfo, find_wheel

_CHUNK = 1024 * 1024
#: The most bytes written for a wheel whose size the index does not list.
UNSIZED_LIMIT = 4 << 30

Progress = Callable[[str, float], None]  # (message, fraction 0..1)


def _file_digest(path: Path, hash_name: str) -> str:
    if hash_name == "sha256":
        return sha256_file(path)
    with open(path, "rb") as f:
        return hashlib.file_digest(f, hash_name).hexdigest()


def _source(net: _Net, info: WheelInfo):
    """The wheel's bytes: a local file (only one a local page listed) or the network."""
    if info.local:
        return open(urllib.request.url2pathname(urllib.parse.urlsplit(info.url).path), "rb")  # noqa: SIM115
    return net.open(info.url, any_host=info.index.setting == ENV_OVERRIDE)


def _download(net: _Net, info: WheelInfo, dest: Path, on_bytes: Callable[[int], None]) -> Path:
    final = dest / info.filename
    h = hashlib.new(info.hash_name) if info.hash_name else None
    written = 0
    where = f"{info.index.shown} ({info.index.setting})"
    # a public wheel, readable as pip saves it; checked before it takes its name
    limit = info.size if info.size is not None else UNSIZED_LIMIT
    with atomic_file(final, 0o644, suffix=".partial") as out, _source(net, info) as r:
        while True:
            # one byte past the size (or the limit) is all that is ever read: never written
            b = r.read(min(_CHUNK, limit - written + 1))
            if not b:
                break
            if written + len(b) > limit:
                if info.size is None:
                    raise FetchError(f"{info.filename}: the download is larger than {format_bytes(limit)}, the most "
                                     f"SpecDesk takes for a wheel whose size {where} does not list; stopped there")
                raise FetchError(f"{info.filename}: the download is larger than the {info.size:,} bytes "
                                 f"{where} lists; stopped there")
            out.write(b)
            if h:
                h.update(b)
            written += len(b)
            on_bytes(len(b))
        left = getattr(r, "length", None)
        if left:  # http.client's read(n) returns b"" on a body cut short
            raise ConnectionError(f"connection closed {left:,} bytes before the end")
        if info.size is not None and written != info.size:
            raise FetchError(f"{info.filename}: got {written:,} bytes, {where} lists {info.size:,}")
        if h is not None and h.hexdigest() != info.hash_value:
            raise FetchError(f"{info.filename}: {info.hash_name} {h.hexdigest()[:12]}… does not match "
                             f"{info.hash_value[:12]}… given by {where}")
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
