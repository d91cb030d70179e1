"""GGUF models from the Hugging Face Hub, through ``huggingface_hub``.

One module per job:

``repo``
    What a repo holds: ``list_gguf``, ``pick``, ``parse_quant``, ``HubFile``,
    ``HubModelFile``.
``transfer``
    ``download``: every part of a model into the Hugging Face cache, resumable and
    verified.
``cache``
    ``cached_gguf_files``: the GGUF models already complete in the cache.
``location``
    ``endpoint`` and ``hub_cache_dir``: where the Hub and the cache are.
``errors``
    ``DownloadError``, and huggingface_hub/network errors mapped to it.

Every error is a ``SpecDeskError`` with a one-line message. huggingface_hub itself is
imported only inside the functions that use it, so importing this package is cheap.
"""

from .cache import cached_gguf_files
from .errors import DownloadError
from .location import endpoint, hub_cache_dir
from .repo import HubFile, HubModelFile, list_gguf, parse_quant, pick
from .transfer import download

__all__ = [
    "DownloadError",
    "HubFile",
    "HubModelFile",
    "cached_gguf_files",
    "download",
    "endpoint",
    "hub_cache_dir",
    "list_gguf",
    "parse_quant",
    "pick",
]
