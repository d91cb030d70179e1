"""Rollbacks across a sliding window's edge are exact.

llama.cpp 0.3.36's SWA cache is a ring of ``PAD(n_swa + n_ubatch, 256)`` cells
(src/llama-kv-cache-iswa.cpp); once full, each new token takes the cell of the oldest
position that has slid out of the window (src/llama-kv-cache.cpp ``find_slot``). A
rollback deeper than the ring's slack then needs positions whose cells were taken: the
window comes back short and the logits change (the control below). The engine checks
the window's first position after every rollback (engine/rollback.py) and rebuilds a
short window from a checkpoint or by decoding again. A verify batch never loses one (its
cells are found from the position before it), nor does a draft's rollback of at most a
few dozen tokens (the ring's slack is n_ubatch), so drafting needs no full-size cache
(``swa_full``); only a conversation taken back far (an edited earlier message) meets it.

The model is the synthetic Gemma 3 of tools/synth/swa.py: its next token follows the
mean sign of the tokens in its 7-position window, so a window that lost a position
changes the logits.
"""

from __future__ import annotations

import sys
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from hybrid_models import GREEDY, WORDS  # noqa: E402
from synth.swa import SwaSpec, write_swa_model  # noqa: E402

from specdesk.engine.context import Context  # noqa: E402
from specdesk.engine.model import Model  # noqa: E402
from specdesk.session import GenerationConfig, ModelSpec, Session  # noqa: E402

N_BATCH = 16  # a ring of 256 cells: it wraps after 256 tokens
DEPTHS = (2, 100, 240, 249, 250, 251, 260, 400)


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("swa")
    return {"target": write_swa_model(d / "swa.gguf", SwaSpec()),
            "draft": write_swa_model(d / "swa-draft.gguf", SwaSpec(flip=0.15, seed=5))}


@pytest.fixture(scope="module")
def model(paths):
    m = Model(paths["target"])
    yield m
    m.close()


def _sequence(n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(3).integers(3, 405, n)]


def _rollbacks(model: Model, guarded: bool) -> dict[int, float]:
    """Decode 600 tokens one at a time, roll back by each depth, decode the next one:
    how far its logits are from a full-size cache's that read the same tokens."""
    seq = _sequence(700)
    ctx = Context(model, n_ctx=1024, n_batch=N_BATCH, threads=1)
    ref = Context(model, n_ctx=1024, n_batch=N_BATCH, threads=1, swa_full=True)
    assert ctx.rollback_costs is not None and ref.rollback_costs is None  # a full-size cache needs no care
    if not guarded:
        ctx._guard = None  # llama_memory_seq_rm alone, as before
    ctx.prefill(seq[:50], logits=False)
    for t in seq[50:600]:
        ctx.eval([t], all_rows=False)
    out = {}
    for back in DEPTHS:
        n = 600 - back
        ctx.rollback(n)
        row = ctx.eval([seq[n]], all_rows=False)[-1]
        ref.reset()
        out[back] = float(np.abs(row - ref.prefill(seq[: n + 1])).max())
        for t in seq[n + 1: 600]:
            ctx.eval([t], all_rows=False)
    costs = ctx.rollback_costs
    ctx.close()
    ref.close()
    return out, costs


def test_the_window_comes_back_short_after_a_deep_rollback_without_care(model):
    """The control: llama.cpp's own rollback keeps the window up to the ring's slack, and
    loses it past that."""
    diffs, _ = _rollbacks(model, guarded=False)
    assert diffs[2] == diffs[100] == 0.0
    assert all(diffs[b] > 0.1 for b in DEPTHS if b >= 250), diffs


def test_every_rollback_across_the_edge_gives_the_logits_of_a_full_cache(model):
    diffs, costs = _rollbacks(model, guarded=True)
    assert all(d == 0.0 for d in diffs.values()), diffs
    assert costs.lost_windows >= 4 and costs.restores + costs.reprefills == costs.lost_windows


CUTS = (30, 40, 50, 60)


def _conversations(paths, guarded: bool) -> list[list[int]]:
    """A first turn that runs past the ring (the cells of its early positions are reused),
    then, for each cut, a second turn that edits the first's prompt there: both contexts
    roll back across the window's edge. The second turns' answers, at T=0."""
    s = Session.load(ModelSpec(paths["target"], n_ctx=2048, threads=1),
                     ModelSpec(paths["draft"], n_ctx=2048, threads=1), remember_costs=False)
    if not guarded:
        s.target.ctx._guard = s.draft.ctx._guard = None
    try:
        first = s.raw_prompt(" ".join(np.random.default_rng(1).choice(WORDS, 60)), parse_special=False)
        answers = []
        for cut in CUTS:
            s.run(first, GenerationConfig(proposer="draft", k=4, max_tokens=900, sampling=GREEDY))
            second = first[:cut] + [first[cut] ^ 1]
            answers.append((second, s.run(second, GenerationConfig(proposer="draft", k=4, max_tokens=20,
                                                                   sampling=GREEDY)).tokens))
        if guarded:
            assert s.target.ctx.rollback_costs.lost_windows >= len(CUTS)  # every rollback crossed the edge
        return answers
    finally:
        s.close()


def test_a_conversation_taken_back_past_the_window_answers_as_target_alone(paths):
    """A sliding-window target with a sliding-window draft, at T=0: every answer after a
    rollback across the window's edge is the one a fresh target alone gives; without the
    engine's care (the control), some are not."""
    alone = Session.load(ModelSpec(paths["target"], n_ctx=2048, threads=1), remember_costs=False)
    try:
        def fresh(prompt):
            alone.reset()
            return alone.run(prompt, GenerationConfig(proposer="none", max_tokens=20, sampling=GREEDY)).tokens

        exact = _conversations(paths, guarded=True)
        assert [a for _, a in exact] == [fresh(p) for p, _ in exact]
        careless = _conversations(paths, guarded=False)
        assert sum(a != fresh(p) for p, a in careless) >= 2
    finally:
        alone.close()


def test_the_swa_ring_is_as_measured(model):
    """The ring's size the docstring's arithmetic rests on: the SWA cache holds the
    window plus n_ubatch, padded to 256 (read back from llama.cpp's first position)."""
    ctx = Context(model, n_ctx=1024, n_batch=N_BATCH, threads=1)
    ctx.prefill(_sequence(400), logits=False)
    first = llama_cpp.llama_memory_seq_pos_min(llama_cpp.llama_get_memory(ctx.ptr), 0)
    ctx.close()
    assert first == 400 - 256
