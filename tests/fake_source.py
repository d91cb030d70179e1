"""A draft source that no SpecDesk module knows, registered by a test: the way a new
kind of draft comes in (one registry row, one Source, one implementation of the
session's draft-source interface), with no edit to ui/, cli/ or bench/.

"second-look" is the target drafting for itself in a second context of its own model:
real llama.cpp decodes, exact as every source, and at temperature 0 every draft token
is the target's own argmax, so nearly every one is accepted. Nothing about it is
useful beyond proving the way in.

:func:`register` adds it to this process; :func:`main` is a ``specdesk`` entry point
that registers it first (a subprocess runs it: ``python -c "import fake_source;
fake_source.main()" serve ...``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from specdesk.engine.context import Context
from specdesk.session import source_table
from specdesk.session.sources import warm_up_context
from specdesk.speculative.proposers import DraftModelProposer, registry
from specdesk.speculative.proposers.base import SOURCES, Source, register_source
from specdesk.system.memory import ModelMemory

NAME = "second-look"
NEED = registry.Need("second look of the target", in_draft_file=False)
SOURCE = Source(NAME, model=True, code="s", label="second look", what="the target itself, again", colour="#d0f0ff")
KIND = registry.ProposerKind(
    NAME, label="The target, looking twice (a test's source)", build=lambda parts: parts.source(NEED), sources=(NAME,),
    needs=NEED, presets=(registry.Preset("k=2", checked=True, bench=True),),
)


class SecondLook:
    """The target's own model in a second context, as a draft source."""

    need = NEED

    def __init__(self, path: Path) -> None:
        self.path = path
        self._target = None
        self._ctx: Context | None = None

    def attach(self, target) -> "SecondLook":
        self._target = target
        return self

    def _context(self) -> Context:
        if self._ctx is None:
            t = self._target
            self._ctx = Context(t.model, n_ctx=t.ctx.n_ctx, threads=t.ctx.threads)
        return self._ctx

    @property
    def source(self) -> Source:
        return SOURCE

    def refusal(self) -> str | None:
        return None if self._target is not None else "no target is loaded"

    def proposer(self, config):
        return DraftModelProposer(self._context(), self._target.model.n_vocab, p_min=config.p_min, source=SOURCE)

    def use(self) -> None:
        pass

    def idle(self) -> None:
        pass

    def rewind(self, n_seq: int, k: int) -> None:
        ctx = self._context()
        ctx.rollback(min(len(ctx.history), max(0, n_seq - 1)))

    def holds(self):
        return tuple(self._ctx.history) if self._ctx is not None else None

    def reset(self) -> None:
        if self._ctx is not None:
            self._ctx.rollback(0)

    def warm_up(self) -> None:
        warm_up_context(self._target.model, self._context())

    def memory(self):
        if self._ctx is None:
            return None
        kv = sum(b.bytes for b in self._ctx.buffers if b.kind == "KV")
        return ModelMemory(role="draft", path=str(self.path), weights_bytes=0, kv_bytes=kv, n_ctx=self._ctx.n_ctx,
                           n_gpu_layers=0)

    def close(self) -> None:
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None


def register() -> None:
    """Add the source, its row and its way into a session, to this process."""
    if NAME in registry.REGISTRY:
        return
    register_source(SOURCE)
    registry.register(KIND)
    source_table.register_own(SecondLook)


def unregister() -> None:
    registry.unregister(NAME)
    SOURCES.pop(NAME, None)
    source_table.unregister_own(SecondLook)


def main() -> None:
    """``specdesk`` with the source registered (argv as the command line gives it)."""
    from specdesk.__main__ import main as specdesk_main

    register()
    sys.exit(specdesk_main(sys.argv[1:]))
