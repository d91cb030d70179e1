"""What the CLI prints: JSON documents, one-line errors and exit codes, progress bars."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tqdm import tqdm

EXIT_USAGE = 2
#: In a log (no terminal), a progress bar prints a line at most this often.
LOG_INTERVAL_S = 5.0


def dump_json(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False, default=_json_default)


def _json_default(o):
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, Path):
        return str(o)
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"cannot serialise {type(o).__name__}")


def progress_bar(**kw) -> tqdm:
    """A tqdm bar on stderr. In a terminal it redraws in place; in a log (CI, a pipe)
    it prints one line every few seconds instead of thousands of carriage returns."""
    kw.setdefault("file", sys.stderr)
    tty = hasattr(kw["file"], "isatty") and kw["file"].isatty()
    if not tty:
        kw.setdefault("mininterval", LOG_INTERVAL_S)
        kw.setdefault("maxinterval", LOG_INTERVAL_S * 4)
        kw.setdefault("ascii", True)
        kw.setdefault("ncols", 100)
    return tqdm(**kw)


def printable(value: object) -> str:
    """``value`` as text a terminal shows as it is: control characters (an escape
    sequence, a newline, a NUL in a GGUF's metadata or a file's name) written as
    escapes, as ``repr`` would, so a hostile file cannot move the cursor, clear the
    screen or split a table's row."""
    s = str(value)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in s)


def error(message: str) -> int:
    print(f"specdesk: error: {message}", file=sys.stderr)
    return EXIT_USAGE
