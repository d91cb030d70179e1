"""The devices llama.cpp can run on, with their memory, from ggml's backend registry.

Read through ctypes on the ggml library llama-cpp-python ships, so it works the same
for CPU, CUDA, Vulkan, Metal, HIP, SYCL and RPC builds: every registered backend
device reports its name, kind and free/total memory (``ggml_backend_dev_*`` in
ggml-backend.h). NVML stays a cross-check for NVIDIA cards (engine.memory).
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import asdict, dataclass

from llama_cpp._ggml import libggml

from .model import ensure_backend

# enum ggml_backend_dev_type, in ggml-backend.h's order
_TYPES = {0: "CPU", 1: "GPU", 2: "iGPU", 3: "accelerator"}

_lock = threading.Lock()
_bound = False


def _bind() -> None:
    global _bound
    with _lock:
        if _bound:
            return
        lib = libggml
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        for name, res, args in (
            ("ggml_backend_dev_count", sz, []),
            ("ggml_backend_dev_get", vp, [sz]),
            ("ggml_backend_dev_name", ctypes.c_char_p, [vp]),
            ("ggml_backend_dev_description", ctypes.c_char_p, [vp]),
            ("ggml_backend_dev_type", ctypes.c_int, [vp]),
            ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
            ("ggml_backend_dev_backend_reg", vp, [vp]),
            ("ggml_backend_reg_name", ctypes.c_char_p, [vp]),
            ("ggml_backend_reg_count", sz, []),
            ("ggml_backend_reg_get", vp, [sz]),
        ):
            f = getattr(lib, name)
            f.restype = res
            f.argtypes = args
        _bound = True


@dataclass(frozen=True)
class Device:
    name: str  # "CPU", "CUDA0", "Vulkan0", "RPC[10.0.0.2:50052]"
    description: str  # e.g. the CPU or GPU model
    kind: str  # CPU | GPU | iGPU | accelerator
    backend: str  # the backend that registered it: CPU, CUDA, Vulkan, Metal, RPC, ...
    free_bytes: int
    total_bytes: int

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("GPU", "iGPU")

    def to_dict(self) -> dict:
        return {**asdict(self), "is_gpu": self.is_gpu}


def _text(b: bytes | None) -> str:
    return (b or b"").decode("utf-8", "replace")


def devices() -> list[Device]:
    """Every device the installed llama.cpp registered, with its memory now."""
    ensure_backend()
    _bind()
    lib = libggml
    out = []
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        if not dev:
            continue
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        reg = lib.ggml_backend_dev_backend_reg(dev)
        out.append(Device(
            name=_text(lib.ggml_backend_dev_name(dev)),
            description=_text(lib.ggml_backend_dev_description(dev)),
            kind=_TYPES.get(int(lib.ggml_backend_dev_type(dev)), "unknown"),
            backend=_text(lib.ggml_backend_reg_name(reg)) if reg else "?",
            free_bytes=int(free.value),
            total_bytes=int(total.value),
        ))
    return out


def backends() -> list[str]:
    """The names of the backends built into this llama.cpp (CPU, CUDA, Vulkan, RPC, ...)."""
    ensure_backend()
    _bind()
    lib = libggml
    return [_text(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i))) for i in range(int(lib.ggml_backend_reg_count()))]
