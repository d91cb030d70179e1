"""Where the Hub and the cache are.

The endpoint is read from ``HF_ENDPOINT`` and the cache from ``HF_HUB_CACHE`` (or
``HF_HOME``) when a function is called, not when huggingface_hub was imported, and is
passed to huggingface_hub explicitly.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"


def endpoint() -> str:
    """The Hub endpoint: ``$HF_ENDPOINT`` (read now) or https://huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


_endpoint_now = endpoint  # ``endpoint`` is also a parameter name of list_gguf and download


def hub_cache_dir() -> Path:
    """The Hugging Face cache, resolved like huggingface_hub does but read now:
    ``$HF_HUB_CACHE``, ``$HUGGINGFACE_HUB_CACHE``, ``$HF_HOME/hub``, or
    ``$XDG_CACHE_HOME/huggingface/hub`` (default ``~/.cache/huggingface/hub``)."""

    def expand(p: str) -> Path:
        return Path(os.path.expandvars(os.path.expanduser(p)))

    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return expand(os.environ[var])
    if os.environ.get("HF_HOME"):
        return expand(os.environ["HF_HOME"]) / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return expand(xdg) / "huggingface" / "hub"


def _cache_path(cache_dir: str | os.PathLike[str] | None) -> Path:
    # hf_hub_download resolves its cache_dir the same way; the partial files must agree.
    return (Path(cache_dir) if cache_dir is not None else hub_cache_dir()).expanduser().resolve()
