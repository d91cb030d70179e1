"""Before loading: check the files and the pair, and weigh the memory they need
against what is free. The CLI and the app ask the same question the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import psutil

from ..system.memory import gpu_memory
from ..fmt import format_bytes
from ..library.gguf import estimate_memory, validate_gguf
from ..library.pairing import check_pair
from .config import ModelSpec
from .core import plan_target
from .offload import Offload, resolve_offload
from .remote import Placement
from .runtime import repack_types, supports_gpu_offload


@dataclass
class Preflight:
    """What loading ``target`` (and ``draft``) would take, and what stands in the way."""

    ram_bytes: int
    vram_bytes: int
    compat: object | None = None  # the pair check (truthy when compatible); None without a draft
    shortfalls: list[str] = field(default_factory=list)  # "about 9 GiB of RAM but 4 GiB is free"
    # where the target's layers go, when RPC servers or a split are set: the plan
    # Session.load takes (so a load registers each server once)
    plan: Placement | None = None
    # where each model's layers go (auto resolved): what Session.load takes, so the load
    # places them as the check said
    offload: Offload | None = None

    @property
    def placement(self) -> str:
        return self.plan.describe() if self.plan is not None else ""

    @property
    def fits(self) -> bool:
        return not self.shortfalls

    def summary(self) -> str:
        return f"estimated memory: {format_bytes(self.ram_bytes)} RAM" + (
            f", {format_bytes(self.vram_bytes)} VRAM" if self.vram_bytes else "") + (
            f"; target: {self.placement}; the draft stays local" if self.placement else "") + (
            f"; {self.where}" if self.where else "")

    @property
    def where(self) -> str:
        """Where the local models' layers go, on a build that offloads ("" on a CPU-only one)."""
        if self.offload is None or not self.offload.offloads:
            return ""
        return "; ".join(w.describe() for w in self.offload.roles if not w.plan)


def effective_gpu_layers(n_gpu_layers: int) -> int:
    """What llama.cpp will really offload: nothing on a build without GPU support."""
    return n_gpu_layers if n_gpu_layers <= 0 or supports_gpu_offload() else 0


def estimate(spec: ModelSpec) -> dict:
    """RAM and VRAM for one model at its context size and offload, auto resolved as
    for a load of this model alone (validates the file)."""
    validate_gguf(spec.path)
    if spec.n_gpu_layers is None:
        spec, _ = resolve_offload(spec).apply(spec, None)
    return estimate_memory(validate_gguf(spec.path), n_ctx=spec.n_ctx, n_gpu_layers=effective_gpu_layers(spec.n_gpu_layers),
                           repack_types=repack_types())


def preflight(target: ModelSpec, draft: ModelSpec | None = None,
              progress: Callable[[str, float], object] | None = None) -> Preflight:
    """Validate both files, check the pair's vocabularies and weigh the memory.

    Raises ModelFileError for a bad file; an incompatible pair is reported in ``compat``."""
    if progress:
        progress("checking the model files…", 0.0)
    where = None
    validate_gguf(target.path)
    if draft is not None:
        validate_gguf(draft.path)
    if target.rpc or target.tensor_split:
        if progress:
            progress("asking the RPC servers for their devices…", 0.0)
        where = plan_target(target)
    off = resolve_offload(target, draft, where)
    target, draft = off.apply(target, draft)
    if where is not None:
        est = estimate_memory(validate_gguf(target.path), n_ctx=target.n_ctx, n_gpu_layers=where.n_gpu_layers,
                              repack_types=repack_types())
        if target.rpc:  # what goes to the servers is their memory, not this machine's VRAM
            est = {**est, "vram_bytes": 0}
    else:
        est = estimate(target)
    ram, vram = int(est["ram_bytes"]), int(est["vram_bytes"])
    compat = None
    if draft is not None:
        de = estimate(draft)
        ram += int(de["ram_bytes"])
        vram += int(de["vram_bytes"])
        if progress:
            progress("checking that the draft shares the target's vocabulary…", 0.5)
        compat = check_pair(target.path, draft.path)
    short = []
    avail = psutil.virtual_memory().available
    if ram > avail:
        short.append(f"about {format_bytes(ram)} of RAM but {format_bytes(avail)} is free")
    if vram:
        gpus, status = gpu_memory()
        free_vram = sum(g.total_bytes - g.used_bytes for g in gpus)
        if not gpus and off.free_bytes is not None:  # no NVML reading (Vulkan, Metal, ROCm): ggml's own
            free_vram = off.free_bytes
        if not gpus and off.free_bytes is None:
            short.append(f"{format_bytes(vram)} of VRAM but the GPU reads '{status}'")
        elif vram > free_vram:
            short.append(f"about {format_bytes(vram)} of VRAM but {format_bytes(free_vram)} is free")
    return Preflight(ram, vram, compat, short, where, off)
