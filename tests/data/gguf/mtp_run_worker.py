"""Run GGUF files with MTP heads, many per process, isolated from pytest.

``run_many(paths)`` (used by tests/integration/test_mtp_hostile.py) runs this file as a
script and feeds it one path per line; for each file it prints, flushed:

    START <index>
    RESULT <index> <outcome> <message as a JSON string>

A START without its RESULT means the process died on that file (llama.cpp aborted or
crashed, or it hung): the driver records CRASHED (or TIMEOUT), confirms it with that
file alone, and resumes the batch after it, so an abort is a result attributed to its
file, never a crash of pytest.

Two modes:

``session`` (the default): what SpecDesk's CLI, server and app do with the file, through
``Session.load`` (which validates it and checks its heads before llama.cpp sees it) and
``Session.generate`` of a few tokens, drafting with the heads where SpecDesk accepts them
and with none otherwise. Outcomes: ``mtp`` (loaded, drafted with its heads), ``trunk``
(loaded, heads refused: the message says why), ``refused`` (a SpecDeskError: the message),
``error`` (any other exception: a bug).

``raw``: llama.cpp alone, with no check of SpecDesk's: the model loaded with its heads
(``load_mtp``), a context for them made and one draft step taken. Outcomes: ``loaded``
or ``rejected`` (llama.cpp refused it with an error).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
import subprocess
import sys
from pathlib import Path

MTP, TRUNK, REFUSED, ERROR = "mtp", "trunk", "refused", "error"
LOADED, REJECTED, CRASHED, TIMEOUT = "loaded", "rejected", "crashed", "timeout"
EXITED = "exited"  # the worker itself ended early without a signal (a bug of the worker): its stderr's end
PROMPT = "the of and to in is"


def _run(paths: list[str], mode: str, timeout: float) -> tuple[dict[int, tuple[str, str]], int | None, str | None]:
    """One worker over ``paths``: (results by index, the index it died on, how it died:
    TIMEOUT, CRASHED for a signal, EXITED with its stderr for anything else)."""
    timed_out, how = False, None
    # GGML_NO_BACKTRACE: on an abort, ggml would otherwise attach gdb to print a trace
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), mode],
                              input="".join(p + "\n" for p in paths), capture_output=True, text=True,
                              timeout=timeout, env=env)
        out = proc.stdout
        how = CRASHED if proc.returncode < 0 else f"{EXITED} {proc.returncode}: {proc.stderr[-500:]}"
    except subprocess.TimeoutExpired as e:
        timed_out = True
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    results: dict[int, tuple[str, str]] = {}
    started: int | None = None
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 2 and parts[0] == "START":
            started = int(parts[1])
        elif len(parts) == 4 and parts[0] == "RESULT":
            results[int(parts[1])] = (parts[2], json.loads(parts[3]))
            started = None
    if started is None and len(results) < len(paths):
        started = len(results)  # died before it could even report a START
    return results, started, TIMEOUT if timed_out else how


def run_many(paths: list[str | Path], mode: str = "session", timeout: float = 300.0,
             confirm: bool = True) -> dict[str, tuple[str, str]]:
    """path -> (outcome, message) for every path (see the module's doc for the outcomes).
    ``confirm=False``: a death is not run again alone (for files expected to abort)."""
    todo = [str(p) for p in paths]
    status: dict[str, tuple[str, str]] = {}
    while todo:
        results, died_on, how = _run(todo, mode, timeout)
        for i, result in results.items():
            status[todo[i]] = result
        if died_on is None:
            break
        bad = todo[died_on]
        # confirmed alone: a death caused by an earlier file's state is not blamed on this one
        alone, alone_died, alone_how = _run([bad], mode, timeout) if confirm else ({}, 0, how)
        if alone_died is None:
            status[bad] = alone[0]
        else:
            kind, _, detail = (alone_how or EXITED).partition(" ")
            status[bad] = (kind, detail)
        todo = todo[died_on + 1:]
    return status


def _session(path: str) -> tuple[str, str]:
    from specdesk.errors import SpecDeskError
    from specdesk.session import GenerationConfig, ModelSpec, Session

    try:
        s = Session.load(ModelSpec(Path(path), n_ctx=256, threads=1), remember_costs=False)
    except SpecDeskError as e:
        return REFUSED, str(e)
    with s:
        cfg = GenerationConfig(proposer="mtp", k=2, max_tokens=6)
        why = s.refusal(cfg)
        if why:
            cfg = replace(cfg, proposer="none")
        try:
            steps = list(s.generate(s.raw_prompt(PROMPT), cfg))
        except SpecDeskError as e:
            return REFUSED, str(e)
        if not steps or not steps[-1].done:
            return ERROR, "the generation did not end"
        return (TRUNK, why) if why else (MTP, f"drafted {steps[-1].stats.drafted}")


def _raw(path: str) -> tuple[str, str]:
    from specdesk.engine.context import Context
    from specdesk.engine.model import Model
    from specdesk.engine.mtp import MtpHeads
    from specdesk.errors import SpecDeskError

    try:
        model = Model(Path(path), load_mtp=True)
    except SpecDeskError as e:
        return REJECTED, str(e)
    try:
        ctx = Context(model, n_ctx=256, threads=1)
        heads = MtpHeads(model, ctx)
        heads.activate()
        prompt = model.tokenize(PROMPT, add_special=False)
        ctx.eval(prompt, all_rows=False)
        heads.prefill(prompt)
        heads.close()
        ctx.close()
    except SpecDeskError as e:
        return REJECTED, str(e)
    finally:
        model.close()
    return LOADED, ""


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "session"
    run = _raw if mode == "raw" else _session
    for index, line in enumerate(sys.stdin):
        print(f"START {index}", flush=True)
        try:
            outcome, message = run(line.rstrip("\n"))
        except Exception as e:  # noqa: BLE001 - reported as the bug it is
            outcome, message = ERROR, f"{type(e).__name__}: {e}"
        print(f"RESULT {index} {outcome} {json.dumps(message)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
