"""The devices llama.cpp can run on, with their memory, from ggml's backend registry.

Read through ctypes on the ggml library llama-cpp-python ships, so it works the same
for CPU, CUDA, Vulkan, Metal, HIP, SYCL and RPC builds: every registered backend
device reports its name, kind and free/total memory (``ggml_backend_dev_*`` in
ggml-backend.h). NVML stays a cross-check for NVIDIA cards (system.memory).
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from llama_cpp._ggml import libggml

from ..errors import SpecDeskError
from .backend import ensure_backend

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
            ("ggml_backend_reg_get_proc_address", vp, [vp, ctypes.c_char_p]),
            ("ggml_backend_buft_name", ctypes.c_char_p, [vp]),
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
    #: why the memory is unknown (an RPC server that does not answer); "" when it is known
    error: str = ""

    @property
    def is_remote(self) -> bool:
        return self.backend == "RPC"

    @property
    def endpoint(self) -> str | None:
        """host:port of the RPC server that offers this device (its description)."""
        return self.description if self.is_remote else None

    @property
    def is_gpu(self) -> bool:
        """A local GPU (an RPC server's device reports itself as a GPU too)."""
        return self.kind in ("GPU", "iGPU") and not self.is_remote

    def to_dict(self) -> dict:
        return {**asdict(self), "is_gpu": self.is_gpu, "is_remote": self.is_remote}


def _text(b: bytes | None) -> str:
    return (b or b"").decode("utf-8", "replace")


def devices(memory: bool = True, remote: Sequence[str] | None = None,
            reachable: Callable[[str], str | None] | None = None) -> list[Device]:
    """Every device the installed llama.cpp registered, with its memory now.

    A remote (RPC) device is asked only when ``reachable(endpoint)`` returned None
    (llama.cpp aborts on a dead server): otherwise its memory reads 0 and ``error``
    says why; with no ``reachable`` it is not asked at all. ``memory=False`` asks no
    device; ``remote`` limits the servers asked to these endpoints (the others read 0,
    "not asked"). ``rpc.devices`` passes the RPC backend's own check."""
    ensure_backend()
    _bind()
    lib = libggml
    out = []
    reasons: dict[str, str | None] = {}
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        if not dev:
            continue
        reg = lib.ggml_backend_dev_backend_reg(dev)
        backend = _text(lib.ggml_backend_reg_name(reg)) if reg else "?"
        description = _text(lib.ggml_backend_dev_description(dev))
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        error = ""
        if memory and backend == "RPC" and (reachable is None or (remote is not None and description not in remote)):
            error = "not asked"
        elif memory and backend == "RPC":
            if description not in reasons:
                reasons[description] = reachable(description)
            error = reasons[description] or ""
        if memory and not error:
            lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append(Device(
            name=_text(lib.ggml_backend_dev_name(dev)),
            description=description,
            kind=_TYPES.get(int(lib.ggml_backend_dev_type(dev)), "unknown"),
            backend=backend,
            free_bytes=int(free.value),
            total_bytes=int(total.value),
            error=error,
        ))
    return out


def handles(names: Sequence[str]) -> list[int]:
    """ggml device handles by name (``CPU``, ``CUDA0``, ``RPC0``); an unknown name is an
    error that lists the known ones."""
    ensure_backend()
    _bind()
    lib = libggml
    known = {}
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        if dev:
            known[_text(lib.ggml_backend_dev_name(dev))] = dev
    out = []
    for n in names:
        if n not in known:
            raise SpecDeskError(f"no device named {n!r} here: choose from {', '.join(known) or 'none'}")
        out.append(known[n])
    return out


def backends() -> list[str]:
    """The names of the backends built into this llama.cpp (CPU, CUDA, Vulkan, RPC, ...)."""
    ensure_backend()
    _bind()
    lib = libggml
    return [_text(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i))) for i in range(int(lib.ggml_backend_reg_count()))]


_ExtraBufts = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


def cpu_extra_buffer_types() -> dict[str, int]:
    """The CPU device's extra weight buffer types by name (``CPU_REPACK``, ``AMX``):
    ggml-cpu's ``ggml_backend_dev_get_extra_bufts``, a NULL-terminated list."""
    ensure_backend()
    _bind()
    lib = libggml
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        if not dev or int(lib.ggml_backend_dev_type(dev)) != 0:  # the CPU device
            continue
        reg = lib.ggml_backend_dev_backend_reg(dev)
        fn = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts") if reg else None
        if not fn:
            return {}
        arr = _ExtraBufts(fn)(dev)
        out: dict[str, int] = {}
        j = 0
        while arr and arr[j]:
            out[_text(lib.ggml_backend_buft_name(arr[j]))] = int(arr[j])
            j += 1
        return out
    return {}
