"""EAGLE-3 and DFlash heads in the draft file as a session's draft source
(session/sources.py): heads that read the target's layer inputs. The file's architecture
says which (a :class:`~.sources.HeadFile` each, in session/source_table.py); whether the
pair fits is checked from both headers before llama.cpp sees either
(``library.gguf.heads.head_problem``); the head's context is made with the target's as
``ctx_other``."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from ..engine.heads import DFlashHeads, Eagle3Heads
from ..library.gguf import validate_gguf
from ..library.gguf.heads import HEAD_FILES, HeadInfo, head_info
from ..library.gguf.rules import DFLASH_ARCH, EAGLE3_ARCH
from ..speculative.backend import common_prefix_length
from ..speculative.proposers import DFlashProposer, Eagle3Proposer, Proposer
from ..speculative.proposers.base import DFLASH, EAGLE3, Source
from ..speculative.proposers.registry import DFLASH_HEAD, EAGLE3_HEAD, Need
from ..system.memory import ModelMemory
from .config import GenerationConfig
from .sources import HeadFile, warm_up_tokens

@dataclass(frozen=True)
class _Kind:
    need: Need  # the registry's need it answers
    source: Source  # the source its drafts carry
    context: Callable  # its context, beside the target's
    proposer: Callable
    #: positions it holds before the k drafted ones after a fully accepted step: an EAGLE-3
    #: head the pairs before them (it never keeps drafted positions), a DFlash head the
    #: features of the positions the target had decoded when it drafted
    behind: int
    block: bool  # it drafts a block at once (DFlash), else a token at a time after a prefill (EAGLE-3)


KINDS: dict[str, _Kind] = {
    EAGLE3_ARCH: _Kind(EAGLE3_HEAD, EAGLE3, Eagle3Heads, Eagle3Proposer, behind=1, block=False),
    DFLASH_ARCH: _Kind(DFLASH_HEAD, DFLASH, DFlashHeads, DFlashProposer, behind=2, block=True),
}


class DraftHead:
    """A head from the draft file: its model (``loaded``: the session's draft, with the
    head's context as its ``ctx``) beside the target."""

    def __init__(self, loaded, target) -> None:
        self.info: HeadInfo = head_info(validate_gguf(loaded.spec.path))
        self.kind = KINDS[self.info.kind]
        self.need = self.kind.need
        self.loaded, self.target = loaded, target

    @property
    def heads(self):
        return self.loaded.ctx

    @property
    def source(self) -> Source:
        return self.kind.source

    def refusal(self) -> str | None:
        return None

    def proposer(self, config: GenerationConfig) -> Proposer:
        return self.kind.proposer(self.heads, self.target.model.n_vocab, p_min=config.p_min)

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
        held = n_seq - self.kind.behind - k
        h.rollback(max(0, min(len(h.history), held)))

    def holds(self) -> tuple[int, ...] | None:
        return tuple(self.heads.history)

    def reset(self) -> None:
        self.heads.rollback(0)

    def warm_up(self) -> float:
        """The target reads a few tokens after what it holds and the head drafts once
        after them, untimed; then both hold what they held. Returns the seconds it took."""
        h, t = self.heads, self.target
        toks = warm_up_tokens(t.model)
        toks = toks if len(toks) >= 2 else toks * 2
        was = h.active
        h.activate()
        p0, h0 = t.ctx.n_past, list(h.history)
        seq = list(t.ctx.history) + list(toks)
        t0, native = time.perf_counter(), h.native_seconds
        try:
            if len(seq) + 1 <= min(h.n_ctx, t.ctx.n_ctx):
                with t.ctx.untimed():
                    t.ctx.prefill(seq[:-1], logits=False)
                    if self.kind.block:
                        h.block(seq, max(1, min(3, h.max_draft)))
                    else:
                        h.prefill(seq)
                        h.eval([seq[-1]])
        finally:
            h.rollback(common_prefix_length(h.history, h0))
            t.ctx.rollback(p0)
            h.native_seconds = native
            if not was:
                h.deactivate()
        return time.perf_counter() - t0

    def memory(self) -> ModelMemory | None:
        return self.loaded.memory()

    def rollback_costs(self) -> None:
        """Its context is a plain KV cache: its rollback costs nothing beyond the target's."""
        return None

    def close(self) -> None:
        self.loaded.close()


def describe(info: dict) -> list[tuple[str, str]]:
    """What a file's summary (the library's) says when the file is a head of another
    model (an EAGLE-3 or DFlash head, a Gemma 4 assistant)."""
    if not info.get("head"):
        return []
    problem = info.get("head_problem")
    return [("Draft head", f"{info['head']}, unusable: {problem}" if problem else info["head"])]


def _file(arch: str) -> HeadFile:
    make = KINDS[arch].context
    return HeadFile(arch, HEAD_FILES[arch][0], lambda model, target: make(model, target.ctx), DraftHead)


#: The draft files this module loads, for session/source_table.py.
HEADS: tuple[HeadFile, ...] = tuple(_file(arch) for arch in KINDS)

__all__ = ["describe", "DraftHead", "HEADS", "KINDS"]
