"""A Gemma 4 assistant as a session's draft source (session/sources.py): a
``gemma4-assistant`` GGUF loaded as the draft file, checked against its target before
llama.cpp sees the pair, and drafting through a context that shares the target's KV
cache (engine/gemma4_assistant.py)."""

from __future__ import annotations

import time

from ..engine.gemma4_assistant import Gemma4Assistant
from ..library.gguf.gemma4 import ASSISTANT
from ..library.gguf.heads import HEAD_FILES
from ..speculative.proposers import Gemma4AssistantProposer, Proposer
from ..speculative.proposers.base import Source
from ..speculative.proposers.gemma4_assistant import SOURCE
from ..speculative.proposers.registry import GEMMA4_ASSISTANT
from ..system.memory import ModelMemory
from .config import GenerationConfig
from .sources import HeadFile, warm_up_tokens


class AssistantSource:
    """The draft file's Gemma 4 assistant: its context beside the target's (made with
    the source), switched on for the generations that draft with it."""

    need = GEMMA4_ASSISTANT

    def __init__(self, head, target) -> None:
        """``head``: the assistant's LoadedModel (its context: :func:`context`); ``target``: the target's."""
        self.head, self.target = head, target
        self.assistant: Gemma4Assistant = head.ctx

    @property
    def source(self) -> Source:
        return SOURCE

    def refusal(self) -> str | None:
        return None

    def proposer(self, config: GenerationConfig) -> Proposer:
        return Gemma4AssistantProposer(self.assistant, self.target.model.n_vocab, p_min=config.p_min)

    def use(self) -> None:
        """The target keeps its hidden states from now on (the assistant reads them)."""
        self.assistant.activate()

    def idle(self) -> None:
        self.assistant.deactivate()

    def rewind(self, n_seq: int, k: int) -> None:
        """Nothing: what it reads is the target's cache."""

    def holds(self) -> tuple[int, ...] | None:
        return None

    def reset(self) -> None:
        self.assistant.reset()

    def warm_up(self) -> float:
        """The target reads a few tokens after what it holds and the assistant drafts
        twice after them, untimed; the target then holds what it held (what activating
        the assistant left it: the positions whose hidden states it kept)."""
        a, t = self.assistant, self.target
        toks = warm_up_tokens(t.model)
        toks = toks if len(toks) >= 2 else toks * 2
        was = a.active
        t0 = time.perf_counter()
        a.activate()
        p0 = t.ctx.n_past
        try:
            if p0 + len(toks) <= t.ctx.n_ctx:
                with t.ctx.untimed():
                    t.ctx.eval(toks[:-1], all_rows=False)
                a.next(int(a.first(list(t.ctx.history) + [toks[-1]]).argmax()))
        finally:
            t.ctx.rollback(p0)
            a.reset()
            if not was:
                a.deactivate()
        return time.perf_counter() - t0

    def memory(self) -> ModelMemory | None:
        """Its weights and buffers; no KV cache of its own (it reads the target's)."""
        h, bufs = self.head, self.assistant.buffers
        mb = h.model.buffers
        return ModelMemory(
            role="draft", path=str(h.spec.path), weights_bytes=int(h.model.shape.size_bytes), kv_bytes=0,
            n_ctx=self.assistant.n_ctx, n_gpu_layers=h.spec.n_gpu_layers,
            compute_bytes=sum(b.bytes for b in bufs if b.kind in ("compute", "output")),
            vram_bytes=sum(b.bytes for b in mb + bufs if b.on_gpu), where=h.where)

    def rollback_costs(self) -> None:
        """Nothing of its own to roll back: its cache is the target's."""
        return None

    def close(self) -> None:
        """Its context (before the target's, whose cache it reads), then its model."""
        self.head.close()


def context(model, target) -> Gemma4Assistant:
    """The assistant's context beside the loaded ``target``'s, sharing its KV cache."""
    return Gemma4Assistant(model, target.ctx)


HEAD = HeadFile(ASSISTANT, HEAD_FILES[ASSISTANT][0], context, AssistantSource)
