"""What the library learnt about each GGUF model (library-cache.json in the user cache),
valid while the file's size and mtime stay the same (for a split model, every part's),
and how one model is inspected."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .. import __version__
from ..errors import ModelFileError
from ..files import read_json_object, write_json_atomic
from ..paths import user_cache_dir
from .gguf import inspect_gguf, validate_gguf

log = logging.getLogger(__name__)

_CACHE_FORMAT = 3  # 2: summaries say which models carry MTP heads; 3: and how each rolls back


def cache_path() -> Path:
    return user_cache_dir() / "library-cache.json"


class InfoCache:
    """real path -> {size, mtime_ns, info, error[, parts]}; valid while size and mtime_ns
    match, and for a split model (keyed by its first part) each part's [size, mtime_ns]
    (``[]`` for a missing one): a part added, removed or changed is read again."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.files: dict[str, dict] = {}
        self.dirty = False
        if enabled:
            self._load()

    def _load(self) -> None:
        data = read_json_object(cache_path(), "library cache")
        # A new SpecDesk version may validate differently: start over then.
        if data.get("format") != _CACHE_FORMAT or data.get("specdesk") != __version__:
            return
        files = data.get("files")
        if isinstance(files, dict):
            self.files = {k: v for k, v in files.items() if isinstance(v, dict)}

    def get(self, real: str, size: int, mtime_ns: int,
            parts: list[list[int]] | None = None) -> tuple[dict | None, str | None] | None:
        if not self.enabled:
            return None
        rec = self.files.get(real)
        if rec is None or rec.get("size") != size or rec.get("mtime_ns") != mtime_ns or rec.get("parts") != parts:
            return None
        info = rec.get("info")
        error = rec.get("error")
        return (info if isinstance(info, dict) else None, error if isinstance(error, str) else None)

    def put(self, real: str, size: int, mtime_ns: int, info: dict | None, error: str | None,
            parts: list[list[int]] | None = None) -> None:
        if not self.enabled:
            return
        self.files[real] = {"size": size, "mtime_ns": mtime_ns, "info": info, "error": error}
        if parts is not None:
            self.files[real]["parts"] = parts
        self.dirty = True

    def save(self, seen: set[str]) -> None:
        if not self.enabled:
            return
        # Forget files that are gone (but keep those another kind of scan may still see).
        for real in [r for r in self.files if r not in seen and not os.path.exists(r)]:
            del self.files[real]
            self.dirty = True
        if not self.dirty:
            return
        try:
            write_json_atomic(cache_path(), {"format": _CACHE_FORMAT, "specdesk": __version__, "files": self.files})
        except OSError as e:
            log.warning("could not write the library cache %s: %s", cache_path(), e)
        self.dirty = False


def _quant(summary: dict) -> str | None:
    ft = summary.get("file_type")
    if isinstance(ft, str) and ft:
        for prefix in ("MOSTLY_", "ALL_"):
            if ft.startswith(prefix):
                return ft[len(prefix):]
        return ft
    # No general.file_type: the most common tensor type, quantized types before F32.
    types = summary.get("tensor_types") or {}
    if not types:
        return None
    quantized = {k: v for k, v in types.items() if k not in ("F32", "F16", "BF16")}
    pool = quantized or types
    return max(sorted(pool), key=lambda k: pool[k])


def _summary(full: dict) -> dict:
    s = {
        "architecture": full.get("architecture"),
        "model_name": full.get("name"),
        "parameters": full.get("parameters"),
        "file_type": full.get("file_type"),
        "quant": None,
        "context_length": full.get("context_length"),
        "vocab_size": full.get("vocab_size"),
        "layers": full.get("layers"),
        "embedding_length": full.get("embedding_length"),
        "has_chat_template": full.get("has_chat_template"),
        "tensor_types": full.get("tensor_types"),
        "mtp_heads": full.get("mtp_heads"),
        "mtp_problem": full.get("mtp_problem"),
        "rollback": full.get("rollback"),
    }
    s["quant"] = _quant(s)
    return s


def inspect_file(path: Path) -> tuple[dict | None, str | None]:
    """(summary or None, error or None) for one model (a file, or a split model named by
    one of its parts, as listed: its parts are found beside it by name); never raises."""
    error: str | None = None
    try:
        validate_gguf(path)
    except ModelFileError as e:
        error = str(e)
    except Exception as e:  # a bug in the validator must not stop the scan
        log.exception("validating %s failed unexpectedly", path)
        error = f"{path.name}: could not be checked ({type(e).__name__}: {e})"
    info: dict | None = None
    try:
        info = _summary(inspect_gguf(path))
    except ModelFileError as e:
        error = error or str(e)
    except Exception as e:
        log.exception("inspecting %s failed unexpectedly", path)
        error = error or f"{path.name}: could not be read ({type(e).__name__}: {e})"
    return info, error
