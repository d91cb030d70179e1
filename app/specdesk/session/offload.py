"""Where each model's layers go when the user leaves it to SpecDesk ("auto", a
ModelSpec whose ``n_gpu_layers`` is None): on a build with a local GPU backend, as
many layers as the GPUs' free memory holds, the target first, then the draft in
what is left; on a CPU-only build, none (nothing changes there).

llama.cpp's own fit (``common_fit_params`` in common/fit.cpp) lives in libcommon,
which llama-cpp-python 0.3.36 does not export, so the fit is made here from what
SpecDesk already knows: every ggml device's free memory (``engine.devices``) and
the VRAM a GGUF needs for a number of offloaded layers (``estimate_memory``; the
output layer goes with ``n_gpu_layers > n_layer``, so a model of 28 blocks has 29
layers, as llama.cpp counts them in "offloaded 29/29 layers to GPU").

A layer count the user gave wins; it still takes its share of the memory, so an
auto draft fits into what an explicit target leaves. With RPC servers or a tensor
split the target's plan (``remote.plan_placement``) decides its layers, as before
(all of them when none were given), and the draft fits into what the plan leaves on
the local GPUs.

:func:`fit_offload` is pure over the specs, the device list and whether the build
offloads (tests fake the devices); :func:`resolve_offload` reads them for a load.
Session.load and the preflight both resolve through it, so nothing past them sees
an unresolved count.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from ..engine.devices import Device
from ..fmt import format_bytes
from ..library.gguf import estimate_memory, validate_gguf
from .config import ModelSpec
from .remote import Placement
from .runtime import devices, supports_gpu_offload

#: The n_gpu_layers of a spec that leaves the choice to the fit.
AUTO = None
#: Device memory each GPU keeps free. llama.cpp's fit leaves 1 GiB per device by default
#: (common.h ``fit_params_target``, ``--fit-target``): the estimate is a formula, not
#: llama.cpp's measured graph, and the driver's and cuBLAS's workspaces, a display and
#: other processes growing are not in it. Erring low costs a few layers on the CPU;
#: erring high costs a load that fails.
MARGIN_BYTES = 1 << 30


@dataclass(frozen=True)
class Where:
    """Where one model's layers go."""

    role: str
    layers: int  # the n_gpu_layers llama.cpp is given
    on_gpu: int = 0  # layers that really go to a GPU, the output layer counted
    total: int = 0  # the model's layers, the output layer counted (0: not read)
    gpus: tuple[str, ...] = ()  # the GPUs they go to, "CUDA0 (NVIDIA H200)"
    auto: bool = False  # chosen by the fit, not given
    plan: str = ""  # the RPC or tensor-split plan's own description, when that decides

    def place(self) -> str:
        """Where the layers are, in words: "all 29 layers on CUDA0 (NVIDIA H200)"."""
        if self.plan:
            return self.plan
        gpus = ", ".join(self.gpus)
        if self.on_gpu and self.on_gpu >= self.total:
            return f"all {self.total} layers on {gpus}"
        if self.on_gpu:
            return f"{self.on_gpu} of {self.total} layers on {gpus}, the rest on the CPU"
        if not self.gpus:
            return "on the CPU (no GPU device was found)"
        return f"on the CPU ({'no room left on ' + gpus if self.auto else 'as asked'})"

    def describe(self) -> str:
        return f"{self.role}: {self.place()}"

    @property
    def limited(self) -> bool:
        """The fit chose, and the GPUs' free memory did not hold every layer."""
        return self.auto and not self.plan and bool(self.gpus) and self.on_gpu < self.total


@dataclass(frozen=True)
class Offload:
    """Where the target (and the draft) go, and how that was read."""

    target: Where
    draft: Where | None
    offloads: bool  # the build has a local GPU backend
    free_bytes: int | None = None  # the offload GPUs' free memory as read; None without one
    margin_bytes: int = MARGIN_BYTES

    @property
    def roles(self) -> tuple[Where, ...]:
        return (self.target,) if self.draft is None else (self.target, self.draft)

    def describe(self) -> str:
        """"target: all 29 layers on CUDA0 (NVIDIA H200); draft: 12 of 25 layers on ..."."""
        return "; ".join(w.describe() for w in self.roles)

    @property
    def limited(self) -> bool:
        return any(w.limited for w in self.roles)

    def apply(self, target: ModelSpec, draft: ModelSpec | None) -> tuple[ModelSpec, ModelSpec | None]:
        """The specs with the layers chosen here (a given count stays as it was)."""
        t = replace(target, n_gpu_layers=self.target.layers)
        if draft is None:
            return t, None
        d = self.draft.layers if self.draft is not None else (0 if draft.n_gpu_layers is None else draft.n_gpu_layers)
        return t, replace(draft, n_gpu_layers=d)


