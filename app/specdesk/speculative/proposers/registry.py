"""Every proposer by name: the one table the session, the CLI, the benchmark, the
advisor and the app read. A proposer's name is written here and nowhere else.

A row says how the kind is offered (its ``label`` in the app and the CLI's help, its
ready-made ``presets`` on the Compare tab and in ``specdesk bench``), what it ``needs``
(a :class:`Need`: the draft-source of a session it drafts with, e.g. the draft model
file or the target's own multi-token-prediction heads), which sources its drafts come
from (``Draft.source``: what acceptance and costs are kept under) and how to build it
from the parts a session has. One row is the
``baseline`` (target alone, what every comparison is measured against), one the
``fallback`` (what a chat runs while its kind's draft model is not loaded), one the
``default`` (what a generation runs unless told).

Adding a proposer is one row here and its own module under ``proposers/``; one that
drafts with something a session must load is also one :class:`Need` here and one
implementation of the session's draft-source interface (``specdesk.session.sources``).
Every front end offers it from the row (tests/unit/test_registry.py checks they do,
tests/integration/test_new_source.py runs a source registered by a test through them).

``draft`` is the draft model drafting in the target's vocabulary; on a pair whose
vocabularies differ the same model drafts ``translated`` (its text re-tokenized for
the target), which :func:`resolve` makes explicit, and asking for ``translated`` on a
pair that shares the vocabulary is refused there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .base import Proposer, Source
from .history import HistoryProposer
from .hybrid import HybridProposer
from .ngram import NgramProposer
from .none import NoProposer


@dataclass(frozen=True)
class Need:
    """Something a kind drafts with that a session must have loaded: one source of the
    session's draft-source interface, found by this need. ``in_draft_file``: it is
    loaded from the draft file (``--draft``: a draft model, a head), not from the
    target's own file (its MTP heads)."""

    name: str
    in_draft_file: bool = True

    def __str__(self) -> str:
        return self.name


#: A draft model file: same vocabulary as the target, or another one (translated).
DRAFT_MODEL = Need("draft model")
#: The target's own multi-token-prediction (NextN) heads, from the target's file.
MTP_HEADS = Need("MTP heads", in_draft_file=False)
#: An EAGLE-3 head (a draft file of architecture eagle3) reading the target's layers.
EAGLE3_HEAD = Need("EAGLE-3 head")
#: A DFlash head (a draft file of architecture dflash) reading the target's layers.
DFLASH_HEAD = Need("DFlash head")
#: A Gemma 4 assistant (a ``gemma4-assistant`` GGUF as the draft file): it shares the target's KV cache.
GEMMA4_ASSISTANT = Need("Gemma 4 assistant")


@dataclass(frozen=True)
class Parts:
    """What a proposer is built from: the proposer each of the session's draft sources
    makes (built on demand, with the config's p_min), and the session's history of
    earlier turns."""

    sources: Callable[[Need], Proposer]
    history: HistoryProposer

    def source(self, need: Need) -> Proposer:
        return self.sources(need)


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
    needs: Need | None = None  # what it drafts with, that a session must have loaded (None: nothing)
    baseline: bool = False  # target alone: what every comparison is measured against
    fallback: bool = False  # runs instead of a kind whose draft model is not loaded
    default: bool = False  # what a generation runs unless told
    presets: tuple[Preset, ...] = ()  # offered ready-made (the baseline always runs: it needs none)
    # True for the proposers that are not a session choice of their own but a name
    # the draft model takes on a pair: "translated" (see resolve)
    pair_dependent: bool = False

    @property
    def needs_draft(self) -> bool:
        """It drafts with what the draft file holds: a draft file must be loaded."""
        return self.needs is not None and self.needs.in_draft_file

    @property
    def substitute(self) -> bool:
        """It drafts with one loaded source alone (no lookups, no second vocabulary to
        ask for): what an answer may run instead of a kind whose source is missing."""
        return self.needs is not None and not self.pair_dependent and not self.sources_lookup

    @property
    def sources_lookup(self) -> bool:
        return any(Source.of(s).is_lookup for s in self.sources)

    @property
    def looks_up_history(self) -> bool:
        return "history" in self.sources

    @property
    def looks_up(self) -> bool:
        """Some of its drafts are copied from text already seen (free to propose)."""
        return self.sources_lookup


def _draft(parts: Parts) -> Proposer:
    return parts.source(DRAFT_MODEL)


def _mtp(parts: Parts) -> Proposer:
    return parts.source(MTP_HEADS)


