"""Memory per model (weights, KV cache), process RSS (psutil) and VRAM (NVML)."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import asdict, dataclass

import psutil

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelMemory:
    """What one loaded model holds, from the buffers llama.cpp reported allocating."""

    role: str
    path: str
    weights_bytes: int  # the model's tensors (mapped from the file, or on the GPU)
    kv_bytes: int  # the KV cache for n_ctx positions
    n_ctx: int
    n_gpu_layers: int
    repack_bytes: int = 0  # weights repacked for this CPU: an extra copy in RAM
    compute_bytes: int = 0  # compute graph and output buffers
    vram_bytes: int = 0  # the part of all the above that lives on a GPU
    remote_bytes: int = 0  # the part that lives on other machines (RPC servers)
    where: str = ""  # where its layers are, in words, on a build that offloads ("all 29 layers on CUDA0 (...)")
    #: a recurrent or hybrid model's state (its snapshots included) and the checkpoints its rollback keeps
    state_bytes: int = 0
    snapshot_bytes: int = 0  # the part of state_bytes that are snapshots (n_rs_seq of them per sequence)

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.repack_bytes + self.kv_bytes + self.compute_bytes + self.state_bytes

    @property
    def ram_bytes(self) -> int:
        return self.total_bytes - self.vram_bytes - self.remote_bytes


@dataclass(frozen=True)
class GpuMemory:
    name: str
    used_bytes: int
    total_bytes: int
    process_bytes: int | None  # this process's share, where the driver tells


@dataclass(frozen=True)
class MemoryReport:
    models: tuple[ModelMemory, ...]
    rss_bytes: int
    gpus: tuple[GpuMemory, ...]
    gpu_status: str  # "ok", or why there is no reading ("no NVIDIA GPU", "n/a: ...")

    def model(self, role: str) -> ModelMemory | None:
        return next((m for m in self.models if m.role == role), None)

    @property
    def draft_share(self) -> float | None:
        """The draft's share of the models' weights + KV."""
        total = sum(m.total_bytes for m in self.models)
        d = self.model("draft")
        return d.total_bytes / total if d and total else None

    def to_dict(self) -> dict:
        return {
            "models": {m.role: asdict(m) | {"total_bytes": m.total_bytes} for m in self.models},
            "draft_share": self.draft_share,
            "rss_bytes": self.rss_bytes,
            "vram": [asdict(g) for g in self.gpus] if self.gpus else self.gpu_status,
        }


def rss_bytes() -> int:
    return psutil.Process(os.getpid()).memory_info().rss


_nvml_lock = threading.Lock()
_nvml_state: str | None = None  # None = not tried, "ok", or the reason it is unavailable


def _nvml_init() -> str:
    global _nvml_state
    with _nvml_lock:
        if _nvml_state is None:
            try:
                import pynvml

                pynvml.nvmlInit()
                _nvml_state = "ok" if pynvml.nvmlDeviceGetCount() > 0 else "no NVIDIA GPU"
            except Exception as e:  # noqa: BLE001 - no driver, no library, no device: all mean "n/a"
                name = type(e).__name__
                _nvml_state = "no NVIDIA GPU" if "LibraryNotFound" in name or "DriverNotLoaded" in name else f"n/a ({name})"
        return _nvml_state


def gpu_memory() -> tuple[tuple[GpuMemory, ...], str]:
    """VRAM used/total per NVIDIA GPU, or () and the reason there is no reading."""
    state = _nvml_init()
    if state != "ok":
        return (), state
    try:
        import pynvml

        out = []
        pid = os.getpid()
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            info = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            if isinstance(name, bytes):
                name = name.decode()
            mine = None
            try:
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                    if p.pid == pid and p.usedGpuMemory is not None:
                        mine = int(p.usedGpuMemory)
            except Exception:  # noqa: BLE001 - per-process figures are optional
                pass
            out.append(GpuMemory(name=name, used_bytes=int(info.used), total_bytes=int(info.total), process_bytes=mine))
        return tuple(out), "ok"
    except Exception as e:  # noqa: BLE001
        log.debug("NVML query failed", exc_info=True)
        return (), f"n/a ({type(e).__name__})"


def report(models: list[ModelMemory]) -> MemoryReport:
    gpus, status = gpu_memory()
    return MemoryReport(models=tuple(models), rss_bytes=rss_bytes(), gpus=gpus, gpu_status=status)
