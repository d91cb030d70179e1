"""File paths kept by Qt without losing a byte: QSettings values, and the item data of
the model pickers and the empty page's model list.

A file name that is not UTF-8 comes to Python with each bad byte as a lone surrogate
(``os.fsdecode``: ``b"\\xff"`` -> ``"\\udcff"``). Qt keeps text as UTF-16 and drops such
a character when it converts the str, so ``nonutf8-\\udcff.gguf`` came back as
``nonutf8-.gguf``: another file, or none. Here a path that Qt can carry as text stays
text (as before, so settings written by older versions read the same, and the INI file
stays readable); any other is kept as its own bytes (``os.fsencode``) in a QByteArray,
which QSettings writes as ``@ByteArray(...)`` and gives back as it was.

(A QSettings *key* keeps such a character: ``references`` keys speeds by path as text.)
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QByteArray


def _qt_safe(s: str) -> bool:
    """Whether Qt keeps ``s`` as it is (no lone surrogate)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def path_value(path: str | os.PathLike[str]) -> str | QByteArray:
    """What to store for ``path``: its text, or its bytes when Qt would change the text."""
    s = os.fspath(path)
    return s if _qt_safe(s) else QByteArray(os.fsencode(s))


def path_from_value(value: object) -> Path | None:
    """The path stored by :func:`path_value` (or as plain text by an older version);
    None for anything else (an empty or damaged value)."""
    if isinstance(value, QByteArray):
        value = value.data()
    if isinstance(value, (bytes, bytearray)):
        return Path(os.fsdecode(bytes(value))) if value else None
    if isinstance(value, str) and value:
        return Path(value)
    return None


__all__ = ["path_from_value", "path_value"]
