"""How a session's models roll back, from their files: what a context must be made with
(``n_rs_seq`` snapshots for a target of an architecture that has them; a draft model
decodes a token at a time, which snapshots cannot undo, so it rolls back by checkpoints),
and what that costs (rules.rollback's plan, the engine's counters), for the memory panel,
doctor and the advisor.

Every drafting source (a draft model, the target's MTP heads, lookups) verifies its
drafts in one batch on the target and rolls back its rejected end, so the target's
snapshots serve them all; a source with a context of its own says how that one rolls
back (``DraftSource.rollback_costs``)."""

from __future__ import annotations

from pathlib import Path

from ..library.gguf import validate_gguf
from ..library.gguf.hybrid import recurrent_shape
from ..library.gguf.rules import HYBRID_ARCHITECTURES, RECURRENT_ARCHITECTURES
from ..rules.rollback import DEFAULT_SNAPSHOTS, RollbackPlan, rollback_plan


def plan_of(path: Path, role: str, n_rs_seq: int = DEFAULT_SNAPSHOTS) -> RollbackPlan:
    """How the model in ``path`` rolls back as a ``role`` ("target" or "draft")."""
    g = validate_gguf(path)
    arch = g.architecture or ""
    recurrent = arch in RECURRENT_ARCHITECTURES or arch in HYBRID_ARCHITECTURES
    return rollback_plan(arch, recurrent, recurrent_shape(g) if recurrent else None, n_rs_seq, role)


def context_options(path: Path, role: str) -> dict:
    """What the ``role``'s context must be made with to roll back as planned."""
    plan = plan_of(path, role)
    return {"n_rs_seq": plan.n_rs_seq} if plan.n_rs_seq else {}


def costs_report(session) -> dict:
    """How the session's contexts rolled back so far: the target's, and each draft
    source's own (``DraftSource.rollback_costs``), as dicts (None where a context drops
    positions itself)."""
    t = getattr(session.target.ctx, "rollback_costs", None)
    out: dict = {"target": t.to_dict() if t is not None else None}
    for need, src in session.sources.items():
        c = getattr(src, "rollback_costs", lambda: None)()
        if c is not None:
            out[need.name] = c.to_dict()
    return out
