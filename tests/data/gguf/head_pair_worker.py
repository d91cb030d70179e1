"""Run (target, head) pairs as SpecDesk does, isolated in a subprocess: a head of
another model as the draft file (an EAGLE-3 or DFlash head, a Gemma 4 assistant).

``run_pairs(cases)`` (used by tests/integration/test_heads_hostile.py and
test_gemma4_assistant_hostile.py) runs this file as a worker of isolated.py, one
``(proposer, target, head)`` per item. For each pair it asks what SpecDesk asks before
llama.cpp sees a pair (both files validated, the head's fit to the target), then loads
the pair into a Session and, where that works, generates a few tokens with the head and
with target alone. Outcomes, each with its one-line message:

``refused``: SpecDesk's checks said no before llama.cpp saw the files; ``rejected``:
llama.cpp refused one (a SpecDeskError from the load or the run); ``ran-same`` /
``ran-different``: the head drafted, and its tokens are (or are not) target alone's;
``crashed`` / ``timeout``: llama.cpp aborted (or hung) on the pair; ``error``: a bug.
"""

from __future__ import annotations

import sys
from pathlib import Path

from isolated import CRASHED, ERROR, TIMEOUT, run_isolated, serve

REFUSED, REJECTED, RAN_SAME, RAN_DIFFERENT = "refused", "rejected", "ran-same", "ran-different"
__all__ = ["CRASHED", "ERROR", "RAN_DIFFERENT", "RAN_SAME", "REFUSED", "REJECTED", "TIMEOUT", "run_pairs"]


def run_pairs(cases: list[tuple[str, str | Path, str | Path]], timeout: float = 600.0) -> list[tuple[str, str]]:
    """(outcome, message) for each (proposer, target, head), in order."""
    return run_isolated(__file__, ["\t".join(map(str, c)) for c in cases], timeout=timeout)


def _one(line: str) -> tuple[str, str]:
    from specdesk.errors import SpecDeskError
    from specdesk.session import GenerationConfig, ModelSpec, Session
    from specdesk.session.core import check_head, check_model_file

    proposer, target, head = (Path(x) if i else x for i, x in enumerate(line.split("\t")))
    try:
        check_head(check_model_file(target), check_model_file(head))
    except SpecDeskError as e:
        return REFUSED, str(e)
    try:
        s = Session.load(ModelSpec(target, n_ctx=256, threads=1), ModelSpec(head, n_ctx=256, threads=1),
                         remember_costs=False)
    except SpecDeskError as e:
        return REJECTED, str(e)
    try:
        prompt = s.raw_prompt("the of and to in is")
        alone = s.run(prompt, GenerationConfig(proposer="none", max_tokens=8)).tokens
        spec = s.run(prompt, GenerationConfig(proposer=proposer, k=3, p_min=0.0, max_tokens=8))
    except SpecDeskError as e:
        return REJECTED, str(e)
    finally:
        s.close()
    return (RAN_SAME if spec.tokens == alone else RAN_DIFFERENT), f"{spec.stats.drafted} drafted"


def main() -> int:
    return serve(_one)


if __name__ == "__main__":
    sys.exit(main())
