"""Load GGUF files with the real llama.cpp loader, isolated in a subprocess.

``load_many(paths)`` (used by tests/integration/test_gguf_llama_agreement.py) runs this
file as a worker of isolated.py, one path per item; it loads each with llama-cpp-python's
low-level API: ``loaded`` or ``rejected``, or ``crashed`` / ``timeout`` where llama.cpp
aborted (or hung) on it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from isolated import CRASHED, TIMEOUT, run_isolated, serve

LOADED, REJECTED = "loaded", "rejected"
__all__ = ["CRASHED", "LOADED", "REJECTED", "TIMEOUT", "load_many"]


def load_many(paths: list[str | Path], *, vocab_only: bool = False, timeout: float = 120.0) -> dict[str, str]:
    """Load every path with llama.cpp; return path -> loaded/rejected/crashed/timeout."""
    todo = [str(p) for p in paths]
    results = run_isolated(__file__, todo, args=["--vocab-only"] if vocab_only else [], timeout=timeout)
    return {p: outcome for p, (outcome, _) in zip(todo, results)}


def main() -> int:
    import ctypes

    import llama_cpp

    @llama_cpp.llama_log_callback
    def quiet(level, text, user_data):  # noqa: ARG001 - ctypes callback signature
        return None

    vocab_only = "--vocab-only" in sys.argv[1:]
    llama_cpp.llama_log_set(quiet, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    use_extra_bufts = b"AMX_INT8 = 1" not in llama_cpp.llama_print_system_info()

    def load(path: str) -> tuple[str, str]:
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = vocab_only
        params.use_extra_bufts = use_extra_bufts  # as SpecDesk's loader (specdesk.engine.model.amx_compiled)
        model = llama_cpp.llama_model_load_from_file(path.encode(), params)
        if model:
            llama_cpp.llama_model_free(model)
        return (LOADED if model else REJECTED), ""

    return serve(load)


if __name__ == "__main__":
    sys.exit(main())
