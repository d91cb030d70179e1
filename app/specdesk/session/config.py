"""What to load and how to generate: the settings every front end fills in."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SpecDeskError
from ..engine.rpc import parse_endpoints
from ..speculative.proposers import registry
from ..speculative.sampling import SamplingParams

def translated_refusal(names: str) -> str:
    """Why ``translated`` configurations cannot run on a pair that shares a vocabulary."""
    return (f"{names} need a draft with another vocabulary than the target's (e.g. SmolLM2-135M for Qwen2.5); "
            "this draft shares it: use draft instead")


@dataclass(frozen=True)
class ModelSpec:
    path: Path
    #: layers to offload to the GPU; None ("auto"): as many as fit, the target first
    #: (session.offload resolves it before anything reads it)
    n_gpu_layers: int | None = None
    threads: int | None = None
    n_ctx: int = 4096
    #: RPC servers (host:port) to place this model's layers on, with the local devices
    rpc: tuple[str, ...] = ()
    #: shares of the offloaded layers per device (remote first, then local GPUs; the local CPU last, optional)
    tensor_split: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path).expanduser())
        if self.rpc:
            object.__setattr__(self, "rpc", parse_endpoints(self.rpc))
        if self.tensor_split is not None:
            object.__setattr__(self, "tensor_split", tuple(float(x) for x in self.tensor_split))
        if self.n_ctx <= 0:
            raise SpecDeskError(f"context size must be positive, got {self.n_ctx}")
        if self.threads is not None and self.threads <= 0:
            raise SpecDeskError(f"threads must be positive, got {self.threads}")


@dataclass(frozen=True)
class GenerationConfig:
    proposer: str = registry.DEFAULT
    k: int | str = "auto"
    # 0: drafts are not cut short by the draft's confidence. On a GPU, where verifying a
    # long batch is cheap, p-min 0.75 cut k=8 to 1.4 tokens a step (0.68x target alone
    # on an H200); on a CPU, auto drafts little anyway. --p-min sets it.
    p_min: float = 0.0
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0
    max_tokens: int = 256

    def __post_init__(self) -> None:
        if self.proposer not in registry.REGISTRY:
            raise SpecDeskError(f"unknown proposer {self.proposer!r}: choose one of {', '.join(registry.NAMES)}")
        if self.k != "auto":
            if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k <= 0:
                raise SpecDeskError(f"k must be a positive integer or 'auto', got {self.k!r}")
        if not 0.0 <= self.p_min < 1.0:
            raise SpecDeskError(f"p-min must be in [0, 1), got {self.p_min}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise SpecDeskError(f"the seed must be an integer >= 0, got {self.seed!r}")
        if self.max_tokens <= 0:
            raise SpecDeskError(f"max tokens must be positive, got {self.max_tokens}")

    @property
    def needs_draft(self) -> bool:
        return registry.kind(self.proposer).needs_draft

    @property
    def baseline(self) -> bool:
        """Target alone: what every speedup is measured against."""
        return registry.kind(self.proposer).baseline

    def describe(self) -> str:
        if self.baseline:
            return self.proposer
        return f"{self.proposer}:k={self.k}"
