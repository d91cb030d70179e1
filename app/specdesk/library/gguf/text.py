"""One-line messages about GGUF files: file-derived text made safe to show.

Every error message is ``"<file name>: <problem>"``; anything taken from the file
itself is escaped and shortened before it goes into a message.
"""

from __future__ import annotations

from pathlib import Path


def show(text: object, limit: int = 80) -> str:
    """A file-derived string made safe for a one-line message: non-printable characters
    (newlines, escape sequences, ...) escaped, quotes escaped, shortened."""
    text = str(text)
    out = []
    for ch in text[:limit]:  # escaping only lengthens: the first `limit` characters are enough
        if ch == "'" or ch == "\\":
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape", errors="backslashreplace").decode("ascii"))
    s = "".join(out)
    if len(s) > limit or len(text) > limit:
        s = s[: limit - 3] + "..."
    return s


def show_bytes(raw: bytes, limit: int = 80) -> str:
    """Raw bytes from the file: as text when they are valid UTF-8 (``'abc'``), else as
    a bytes literal (``b'\\xfe'``), so that two texts that differ only in invalid bytes
    are told apart."""
    try:
        return "'" + show(raw.decode("utf-8"), limit) + "'"
    except UnicodeDecodeError:
        r = repr(raw[:limit])
        return r if len(raw) <= limit else r + "..."


def label(path: Path) -> str:
    return show(path.name or str(path), 200)


def n(x: int) -> str:
    return f"{x:,}"


_MAGIC_HINTS = [
    (b"PK\x03\x04", "a zip archive"),
    (b"PK\x05\x06", "an empty zip archive"),
    (b"\x1f\x8b", "a gzip file"),
    (b"BZh", "a bzip2 file"),
    (b"\xfd7zXZ", "an xz file"),
    (b"7z\xbc\xaf", "a 7z archive"),
    (b"\x28\xb5\x2f\xfd", "a zstd file"),
    (b"lmgg", "an old GGML model (convert it to GGUF)"),
    (b"fmgg", "an old GGMF model (convert it to GGUF)"),
    (b"tjgg", "an old GGJT model (convert it to GGUF)"),
    (b"\x89HDF", "an HDF5 file"),
    (b"\x80", "a Python pickle"),
    (b"version https://git-lfs", "a Git LFS pointer, not the model itself"),
    (b"\x7fELF", "an executable"),
    (b"%PDF", "a PDF document"),
]


def describe_magic(head: bytes) -> str:
    """Say what a file that is not a GGUF looks like, from its first bytes."""
    shown = repr(head[:8])
    for sig, what in _MAGIC_HINTS:
        if head.startswith(sig):
            return f"magic {shown}: looks like {what}"
    low = head.lstrip()[:16].lower()
    if low.startswith((b"<!doctype", b"<html", b"<head", b"<?xml", b"<body")):
        return f"magic {shown}: looks like an HTML page (a failed download?)"
    if low.startswith((b"{", b"[")):
        return f"magic {shown}: looks like JSON"
    if len(head) >= 10 and head[8:10] == b'{"':
        return f"magic {shown}: looks like a safetensors file"
    if head and all(32 <= c < 127 or c in (9, 10, 13) for c in head[:16]):
        return f"magic {shown}: looks like a text file"
    return f"magic {shown}"
