"""The target's own MTP heads as a session's draft source (session/sources.py): what
its GGUF declares (read before the load, so llama.cpp loads the heads only where they
can draft), and the heads' context, made on the first generation that drafts with them."""

from __future__ import annotations

from pathlib import Path

from ..engine.mtp import MtpHeads
from ..errors import ModelFileError, SpecDeskError
from ..library.gguf import validate_gguf
from ..library.gguf.mtp import check_mtp, mtp_heads
from ..rules import mtp as mtp_rules
from ..rules.mtp import MtpSupport
from ..speculative.proposers import MtpProposer, Proposer
from ..speculative.proposers.base import MTP, Source
from ..speculative.proposers.registry import MTP_HEADS
from ..system.memory import ModelMemory
from .config import GenerationConfig
from .sources import warm_up_tokens


class TargetHeads:
    """A target's MTP heads: whether they can draft (and why not), and their context."""

    need = MTP_HEADS

    def __init__(self, name: str, support: MtpSupport, error: str | None = None) -> None:
        self.name = name
        self.support = support
        self.error = error  # a malformed NextN block, in one line
        self._heads: MtpHeads | None = None
        self._target = None  # the loaded target (LoadedModel), once attached

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

    def attach(self, target) -> "TargetHeads":
        """The loaded target whose heads these are."""
        self._target = target
        return self

    @property
    def source(self) -> Source:
        return MTP

    def load_options(self) -> dict:
        """The target's load loads the heads only where they can draft."""
        return {"load_mtp": self.load}

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

    def heads(self) -> MtpHeads:
        """The heads' context (made once)."""
        why = self.refusal()
        if why:
            raise SpecDeskError(why)
        if self._heads is None:
            self._heads = MtpHeads(self._target.model, self._target.ctx)
        return self._heads

    def proposer(self, config: GenerationConfig) -> Proposer:
        return MtpProposer(self.heads(), self._target.model.n_vocab, p_min=config.p_min)

    def use(self) -> None:
        """The target keeps its hidden states from now on (the heads read them)."""
        self.heads().activate()

    def idle(self) -> None:
        """A generation that does not draft with the heads: the target stops keeping
        its hidden states (its prompt skips the last layer's unused rows again)."""
        if self._heads is not None:
            self._heads.deactivate()

    def rewind(self, n_seq: int, k: int) -> None:
        """After a fully accepted step the heads still hold the positions before the k
        drafted ones and the pending token (they never keep drafted positions)."""
        h = self.heads()
        h.rollback(max(0, min(len(h.history), n_seq - 1 - k)))

    def holds(self) -> tuple[int, ...] | None:
        return tuple(self._heads.history) if self._heads is not None else None

    def warm_up(self) -> float:
        """The heads' context reads a few tokens once with the target's states and drafts
        a token, untimed (``MtpHeads.warm_up``); both hold what they held."""
        if self.refusal() is not None:
            return 0.0
        h = self.heads()
        was = h.active
        h.activate()  # the target keeps the states the heads read
        try:
            return h.warm_up(warm_up_tokens(self._target.model))
        finally:
            if not was:
                h.deactivate()

    def memory(self) -> ModelMemory | None:
        """The heads' context (their KV cache and buffers), once made: the memory drafting
        with them adds to the target's (their weights are in the target's file)."""
        if self._heads is None or self._target is None:
            return None
        bufs = self._heads.buffers
        t = self._target
        return ModelMemory(
            role="draft", path=str(t.spec.path), weights_bytes=0,
            kv_bytes=sum(b.bytes for b in bufs if b.kind == "KV"), n_ctx=self._heads.n_ctx, n_gpu_layers=t.spec.n_gpu_layers,
            compute_bytes=sum(b.bytes for b in bufs if b.kind in ("compute", "output")),
            vram_bytes=sum(b.bytes for b in bufs if b.on_gpu), where=t.where)

    def rollback_costs(self) -> None:
        """The heads' context is a plain KV cache (llama.cpp gives a hybrid's heads one):
        its rollback costs nothing beyond the target's."""
        return None

    def reset(self) -> None:
        if self._heads is not None:
            self._heads.rollback(0)

    def close(self) -> None:
        if self._heads is not None:
            self._heads.close()
            self._heads = None


# -- in words ----------------------------------------------------------------------------------------

_MTP_PROBLEMS = {
    mtp_rules.NO_HEADS: "it carries no MTP heads ({arch}.nextn_predict_layers is 0 or absent)",
    mtp_rules.UNSUPPORTED: "this llama.cpp has no MTP graph for the {arch} architecture",
    mtp_rules.RECURRENT: ("its {arch} trunk has recurrent (linear-attention) layers, and SpecDesk does not check "
                          "{arch} files yet (it speculates on qwen35's)"),
    mtp_rules.TOO_MANY: "llama.cpp's {arch} MTP graph takes one head, and it declares {heads}",
    mtp_rules.NO_TRUNK: "every one of its blocks is an MTP head: it has no trunk to draft for",
}


def mtp_heads_text(heads: int | None, problem: str | None, arch: str = "") -> str:
    """What a model's MTP heads allow, as the library and doctor show it: "1 MTP head",
    "2 MTP heads (chained)", or why they cannot draft; "none" without any."""
    if not heads:
        return "none"
    n = f"{heads} MTP head{'s' if heads != 1 else ''}"
    if problem:
        return f"{n}, unusable: " + _MTP_PROBLEMS.get(problem, problem).format(arch=arch or "its", heads=heads)
    return n + (" (chained, one per draft token)" if heads > 1 else "")


def mtp_refusal(model: str, problem: str | None, arch: str = "", heads: int = 0) -> str:
    """Why ``--proposer mtp`` (or the app's MTP choice) cannot run on ``model``."""
    why = _MTP_PROBLEMS.get(problem or mtp_rules.NO_HEADS, problem or "").format(arch=arch or "its", heads=heads)
    return f"the mtp proposer drafts with the target's own MTP heads, but {model} cannot: {why}"


def describe(info: dict) -> list[tuple[str, str]]:
    """What a model file's summary (the library's) says of its MTP heads, as rows."""
    return [("MTP heads", mtp_heads_text(info.get("mtp_heads"), info.get("mtp_problem"), info.get("architecture") or ""))]


def drafts_alone(info: dict) -> str | None:
    """What drafts for a target with no draft file (its own heads, in a few words), or None."""
    heads = info.get("mtp_heads")
    if heads and info.get("mtp_problem") is None:
        return f"its own {mtp_heads_text(heads, None)}"
    return None
