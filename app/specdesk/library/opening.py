"""Which models files given from outside the pickers name, and in which roles: the
command line, a second launch, the macOS Finder and drops all give files this way.

An :class:`OpenRequest` says what was given (files with or without roles); :func:`plan`
turns it into an :class:`Opening` (a target and a draft, or one file whose role the
window decides):

- two files and no roles: the larger is the target (a split model counts all its parts);
- a split model is named by any of its parts and opened by its first one;
- one file and no role: the target, unless a target is loaded and the file can draft
  for it (``library.pairing``): then the app asks which role it takes.

:func:`check_file` says whether a dropped path can be a model at all, reading as little
as it can (a name, or four bytes of a regular file).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .gguf.split import first_part, model_size

MAGIC = b"GGUF"
#: A request names at most this many files; a longer message is refused, not read.
MAX_FILES = 16


@dataclass(frozen=True)
class OpenRequest:
    """Files to open, as absolute paths: ``files`` without a role, and the ``target`` and
    ``draft`` given as such. An empty request asks the window only to show itself."""

    files: tuple[str, ...] = ()
    target: str | None = None
    draft: str | None = None

    @property
    def empty(self) -> bool:
        return not self.files and self.target is None and self.draft is None

    @classmethod
    def from_command_line(cls, files: Sequence[str | os.PathLike] = (), target: str | os.PathLike | None = None,
                          draft: str | os.PathLike | None = None, cwd: str | None = None) -> "OpenRequest":
        """Paths as the user typed them, made absolute against ``cwd`` (default: this
        process's), so that another process can open them."""
        base = cwd or os.getcwd()

        def absolute(p) -> str:
            return os.path.normpath(os.path.join(base, os.path.expanduser(os.fspath(p))))

        return cls(tuple(absolute(f) for f in files), absolute(target) if target else None,
                   absolute(draft) if draft else None)

    def to_json(self) -> str:
        return json.dumps({"files": list(self.files), "target": self.target, "draft": self.draft})

    @classmethod
    def from_json(cls, text: str) -> "OpenRequest":
        """The request in ``text``; ValueError for anything but a well-formed one."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        files = data.get("files", [])
        if not isinstance(files, list) or len(files) > MAX_FILES or not all(isinstance(f, str) and f for f in files):
            raise ValueError(f"'files' must be a list of at most {MAX_FILES} paths")
        roles = [data.get("target"), data.get("draft")]
        if not all(r is None or (isinstance(r, str) and r) for r in roles):
            raise ValueError("'target' and 'draft' must be paths or null")
        if not all(os.path.isabs(p) for p in files + [r for r in roles if r]):
            raise ValueError("paths must be absolute")
        return cls(tuple(files), roles[0], roles[1])


@dataclass(frozen=True)
class Opening:
    """What to open: ``target`` and ``draft``; or ``either``, one file whose role the
    window decides; or ``error``, why nothing can be opened."""

    target: Path | None = None
    draft: Path | None = None
    either: Path | None = None
    error: str | None = None


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name the same file (links resolved)."""
    return os.path.realpath(a) == os.path.realpath(b)


def models_of(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Each path as the model it names (a split model by its first part), once each."""
    out: list[Path] = []
    for p in paths:
        m = first_part(Path(p))
        if not any(same_file(m, o) for o in out):
            out.append(m)
    return out


def plan(req: OpenRequest) -> Opening:
    """The roles of the request's files (see the module's docstring)."""
    target = first_part(Path(req.target)) if req.target else None
    draft = first_part(Path(req.draft)) if req.draft else None
    if target is not None and draft is not None and same_file(target, draft):
        return Opening(error=f"{target.name} is given as both the target and the draft: a model does not draft for itself")
    given = [m for m in (target, draft) if m is not None]
    files = [m for m in models_of(req.files) if not any(same_file(m, g) for g in given)]
    free = (target is None) + (draft is None)
    if len(files) > free:
        every = given + files
        return Opening(error=f"SpecDesk opens a target and at most one draft, but {len(every)} models were given: "
                             + ", ".join(m.name for m in every))
    if not files:
        return Opening(target, draft)
    if target is None and draft is None:
        if len(files) == 1:
            return Opening(either=files[0])
        big, small = sorted(files, key=model_size, reverse=True)  # stable: equal sizes keep their order
        return Opening(big, small)
    if target is None:
        return Opening(files[0], draft)
    return Opening(target, files[0])


def check_file(path: Path) -> str | None:
    """Why ``path`` cannot be dropped as a model, or None when it can: a regular file
    with a .gguf name, or with GGUF's magic bytes at offset 0 (a model saved under
    another name). Only a regular file is ever opened, and without blocking: a FIFO
    swapped in after the stat is not waited on. May block on a hung network mount: run
    it off the Qt thread (``FileChecks``)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{path.name}: no such file"
    except OSError as e:
        return f"{path.name} cannot be read: {e.strerror or e}"
    if stat.S_ISDIR(st.st_mode):
        return f"{path.name} is a folder: drop the .gguf files in it"
    if not stat.S_ISREG(st.st_mode):
        return f"{path.name} is not a regular file (a pipe, a device or a socket): only GGUF model files can be opened"
    if path.suffix.lower() == ".gguf":
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return f"{path.name} is not a regular file (a pipe, a device or a socket): only GGUF model files can be opened"
            head = os.read(fd, len(MAGIC))
        finally:
            os.close(fd)
    except OSError as e:
        return f"{path.name} cannot be read: {e.strerror or e}"
    return None if head == MAGIC else f"{path.name} is not a GGUF model (no .gguf name, no GGUF header)"
