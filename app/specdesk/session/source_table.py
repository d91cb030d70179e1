"""Every kind of draft source a session knows, in one table: which a target's own file
offers (its MTP heads), what loading the target needs for them, and what the library's
summary of a file says of them, in words. The front ends (the Library tab, the model
bar, doctor, advise) ask here, never of a source by name; a new kind of source is
one entry here (and its class: session/sources.py says what it answers)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..library.gguf import validate_gguf
from . import gemma4, heads, mtp
from .sources import DraftSource, HeadFile

#: The target's own sources, each made from its (validated) file before the load.
_OWN: tuple[Callable[[Path], DraftSource], ...] = (mtp.TargetHeads.of_file,)
#: What a library summary of a file says of each kind of source, as (label, text) rows.
_DESCRIBE: tuple[Callable[[dict], list[tuple[str, str]]], ...] = (mtp.describe, heads.describe)
#: What drafts for a target with no draft file, in a few words (None: nothing of its own).
_ALONE: tuple[Callable[[dict], str | None], ...] = (mtp.drafts_alone,)


#: The draft files that are heads of another model, by architecture (their fit to a target:
#: library/gguf/heads.py).
_HEADS: dict[str, HeadFile] = {h.arch: h for h in (*heads.HEADS, gemma4.HEAD)}


def head_file(path: Path) -> HeadFile | None:
    """What the (validated) draft file ``path`` is, where it is a head of another model
    rather than a model of its own; None for a draft model."""
    return _HEADS.get(validate_gguf(path).architecture or "")


def register_own(make: Callable[[Path], DraftSource], describe: Callable[[dict], list[tuple[str, str]]] | None = None,
                 alone: Callable[[dict], str | None] | None = None) -> None:
    """Add a kind of source a target's own file offers (a new kind of heads; a test's
    fake one): ``make`` from the file, and what the library's summary says of it."""
    global _OWN, _DESCRIBE, _ALONE
    _OWN += (make,)
    if describe is not None:
        _DESCRIBE += (describe,)
    if alone is not None:
        _ALONE += (alone,)


def unregister_own(make: Callable[[Path], DraftSource]) -> None:
    global _OWN
    _OWN = tuple(m for m in _OWN if m is not make)


def own_sources(path: Path) -> list[DraftSource]:
    """The sources a target's own file offers (each says, with its refusal, whether it can draft)."""
    return [make(path) for make in _OWN]


def load_options(sources: list[DraftSource]) -> dict:
    """What the target's load must be told for its own sources (llama.cpp loads a
    model's MTP blocks only when asked)."""
    out: dict = {}
    for s in sources:
        out.update(getattr(s, "load_options", dict)())
    return out


def drafts_alone(path: Path) -> bool:
    """Whether the target in ``path`` can draft with no draft file (its own heads)."""
    return any(s.refusal() is None for s in own_sources(path))


def file_rows(info: dict) -> list[tuple[str, str]]:
    """What a file's summary says of the sources it offers, as (label, text) rows."""
    return [row for describe in _DESCRIBE for row in describe(info)]


def alone_text(info: dict) -> str | None:
    """What a target drafts with when no draft file is chosen, in a few words; None when
    only lookups (or nothing) can."""
    return next((t for alone in _ALONE if (t := alone(info))), None)
