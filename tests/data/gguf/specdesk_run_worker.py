"""Run GGUF files through SpecDesk as a user's generation does, isolated in a subprocess.

``run_many(paths)`` runs this file for each path; the what ``specdesk generate`` does: validate the file (a refusal is one line,
``REFUSED``), load it as a target (with its MTP heads where they can draft), and
generate a few tokens, drafting with the heads (else with lookups), so that every
context, rollback and graph the app would run on the file runs: ``ran``, ``refused`` or
``failed``, with the message. It is a worker of isolated.py: where llama.cpp aborted
(or hung) on a file, its outcome is ``crashed`` (or ``timeout``).

``run_many(paths, checked=False)`` skips SpecDesk's checks: the file goes straight to the
engine (a model, a context with snapshots, a few decodes and a rollback), to show what
llama.cpp does with it unguarded.
"""

from __future__ import annotations

import sys
from pathlib import Path

from isolated import CRASHED, TIMEOUT, run_isolated, serve

RAN, REFUSED, FAILED = "ran", "refused", "failed"
__all__ = ["CRASHED", "FAILED", "RAN", "REFUSED", "TIMEOUT", "run_many"]


def run_many(paths: list[str | Path], timeout: float = 300.0, checked: bool = True) -> dict[str, tuple[str, str]]:
    """path -> (ran | refused | failed | crashed | timeout, message)."""
    todo = [str(p) for p in paths]
    return dict(zip(todo, run_isolated(__file__, todo, args=[] if checked else ["--unchecked"], timeout=timeout)))


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


def _unchecked(line: str) -> tuple[str, str]:
    from specdesk.errors import SpecDeskError

    try:
        return RAN, unchecked(Path(line))
    except SpecDeskError as e:
        return FAILED, str(e)


def _checked(line: str) -> tuple[str, str]:
    from specdesk.errors import SpecDeskError
    from specdesk.session import GenerationConfig, ModelSpec, Session
    from specdesk.speculative.sampling import SamplingParams

    try:
        session = Session.load(ModelSpec(Path(line), n_ctx=128, threads=1), remember_costs=False)
    except SpecDeskError as e:
        return REFUSED, str(e)
    try:
        prompt = session.raw_prompt("the of and to in is that", parse_special=False)
        for proposer in ("mtp", "ngram", "none"):
            config = GenerationConfig(proposer=proposer, k=3, max_tokens=12, sampling=SamplingParams(temperature=0.0))
            if session.refusal(config) is None:
                session.run(prompt, config)
                break
        return RAN, proposer
    except SpecDeskError as e:
        return FAILED, str(e)
    finally:
        session.close()


def main() -> int:
    return serve(_unchecked if "--unchecked" in sys.argv[1:] else _checked)


if __name__ == "__main__":
    sys.exit(main())
