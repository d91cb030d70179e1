"""The benchmark report: turns the runner's result dict into files a person can read
and paste (report.md), files a program can read (report.json, report.csv) and three
charts (PNG).

    markdown.py   report.md
    csv.py        report.csv
    charts.py     the PNG charts (matplotlib, imported only when drawing)
    result.py     reading the result dict, shared by the three

Nothing here imports Qt, and importing it does not import matplotlib.

Writing is all-or-nothing per file: the output directory is checked first (by
creating and removing a temporary file), every file's content is rendered in memory,
and each file is written with :func:`specdesk.files.write_bytes_atomic`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ...errors import SpecDeskError
from ...files import write_bytes_atomic
from . import charts
from .charts import acceptance_chart, speedup_chart, tokens_per_second_chart
from .csv import CSV_FIELDS, csv_text
from .markdown import markdown
from .result import drift_of, validate

__all__ = [
    "CSV_FIELDS", "FILE_NAMES", "acceptance_chart", "check_writable", "remove_if_empty", "csv_text", "drift_of",
    "markdown", "speedup_chart", "tokens_per_second_chart", "write_report",
]

FILE_NAMES = [
    "report.json",
    "report.csv",
    "report.md",
    "speedup.png",
    "acceptance_by_position.png",
    "tokens_per_second.png",
]


def write_report(result: dict, out_dir: str | Path) -> list[Path]:
    """Write report.json, report.csv, report.md and the three PNG charts into
    out_dir (created if missing) and return their paths, in that order.

    Raises SpecDeskError, before anything is written, when result is not a
    benchmark result or out_dir cannot be written.
    """
    validate(result)
    out = Path(out_dir)
    created = _prepare_dir(out)
    try:
        contents: list[tuple[str, bytes]] = [
            # A prompt or file name that is not valid UTF-8 (a surrogate escape from argv or
            # the file system) is written escaped, never allowed to lose the whole report.
            ("report.json", (json.dumps(result, indent=2, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")),
            ("report.csv", csv_text(result).encode("utf-8", "backslashreplace")),
            ("report.md", markdown(result).encode("utf-8", "backslashreplace")),
            ("speedup.png", charts.speedup_chart(result)),
            ("acceptance_by_position.png", charts.acceptance_chart(result)),
            ("tokens_per_second.png", charts.tokens_per_second_chart(result)),
        ]
    except BaseException:
        # Nothing written yet: leave no empty directory behind either.
        for d in reversed(created):
            try:
                d.rmdir()
            except OSError:
                pass
        raise
    paths = []
    for name, data in contents:
        path = out / name
        try:
            write_bytes_atomic(path, data)
        except OSError as e:
            raise SpecDeskError(f"cannot write {path}: {e.strerror or e}") from None
        paths.append(path)
    return paths


def check_writable(out_dir: str | Path) -> list[Path]:
    """Create ``out_dir`` if needed and make sure files can be written there; raise a
    one-line SpecDeskError otherwise. The CLI calls it before any model work. Returns
    the folders it created, outermost first (for ``remove_if_empty``)."""
    return _prepare_dir(Path(out_dir))


def remove_if_empty(created: list[Path]) -> None:
    """Remove the folders ``check_writable`` created, innermost first, where they are
    still empty: a run that failed or was interrupted leaves no empty report folder."""
    for d in reversed(created):
        try:
            d.rmdir()
        except OSError:  # not empty, or gone: leave it
            return


def _prepare_dir(out: Path) -> list[Path]:
    """Create out (and missing parents), check that a file can be created in it.
    Returns the directories it created, outermost first."""
    if out.exists() and not out.is_dir():
        raise SpecDeskError(f"cannot write the report to {out}: it exists and is not a directory")
    for name in FILE_NAMES:  # found only after the whole run, a folder under a report's name lost the report
        if (out / name).exists() and not (out / name).is_file():
            raise SpecDeskError(f"cannot write the report to {out}: {name} there is not a file")
    missing = []
    p = out
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    missing.reverse()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SpecDeskError(f"cannot create the report directory {out}: {e.strerror or e}") from None
    try:
        fd, probe = tempfile.mkstemp(dir=out, prefix=".specdesk-write-test-")
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        for d in reversed(missing):
            try:
                d.rmdir()
            except OSError:
                pass
        raise SpecDeskError(f"cannot write the report to {out}: {e.strerror or e}") from None
    return missing