KINDS: tuple[ProposerKind, ...] = (
    ProposerKind(
        "draft", label="Draft model", build=_draft, sources=("draft",), needs=DRAFT_MODEL, default=True,
        presets=(Preset("k=1"), Preset("k=2", checked=True, bench=True), Preset("k=4", checked=True, bench=True),
                 Preset("auto", checked=True, bench=True)),
    ),
    ProposerKind(
        "translated", label="Draft model, translated (another vocabulary)", build=_draft, sources=("translated",),
        needs=DRAFT_MODEL, pair_dependent=True,
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
        needs=DRAFT_MODEL, presets=(Preset(bench=True),),
    ),
    ProposerKind(
        "mtp", label="The model's own MTP heads (no draft model)", build=_mtp, sources=("mtp",), needs=MTP_HEADS,
        presets=(Preset("k=4"), Preset("auto")),
    ),
    ProposerKind(
        "eagle3", label="EAGLE-3 head (a draft file reading the target's layers)",
        build=lambda parts: parts.source(EAGLE3_HEAD), sources=("eagle3",), needs=EAGLE3_HEAD,
        presets=(Preset("k=3", checked=True), Preset("auto", checked=True)),
    ),
    ProposerKind(
        "dflash", label="DFlash head (a draft file drafting a block at once)",
        build=lambda parts: parts.source(DFLASH_HEAD), sources=("dflash",), needs=DFLASH_HEAD,
        presets=(Preset("k=3", checked=True), Preset("auto", checked=True)),
    ),
    ProposerKind(
        "gemma4-assistant", label="A Gemma 4 assistant (the draft file; it shares the target's cache)",
        build=lambda parts: parts.source(GEMMA4_ASSISTANT), sources=("gemma4-assistant",), needs=GEMMA4_ASSISTANT,
        presets=(Preset("k=4"), Preset("auto")),
    ),
    ProposerKind("none", label="None (target alone)", build=lambda parts: NoProposer(), baseline=True),
)

REGISTRY: dict[str, ProposerKind] = {}
#: Every name, in the order the CLI and the app offer them.
NAMES: tuple[str, ...] = ()
#: The names a user chooses for a generation (``translated`` follows from the pair).
CHOICES: tuple[str, ...] = ()
#: The proposers that work with any target alone (nothing to load besides it).
WITHOUT_DRAFT: tuple[str, ...] = ()
#: Every need a kind has, in the order the kinds are offered.
NEEDS: tuple[Need, ...] = ()
#: Target alone: the baseline of every comparison.
BASELINE: str = ""
#: What a chat runs while the source its kind drafts with is not loaded (and no other can stand in).
FALLBACK: str = ""
#: What a generation runs unless told.
DEFAULT: str = ""
#: Every preset configuration, in the order the app offers them.
PRESETS: tuple[str, ...] = ()
#: The presets ticked when the Compare tab opens.
CHECKED: frozenset[str] = frozenset()
#: ``specdesk bench``'s default configurations: the baseline, then the kinds' bench presets.
BENCH_DEFAULT: tuple[str, ...] = ()


def _one(flag: str) -> str:
    (name,) = (k.name for k in KINDS if getattr(k, flag))  # exactly one row carries it
    return name


def _derive() -> None:
    """The tables every front end reads, from the rows (again after :func:`register`)."""
    global REGISTRY, NAMES, CHOICES, WITHOUT_DRAFT, NEEDS, BASELINE, FALLBACK, DEFAULT, PRESETS, CHECKED, BENCH_DEFAULT
    REGISTRY = {k.name: k for k in KINDS}
    NAMES = tuple(k.name for k in KINDS)
    CHOICES = tuple(k.name for k in KINDS if not k.pair_dependent)
    WITHOUT_DRAFT = tuple(k.name for k in KINDS if k.needs is None)
    NEEDS = tuple(dict.fromkeys(k.needs for k in KINDS if k.needs is not None))
    BASELINE, FALLBACK, DEFAULT = _one("baseline"), _one("fallback"), _one("default")
    PRESETS = tuple(p.config(k.name) for k in KINDS for p in k.presets)
    CHECKED = frozenset(p.config(k.name) for k in KINDS for p in k.presets if p.checked)
    BENCH_DEFAULT = (BASELINE,) + tuple(p.config(k.name) for k in KINDS for p in k.presets if p.bench)


_derive()


def register(row: ProposerKind) -> None:
    """Add a kind (before the baseline, which is offered last); the front ends offer it
    from the next table they read. A name already taken raises ValueError."""
    global KINDS
    if row.name in REGISTRY:
        raise ValueError(f"a proposer called {row.name!r} is registered already")
    KINDS = KINDS[:-1] + (row, KINDS[-1]) if KINDS[-1].baseline else KINDS + (row,)
    _derive()


def unregister(name: str) -> None:
    """Take a kind :func:`register` added out of the table again."""
    global KINDS
    KINDS = tuple(k for k in KINDS if k.name != name)
    _derive()


def drafting_with(need: Need) -> str:
    """The kind that drafts with ``need`` alone (what the advisor calibrates it as)."""
    return next(k.name for k in KINDS if k.needs == need and k.substitute)


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
