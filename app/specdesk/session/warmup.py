"""A session's contexts warmed before anything is timed: each context that a
configuration runs decodes the batch shapes its loop will use once, untimed, so that
neither the answer's figures nor what ``auto`` learns carry a context's first decode or
a shape's first use (on a GPU: cuBLAS handles, kernels loaded on first launch, a CUDA
graph captured; on a CPU: the weights' pages read in). See
:mod:`specdesk.speculative.warmup` for the shapes, and llama.cpp's own warm-up
(``common_init_from_params``, ``--no-warmup``).

Each (context, shape) is warmed once per session: a later call for the same
configuration costs nothing, one for another configuration warms only what is new
(a draft length's verify batch, the draft model, the MTP heads' context).
"""

from __future__ import annotations

import logging

from ..speculative.proposers import registry
from ..speculative.warmup import draft_shapes, target_shapes
from .config import GenerationConfig

log = logging.getLogger(__name__)

#: The text whose tokens fill the warm-up's batches.
WARM_TEXT = "Warm up the model before anything is timed."


def on_device(lm) -> bool:
    """Whether any of the loaded model's (``lm``, a :class:`~.core.LoadedModel`) or its context's buffers is on a GPU (or another
    machine's device): there the one-offs are large, and every kernel class is warmed."""
    return any(b.on_gpu or b.remote for b in list(lm.model.buffers) + list(lm.ctx.buffers))


def _tokens(lm) -> list[int]:
    return lm.model.tokenize(WARM_TEXT, add_special=True) or [0]


def _draft_length(config: GenerationConfig | None) -> int | str | None:
    """The k whose verify batches the loop will use: None for target alone."""
    if config is None:
        return "auto"
    return None if registry.kind(config.proposer).baseline else config.k


def _warm(session, role: str, lm, shapes: list[tuple[int, int]]) -> float:
    new = [s for s in shapes if (role, s) not in session.warmed]
    if not new:
        return 0.0
    seconds = lm.ctx.warm_up(new, _tokens(lm))
    session.warmed.update((role, s) for s in new)
    return seconds


def warm(session, config: GenerationConfig | None = None) -> float:
    """Warm what ``config`` runs on ``session`` (a :class:`~.core.Session`; None: the target and the draft model, if loaded, with
    ``auto``'s shapes; the MTP heads too where no draft model is loaded and they can
    draft, as the advisor then calibrates them); returns the seconds it took. The
    caller holds the session's lease."""
    t = session.target
    seconds = _warm(session, "target", t, target_shapes(_draft_length(config), on_device(t)))
    kind = registry.kind(config.proposer) if config is not None else None
    if session.draft is not None and (kind is None or kind.needs_draft):
        seconds += _warm(session, "draft", session.draft, draft_shapes())
    heads = kind.needs_mtp if kind is not None else session.draft is None and session.mtp.refusal() is None
    if heads and ("mtp", ()) not in session.warmed and session.mtp.refusal() is None:
        seconds += session.mtp.heads(t.model, t.ctx).warm_up(_tokens(t)[:16])
        session.warmed.add(("mtp", ()))
    if seconds:
        log.info("warmed up in %.2f s", seconds)
    return seconds
