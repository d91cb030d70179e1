"""Every proposer by name: the one table the session, the CLI, the benchmark and the app read.

A row says whether the proposer runs a draft model, which sources its drafts come
from (``Draft.source``: what acceptance and costs are kept under) and how to build
it from the parts a session has. Adding a proposer is one row here and its own
module under ``proposers/``.

``draft`` is the draft model drafting in the target's vocabulary; on a pair whose
vocabularies differ the same model drafts ``translated`` (its text re-tokenized for
the target), which :func:`resolve` makes explicit, and asking for ``translated`` on a
pair that shares the vocabulary is refused there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .base import Proposer
from .history import HistoryProposer
from .hybrid import HybridProposer
from .ngram import NgramProposer
from .none import NoProposer


@dataclass(frozen=True)
class Parts:
    """What a proposer is built from: the session's draft-model proposer (same
    vocabulary or translated, built on demand with the config's p_min), and the
    session's history of earlier turns."""

    draft_model: Callable[[], Proposer] | None
    history: HistoryProposer
    # the target's own MTP heads as a proposer (built on demand), where it carries them
    mtp: Callable[[], Proposer] | None = None


@dataclass(frozen=True)
class ProposerKind:
    name: str
    needs_draft: bool  # runs a draft model
    sources: tuple[str, ...]  # the Draft.source values its drafts carry
    build: Callable[[Parts], Proposer]
    # True for the proposers that are not a session choice of their own but a name
    # the draft model takes on a pair: "translated" (see resolve)
    pair_dependent: bool = False
    # True for the proposers that draft with the target's own MTP (NextN) heads
    needs_mtp: bool = False

    @property
    def looks_up_history(self) -> bool:
        return "history" in self.sources


def _draft(parts: Parts) -> Proposer:
    if parts.draft_model is None:
        raise ValueError("this proposer needs a draft model")
    return parts.draft_model()


def _mtp(parts: Parts) -> Proposer:
    if parts.mtp is None:
        raise ValueError("this proposer needs a target with MTP heads")
    return parts.mtp()


KINDS: tuple[ProposerKind, ...] = (
    ProposerKind("draft", True, ("draft",), _draft),
    ProposerKind("translated", True, ("translated",), _draft, pair_dependent=True),
    ProposerKind("ngram", False, ("ngram",), lambda parts: NgramProposer()),
    ProposerKind("ngram+history", False, ("ngram", "history"),
                 lambda parts: HybridProposer(NoProposer(), history=parts.history)),
    ProposerKind("hybrid", True, ("ngram", "history", "draft"),
                 lambda parts: HybridProposer(_draft(parts), history=parts.history)),
    ProposerKind("mtp", False, ("mtp",), _mtp, needs_mtp=True),
    ProposerKind("none", False, (), lambda parts: NoProposer()),
)

REGISTRY: dict[str, ProposerKind] = {k.name: k for k in KINDS}

#: Every name, in the order the CLI and the app offer them.
NAMES: tuple[str, ...] = tuple(k.name for k in KINDS)
#: The names a user chooses for a generation (``translated`` follows from the pair).
CHOICES: tuple[str, ...] = tuple(k.name for k in KINDS if not k.pair_dependent)
#: The proposers that work with any target alone (no draft model, no MTP heads).
WITHOUT_DRAFT: tuple[str, ...] = tuple(k.name for k in KINDS if not k.needs_draft and not k.needs_mtp)
#: The proposers that draft with the target's own MTP heads.
WITH_MTP: tuple[str, ...] = tuple(k.name for k in KINDS if k.needs_mtp)


def kind(name: str) -> ProposerKind:
    """The row for ``name``; KeyError for a name that is not in the table."""
    return REGISTRY[name]


class PairMismatch(ValueError):
    """``translated`` was asked for on a pair whose vocabularies are the same."""


def resolve(name: str, translated_pair: bool) -> str:
    """The proposer that runs ``name`` on a pair: ``draft`` on a pair of two
    vocabularies is ``translated``; ``translated`` on a pair of one raises
    PairMismatch."""
    if translated_pair and name == "draft":
        return "translated"
    if not translated_pair and REGISTRY[name].pair_dependent:
        raise PairMismatch(name)
    return name
