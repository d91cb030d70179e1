"""The GGUF models already in the Hugging Face cache.

``cached_gguf_files``
    The GGUF models already complete in the cache (``scan_cache_dir``).
"""

from __future__ import annotations

import os
from pathlib import Path

from .location import _cache_path
from .repo import HubFile, group_gguf, parse_quant


def cached_gguf_files(cache_dir: str | os.PathLike[str] | None = None) -> list[tuple[str, Path]]:
    """``(repo_id, path)`` of the GGUF models complete in the Hugging Face cache: single
    files, and the first part of split models whose parts are all in the same snapshot.
    Downloads in progress (``blobs/*.incomplete``) are not in a snapshot and not listed."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    cache = _cache_path(cache_dir)
    try:
        info = scan_cache_dir(cache)
    except CacheNotFound:
        return []
    out: set[tuple[str, Path]] = set()
    for repo in info.repos:
        if repo.repo_type != "model":
            continue
        for revision in repo.revisions:
            files = []
            for cf in revision.files:
                rel = cf.file_path.relative_to(revision.snapshot_path).as_posix()
                if cf.file_path.exists():
                    files.append(HubFile(rel, cf.size_on_disk, parse_quant(rel)))
            for m in group_gguf(files):
                if m.complete:
                    out.add((repo.repo_id, revision.snapshot_path / m.primary.filename))
    return sorted(out, key=lambda t: (t[0], str(t[1])))
