"""The proposer interface: given the sequence so far and a budget, return a draft."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..sampling import SamplingParams, TopToken, Warped, warp_support

# budget(source, hint) -> how many tokens the controller wants drafted. The hint is
# what the controller needs to price the draft: for "ngram" the match length (long
# matches predict better), for "draft" how many tokens the draft model must catch up
# on before it can draft (after n-gram steps or target-alone steps it falls behind).
Budget = Callable[[str, "int | None"], int]



class Source(str):
    """Where a draft comes from: its name (a str, as the statistics and the app key
    by it) with what the controller needs to know of it, read once per step instead of
    a name checked against lists: ``is_model`` (it runs a model to draft: it costs
    draft time, and a catch-up after steps it sat out) or ``is_lookup`` (it copies
    tokens from text already seen: free to propose, sized by the match length).

    And how it is shown, so that no module outside this table spells a source's name:
    ``code``, one letter in a run's recorded timeline; ``label``, its name in a legend;
    ``what``, who drafts (a few words: "the target's own MTP heads"); ``colour``, the
    background of the tokens it supplied that the target kept ("" for a draft model's,
    which take the accepted draft's colour)."""

    is_model: bool
    is_lookup: bool
    code: str
    label: str
    what: str
    colour: str

    def __new__(cls, name: str, *, model: bool = False, lookup: bool = False, code: str = "?", label: str = "",
                what: str = "", colour: str = "") -> "Source":
        s = super().__new__(cls, name)
        s.is_model, s.is_lookup = model, lookup
        s.code, s.label, s.what, s.colour = code, label or name, what or name, colour
        return s

    @classmethod
    def of(cls, name: str) -> "Source":
        """The source called ``name`` (a plain name too: one restored from a file)."""
        if isinstance(name, Source):
            return name
        return SOURCES.get(name) or cls(name)

    @classmethod
    def by_code(cls, code: str) -> "Source | None":
        """The source a timeline's letter stands for (None for no source, or one unknown)."""
        return next((s for s in SOURCES if s.code == code), None)


DRAFT = Source("draft", model=True, code="d", label="draft", what="the draft model")
TRANSLATED = Source("translated", model=True, code="t", label="translated", colour="#c8f0e8",
                    what="a model of another vocabulary")
MTP = Source("mtp", model=True, code="m", label="MTP heads", colour="#ffd8e8", what="the target's own MTP heads")
NGRAM = Source("ngram", lookup=True, code="n", label="lookup", colour="#ddd0ff", what="n-gram prompt lookup")
HISTORY = Source("history", lookup=True, code="h", label="history", colour="#ffe8a8", what="an earlier turn")
EAGLE3 = Source("eagle3", model=True, code="e", label="EAGLE-3 head", colour="#ffe0c4",
                what="an EAGLE-3 head")
DFLASH = Source("dflash", model=True, code="f", label="DFlash head", colour="#d4f0c4",
                what="a DFlash head")
SOURCES: dict[str, Source] = {s: s for s in (DRAFT, TRANSLATED, MTP, NGRAM, HISTORY, EAGLE3, DFLASH)}
#: A timeline's letter for a token no source supplied (a plain target step).
NO_SOURCE_CODE = "-"


def register_source(source: Source) -> Source:
    """Add a source to the table (a new kind of draft; the tests' fake one). Its code
    must be new: a timeline must say which source each token came from."""
    if source in SOURCES or any(s.code == source.code for s in SOURCES) or source.code == NO_SOURCE_CODE:
        raise ValueError(f"source {source!r} or its code {source.code!r} is taken")
    SOURCES[source] = source
    return source


def model_sources() -> tuple[Source, ...]:
    """Sources that run a model to draft (they cost draft time and catch-up)."""
    return tuple(s for s in SOURCES.values() if s.is_model)


def lookup_sources() -> tuple[Source, ...]:
    """Sources that copy tokens from text already seen (free to propose; sized by match length)."""
    return tuple(s for s in SOURCES.values() if s.is_lookup)


@dataclass(frozen=True)
class Draft:
    tokens: tuple[int, ...] = ()
    # The (warped) draft distribution each token was sampled from, one per token, over
    # its support in the target's vocabulary; None when the draft is deterministic
    # (greedy draft model, n-gram lookup), which the verifier treats as one-hot.
    q: tuple[Warped, ...] | None = None
    # Where the tokens come from: "draft" (a draft model of the target's vocabulary),
    # "translated" (a draft model of another vocabulary, re-tokenized), "ngram" (copied
    # from the prompt and the answer so far), "history" (copied from earlier turns) or
    # "mtp" (the target's own multi-token-prediction heads).
    source: str = ""
    # Lookups: how many tokens matched; for "ngram", where in the sequence the copied
    # continuation starts (the lookup source shown in the app).
    match_length: int | None = None
    match_start: int | None = None
    # The draft model's probability of each token it proposed (where computed).
    confidence: tuple[float, ...] = ()
    # Tokens the draft model had to evaluate to catch up before drafting.
    synced: int = 0
    # The draft model's single-token decodes of this draft that kept the batch shape
    # (no graph rebuilt): their seconds and how many, what a decode costs while
    # drafting goes on (a draft between target-alone steps pays shape changes besides).
    steady: tuple[float, int] = (0.0, 0)
    # ... and the seconds its decodes that changed the context's batch shape are taken
    # to have paid for the change (see speculative.shapes).
    reshape: float = 0.0
    # Of the steady decodes' seconds, what one-offs took (a decode far dearer than the
    # draft's others: a page fault, a GC pause, another process), not what drafting
    # costs (see costmodel.one_off_excess); ``steady`` is without them.
    oneoff: float = 0.0

    def __len__(self) -> int:
        return len(self.tokens)


EMPTY_DRAFT = Draft()


class Proposer(Protocol):
    """Every member is required (the decoder reads none with getattr); a proposer
    with nothing to prepare returns 0, one with no native calls reports 0.0. A
    proposer has no name of its own: the registry's row names its kind."""

    #: False only for the proposer that never drafts (target alone): the decoder then
    #: says "target alone" rather than "no candidate" for an empty draft.
    drafts: bool

    @property
    def native_seconds(self) -> float:
        """Cumulative seconds in the proposer's own native decode calls (the overhead split)."""

    def prepare(self, prompt: Sequence[int], budget: Budget) -> int:
        """During the prompt phase: evaluate the prompt on a draft model, unless
        ``budget`` says it will not draft (then it stays lazy). Returns how many
        tokens it evaluated, so the draft's prefill cost per token is measured."""

    def propose(
        self,
        seq: Sequence[int],
        budget: Budget,
        params: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft: ...

    def reset(self) -> None: ...


def row_reader(params: SamplingParams, top: TopToken, n_common: int) -> Callable[[np.ndarray], object]:
    """What a model's draft reads of a logits row (the first of ``rows``, over the
    target's ``n_common`` ids), where it lies: at temperature 0 the argmax and its
    probability (for p-min), above it the warped distribution it samples from."""
    if params.greedy:
        return lambda rows: top(rows[0, :n_common])
    return lambda rows: warp_support(rows[0, :n_common], params)


class DraftTokens:
    """A model's draft, a token at a time from what :func:`row_reader` read: the argmax
    at temperature 0, a sample above it (its q kept for the verifier); it stops where
    the draft's confidence falls below ``p_min`` (llama.cpp's --draft-p-min)."""

    def __init__(self, params: SamplingParams, rng: np.random.Generator, p_min: float) -> None:
        self.greedy, self.rng, self.p_min = params.greedy, rng, p_min
        self.tokens: list[int] = []
        self.confs: list[float] = []
        self.qs: list[Warped] = []

    def take(self, read) -> int | None:
        """The next token from ``read`` (a row_reader's result), None where p-min stops."""
        if self.greedy:
            t, conf = read
            if self.p_min > 0 and conf < self.p_min:
                return None
        else:
            q = read
            if self.p_min > 0 and float(q.probs.max()) < self.p_min:
                return None
            t = q.sample(self.rng)
            self.qs.append(q)  # over the common range: the target's ids, 0 beyond it
            conf = q.prob(t)
        self.tokens.append(t)
        self.confs.append(conf)
        return t

    def draft(self, source: str, **fields) -> Draft:
        if not self.tokens:
            return Draft(source=source, **fields)
        return Draft(tokens=tuple(self.tokens), q=tuple(self.qs) if self.qs else None, source=source,
                     confidence=tuple(self.confs), **fields)
