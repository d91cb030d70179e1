"""Run GGUF files with MTP heads, many per process, isolated from pytest.

``run_many(paths)`` (used by tests/integration/test_mtp_hostile.py) runs this file as a
worker of isolated.py, one path per item: an abort is a result attributed to its file
(``crashed``, ``timeout``), never a crash of pytest.

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

import sys
from dataclasses import replace
from pathlib import Path

from isolated import CRASHED, ERROR, EXITED, TIMEOUT, run_isolated, serve

MTP, TRUNK, REFUSED = "mtp", "trunk", "refused"
LOADED, REJECTED = "loaded", "rejected"
PROMPT = "the of and to in is"
__all__ = ["CRASHED", "ERROR", "EXITED", "LOADED", "MTP", "REFUSED", "REJECTED", "TIMEOUT", "TRUNK", "run_many"]


def run_many(paths: list[str | Path], mode: str = "session", timeout: float = 300.0,
             confirm: bool = True) -> dict[str, tuple[str, str]]:
    """path -> (outcome, message) for every path (see the module's doc for the outcomes).
    ``confirm=False``: a death is not run again alone (for files expected to abort)."""
    todo = [str(p) for p in paths]
    return dict(zip(todo, run_isolated(__file__, todo, args=[mode], timeout=timeout, confirm=confirm)))


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
    return serve(_raw if mode == "raw" else _session)


if __name__ == "__main__":
    sys.exit(main())