def offload_gpus(devs: Sequence[Device]) -> list[Device]:
    """The devices llama.cpp offloads to without being told (llama.cpp's default device
    selection): every local discrete GPU, else the integrated ones of one backend."""
    gpus = [d for d in devs if d.kind == "GPU" and not d.is_remote]
    if gpus:
        return gpus
    igpus = [d for d in devs if d.kind == "iGPU" and not d.is_remote]
    return [d for d in igpus if d.backend == igpus[0].backend]


def _label(d: Device) -> str:
    return f"{d.name} ({d.description})" if d.description and d.description != d.name else d.name


def vram_bytes(spec: ModelSpec, layers: int) -> int:
    """The VRAM ``spec`` needs with ``layers`` offloaded (llama.cpp's count)."""
    return int(estimate_memory(validate_gguf(spec.path), n_ctx=spec.n_ctx, n_gpu_layers=layers)["vram_bytes"])


def layer_count(spec: ModelSpec) -> int:
    """The model's layers as llama.cpp counts them for offload: its blocks and the output layer."""
    return int(estimate_memory(validate_gguf(spec.path), n_ctx=spec.n_ctx, n_gpu_layers=-1)["n_gpu_layers"])


def most_layers(spec: ModelSpec, budget: int) -> int:
    """The most layers of ``spec`` whose VRAM fits ``budget`` bytes (VRAM grows with
    the layers, so a bisection finds it)."""
    total = layer_count(spec)
    if vram_bytes(spec, total) <= budget:
        return total
    lo, hi = 0, total  # lo fits (no layer needs no VRAM), hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if vram_bytes(spec, mid) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


def _planned_locally(plan: Placement, gpus: Sequence[Device]) -> int:
    """The bytes the target's plan puts on these local GPUs."""
    names = {d.name for d in gpus}
    return sum(b for label, _, b in plan.plan if label.split(" ", 1)[0] in names)


def _one(role: str, spec: ModelSpec, gpus: Sequence[Device], budget: int) -> tuple[Where, int]:
    """Where ``spec`` goes with ``budget`` bytes left on ``gpus``, and the bytes it takes."""
    labels = tuple(_label(d) for d in gpus)
    auto = spec.n_gpu_layers is None
    if not gpus:
        return Where(role, 0 if auto else spec.n_gpu_layers, gpus=labels, auto=auto), 0
    layers = most_layers(spec, budget) if auto else spec.n_gpu_layers
    total = layer_count(spec)
    on_gpu = min(max(0, layers), total)
    return Where(role, layers, on_gpu, total, labels, auto), vram_bytes(spec, on_gpu)


def fit_offload(target: ModelSpec, draft: ModelSpec | None, devs: Sequence[Device], offloads: bool,
                plan: Placement | None = None, margin: int = MARGIN_BYTES) -> Offload:
    """Where the target and the draft go on ``devs`` (the device list, with free memory)
    on a build that ``offloads`` or not: a spec's own count wins; an auto one gets as
    many layers as the free memory less ``margin`` per GPU holds, the target first. A
    CPU-only build (or one without a GPU device) gives auto 0 layers. With ``plan``
    (RPC servers or a tensor split) the target goes by the plan. Reads the GGUF
    headers only when there is a GPU to fit."""
    gpus = offload_gpus(devs) if offloads else []
    budget = sum(max(0, d.free_bytes - margin) for d in gpus)
    if plan is not None:
        tw = Where("target", plan.n_gpu_layers, plan=plan.describe())
        budget -= _planned_locally(plan, gpus)
    else:
        tw, used = _one("target", target, gpus, budget)
        budget -= used
    dw = None
    if draft is not None:
        dw, _ = _one("draft", draft, gpus, budget)
    free = sum(d.free_bytes for d in gpus) if gpus else None
    return Offload(tw, dw, offloads, free, margin)


def resolve_offload(target: ModelSpec, draft: ModelSpec | None = None, plan: Placement | None = None) -> Offload:
    """:func:`fit_offload` over this build and its local devices now (no RPC server is
    asked); a CPU-only build reads no device."""
    offloads = supports_gpu_offload()
    return fit_offload(target, draft, devices(remote=()) if offloads else [], offloads, plan)


def margin_text(off: Offload) -> str:
    """How the fit chose, for a note beside a partial offload."""
    return (f"auto fits what {format_bytes(off.free_bytes)} of free GPU memory holds, keeping "
            f"{format_bytes(off.margin_bytes)} free per device, the target first")


__all__ = ["AUTO", "MARGIN_BYTES", "Offload", "Where", "fit_offload", "layer_count", "margin_text", "most_layers",
           "offload_gpus", "resolve_offload", "vram_bytes"]
