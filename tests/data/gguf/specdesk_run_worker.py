"""Run GGUF files through SpecDesk as a user's generation does, isolated in a subprocess.

``run_many(paths)`` runs this file as a script and feeds it one path per line; for each,
the script does what ``specdesk generate`` does: validate the file (a refusal is one line,
``REFUSED``), load it as a target (with its MTP heads where they can draft), and
generate a few tokens, drafting with the heads (else with lookups), so that every
context, rollback and graph the app would run on the file runs. It prints, flushed:

    START <index>
    RESULT <index> <ran | refused | failed> <the one-line message>

A START without its RESULT means llama.cpp aborted (or hung): the driver records it as
``crashed``, confirms it alone, and resumes after it (as llama_load_worker.py does).

``run_many(paths, checked=False)`` skips SpecDesk's checks: the file goes straight to the
engine (a model, a context with snapshots, a few decodes and a rollback), to show what
llama.cpp does with it unguarded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

RAN, REFUSED, FAILED, CRASHED, TIMEOUT = "ran", "refused", "failed", "crashed", "timeout"


def _run(paths: list[str], timeout: float, checked: bool = True) -> tuple[dict[int, tuple[str, str]], int | None, bool]:
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    args = [sys.executable, str(Path(__file__).resolve())] + ([] if checked else ["--unchecked"])
    try:
        proc = subprocess.run(args, input="".join(p + "\n" for p in paths),
                              capture_output=True, text=True, timeout=timeout, env=env)
        out, timed_out = proc.stdout, False
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        timed_out = True
    results: dict[int, tuple[str, str]] = {}
    started: int | None = None
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 2 and parts[0] == "START":
            started = int(parts[1])
        elif len(parts) >= 3 and parts[0] == "RESULT":
            results[int(parts[1])] = (parts[2], parts[3] if len(parts) > 3 else "")
            started = None
    if started is None and len(results) < len(paths):
        started = len(results)
    return results, started, timed_out


def run_many(paths: list[str | Path], timeout: float = 300.0, checked: bool = True) -> dict[str, tuple[str, str]]:
    """path -> (ran | refused | failed | crashed | timeout, message)."""
    todo = [str(p) for p in paths]
    status: dict[str, tuple[str, str]] = {}
    while todo:
        results, died_on, timed_out = _run(todo, timeout, checked)
        for i, r in results.items():
            status[todo[i]] = r
        if died_on is None:
            break
        bad = todo[died_on]
        alone, alone_died, alone_timeout = _run([bad], timeout, checked)
        status[bad] = alone[0] if alone_died is None else ((TIMEOUT if alone_timeout else CRASHED), "")
        todo = todo[died_on + 1:]
    return status


def unchecked(path: Path) -> str:
    """The engine on the file, no check first: load, a context with snapshots, decodes, a rollback."""
    from specdesk.engine.context import Context
    from specdesk.engine.model import Model

    model = Model(path)
    ctx = Context(model, n_ctx=128, threads=1, n_rs_seq=4)
    ctx.prefill([5, 6, 7, 8, 9, 10], logits=False)
    ctx.eval([11, 12, 13, 14])
    ctx.rollback(8)
    ctx.eval([15])
    ctx.close()
    model.close()
    return "decoded"


def main() -> int:
    from specdesk.errors import SpecDeskError

    if "--unchecked" in sys.argv[1:]:
        for index, line in enumerate(sys.stdin):
            print(f"START {index}", flush=True)
            try:
                print(f"RESULT {index} {RAN} {unchecked(Path(line.rstrip()))}", flush=True)
            except SpecDeskError as e:
                print(f"RESULT {index} {FAILED} {e}".replace("\n", "\\n"), flush=True)
        return 0
    from specdesk.session import GenerationConfig, ModelSpec, Session
    from specdesk.speculative.sampling import SamplingParams

    for index, line in enumerate(sys.stdin):
        path = Path(line.rstrip("\n"))
        print(f"START {index}", flush=True)
        try:
            session = Session.load(ModelSpec(path, n_ctx=128, threads=1), remember_costs=False)
        except SpecDeskError as e:
            print(f"RESULT {index} {REFUSED} {e}".replace("\n", "\\n"), flush=True)
            continue
        try:
            prompt = session.raw_prompt("the of and to in is that", parse_special=False)
            for proposer in ("mtp", "ngram", "none"):
                config = GenerationConfig(proposer=proposer, k=3, max_tokens=12,
                                          sampling=SamplingParams(temperature=0.0))
                if session.refusal(config) is None:
                    session.run(prompt, config)
                    break
            print(f"RESULT {index} {RAN} {proposer}", flush=True)
        except SpecDeskError as e:
            print(f"RESULT {index} {FAILED} {e}".replace("\n", "\\n"), flush=True)
        finally:
            session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
