"""Run draft-head pairs as the session does, isolated in a subprocess.

``run_pairs(cases)`` (used by tests/integration/test_heads_hostile.py) runs this file
as a script and feeds it one ``kind<TAB>target<TAB>head`` line per pair; the script
loads each pair with ``Session.load`` and drafts a few tokens with the head, printing,
flushed:

    START <index>
    RESULT <index> <ran | refused | error> <the one-line message>

A START without its RESULT means the process died on that pair (llama.cpp aborted):
the driver records it as "crashed" and resumes the batch after it, so one bad file
cannot take pytest -- or the rest of the batch -- down.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CRASHED, TIMEOUT = "crashed", "timeout"


def _run(cases: list[tuple[str, str, str]], timeout: float) -> tuple[dict[int, tuple[str, str]], int | None, bool]:
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    feed = "".join("\t".join(map(str, c)) + "\n" for c in cases)
    timed_out = False
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve())], input=feed, capture_output=True,
                              text=True, timeout=timeout, env=env)
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
        elif len(parts) >= 3 and parts[0] == "RESULT":
            results[int(parts[1])] = (parts[2], parts[3] if len(parts) > 3 else "")
            started = None
    if started is None and len(results) < len(cases):
        started = len(results)
    return results, started, timed_out


def run_pairs(cases: list[tuple[str, str, str]], timeout: float = 300.0) -> list[tuple[str, str]]:
    """(status, message) per (kind, target, head): ran / refused / error / crashed / timeout."""
    out: list[tuple[str, str] | None] = [None] * len(cases)
    base = 0
    while base < len(cases):
        results, died_on, timed_out = _run(cases[base:], timeout)
        for i, r in results.items():
            out[base + i] = r
        if died_on is None:
            break
        out[base + died_on] = (TIMEOUT if timed_out else CRASHED, "")
        base += died_on + 1
    return [r or (CRASHED, "") for r in out]


def main() -> int:
    from specdesk.errors import SpecDeskError
    from specdesk.session import GenerationConfig, ModelSpec, Session

    for i, line in enumerate(sys.stdin):
        kind, target, head = line.rstrip("\n").split("\t")
        print(f"START {i}", flush=True)
        try:
            with Session.load(ModelSpec(Path(target), n_ctx=256, threads=1),
                              ModelSpec(Path(head), n_ctx=256, threads=1), remember_costs=False) as s:
                g = s.run(s.raw_prompt("the of and to in"), GenerationConfig(proposer=kind, k=3, max_tokens=6))
            status, msg = "ran", f"{g.stats.drafted} drafted"
        except SpecDeskError as e:
            status, msg = "refused", str(e)
        except Exception as e:  # noqa: BLE001 - reported, and the test fails on it
            status, msg = "error", f"{type(e).__name__}: {e}"
        print(f"RESULT {i} {status} {' '.join(msg.split())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
