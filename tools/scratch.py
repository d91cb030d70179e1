"""Temporary folders a tool removes when it ends: its runs' data, cache, config and
HOME folders (the user's own are never touched), without leaving them behind in
/tmp run after run."""

from __future__ import annotations

import atexit
import shutil
import tempfile


def scratch_dir(prefix: str) -> str:
    """A new temporary folder, removed with everything in it when this process exits
    (normally or by an exception; not by os._exit or a kill)."""
    d = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, d, True)
    return d
