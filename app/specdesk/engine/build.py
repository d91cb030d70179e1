"""Which llama.cpp this is: the llama-cpp-python version, its library, what it was built with."""

from __future__ import annotations

import llama_cpp
import llama_cpp.llama_cpp as _ll

from .model import amx_compiled, supports_gpu_offload, system_info


def build_info() -> dict:
    """Version, shared library path, GPU offload support and llama.cpp's system info line."""
    lib = getattr(getattr(_ll, "_lib", None), "_name", None)
    return {
        "llama_cpp_python": llama_cpp.__version__,
        "library": str(lib) if lib else None,
        "gpu_offload": supports_gpu_offload(),
        "system_info": system_info().strip(),
        # None: llama.cpp's extra weight buffers (AMX, CPU_REPACK) are on; else why they are off
        "extra_buffers_off": ("this llama.cpp's AMX kernels can crash the process (0.3.36 loads a tile configuration "
                              "half made of stack garbage), so its AMX buffer is off; the weights it would repack "
                              "are sent to CPU_REPACK by name" if amx_compiled() else None),
    }
