"""What the front ends may ask of the installed llama.cpp without loading a model.

The CLI and the app go through the session for everything llama.cpp knows; this
module names the facts about the build and the machine that they show or use."""

from __future__ import annotations

import platform

from ..engine.backend import ctrl_c_guard, interrupted, stop_if_interrupted
from ..engine.build import build_info
from ..engine.devices import Device, backends
from ..system.memory import MemoryReport, gpu_memory, rss_bytes
from ..engine.model import default_threads, repack_types, supports_gpu_offload
from ..engine.rpc import devices

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"


def gpu_build_hint() -> str:
    """One line: how to install a llama.cpp that can offload to a GPU."""
    return ("reinstall llama-cpp-python with a GPU backend, e.g. CMAKE_ARGS=\"-DGGML_CUDA=on -DGGML_RPC=ON\" "
            f".venv/bin/pip install --force-reinstall --no-cache-dir {LLAMA_CPP_PYTHON} "
            "(-DGGML_VULKAN=on, -DGGML_METAL=on or -DGGML_HIP=on for other GPUs)")


def gpu_layers_note(n_gpu_layers: int | None, who: str = "") -> str | None:
    """Why ``n_gpu_layers`` (``who``'s, e.g. "the draft's") has no effect on this build,
    or None when it has one; auto (None) needs no word: it offloads nothing there."""
    if n_gpu_layers is None or n_gpu_layers <= 0 or supports_gpu_offload():
        return None
    whose = f"{who} " if who else ""
    return (f"this llama.cpp was built without GPU support, so {whose}{n_gpu_layers} GPU layers have no effect: "
            f"{gpu_build_hint()}")


def machine() -> dict:
    gpus, status = gpu_memory()
    try:
        import psutil

        cores = psutil.cpu_count(logical=False)
    except Exception:  # noqa: BLE001
        cores = None
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": cores, "gpu": gpus[0].name if gpus else status, "os": platform.platform()}


__all__ = ["Device", "MemoryReport", "backends", "build_info", "ctrl_c_guard", "default_threads", "devices",
           "gpu_build_hint", "gpu_layers_note", "gpu_memory", "interrupted", "machine", "repack_types", "rss_bytes",
           "stop_if_interrupted", "supports_gpu_offload"]
