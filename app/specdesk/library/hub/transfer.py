"""The resumable download of a model into the Hugging Face cache.

``download``
    Every part into the Hugging Face cache (``HF_HUB_CACHE``), resumable, with
    aggregate progress and cancellation, checked against the Hub's sha256 and by the
    GGUF validator; returns the path of the first part in the cache snapshot.

How a download works. huggingface_hub 2.4.0's ``hf_hub_download`` writes to a
process-unique temporary file and deletes it when the download fails, so it cannot
resume an interrupted or cancelled download in a later call, and it checks only the
size of what it received. To resume across calls, ``download`` does the transfer of a
part itself with huggingface_hub's own pieces -- ``get_hf_file_metadata`` (the ``HEAD``
on ``/resolve`` that gives commit, etag, size and CDN location) and ``http_get`` (the
streaming ``GET``, which sends ``Range`` to resume and retries dropped connections) --
into ``<cache>/models--org--repo/blobs/<etag>.incomplete``, under the same lock file
``hf_hub_download`` uses. The partial file survives a failure or a cancel; the next
call continues it with a ``Range`` request. When the part is complete and its sha256
matches the one the repo's listing gives (or, without one, the etag when that is a
sha256, as on the Hub; a mirror's etag may be any token) it becomes ``blobs/<etag>``,
and that very blob is linked into ``snapshots/<commit>/<file>`` and the revision's
``refs`` written, with huggingface_hub's own helpers, so the cache layout stays
huggingface_hub's. Placing it sends no request: ``hf_hub_download`` would send its own
``HEAD`` and, had the file changed since (a repo updated during a long download, a
hostile mirror), download another copy itself, unchecked and unbounded. Every part of
a split model is resolved at the commit the first part was, and placed under it. No
HTTP is done here by hand.

A part's size is the listing's (or the ``HEAD``'s when the listing has none; the two
must agree). The partial file is never written past it: a server that sends more is
stopped at the first byte too many and the partial file deleted, so a hostile or
broken mirror cannot fill the disk. When neither gives a size (a mirror), the part is
written up to ``UNSIZED_LIMIT`` at most (50 GB, the largest file the Hub serves over
plain HTTP), and stopped there the same way. A split model's parts are validated as one
model (``validate_gguf`` of the first part reads them all), as llama.cpp will load it.

Without a sha256 (a mirror whose listing has none and whose etag is no sha256), nothing
can tell a right part from a wrong one of the right shape, so: a partial file left by
an earlier call is not resumed but downloaded again from the start (its bytes may be
another version's, or a broken transfer's), and the finished part must read as a GGUF
file (``read_gguf``: its header, and every tensor's data inside the file) before it is
moved into place; one that does not is deleted.

Progress and cancellation go through the ``tqdm_class`` hook of ``http_get``: its
``update`` reports the bytes and raises ``Cancelled`` when ``cancel()`` is true. The
hook is called once per chunk of ``huggingface_hub.constants.DOWNLOAD_CHUNK_SIZE``
(10 MiB), so that is the granularity of both.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import shutil
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator
from urllib.parse import urlsplit

from ...errors import Cancelled, ModelFileError, SpecDeskError
from ...fmt import format_download_size
from ..gguf import read_gguf, validate_gguf
from .errors import DownloadError, _map_error, _network_error_types, _offline_error_types, _one_line
from .location import _cache_path, _endpoint_now
from .repo import HubFile, HubModelFile

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (done_bytes, total_bytes)
CancelCheck = Callable[[], bool]

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_HASH_BLOCK = 8 << 20
#: The most bytes written for a part whose size neither the listing nor the HEAD gives:
#: huggingface_hub's MAX_HTTP_DOWNLOAD_SIZE, the largest file the Hub serves over plain HTTP.
UNSIZED_LIMIT = 50 * 1000**3


@dataclass
class _Part:
    file: HubFile
    url: str  # where to GET the bytes (the CDN location of the redirect, or /resolve)
    etag: str
    commit: str
    size: int | None
    sha256: str | None  # what the content must hash to: the listing's, else a sha256 etag
    headers: dict[str, str]
    pointer: Path  # snapshots/<commit>/<filename>
    blob: Path
    partial: Path
    lock: Path


def _open_partial(path: Path):
    """The partial file, opened for appending (its position is its size). A seam for
    tests that inject write errors (disk full)."""
    return open(path, "ab")


class _TooLarge(Exception):  # noqa: N818 - a signal from the writer, turned into a DownloadError
    """The server sent more bytes than the part's known size (or ``UNSIZED_LIMIT``)."""


