"""A session's contexts warmed before anything is timed: each context that a
configuration runs decodes the batch shapes its loop will use once, untimed, so that
neither the answer's figures nor what ``auto`` learns carry a context's first decode or
a shape's first use (on a GPU: cuBLAS handles, kernels loaded on first launch, a CUDA
graph captured; on a CPU: the weights' pages read in). See
:mod:`specdesk.speculative.warmup` for the shapes, and llama.cpp's own warm-up
(``common_init_from_params``, ``--no-warmup``).

Each target shape and each draft source is warmed once per session: a later call for
the same configuration costs nothing, one for another configuration warms only what is
new (a draft length's verify batch, the draft model, the MTP heads' context).
"""

from __future__ import annotations

import logging

from ..speculative.proposers import registry
from ..speculative.warmup import target_shapes
from .config import GenerationConfig
from .sources import warm_up_context

log = logging.getLogger(__name__)

def on_device(lm) -> bool:
    """Whether any of the buffers of the loaded model ``lm`` (a :class:`~.core.LoadedModel`)
    or of its context is on a GPU (or another machine's device): there the one-offs are
    large, and every kernel class is warmed."""
    return any(b.on_gpu or b.remote for b in list(lm.model.buffers) + list(lm.ctx.buffers))


def _draft_length(config: GenerationConfig | None) -> int | str | None:
    """The k whose verify batches the loop will use: None for target alone."""
    if config is None:
        return "auto"
    return None if registry.kind(config.proposer).baseline else config.k


def _needs(session, config: GenerationConfig | None) -> list:
    """The sources ``config`` drafts with (None: every one the session has that can)."""
    if config is None:
        return [n for n, src in session.sources.items() if src.refusal() is None]
    need = registry.kind(session.proposer_name(config)).needs
    return [need] if need is not None and need in session.sources and session.sources[need].refusal() is None else []


def warm(session, config: GenerationConfig | None = None) -> float:
    """Warm what ``config`` runs on ``session`` (a :class:`~.core.Session`): the target
    with the shapes its loop will use, and the source it drafts with (its
    ``DraftSource.warm_up``); None: the target with ``auto``'s shapes and every source
    that can draft (a calibration measures them). Returns the seconds it took. The
    caller holds the session's lease."""
    t = session.target
    shapes = [s for s in target_shapes(_draft_length(config), on_device(t)) if ("target", s) not in session.warmed]
    seconds = warm_up_context(t.model, t.ctx, shapes) if shapes else 0.0
    session.warmed.update(("target", s) for s in shapes)
    for need in _needs(session, config):
        if (need.name, ()) not in session.warmed:
            seconds += session.sources[need].warm_up() or 0.0
            session.warmed.add((need.name, ()))
    if seconds:
        log.info("warmed up in %.2f s", seconds)
    return seconds
