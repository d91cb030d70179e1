"""Where a session's drafts come from: one interface for everything a proposer drafts
with that must be loaded beside the target.

A registry row names what its kind drafts with (``ProposerKind.needs``, a
:class:`~specdesk.speculative.proposers.registry.Need`); a session holds one
:class:`DraftSource` per need it can answer. The draft model file is one source, the
target's own multi-token-prediction heads another (session/mtp.py); a source that is
not loaded is a :class:`Missing` one, which only says why. Everything above the
session asks the same questions of every source, through :meth:`Session.runnable
<specdesk.session.core.Session.runnable>`: can this configuration run here, and if not,
why; and the session alone calls the rest (build, use, idle, reset, warm up, memory,
close). A new source is one registry row, one :class:`Need`, and one class here or
beside it: no front end changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, Protocol

from ..engine.rollback import RollbackCosts
from ..engine.tokenizer import ModelTokenizer
from ..rules.vocab import Compatibility
from ..speculative.proposers import DraftModelProposer, Proposer, TranslatedDraftProposer
from ..speculative.proposers.base import DRAFT, TRANSLATED, Source
from ..speculative.proposers.registry import Need
from ..speculative.warmup import draft_shapes
from ..system.memory import ModelMemory
from .config import GenerationConfig
from .text import missing_source_text


class DraftSource(Protocol):
    """What a session asks of each thing its proposers draft with."""

    #: the need of the registry's rows it answers
    need: Need

    @property
    def source(self) -> Source:
        """The source its drafts carry (what acceptance and costs are kept under)."""

    def refusal(self) -> str | None:
        """Why it cannot draft on this session, in one line; None when it can."""

    def proposer(self, config: GenerationConfig) -> Proposer:
        """A proposer drafting with it, for a generation with ``config`` (only after
        :meth:`refusal` said None)."""

    def use(self) -> None:
        """A generation is about to draft with it (before the target reads the prompt)."""

    def idle(self) -> None:
        """A generation is about to run without it."""

    def rewind(self, n_seq: int, k: int) -> None:
        """Hold what a fully accepted step of ``k`` drafted tokens leaves it holding
        before it drafts after a sequence of ``n_seq`` tokens (the calibration times
        drafts from there)."""

    def holds(self) -> tuple[int, ...] | None:
        """The tokens its context(s) hold (None: it holds none of its own)."""

    def reset(self) -> None:
        """Forget every position."""

    def warm_up(self) -> float | None:
        """Decode the batch shapes a loop drafting with it will use once, untimed, and
        hold what it held (session/warmup.py): the first timed call is not the first
        call (cuBLAS, kernels, a graph captured; llama.cpp sets up each batch shape on
        its first use), and nothing auto learns counts it. Returns the seconds it took."""

    def memory(self) -> ModelMemory | None:
        """What it holds in memory beyond the target (its own model, or its context)."""

    def rollback_costs(self) -> RollbackCosts | None:
        """How its own context rolls back (a hybrid draft model: by checkpoints) and what
        that cost so far; None where it drops positions itself (session/rollback.py)."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class HeadFile:
    """A kind of draft file that is a head of another model rather than a model of its
    own (an EAGLE-3 or DFlash head, a Gemma 4 assistant), by its architecture. Whether a
    pair fits is the library's to say, from the two files alone
    (``library.gguf.heads.head_problem``); ``context(model, target)`` makes the head's
    context beside the loaded target; ``source(head, target)`` is the source made of the
    loaded head (its LoadedModel, whose ``ctx`` that context is) and the target's."""

    arch: str
    what: str  # the file, in a few words ("a Gemma 4 assistant")
    context: Callable
    source: Callable


class Missing:
    """A source a session does not have: it only says why (the draft file is not
    loaded, or holds something else)."""

    def __init__(self, need: Need, why: str | None = None) -> None:
        self.need = need
        self._why = why or missing_source_text(need.name)

    @property
    def source(self) -> Source:
        return Source.of(self.need.name)

    def refusal(self) -> str | None:
        return self._why

    def proposer(self, config: GenerationConfig) -> Proposer:
        raise ValueError(self._why)

    def use(self) -> None:
        pass

    def idle(self) -> None:
        pass

    def rewind(self, n_seq: int, k: int) -> None:
        pass

    def holds(self) -> tuple[int, ...] | None:
        return None

    def reset(self) -> None:
        pass

    def warm_up(self) -> float | None:
        return 0.0

    def memory(self) -> ModelMemory | None:
        return None

    def rollback_costs(self) -> RollbackCosts | None:
        return None

    def close(self) -> None:
        pass


class DraftModel:
    """The draft model file: it drafts in the target's vocabulary, or, with another
    vocabulary (``compat`` says they differ), translated: its text re-tokenized for the
    target."""

    def __init__(self, need: Need, draft, target, compat: Compatibility | None) -> None:
        self.need = need
        self.loaded, self.target, self.compat = draft, target, compat

    @property
    def translated(self) -> bool:
        return self.compat is not None and not self.compat

    @property
    def source(self) -> Source:
        return TRANSLATED if self.translated else DRAFT

    def refusal(self) -> str | None:
        return None

    def proposer(self, config: GenerationConfig) -> Proposer:
        d, t = self.loaded, self.target
        if self.translated:
            vi = d.model.vocab_info()
            return TranslatedDraftProposer(d.ctx, ModelTokenizer(d.model), ModelTokenizer(t.model),
                                           prefix=[vi.bos] if vi.add_bos and vi.bos >= 0 else [], p_min=config.p_min)
        return DraftModelProposer(d.ctx, t.model.n_vocab, p_min=config.p_min)

    def use(self) -> None:
        pass

    def idle(self) -> None:
        pass

    def rewind(self, n_seq: int, k: int) -> None:
        if not self.translated:  # a translated draft rolls itself back to the text it is given
            self.loaded.ctx.rollback(min(len(self.loaded.ctx.history), max(0, n_seq - 1)))

    def holds(self) -> tuple[int, ...] | None:
        return tuple(self.loaded.ctx.history)

    def reset(self) -> None:
        self.loaded.ctx.rollback(0)

    def warm_up(self) -> float:
        return warm_up_context(self.loaded.model, self.loaded.ctx)

    def memory(self) -> ModelMemory | None:
        return self.loaded.memory()

    def rollback_costs(self) -> RollbackCosts | None:
        return getattr(self.loaded.ctx, "rollback_costs", None)

    def close(self) -> None:
        self.loaded.close()


def warm_up_tokens(model, n: int = 16) -> list[int]:
    """A few tokens of ``model``'s vocabulary to warm a context with."""
    return model.tokenize("Warm up the model before anything is timed.", add_special=True)[:n] or [0]


def warm_up_context(model, ctx, shapes: Sequence[tuple[int, int]] | None = None) -> float:
    """Decode a context's batch shapes once (a draft model's, by default: its prompt,
    its catch-up, its single decodes), untimed (``Context.warm_up``): every weight read
    once, each shape set up, and the context holds what it held; returns the seconds."""
    return ctx.warm_up(draft_shapes() if shapes is None else shapes, warm_up_tokens(model))