class _Bounded:
    """The partial file, refusing any write that would take it past ``limit`` bytes
    (``http_get`` writes whatever the server sends and checks the size only at the end)."""

    def __init__(self, f, limit: int) -> None:
        self._f, self._limit = f, limit

    def write(self, data) -> int:
        if self._f.tell() + len(data) > self._limit:
            raise _TooLarge
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)


def _origin(url: str) -> tuple[str, str, int | None]:
    p = urlsplit(url)
    return p.scheme, (p.hostname or "").lower(), p.port


def _check_cancel(cancel: CancelCheck | None) -> None:
    if cancel is not None and cancel():
        raise Cancelled("download cancelled")


def _progress_class(report: Callable[[int], None], cancel: CancelCheck | None):
    """A tqdm stand-in for ``http_get(tqdm_class=...)``: forwards byte counts, cancels."""

    class _Bar:
        def __init__(self, *args, initial: int = 0, **kwargs) -> None:
            self.n = initial
            report(self.n)

        def update(self, n: int | float = 1) -> None:
            self.n += int(n)
            report(self.n)
            _check_cancel(cancel)

        def close(self) -> None:
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.close()

    return _Bar


def _free_bytes(path: Path) -> int | None:
    for p in (path, *path.parents):
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
    return None


def _file_size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _sha256(path: Path, cancel: CancelCheck | None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            h.update(block)
            _check_cancel(cancel)
    return h.hexdigest()


def _resolve_part(repo_id: str, f: HubFile, revision: str, token: str | None, ep: str, storage: Path,
                  cache: Path) -> _Part:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import repo_folder_name
    from huggingface_hub.utils import build_hf_headers

    url = hf_hub_url(repo_id, f.filename, revision=revision, endpoint=ep)
    meta = get_hf_file_metadata(url, token=token, endpoint=ep)
    if meta.commit_hash is None or meta.etag is None:
        raise DownloadError(f"{ep} does not look like a Hugging Face Hub endpoint (no commit or etag for "
                            f"{f.filename}); check HF_ENDPOINT")
    headers = build_hf_headers(token=token)
    location = meta.location or url
    if _origin(location) != _origin(url):
        headers.pop("authorization", None)  # never send the token to a CDN
    # The etag, the commit and the file name come from the network and become paths:
    # each must be a plain name (or, for the file, plain names), and every path made
    # of them must stay in its folder of the cache.
    etag = _safe_name(meta.etag, "etag", f.filename, ep)
    commit = _safe_name(meta.commit_hash, "commit", f.filename, ep)
    if f.size is not None and meta.size is not None and f.size != meta.size:
        raise DownloadError(f"{ep} lists {f.filename} as {f.size:,} bytes but its download has {meta.size:,}; "
                            "refusing it (check HF_ENDPOINT)")
    listed = f.sha256.lower() if f.sha256 and _SHA256_RE.match(f.sha256.lower()) else None
    parts = f.filename.split("/")
    if any(p in ("", ".", "..") or "\\" in p for p in parts):
        raise DownloadError(f"{ep} listed an unsafe file name {_shown(f.filename)}; refusing to write it to the cache")
    snapshot = storage / "snapshots" / commit
    blobs = storage / "blobs"
    locks = cache / ".locks" / repo_folder_name(repo_id=repo_id, repo_type="model")
    part = _Part(
        file=f,
        url=location,
        etag=etag,
        commit=commit,
        size=f.size if f.size is not None else meta.size,
        sha256=listed or (etag if _SHA256_RE.match(etag) else None),
        headers=headers,
        pointer=snapshot / Path(*parts),
        blob=blobs / etag,
        partial=blobs / f"{etag}.incomplete",
        lock=locks / f"{etag}.lock",
    )
    for path, folder in ((part.pointer, snapshot), (part.blob, blobs), (part.partial, blobs), (part.lock, locks)):
        _confine(path, folder, f.filename, ep)
    return part


# An etag or commit used as a file name: a sha256 or git sha1 on the Hub, a plain
# token on a mirror (letters, digits, '.', '_', '-'; no separators, not '.' or '..').
_SAFE_NAME_RE = re.compile(r"^[0-9A-Za-z_-][0-9A-Za-z._-]{0,199}$")


def _shown(value: object) -> str:
    r = repr(value)
    return r if len(r) <= 80 else r[:77] + "..."


def _safe_name(value: str, what: str, filename: str, ep: str) -> str:
    if not _SAFE_NAME_RE.match(value) or ".." in value:
        raise DownloadError(f"{ep} sent an unsafe {what} {_shown(value)} for {filename}; refusing to use it as a "
                            "file name in the cache (check HF_ENDPOINT)")
    return value


def _confine(path: Path, folder: Path, filename: str, ep: str) -> None:
    """``path`` with its '..' resolved must be inside ``folder``. Lexically: the snapshot
    entry is huggingface_hub's own symlink to the blob, which is fine; what comes from the
    network are names, and those must not climb out."""
    real, base = Path(os.path.abspath(path)), Path(os.path.abspath(folder))
    if real != base and base not in real.parents:
        raise DownloadError(f"{ep}: the cache path for {filename} would be {real}, outside {base}; refusing it")


@contextmanager
def _lock(path: Path, cancel: CancelCheck | None) -> Iterator[None]:
    """hf_hub_download's lock for this blob (another process may be downloading it),
    waited for in steps so that a cancel is seen."""
    from filelock import Timeout
    from huggingface_hub.utils import WeakFileLock

    with ExitStack() as stack:
        while True:
            _check_cancel(cancel)
            try:
                stack.enter_context(WeakFileLock(path, timeout=1.0))
                break
            except Timeout:
                continue
        yield


def _fetch_blob(part: _Part, report: Callable[[int], None], cancel: CancelCheck | None) -> None:
    """Download (or finish) ``part`` into ``blobs/<etag>``, verified. The partial file
    stays on a failure or cancel, except when its content is known to be wrong."""
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.file_download import http_get

    name = part.file.filename
    part.lock.parent.mkdir(parents=True, exist_ok=True)
    part.blob.parent.mkdir(parents=True, exist_ok=True)
    with _lock(part.lock, cancel):
        if part.blob.exists():
            report(part.size or _file_size(part.blob))
            return
        limit = part.size if part.size is not None else UNSIZED_LIMIT
        resume = _file_size(part.partial)
        if resume > limit or (resume and part.sha256 is None):
            # too long to be this part; or, with no checksum to check it, not to be trusted
            part.partial.unlink(missing_ok=True)
            resume = 0
        try:
            with _open_partial(part.partial) as f:
                out = _Bounded(f, limit)
                http_get(part.url, out, resume_size=resume, headers=dict(part.headers), expected_size=part.size,
                         displayed_filename=name.rsplit("/", 1)[-1],
                         tqdm_class=_progress_class(report, cancel))  # type: ignore[arg-type]
        except (Cancelled, KeyboardInterrupt):
            raise
        except _TooLarge:
            part.partial.unlink(missing_ok=True)
            if part.size is None:
                raise DownloadError(f"{name}: the server gave no size for it and sent more than "
                                    f"{format_download_size(limit)}, the most SpecDesk downloads of a file of unknown "
                                    "size; stopped there and deleted the partial download") from None
            raise DownloadError(f"{name}: the server sent more than the {format_download_size(part.size)} the Hub "
                                "lists; stopped there and deleted the partial download") from None
        except HfHubHTTPError as e:
            status = e.response.status_code if e.response is not None else None
            if status == 416:  # the partial file does not fit the file on the server any more
                part.partial.unlink(missing_ok=True)
                raise DownloadError(f"{name}: the partial download did not match the file on the Hub and was "
                                    "deleted; run the download again") from e
            raise
        except OSError as e:
            if e.errno == errno.ENOSPC:
                part.partial.unlink(missing_ok=True)
                raise DownloadError(f"no space left on device while downloading {name} to {part.blob.parent} "
                                    f"(needs {format_download_size(part.size)}); free some space and try again") from e
            if e.errno is not None:  # EACCES, EIO, ...: the disk, not the network
                raise DownloadError(f"cannot write {name} to {part.blob.parent}: {e.strerror or e}") from e
            got = _file_size(part.partial)  # http_get's size check: the server sent too little or too much
            if part.size is not None and got > part.size:
                part.partial.unlink(missing_ok=True)
            raise DownloadError(f"download of {name} was interrupted after {format_download_size(got)} of "
                                f"{format_download_size(part.size)} ({_one_line(e, 120)}); "
                                "run it again to resume") from e
        except _network_error_types() as e:
            got = _file_size(part.partial)
            raise DownloadError(f"download of {name} was interrupted after {format_download_size(got)} of "
                                f"{format_download_size(part.size)} ({_one_line(e, 120)}); "
                                "run it again to resume") from e
        if part.sha256 is not None:
            digest = _sha256(part.partial, cancel)
            if digest != part.sha256:
                part.partial.unlink(missing_ok=True)
                raise DownloadError(f"{name}: checksum mismatch, the download has sha256 {digest[:16]}... but the "
                                    f"Hub lists {part.sha256[:16]}...; the corrupt file was deleted, try again")
        else:
            try:
                read_gguf(part.partial, lazy_arrays=True, cancel=cancel)
            except ModelFileError as e:
                part.partial.unlink(missing_ok=True)
                why = str(e).split(": ", 1)[-1]  # without the partial file's own name
                raise DownloadError(f"{name}: the download is not a usable GGUF file ({why}); with no sha256 known for it "
                                    "(neither the listing nor the etag gives one), nothing else could check it, and it "
                                    "was deleted") from None
        os.replace(part.partial, part.blob)


def _place(part: _Part, cache: Path, cancel: CancelCheck | None) -> Path:
    """Link the verified blob into its snapshot, as huggingface_hub's cache has it
    (``snapshots/<commit>/<file>`` -> ``../../blobs/<etag>``), under the blob's lock.
    Sends no request: what is placed is exactly what was checked."""
    from huggingface_hub.file_download import _create_cachedir_tag, _create_symlink

    part.pointer.parent.mkdir(parents=True, exist_ok=True)
    _create_cachedir_tag(cache)  # as hf_hub_download tags the cache for backup tools
    with _lock(part.lock, cancel):
        if not part.pointer.exists():
            _create_symlink(str(part.blob), str(part.pointer), new_blob=False)
    if not part.pointer.is_symlink() and part.blob.exists():
        # No symlinks here (Windows without developer mode): the blob was copied into the
        # snapshot. huggingface_hub's own downloads move the blob there instead; do the same.
        try:
            part.blob.unlink()
        except OSError:
            pass
    return part.pointer


def _write_ref(storage: Path, revision: str, commit: str, ep: str) -> None:
    """``refs/<revision>`` names the commit a branch or tag was downloaded at (as
    hf_hub_download writes it; nothing for a commit hash itself)."""
    from huggingface_hub.file_download import _cache_commit_hash_for_specific_revision

    if revision == commit:
        return
    _confine(storage / "refs" / revision, storage / "refs", revision, ep)
    try:
        _cache_commit_hash_for_specific_revision(str(storage), revision, commit)
    except OSError as e:  # a read-only cache: the files are there, found by commit if not by name
        log.warning("could not record %s's commit in %s: %s", revision, storage / "refs", e)


def _validate(paths: list[Path], model_file: HubModelFile) -> None:
    """The model as llama.cpp will load it: ``validate_gguf`` of the first part, which
    for a split model reads every part beside it and checks the set."""
    g = validate_gguf(paths[0])
    if model_file.is_split and len(paths) > 1 and (g.get("split.count") or 0) != len(paths):
        raise ModelFileError(f"{paths[0].name}: the repo has {len(paths)} parts of this model but the file says "
                             f"it is split into {g.get('split.count') or 1}")


def _check_space(parts: list[_Part], storage: Path, cache: Path, name: str) -> None:
    """Refuse to start when the parts still to download do not fit on the disk."""
    todo = [p for p in parts if not p.pointer.exists()]
    needed = sum((p.size or 0) - _file_size(p.partial) for p in todo if not p.blob.exists())
    free = _free_bytes(storage)
    if free is not None and needed > free:
        raise DownloadError(f"not enough disk space to download {name} to {cache}: needs "
                            f"{format_download_size(needed)} more, {format_download_size(free)} free")


def _discard(paths: Iterable[Path]) -> None:
    """Remove snapshot links (and the blobs they point to) that this call created."""
    for p in paths:
        try:
            target = p.resolve() if p.is_symlink() else None
            p.unlink(missing_ok=True)
            if target is not None and target != p:
                target.unlink(missing_ok=True)
        except OSError:
            pass


def download(
    repo_id: str,
    model_file: HubModelFile,
    *,
    revision: str | None = None,
    token: str | None = None,
    progress: Progress | None = None,
    cancel: CancelCheck | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    endpoint: str | None = None,
) -> Path:
    """Download every part of ``model_file`` into the Hugging Face cache and return the
    path of the first part in the cache snapshot.

    Resumes what an earlier interrupted or cancelled call left. ``progress(done,
    total)`` gets the bytes of all parts together (parts already in the cache count as
    done); ``cancel()`` is polled once per chunk and stops with ``Cancelled`` (the partial
    file stays, for the next call). Each part is checked against the Hub's sha256, then
    the model with the GGUF validator; a file that fails is removed from the cache.
    """
    ep = (endpoint or _endpoint_now()).rstrip("/")
    cache = _cache_path(cache_dir)
    rev = revision or "main"
    name = model_file.name
    if model_file.is_split and not model_file.complete:
        raise DownloadError(f"{name} is split into {model_file.n_parts} parts but the repo has "
                            f"{len(model_file.files)} of them")
    _check_cancel(cancel)

    from huggingface_hub.file_download import repo_folder_name

    storage = cache / repo_folder_name(repo_id=repo_id, repo_type="model")

    # 1. metadata of every part (one HEAD each); later parts pinned to the first one's commit
    parts: list[_Part] = []
    try:
        for f in model_file.files:
            _check_cancel(cancel)
            at = parts[0].commit if parts else rev
            parts.append(_resolve_part(repo_id, f, at, token, ep, storage, cache))
    except SpecDeskError:
        raise
    except Exception as e:  # noqa: BLE001
        offline = _cached_parts(repo_id, model_file, rev, cache)
        if offline is not None and isinstance(e, _offline_error_types()):
            _validate(offline, model_file)
            return offline[0]
        failing = model_file.files[len(parts)].filename
        raise _map_error(e, repo_id=repo_id, revision=rev, endpoint=ep, filename=failing, token=token,
                         cache=cache) from e

    sizes = [p.size or 0 for p in parts]
    total = sum(sizes)
    _check_space(parts, storage, cache, name)

    done_before = 0
    last = [-1]

    def report_for(base: int) -> Callable[[int], None]:
        def report(n: int) -> None:
            value = base + n
            if progress is not None and value != last[0]:
                last[0] = value
                progress(value, total)

        return report

    created: list[Path] = []
    paths: list[Path] = []
    try:
        for i, part in enumerate(parts):
            report = report_for(done_before)
            if part.pointer.exists():
                report(part.size or 0)
                paths.append(part.pointer)
            else:
                _check_cancel(cancel)
                _fetch_blob(part, report, cancel)
                path = _place(part, cache, cancel)  # every part at the first one's commit
                created.append(path)
                paths.append(path)
                report(part.size or 0)
            done_before += sizes[i]
    except SpecDeskError:
        raise
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001
        failing = parts[len(paths)].file.filename if len(paths) < len(parts) else name
        raise _map_error(e, repo_id=repo_id, revision=rev, endpoint=ep, filename=failing, token=token,
                         cache=cache) from e

    try:
        _validate(paths, model_file)
    except ModelFileError as e:
        _discard(created)
        raise DownloadError(f"{name} from {repo_id} is not a usable GGUF model and was removed: {e}") from e
    _write_ref(storage, rev, parts[0].commit, ep)  # the revision names it once it is known to be good
    return paths[0]


def _cached_parts(repo_id: str, model_file: HubModelFile, revision: str, cache: Path) -> list[Path] | None:
    """The parts already in the cache for ``revision`` (a branch through its ref), or None."""
    from huggingface_hub import try_to_load_from_cache

    out = []
    for f in model_file.files:
        p = try_to_load_from_cache(repo_id, f.filename, cache_dir=cache, revision=revision)
        if not isinstance(p, str):
            return None
        out.append(Path(p))
    return out
