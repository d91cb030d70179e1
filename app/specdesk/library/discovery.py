"""Discovery of the GGUF files a user already has, for SpecDesk's model library.

``scan`` looks in five places and labels every file with the source(s) that found it:

``models``
    SpecDesk's own ``models/`` folder (``specdesk.paths.models_dir()``), scanned
    recursively. The default models of ``models/manifest.json`` carry their role
    (target / draft / test); a default model that is not downloaded yet is listed too,
    with ``present=False`` and an error saying how to fetch it.
``folder``
    Folders the user added (``add_folder``/``remove_folder``/``user_folders``, kept in
    ``user_data_dir()/library.json``), scanned recursively for ``*.gguf``.
``hf-cache``
    The Hugging Face cache, read with ``huggingface_hub.scan_cache_dir``: the ``*.gguf``
    files of every snapshot with their repo id and revision. A repo that
    ``scan_cache_dir`` rejects as a whole (a snapshot link whose blob is missing makes
    it give up on the repo) is walked by hand so its intact files still show.
``lmstudio``
    ``~/.lmstudio/models`` and ``~/.cache/lm-studio/models`` (``publisher/repo/file.gguf``).
``ollama``
    ``$OLLAMA_MODELS`` or ``~/.ollama/models``: each manifest's model layer maps
    ``name:tag`` to a ``blobs/sha256-...`` file, listed when it starts with ``GGUF``.

What is skipped, always with a line in ``ScanResult.notes`` and in the log, never with
an exception: partial downloads (``*.incomplete``, ``*.part``, ``*.partial``,
``*.download``, ``*.tmp``, ...), folders that cannot be read, broken symlinks, symlink
loops, malformed Ollama manifests, Ollama blobs that are not GGUF files.

The same real file found through several sources is one entry with every source label.
A split model (``name-00001-of-0000N.gguf`` ...) is one entry whatever part was found:
its path is the first part's (beside the others, in the folder or snapshot it was found
in), its size that of all its parts, its name the model's (``name``), and a missing or
mismatched part is its error. Every model is checked with ``validate_gguf`` and
summarised with ``inspect_gguf``; the result is cached per (real path, size, mtime_ns,
and each part's) in ``user_cache_dir()/library-cache.json`` so a rescan does not read
unchanged files again. Invalid files are listed with the validator's one-line message
rather than dropped.

``scan`` is plain Python without Qt, keeps no global state and can run in a worker
thread; ``cancel`` is polled between folders and files (raising ``Cancelled``).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from ..errors import Cancelled
from ..files import read_limited
from ..paths import hf_hub_cache, models_dir
from .defaults import default_models
from .folders import user_folders
from .gguf.split import canonical, parse_split_name, split_parts
from .scan_cache import InfoCache, inspect_file

__all__ = [
    "LibraryEntry",
    "ScanResult",
    "SOURCES",
    "scan",
]

log = logging.getLogger(__name__)

#: Source labels, in the order ``LibraryEntry.sources`` lists them.
SOURCES = ("models", "folder", "hf-cache", "lmstudio", "ollama")
#: Which source's path an entry shows when several found the same file (the one a
#: person chose over the one a tool made up: an Ollama blob path comes last).
_PATH_PRIORITY = ("models", "folder", "hf-cache", "lmstudio", "ollama")
#: Which source's name an entry shows (a default model's manifest name first).
_NAME_PRIORITY = ("models-default", "ollama", "hf-cache", "lmstudio", "models", "folder")

PARTIAL_SUFFIXES = (".incomplete", ".part", ".partial", ".download", ".tmp", ".crdownload",
                    ".downloadinprogress")
_OLLAMA_MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
_DIGEST_RE = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
_MAX_MANIFEST_BYTES = 1 << 20
_ROLE_ORDER = {"target": 0, "draft": 1, "test": 2}

Cancel = Callable[[], bool]
Progress = Callable[[str], None]



# --------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------


@dataclass
class LibraryEntry:
    """One GGUF file (one real file, however many sources found it)."""

    path: Path
    name: str
    sources: tuple[str, ...]
    size: int
    mtime_ns: int
    role: str | None = None  # target / draft / test for the default models
    repo_id: str | None = None  # Hugging Face repo (hf-cache)
    ollama_tag: str | None = None  # name:tag (ollama); the first one if several tags share the blob
    info: dict | None = None  # inspection summary (see _summary)
    error: str | None = None  # why the file is not usable, if it is not
    revision: str | None = None  # Hugging Face snapshot revision (commit hash)
    present: bool = True  # False only for a default model that is not downloaded
    parts: int = 1  # the files of a split model (``path`` is its first part)

    @property
    def valid(self) -> bool:
        return self.present and self.error is None

    def to_dict(self) -> dict:
        return {
            "path": str(self.path),
            "name": self.name,
            "sources": list(self.sources),
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "role": self.role,
            "repo_id": self.repo_id,
            "revision": self.revision,
            "ollama_tag": self.ollama_tag,
            "present": self.present,
            "parts": self.parts,
            "valid": self.valid,
            "info": self.info,
            "error": self.error,
        }


@dataclass
class ScanResult:
    entries: list[LibraryEntry]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"entries": [e.to_dict() for e in self.entries], "notes": list(self.notes)}


# --------------------------------------------------------------------------------------
# The scan
# --------------------------------------------------------------------------------------


def _is_partial(name: str) -> bool:
    return name.lower().endswith(PARTIAL_SUFFIXES)


def _is_gguf_name(name: str) -> bool:
    return name.lower().endswith(".gguf")


def _stem(p: Path) -> str:
    """A file's name without .gguf; for a part of a split model, the model's."""
    s = parse_split_name(p.name)
    return s.base if s is not None and s.count > 1 else p.stem


@dataclass
class _Group:
    """The hits of one model: one real file, or every part of a split model found."""

    real: str  # the cache key: the real file, or a split model's first part
    read: Path  # the path validated and inspected (a split model's first part as listed)
    size: int
    mtime_ns: int
    parts: list[list[int]] | None = None  # a split model's [size, mtime_ns] per part ([] if missing)
    hits: list[_Hit] = field(default_factory=list)


def _split_group(h: _Hit) -> _Group | None:
    """The group of a part of a split model, keyed by its first part; None for a single
    file. Raises OSError when the part found is gone."""
    s = parse_split_name(h.path.name)
    if s is None or s.count < 2:
        return None
    os.stat(h.path)
    first = h.path.with_name(s.part(1))
    parts, stats = split_parts(first), []
    for p in parts:
        try:
            st = os.stat(p)
            stats.append([st.st_size, st.st_mtime_ns])
        except OSError:
            stats.append([])
    real = os.path.realpath(first) if stats[0] else str(canonical(first))
    present = [x for x in stats if x]
    return _Group(real, first if stats[0] else h.path, sum(x[0] for x in present), max(x[1] for x in present), stats)


@dataclass
class _Hit:
    source: str
    path: Path
    name: str
    role: str | None = None
    default_name: bool = False
    repo_id: str | None = None
    revision: str | None = None
    ollama_tag: str | None = None


class _Scan:
    def __init__(self, cancel: Cancel | None, progress: Progress | None) -> None:
        self.cancel = cancel
        self.progress = progress
        self.notes: list[str] = []
        self.hits: list[_Hit] = []
        self.missing_defaults: list[tuple[Path, object]] = []

    # -- helpers ------------------------------------------------------------------------

    def note(self, msg: str, level: int = logging.INFO) -> None:
        self.notes.append(msg)
        log.log(level, "%s", msg)

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel():
            raise Cancelled("the library scan was cancelled")

    def tell(self, msg: str) -> None:
        if self.progress is not None:
            self.progress(msg)

    def listdir(self, d: Path, source: str) -> list[os.DirEntry] | None:
        """Sorted entries of ``d``, or None (with a note) when it cannot be read."""
        try:
            with os.scandir(d) as it:
                return sorted(it, key=lambda e: e.name)
        except PermissionError:
            self.note(f"{source}: skipped {d}: permission denied", logging.WARNING)
        except FileNotFoundError:
            log.debug("%s: %s vanished during the scan", source, d)
        except OSError as e:
            self.note(f"{source}: skipped {d}: {e.strerror or e}", logging.WARNING)
        return None

    def walk(self, root: Path, source: str) -> Iterator[Path]:
        """Every ``*.gguf`` under ``root`` (following symlinks, each real folder once)."""
        try:
            st = os.stat(root)
        except OSError:
            return
        if not stat.S_ISDIR(st.st_mode):
            return
        visited = {(st.st_dev, st.st_ino)}
        stack = [root]
        while stack:
            self.check_cancel()
            d = stack.pop()
            self.tell(f"{source}: scanning {d}")
            entries = self.listdir(d, source)
            if entries is None:
                continue
            subdirs = []
            for e in entries:
                p = Path(e.path)
                try:
                    is_link = e.is_symlink()
                except OSError:
                    is_link = False
                try:
                    est = os.stat(p)  # follows links
                except OSError as err:
                    if is_link and err.errno == errno.ELOOP:
                        self.note(f"{source}: skipped {p}: symlink loop", logging.WARNING)
                    elif is_link:
                        self.note(f"{source}: skipped {p}: broken symlink (to {_readlink(p)})", logging.WARNING)
                    else:
                        self.note(f"{source}: skipped {p}: {err.strerror or err}", logging.WARNING)
                    continue
                if stat.S_ISDIR(est.st_mode):
                    key = (est.st_dev, est.st_ino)
                    if key in visited:
                        real = os.path.realpath(p)
                        here = os.path.realpath(d)
                        if here == real or here.startswith(real.rstrip(os.sep) + os.sep):
                            self.note(f"{source}: skipped {p}: symlink loop (points back to {real})", logging.WARNING)
                        else:
                            log.debug("%s: %s leads to a folder already scanned", source, p)
                        continue
                    visited.add(key)
                    subdirs.append(p)
                    continue
                if _is_partial(e.name):
                    if ".gguf" in e.name.lower():
                        self.note(f"{source}: ignored partial download {p}")
                    else:
                        log.debug("%s: ignored partial file %s", source, p)
                    continue
                if _is_gguf_name(e.name):
                    if not stat.S_ISREG(est.st_mode):
                        self.note(f"{source}: skipped {p}: not a regular file", logging.WARNING)
                        continue
                    yield p
            stack.extend(reversed(subdirs))  # depth first, in name order

    # -- sources ------------------------------------------------------------------------

    def scan_models(self, root: Path) -> None:
        try:
            defaults = {m.file: m for m in default_models()}
        except (OSError, ValueError, KeyError, TypeError) as e:
            self.note(f"models: cannot read the models manifest: {e}", logging.WARNING)
            defaults = {}
        found = set()
        for p in self.walk(root, "models"):
            m = defaults.get(p.name) if p.parent == root else None
            if m is not None:
                found.add(m.file)
                self.hits.append(_Hit("models", p, m.name, role=m.role, default_name=True))
            else:
                self.hits.append(_Hit("models", p, _stem(p)))
        self.missing_defaults = [(root / m.file, m) for f, m in defaults.items() if f not in found]

    def scan_folders(self, folders: list[Path]) -> None:
        for folder in folders:
            folder = Path(folder).expanduser()
            if not folder.is_dir():
                self.note(f"folder: {folder} does not exist or is not a folder", logging.WARNING)
                continue
            for p in self.walk(folder, "folder"):
                self.hits.append(_Hit("folder", p, _stem(p)))

    def scan_hf(self, cache_dir: Path) -> None:
        try:
            from huggingface_hub import scan_cache_dir
            from huggingface_hub.errors import CacheNotFound
        except ImportError:  # pragma: no cover - huggingface_hub is a dependency
            log.debug("huggingface_hub is not installed: not scanning its cache")
            return
        if not cache_dir.is_dir():
            log.debug("hf-cache: %s does not exist", cache_dir)
            return
        self.tell(f"hf-cache: scanning {cache_dir}")
        try:
            info = scan_cache_dir(cache_dir)
        except CacheNotFound:
            return
        except (OSError, ValueError) as e:
            self.note(f"hf-cache: cannot scan {cache_dir}: {e}", logging.WARNING)
            return
        scanned: set[str] = set()
        for repo in sorted(info.repos, key=lambda r: str(r.repo_path)):
            self.check_cancel()
            scanned.add(os.path.realpath(repo.repo_path))
            # Revisions a ref points to (main, ...) first: their path and revision win.
            revisions = sorted(repo.revisions, key=lambda r: (not r.refs, -r.last_modified, r.commit_hash))
            for rev in revisions:
                for f in sorted(rev.files, key=lambda f: str(f.file_path)):
                    if not _is_gguf_name(f.file_name):
                        continue
                    if _is_partial(f.blob_path.name) or _is_partial(os.path.realpath(f.file_path)):
                        self.note(f"hf-cache: ignored {f.file_path}: its blob is an incomplete download")
                        continue
                    self.hits.append(_Hit("hf-cache", Path(f.file_path), repo.repo_id,
                                          repo_id=repo.repo_id, revision=rev.commit_hash))
        for inc in sorted(info.incomplete_files, key=lambda i: str(i.file_path)):
            self.note(f"hf-cache: ignored partial download {inc.file_path}")
        # scan_cache_dir drops a whole repo for one broken snapshot link: walk those by hand.
        for w in info.warnings:
            log.info("hf-cache: %s", w)
        for repo_path in sorted(Path(info.cache_dir).iterdir() if Path(info.cache_dir).is_dir() else []):
            if "--" not in repo_path.name or os.path.realpath(repo_path) in scanned:
                continue
            kind, _, rest = repo_path.name.partition("--")
            if kind not in ("models", "datasets", "spaces") or not (repo_path / "snapshots").is_dir():
                continue
            repo_id = rest.replace("--", "/")
            self.note(f"hf-cache: {repo_id} is damaged (huggingface_hub rejected it); listing its intact files",
                      logging.WARNING)
            for snap in self.listdir(repo_path / "snapshots", "hf-cache") or []:
                if not snap.is_dir():
                    continue
                for p in self.walk(Path(snap.path), "hf-cache"):
                    if _is_partial(os.path.realpath(p)):
                        self.note(f"hf-cache: ignored {p}: its blob is an incomplete download")
                        continue
                    self.hits.append(_Hit("hf-cache", p, repo_id, repo_id=repo_id, revision=snap.name))

    def scan_lmstudio(self, roots: list[Path]) -> None:
        for root in roots:
            for p in self.walk(root, "lmstudio"):
                rel = p.relative_to(root).parts
                if len(rel) >= 3:
                    name = f"{rel[0]}/{rel[1]}"
                elif len(rel) == 2:
                    name = rel[0]
                else:
                    name = _stem(p)
                self.hits.append(_Hit("lmstudio", p, name))

    def scan_ollama(self, root: Path) -> None:
        manifests = root / "manifests"
        if not manifests.is_dir():
            log.debug("ollama: no manifests under %s", root)
            return
        blobs = root / "blobs"
        for host in self.listdir(manifests, "ollama") or []:
            if not host.is_dir():
                continue
            for ns in self.listdir(Path(host.path), "ollama") or []:
                if not ns.is_dir():
                    continue
                for model in self.listdir(Path(ns.path), "ollama") or []:
                    if not model.is_dir():
                        continue
                    for tag in self.listdir(Path(model.path), "ollama") or []:
                        self.check_cancel()
                        if tag.is_dir():
                            continue
                        if host.name == "registry.ollama.ai":
                            prefix = "" if ns.name == "library" else f"{ns.name}/"
                        else:
                            prefix = f"{host.name}/{ns.name}/"
                        name = f"{prefix}{model.name}:{tag.name}"
                        self._ollama_manifest(Path(tag.path), name, blobs)

    def _ollama_manifest(self, manifest: Path, name: str, blobs: Path) -> None:
        try:
            if manifest.stat().st_size > _MAX_MANIFEST_BYTES:
                self.note(f"ollama: skipped {name}: manifest {manifest} is too large", logging.WARNING)
                return
            data = json.loads(read_limited(manifest, _MAX_MANIFEST_BYTES).decode("utf-8"))  # not a FIFO, nor /dev/zero
        except (ValueError, UnicodeDecodeError) as e:
            self.note(f"ollama: skipped {name}: malformed manifest {manifest} ({e})", logging.WARNING)
            return
        except OSError as e:
            self.note(f"ollama: skipped {name}: cannot read {manifest} ({e.strerror or e})", logging.WARNING)
            return
        layers = data.get("layers") if isinstance(data, dict) else None
        if not isinstance(layers, list):
            self.note(f"ollama: skipped {name}: malformed manifest {manifest} (no layers)", logging.WARNING)
            return
        model = next((l for l in layers if isinstance(l, dict) and l.get("mediaType") == _OLLAMA_MODEL_MEDIA_TYPE), None)
        if model is None:
            log.debug("ollama: %s has no model layer", name)
            return
        m = _DIGEST_RE.match(str(model.get("digest", "")))
        if m is None:
            self.note(f"ollama: skipped {name}: malformed model digest in {manifest}", logging.WARNING)
            return
        blob = blobs / f"sha256-{m.group(1)}"
        try:
            st = os.stat(blob)
        except OSError:
            self.note(f"ollama: skipped {name}: its blob {blob.name} is missing", logging.WARNING)
            return
        if not stat.S_ISREG(st.st_mode):
            self.note(f"ollama: skipped {name}: its blob {blob.name} is not a regular file", logging.WARNING)
            return
        try:
            with open(blob, "rb") as f:
                magic = f.read(4)
        except OSError as e:
            self.note(f"ollama: skipped {name}: cannot read its blob ({e.strerror or e})", logging.WARNING)
            return
        if magic != b"GGUF":
            self.note(f"ollama: skipped {name}: its model blob is not a GGUF file")
            return
        self.hits.append(_Hit("ollama", blob, name, ollama_tag=name))

    # -- merge --------------------------------------------------------------------------

    def groups(self) -> dict[str, _Group]:
        """The hits by model: by real file, and a split model's parts (whichever were
        found) under its first part."""
        groups: dict[str, _Group] = {}
        for h in self.hits:
            try:
                g = _split_group(h)
                if g is None:
                    real = os.path.realpath(h.path)
                    st = os.stat(real)
                    g = _Group(real, Path(real), st.st_size, st.st_mtime_ns)
            except OSError as e:
                self.note(f"{h.source}: skipped {h.path}: {e.strerror or e}", logging.WARNING)
                continue
            groups.setdefault(g.real, g).hits.append(h)
        return groups

    def entries(self, cache: InfoCache, seen: set[str]) -> list[LibraryEntry]:
        groups = self.groups()
        out: list[LibraryEntry] = []
        n = len(groups)
        for i, (real, g) in enumerate(groups.items(), 1):
            self.check_cancel()
            hits = g.hits
            seen.add(real)
            path_hit = min(hits, key=lambda h: _PATH_PRIORITY.index(h.source))
            name_hit = min(hits, key=lambda h: _NAME_PRIORITY.index("models-default" if h.default_name else h.source))
            shown = path_hit.path if g.parts is None else path_hit.path.with_name(g.read.name)
            cached = cache.get(real, g.size, g.mtime_ns, g.parts)
            if cached is None:
                self.tell(f"reading {shown.name} ({i}/{n})")
                info, error = inspect_file(g.read)
                cache.put(real, g.size, g.mtime_ns, info, error, g.parts)
            else:
                info, error = cached
            # The message names the real file (an Ollama blob, an HF blob): name the listed one.
            if error and g.read.name != shown.name:
                error = _rename_label(error, g.read.name, shown.name)
            ollama_tags = sorted({h.ollama_tag for h in hits if h.ollama_tag})
            hf = next((h for h in sorted(hits, key=lambda h: _PATH_PRIORITY.index(h.source)) if h.repo_id), None)
            role = next((h.role for h in hits if h.role), None)
            out.append(LibraryEntry(
                path=shown,
                name=name_hit.name,
                sources=tuple(s for s in SOURCES if any(h.source == s for h in hits)),
                size=g.size,
                mtime_ns=g.mtime_ns,
                role=role,
                repo_id=hf.repo_id if hf else None,
                revision=hf.revision if hf else None,
                ollama_tag=ollama_tags[0] if ollama_tags else None,
                info=info,
                error=error,
                parts=len(g.parts) if g.parts is not None else 1,
            ))
        for path, m in self.missing_defaults:
            hint = " --test-model" if m.role == "test" else ""
            out.append(LibraryEntry(
                path=path, name=m.name, sources=("models",), size=0, mtime_ns=0, role=m.role,
                error=f"{m.file}: not downloaded (run `specdesk models fetch-default{hint}`)", present=False,
            ))
        out.sort(key=_sort_key)
        return out


def _rename_label(error: str, real_name: str, shown_name: str) -> str:
    prefix = f"{real_name}: "
    return f"{shown_name}: {error[len(prefix):]}" if error.startswith(prefix) else error


def _readlink(p: Path) -> str:
    try:
        return os.readlink(p)
    except OSError:
        return "?"


def _sort_key(e: LibraryEntry) -> tuple:
    return (
        0 if e.role else 1,
        _ROLE_ORDER.get(e.role or "", 9),
        e.name.casefold(),
        str(e.path),
    )


# --------------------------------------------------------------------------------------
# Where things are
# --------------------------------------------------------------------------------------


def lmstudio_dirs(home: Path) -> list[Path]:
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def ollama_dirs(home: Path, explicit_home: bool) -> list[Path]:
    env = os.environ.get("OLLAMA_MODELS")
    if env:
        return [Path(env).expanduser()]
    dirs = [home / ".ollama" / "models"]
    if not explicit_home:
        # Linux installs run the service as user "ollama" with this home.
        dirs.append(Path("/usr/share/ollama/.ollama/models"))
    return dirs


def scan(
    *,
    home: Path | None = None,
    hf_cache: Path | None = None,
    folders: list[Path] | None = None,
    models: Path | None = None,
    cancel: Cancel | None = None,
    progress: Progress | None = None,
    use_cache: bool = True,
) -> ScanResult:
    """Find every GGUF file in the library's sources (see the module docstring).

    ``home`` replaces the home folder (LM Studio, Ollama, and the HF cache when no
    HF_* variable names one); ``hf_cache``, ``folders`` and ``models`` replace the HF
    cache, the user's folders and models/. ``cancel`` is polled often; when it returns
    True the scan raises ``Cancelled``. ``progress`` gets one line per folder and file.
    """
    explicit_home = home is not None
    home = Path(home) if home is not None else Path.home()
    s = _Scan(cancel, progress)
    cache = InfoCache(use_cache)
    seen: set[str] = set()
    try:
        s.scan_models(Path(models) if models is not None else models_dir())
        s.scan_folders(list(folders) if folders is not None else user_folders())
        s.scan_hf(Path(hf_cache) if hf_cache is not None else hf_hub_cache(home if explicit_home else None))
        s.scan_lmstudio(lmstudio_dirs(home))
        for d in ollama_dirs(home, explicit_home):
            s.scan_ollama(d)
        entries = s.entries(cache, seen)
    finally:
        cache.save(seen)  # keep what was read, even when cancelled
    return ScanResult(entries=entries, notes=s.notes)
