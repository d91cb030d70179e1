"""Run (target, Gemma 4 assistant) pairs through SpecDesk, isolated in a subprocess.

``run_pairs(pairs)`` (used by tests/integration/test_gemma4_assistant_hostile.py) runs
this file as a script and feeds it one ``target<TAB>head`` per line. For each pair the
script asks what SpecDesk asks before llama.cpp sees a pair (both files validated, the
head's fit to the target), then loads the pair into a Session and, where that works,
generates a few tokens with the assistant and with target alone. It prints, flushed:

    START <index>
    RESULT <index> <refused | rejected | ran-same | ran-different> <one line, JSON-quoted>

``refused``: SpecDesk's checks said no before llama.cpp saw the files; ``rejected``:
llama.cpp refused one (a SpecDeskError from the load); ``ran-*``: the assistant drafted,
and its tokens are (or are not) target alone's. A START without its RESULT means the
process died (an abort): the driver records it, re-runs that pair alone to confirm, and
resumes after it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CRASHED, TIMEOUT = "crashed", "timeout"


def _run(pairs: list[tuple[str, str]], timeout: float) -> tuple[dict[int, tuple[str, str]], int | None, bool]:
    env = dict(os.environ, GGML_NO_BACKTRACE="1")  # an abort: no gdb attached to print a trace
    timed_out = False
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve())], capture_output=True, text=True,
                              input="".join(f"{t}\t{h}\n" for t, h in pairs), timeout=timeout, env=env)
        out = proc.stdout
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
    if started is None and len(results) < len(pairs):
        started = len(results)
    return results, started, timed_out


def run_pairs(pairs: list[tuple[str, str]], timeout: float = 600.0) -> list[tuple[str, str]]:
    """Each pair's (outcome, message), in order; a pair the process died on is (crashed or timeout, "")."""
    out: dict[int, tuple[str, str]] = {}
    base = 0
    todo = list(pairs)
    while todo:
        results, died_on, timed_out = _run(todo, timeout)
        for i, r in results.items():
            out[base + i] = r
        if died_on is None:
            break
        alone, alone_died, alone_timeout = _run([todo[died_on]], timeout)
        out[base + died_on] = alone[0] if alone_died is None else (TIMEOUT if alone_timeout else CRASHED, "")
        base += died_on + 1
        todo = todo[died_on + 1:]
    return [out[i] for i in range(len(pairs))]


def _one(target: Path, head: Path) -> tuple[str, str]:
    from specdesk.errors import SpecDeskError
    from specdesk.session import GenerationConfig, ModelSpec, Session
    from specdesk.session.core import check_head, check_model_file

    try:
        check_head(check_model_file(target), check_model_file(head))
    except SpecDeskError as e:
        return "refused", str(e)
    try:
        s = Session.load(ModelSpec(target, n_ctx=256, threads=1), ModelSpec(head, n_ctx=256, threads=1),
                         remember_costs=False)
    except SpecDeskError as e:
        return "rejected", str(e)
    try:
        prompt = s.raw_prompt("the of and to in is")
        alone = s.run(prompt, GenerationConfig(proposer="none", max_tokens=8)).tokens
        spec = s.run(prompt, GenerationConfig(proposer="gemma4-assistant", k=3, p_min=0.0, max_tokens=8)).tokens
    except SpecDeskError as e:
        return "rejected", str(e)
    finally:
        s.close()
    return ("ran-same" if spec == alone else "ran-different"), ""


def main() -> int:
    import logging

    logging.disable(logging.CRITICAL)  # llama.cpp's log, routed through logging: not on stdout
    for index, line in enumerate(sys.stdin):
        target, head = line.rstrip("\n").split("\t")
        print(f"START {index}", flush=True)
        outcome, message = _one(Path(target), Path(head))
        print(f"RESULT {index} {outcome} {json.dumps(message)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
