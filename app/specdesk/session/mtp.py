"""The target's own MTP heads in a session: what its GGUF declares (read before the
load, so llama.cpp loads the heads only where they can draft), and the heads' context,
made on the first generation that drafts with them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..engine.context import Context
from ..engine.model import Model
from ..engine.mtp import MtpHeads
from ..errors import ModelFileError, SpecDeskError
from ..library.gguf import validate_gguf
from ..library.gguf.mtp import check_mtp, mtp_heads
from ..rules.mtp import MtpSupport
from ..system.memory import ModelMemory
from .text import mtp_refusal


class TargetHeads:
    """A target's MTP heads: whether they can draft (and why not), and their context."""

    def __init__(self, name: str, support: MtpSupport, error: str | None = None) -> None:
        self.name = name
        self.support = support
        self.error = error  # a malformed NextN block, in one line
        self._heads: MtpHeads | None = None

    @classmethod
    def of_file(cls, path: Path) -> "TargetHeads":
        """From the (validated) GGUF; a file whose heads are malformed still loads, as a
        trunk: only drafting with its heads is refused, with the reason."""
        g = validate_gguf(path)
        try:
            return cls(path.name, check_mtp(g))
        except ModelFileError as e:
            return cls(path.name, mtp_heads(g), str(e))

    @classmethod
    def none(cls, name: str = "the target") -> "TargetHeads":
        return cls(name, MtpSupport("", 0))

    @property
    def load(self) -> bool:
        """Whether llama.cpp should load the heads with the target."""
        return self.support.usable and self.error is None

    def refusal(self) -> str | None:
        """Why the mtp proposer cannot run on this target, in one line; None if it can."""
        if self.error:
            return self.error
        s = self.support
        return None if s.usable else mtp_refusal(self.name, s.problem, s.arch, s.heads)

    def heads(self, model: Model, ctx: Context) -> MtpHeads:
        """The heads' context (made once), switched on for the coming generation."""
        why = self.refusal()
        if why:
            raise SpecDeskError(why)
        if self._heads is None:
            self._heads = MtpHeads(model, ctx)
        self._heads.activate()
        return self._heads

    def idle(self) -> None:
        """A generation that does not draft with the heads: the target stops keeping
        its hidden states (its prompt skips the last layer's unused rows again)."""
        if self._heads is not None:
            self._heads.deactivate()

    def with_heads(self, m: ModelMemory) -> ModelMemory:
        """The target's memory with its heads' context (their KV cache and buffers) once made."""
        if self._heads is None:
            return m
        bufs = self._heads.buffers
        kv = sum(b.bytes for b in bufs if b.kind == "KV")
        compute = sum(b.bytes for b in bufs if b.kind in ("compute", "output"))
        return replace(m, kv_bytes=m.kv_bytes + kv, compute_bytes=m.compute_bytes + compute,
                       vram_bytes=m.vram_bytes + sum(b.bytes for b in bufs if b.on_gpu))

    def reset(self) -> None:
        if self._heads is not None:
            self._heads.rollback(0)

    def close(self) -> None:
        if self._heads is not None:
            self._heads.close()
            self._heads = None
