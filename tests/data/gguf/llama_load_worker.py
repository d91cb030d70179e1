"""Load GGUF files with the real llama.cpp loader, isolated in a subprocess.

``load_many(paths)`` (used by tests/integration/test_gguf_llama_agreement.py) runs this
file as a script and feeds it one path per line; the script loads each with
llama-cpp-python's low-level API and prints, flushed:

    START <index>
    RESULT <index> <0 loaded | 3 rejected>

A START without its RESULT means llama.cpp crashed (or hung) on that file: the driver
records it, re-runs that file alone to confirm, and resumes the batch after it, so a
crash on one bad file cannot take pytest -- or the rest of the batch -- down.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LOADED, REJECTED, CRASHED, TIMEOUT = "loaded", "rejected", "crashed", "timeout"


def _run(paths: list[str], vocab_only: bool, timeout: float) -> tuple[dict[int, str], int | None, bool]:
    """One worker process over ``paths``: (results by index, index it died on, timed out)."""
    args = [sys.executable, str(Path(__file__).resolve())] + (["--vocab-only"] if vocab_only else [])
    timed_out = False
    try:
        # GGML_NO_BACKTRACE: on an abort, ggml would otherwise attach gdb to print a trace
        env = dict(os.environ, GGML_NO_BACKTRACE="1")
        proc = subprocess.run(args, input="".join(p + "\n" for p in paths), capture_output=True,
                              text=True, timeout=timeout, env=env)
        out = proc.stdout
    except subprocess.TimeoutExpired as e:
        timed_out = True
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    results: dict[int, str] = {}
    started: int | None = None
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "START":
            started = int(parts[1])
        elif len(parts) == 3 and parts[0] == "RESULT":
            results[int(parts[1])] = LOADED if parts[2] == "0" else REJECTED
            started = None
    if started is None and len(results) < len(paths):
        started = len(results)  # died before it could even report a START
    return results, started, timed_out


def load_many(paths: list[str | Path], *, vocab_only: bool = False, timeout: float = 120.0) -> dict[str, str]:
    """Load every path with llama.cpp; return path -> loaded/rejected/crashed/timeout."""
    todo = [str(p) for p in paths]
    status: dict[str, str] = {}
    while todo:
        results, died_on, timed_out = _run(todo, vocab_only, timeout)
        for i, result in results.items():
            status[todo[i]] = result
        if died_on is None:
            break
        bad = todo[died_on]
        # confirm the crash in isolation (a crash caused by an earlier file's state would
        # otherwise be blamed on this one)
        alone, alone_died, alone_timeout = _run([bad], vocab_only, timeout)
        if alone_died is None:
            status[bad] = alone[0]
        else:
            status[bad] = TIMEOUT if alone_timeout else CRASHED
        todo = todo[died_on + 1 :]
    return status


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
    for index, line in enumerate(sys.stdin):
        path = line.rstrip("\n")
        print(f"START {index}", flush=True)
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = vocab_only
        params.use_extra_bufts = use_extra_bufts  # as SpecDesk's loader (specdesk.engine.model.amx_compiled)
        model = llama_cpp.llama_model_load_from_file(path.encode(), params)
        if model:
            llama_cpp.llama_model_free(model)
        print(f"RESULT {index} {0 if model else 3}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
