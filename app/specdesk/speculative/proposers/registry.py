"""Every proposer by name: the one table the session, the CLI, the benchmark, the
advisor and the app read. A proposer's name is written here and nowhere else.

A row says how the kind is offered (its ``label`` in the app and the CLI's help, its
ready-made ``presets`` on the Compare tab and in ``specdesk bench``), what it needs
(a draft model file loaded, or a target with multi-token-prediction heads), which
sources its drafts come from (``Draft.source``: what acceptance and costs are kept
under) and how to build it from the parts a session has. One row is the
``baseline`` (target alone, what every comparison is measured against), one the
``fallback`` (what a chat runs while its kind's draft model is not loaded), one the
``default`` (what a generation runs unless told).

Adding a proposer is one row here and its own module under ``proposers/``: every
front end offers it from the row (tests/unit/test_registry.py checks they do).

``draft`` is the draft model drafting in the target's vocabulary; on a pair whose
vocabularies differ the same model drafts ``translated`` (its text re-tokenized for
the target), which :func:`resolve` makes explicit, and asking for ``translated`` on a
pair that shares the vocabulary is refused there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .base import LOOKUP_SOURCES, Proposer
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
class Preset:
    """A ready-made configuration of a kind: its options as ``specdesk bench --configs``
    writes them after the name ("" for the kind's own defaults, "k=2", "auto")."""

    options: str = ""
    checked: bool = False  # ticked when the Compare tab opens
    bench: bool = False  # in ``specdesk bench``'s default --configs

    def config(self, name: str) -> str:
        return f"{name}:{self.options}" if self.options else name


@dataclass(frozen=True)
class ProposerKind:
    name: str
    label: str  # how the app and the CLI's help name it
    build: Callable[[Parts], Proposer]
    sources: tuple[str, ...] = ()  # the Draft.source values its drafts carry
    needs_draft: bool = False  # runs a draft model: a draft model file must be loaded
    needs_mtp: bool = False  # drafts with the target's own multi-token-prediction heads: the target must have them
    baseline: bool = False  # target alone: what every comparison is measured against
    fallback: bool = False  # runs instead of a kind whose draft model is not loaded
    default: bool = False  # what a generation runs unless told
    presets: tuple[Preset, ...] = ()  # offered ready-made (the baseline always runs: it needs none)
    # True for the proposers that are not a session choice of their own but a name
    # the draft model takes on a pair: "translated" (see resolve)
    pair_dependent: bool = False

    @property
    def looks_up_history(self) -> bool:
        return "history" in self.sources

    @property
    def looks_up(self) -> bool:
        """Some of its drafts are copied from text already seen (free to propose)."""
        return any(s in LOOKUP_SOURCES for s in self.sources)


def _draft(parts: Parts) -> Proposer:
    if parts.draft_model is None:
        raise ValueError("this proposer needs a draft model")
    return parts.draft_model()


def _mtp(parts: Parts) -> Proposer:
    if parts.mtp is None:
        raise ValueError("this proposer needs a target with MTP heads")
    return parts.mtp()


KINDS: tuple[ProposerKind, ...] = (
    ProposerKind(
        "draft", label="Draft model", build=_draft, sources=("draft",), needs_draft=True, default=True,
        presets=(Preset("k=1"), Preset("k=2", checked=True, bench=True), Preset("k=4", checked=True, bench=True),
                 Preset("auto", checked=True, bench=True)),
    ),
    ProposerKind(
        "translated", label="Draft model, translated (another vocabulary)", build=_draft, sources=("translated",),
        needs_draft=True, pair_dependent=True,
    ),
    ProposerKind(
        "ngram", label="N-gram lookup (no draft model)", build=lambda parts: NgramProposer(), sources=("ngram",),
        fallback=True, presets=(Preset(checked=True, bench=True),),
    ),
    ProposerKind(
        "ngram+history", label="N-gram lookup, earlier turns too (no draft model)",
        build=lambda parts: HybridProposer(NoProposer(), history=parts.history), sources=("ngram", "history"),
        presets=(Preset(),),
    ),
    ProposerKind(
        "hybrid", label="Hybrid (n-gram or earlier turns, else draft model)",
        build=lambda parts: HybridProposer(_draft(parts), history=parts.history), sources=("ngram", "history", "draft"),
        needs_draft=True, presets=(Preset(bench=True),),
    ),
    ProposerKind(
        "mtp", label="The model's own MTP heads (no draft model)", build=_mtp, sources=("mtp",), needs_mtp=True,
        presets=(Preset("k=4"), Preset("auto")),
    ),
    ProposerKind("none", label="None (target alone)", build=lambda parts: NoProposer(), baseline=True),
)

REGISTRY: dict[str, ProposerKind] = {k.name: k for k in KINDS}


def _one(flag: str) -> str:
    (name,) = (k.name for k in KINDS if getattr(k, flag))  # exactly one row carries it
    return name


#: Every name, in the order the CLI and the app offer them.
NAMES: tuple[str, ...] = tuple(k.name for k in KINDS)
#: The names a user chooses for a generation (``translated`` follows from the pair).
CHOICES: tuple[str, ...] = tuple(k.name for k in KINDS if not k.pair_dependent)
#: The proposers that work with any target alone (no draft model, no MTP heads).
WITHOUT_DRAFT: tuple[str, ...] = tuple(k.name for k in KINDS if not k.needs_draft and not k.needs_mtp)
#: The proposers that draft with the target's own MTP heads.
WITH_MTP: tuple[str, ...] = tuple(k.name for k in KINDS if k.needs_mtp)
#: Target alone: the baseline of every comparison.
BASELINE: str = _one("baseline")
#: What a chat runs while the draft model its kind needs is not loaded.
FALLBACK: str = _one("fallback")
#: What a generation runs unless told.
DEFAULT: str = _one("default")
#: Every preset configuration, in the order the app offers them.
PRESETS: tuple[str, ...] = tuple(p.config(k.name) for k in KINDS for p in k.presets)
#: The presets ticked when the Compare tab opens.
CHECKED: frozenset[str] = frozenset(p.config(k.name) for k in KINDS for p in k.presets if p.checked)
#: ``specdesk bench``'s default configurations: the baseline, then the kinds' bench presets.
BENCH_DEFAULT: tuple[str, ...] = (BASELINE,) + tuple(p.config(k.name) for k in KINDS for p in k.presets if p.bench)


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


def with_history(name: str) -> str | None:
    """The kind that drafts as ``name`` does and also looks up earlier turns
    (``ngram:history`` is ``ngram+history``), or None when there is none."""
    sources = REGISTRY[name].sources
    if not sources or "history" in sources:
        return None
    return next((k.name for k in KINDS if k.sources == sources + ("history",)), None)
