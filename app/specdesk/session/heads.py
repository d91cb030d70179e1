"""A draft head in the draft file (EAGLE-3, DFlash) as a session's draft source
(session/sources.py): the file's architecture says which; the pair is checked from
both headers before llama.cpp sees either (library.gguf.heads, and the vocabularies as
library.pairing compares them); the head's model loads beside the target and its
context is made with the target's as ``ctx_other``."""

from __future__ import annotations

from pathlib import Path

from ..engine.heads import DFlashHeads, Eagle3Heads
from ..engine.model import Model
from ..errors import IncompatibleDraftError
from ..library.gguf import validate_gguf
from ..library.gguf.heads import HeadInfo, check_head_pair, head_info, head_kind
from ..library.pairing import check_pair
from ..speculative.proposers import DFlashProposer, Eagle3Proposer, Proposer
from ..speculative.proposers.base import DFLASH, EAGLE3, Source
from ..speculative.proposers.registry import DFLASH_HEAD, EAGLE3_HEAD
from ..system.memory import ModelMemory
from .config import GenerationConfig
from .sources import warm_up_tokens

#: kind -> (the need it answers, the source its drafts carry, its context, its proposer)
KINDS = {
    "eagle3": (EAGLE3_HEAD, EAGLE3, Eagle3Heads, Eagle3Proposer),
    "dflash": (DFLASH_HEAD, DFLASH, DFlashHeads, DFlashProposer),
}


def head_of_file(path: Path) -> HeadInfo | None:
    """What the (validated) draft file is, when it is a head; None for a draft model."""
    g = validate_gguf(path)
    return head_info(g) if head_kind(g) is not None else None


def check_pair_files(target: Path, head: Path, info: HeadInfo | None = None) -> HeadInfo:
    """Both headers' rules for a head and its target, and the same vocabulary
    (ModelFileError or IncompatibleDraftError in one line)."""
    info = check_head_pair(validate_gguf(head), validate_gguf(target), info)
    compat = check_pair(target, head)
    if not compat:
        raise IncompatibleDraftError(f"head {head.name} drafts in another vocabulary than {target.name}: {compat.reason}")
    return info


class DraftHead:
    """A head from the draft file: its model (``loaded``: the session's draft, with the
    head's context as its ``ctx``) beside the target."""

    def __init__(self, info: HeadInfo, loaded, target) -> None:
        self.info = info
        self.need, self._source, _, self._make = KINDS[info.kind]
        self.loaded, self.target = loaded, target

    @classmethod
    def load(cls, info: HeadInfo, spec, target, loaded, progress=None) -> "DraftHead":
        """The head's model and context (``spec``: the draft file's), beside ``target``;
        ``loaded(role, spec, model, ctx)`` holds them as the session's draft."""
        model = Model(spec.path, n_gpu_layers=spec.n_gpu_layers, progress=progress)
        try:
            ctx = KINDS[info.kind][2](model, target.ctx)
        except BaseException:
            model.close()
            raise
        return cls(info, loaded("draft", spec, model, ctx), target)

    def attach(self, target) -> "DraftHead":
        return self  # made beside its target already

    @property
    def heads(self):
        return self.loaded.ctx

    @property
    def source(self) -> Source:
        return self._source

    def refusal(self) -> str | None:
        return None

    def proposer(self, config: GenerationConfig) -> Proposer:
        return self._make(self.heads, self.target.model.n_vocab, p_min=config.p_min)

    def use(self) -> None:
        """The target keeps the inputs of the head's layers from now on."""
        self.heads.activate()

    def idle(self) -> None:
        self.heads.deactivate()

    def rewind(self, n_seq: int, k: int) -> None:
        """After a fully accepted step of k: an EAGLE-3 head holds the pairs before the k
        drafted tokens (it never keeps drafted positions), a DFlash head the features of
        the positions the target had decoded when it drafted."""
        h = self.heads
        held = n_seq - 1 - k if self.info.kind == "eagle3" else n_seq - 2 - k
        h.rollback(max(0, min(len(h.history), held)))

    def holds(self) -> tuple[int, ...] | None:
        return tuple(self.heads.history)

    def reset(self) -> None:
        self.heads.rollback(0)

    def warm_up(self) -> None:
        """The head drafts once after a few tokens the target read (and forgets them)."""
        h, t = self.heads, self.target
        was = h.active
        h.activate()
        toks = warm_up_tokens(t.model)
        if len(toks) < 2:
            toks = toks * 2
        t.ctx.prefill(toks[:-1], logits=False)
        if self.info.kind == "eagle3":
            h.prefill(toks)
            h.eval([toks[-1]])
        else:
            h.block(toks, max(1, min(3, h.max_draft)))
        h.rollback(0)
        t.ctx.rollback(0)
        if not was:
            h.deactivate()

    def memory(self) -> ModelMemory | None:
        return self.loaded.memory()

    def close(self) -> None:
        self.loaded.close()


def describe(info: dict) -> list[tuple[str, str]]:
    """What a file's summary (the library's) says when the file is a draft head."""
    if not info.get("head"):
        return []
    problem = info.get("head_problem")
    return [("Draft head", f"{info['head']}, unusable: {problem}" if problem else info["head"])]


__all__ = ["describe", "DraftHead", "KINDS", "check_pair_files", "head_of_file"]
