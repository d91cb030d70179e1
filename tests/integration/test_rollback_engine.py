"""The engine's rollback of a hybrid context (engine/rollback.py), against llama.cpp.

Random drafts, accepts and far rollbacks on the synthetic qwen35 target, with no
snapshots, a few, and 16: after each, the next token's logits equal those of a fresh
context that read the same tokens. The counters say which way each rollback went. And
the trap the engine's rule avoids: llama.cpp accepts a snapshot rollback over tokens
decoded one at a time (any depth up to n_rs_seq), but only the last batch's states were
written, so it silently restores a stale state.
"""

from __future__ import annotations

import random

import llama_cpp
import numpy as np
import pytest
from hybrid_models import TARGET
from synth.hybrid import write_hybrid_model

from specdesk.engine.context import Context
from specdesk.errors import ContextOverflowError
from specdesk.engine.model import Model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    m = Model(write_hybrid_model(tmp_path_factory.mktemp("rb") / "t.gguf", TARGET))
    yield m
    m.close()


@pytest.fixture(scope="module")
def fresh(model):
    ref = Context(model, n_ctx=512, threads=1)

    def logits(tokens):
        ref.reset()
        return ref.prefill(tokens)

    yield logits
    ref.close()


@pytest.mark.parametrize("n_rs_seq", [0, 4, 16])
def test_random_rollbacks_leave_the_state_a_fresh_context_computes(model, fresh, n_rs_seq):
    rng = random.Random(n_rs_seq)
    ctx = Context(model, n_ctx=512, threads=1, n_rs_seq=n_rs_seq)
    seq = model.tokenize("the of and to in is that it for was on", add_special=False)
    ctx.prefill(seq[:-1], logits=False)
    for i in range(40):
        k = rng.choice([0, 1, 3, 4, 8, 16])
        draft = [rng.randrange(3, 405) for _ in range(k)]
        rows = ctx.eval([seq[-1]] + draft, all_rows=True)
        a = rng.randrange(0, k + 1)
        ctx.rollback(len(seq) + a)  # the verify's rollback
        seq += draft[:a] + [int(rows[a].argmax())]
        if i == 20 or rng.random() < 0.15:  # and sometimes one far back (a new turn), two rollbacks before a decode
            seq = seq[: 3 if i == 20 else rng.randrange(1, len(seq))]  # (3: before the prompt's checkpoint)
            ctx.rollback(len(seq) - 1)
        row = ctx.eval([seq[-1]], all_rows=False)[-1]
        ctx.rollback(len(seq) - 1)
        np.testing.assert_allclose(row, fresh(seq), atol=1e-3)
    c = ctx.rollback_costs
    ctx.close()
    assert c.n_rs_seq == n_rs_seq
    if n_rs_seq:
        assert c.snapshots > 0 and c.snapshot_bytes > 0
    else:
        assert c.snapshots == 0 and c.checkpoints > 0 and c.restores > 0
    assert c.reprefills > 0 and c.replayed > 0  # the far ones, past every checkpoint


def test_snapshots_past_the_last_batch_are_stale_and_not_used(model, fresh):
    """llama.cpp's seq_rm takes a rollback of 3 tokens decoded one at a time (3 <= n_rs_seq)
    and restores a state the last decode did not write; the engine does not use it."""
    seq = model.tokenize("the of and to in is that it for was on", add_special=False)
    raw = Context(model, n_ctx=512, threads=1, n_rs_seq=4)
    raw._guard = None  # llama_memory_seq_rm alone
    raw.prefill(seq[:6], logits=False)
    for t in seq[6:10]:
        raw.eval([t], all_rows=False)
    mem = llama_cpp.llama_get_memory(raw.ptr)
    assert llama_cpp.llama_memory_seq_rm(mem, 0, 7, -1)  # accepted...
    del raw.history[7:]
    stale = raw.eval([seq[7]], all_rows=False)[-1]
    assert np.abs(stale - fresh(seq[:8])).max() > 0.1  # ...and wrong
    raw.close()

    ctx = Context(model, n_ctx=512, threads=1, n_rs_seq=4)
    ctx.prefill(seq[:6], logits=False)
    for t in seq[6:10]:
        ctx.eval([t], all_rows=False)
    ctx.rollback(7)
    np.testing.assert_allclose(ctx.eval([seq[7]], all_rows=False)[-1], fresh(seq[:8]), atol=1e-3)
    assert ctx.rollback_costs.snapshots == 0 and ctx.rollback_costs.restores == 1  # the prefill's checkpoint
    ctx.close()


def test_a_refused_eval_keeps_the_owed_rollback(model, fresh):
    seq = model.tokenize("the of and to in", add_special=False)
    ctx = Context(model, n_ctx=256, threads=1)
    ctx.prefill(seq, logits=False)
    ctx.eval([7, 8, 9])
    ctx.rollback(len(seq) + 1)  # owed: a restore and a replay, merged into the next decode
    with pytest.raises(ContextOverflowError):
        ctx.eval([10] * 300)  # past the context: nothing decoded
    assert ctx.history == seq + [7]
    np.testing.assert_allclose(ctx.eval([11], all_rows=False)[-1], fresh(seq + [7, 11]), atol=1e-3)
    ctx.close()
