"""Run items (GGUF files, pairs of them) in a worker process that may die on one, so
that an abort in llama.cpp is a result attributed to its item, never a crash of pytest.

The worker is a script of this folder whose ``main`` calls :func:`serve` with what it
does to one item; it reads one item per line on stdin and prints, flushed:

    START <index>
    RESULT <index> <outcome> <message as a JSON string>

The driver, :func:`run_isolated`, feeds it the items. A START without its RESULT means
the process died on that item (llama.cpp aborted or crashed, or it hung): the driver
confirms it with that item alone (a death caused by an earlier item's state is not blamed
on this one), records ``crashed`` (a signal), ``timeout``, or ``exited`` (the worker
ended early without a signal: its stderr's end), and resumes the batch after it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

CRASHED, TIMEOUT, EXITED, ERROR = "crashed", "timeout", "exited", "error"


def _run(script: Path, args: Sequence[str], items: list[str], timeout: float) -> tuple[dict[int, tuple[str, str]], int | None, tuple[str, str]]:
    """One worker over ``items``: (results by index, the index it died on, how it died)."""
    # GGML_NO_BACKTRACE: on an abort, ggml would otherwise attach gdb to print a trace
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    try:
        proc = subprocess.run([sys.executable, str(script), *args], input="".join(i + "\n" for i in items),
                              capture_output=True, text=True, timeout=timeout, env=env)
        out = proc.stdout
        how = (CRASHED, "") if proc.returncode < 0 else (EXITED, f"{proc.returncode}: {proc.stderr[-500:]}")
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        how = (TIMEOUT, "")
    results: dict[int, tuple[str, str]] = {}
    started: int | None = None
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 2 and parts[0] == "START":
            started = int(parts[1])
        elif len(parts) == 4 and parts[0] == "RESULT":
            results[int(parts[1])] = (parts[2], json.loads(parts[3]))
            started = None
    if started is None and len(results) < len(items):
        started = len(results)  # died before it could even report a START
    return results, started, how


def run_isolated(script: str | Path, items: Sequence[str], *, args: Sequence[str] = (), timeout: float = 300.0,
                 confirm: bool = True) -> list[tuple[str, str]]:
    """(outcome, message) for each item, in order. ``confirm=False``: a death is not run
    again alone (for items expected to abort)."""
    script = Path(script).resolve()
    out: dict[int, tuple[str, str]] = {}
    base, todo = 0, list(items)
    while todo:
        results, died_on, how = _run(script, args, todo, timeout)
        for i, result in results.items():
            out[base + i] = result
        if died_on is None:
            break
        if confirm:
            alone, alone_died, alone_how = _run(script, args, [todo[died_on]], timeout)
            out[base + died_on] = alone[0] if alone_died is None else alone_how
        else:
            out[base + died_on] = how
        base += died_on + 1
        todo = todo[died_on + 1:]
    return [out[i] for i in range(len(items))]


def serve(handle: Callable[[str], tuple[str, str]]) -> int:
    """The worker's side: ``handle`` each line of stdin (an item), reporting as the
    module's doc says; an exception it raises is the outcome ``error``, with its type."""
    import logging

    logging.disable(logging.CRITICAL)  # llama.cpp's log, routed through logging: not on stdout
    for index, line in enumerate(sys.stdin):
        print(f"START {index}", flush=True)
        try:
            outcome, message = handle(line.rstrip("\n"))
        except Exception as e:  # noqa: BLE001 - reported as the bug it is
            outcome, message = ERROR, f"{type(e).__name__}: {e}"
        print(f"RESULT {index} {outcome} {json.dumps(message)}", flush=True)
    return 0
