"""The warm-up on real contexts (SmolLM2): each context a configuration runs decodes the
batch shapes its loop will use once, before anything is timed, and nothing the loop
or auto reads learns from those decodes; the contexts hold what they held."""

from __future__ import annotations

import numpy as np
import pytest

from specdesk.session import GenerationConfig, ModelSpec, Session
from specdesk.session.warmup import on_device
from specdesk.speculative.proposers.registry import MTP_HEADS
from specdesk.speculative.warmup import PROMPT_BATCH, target_shapes


@pytest.fixture()
def fresh(smol_path, smol_draft_path):
    s = Session.load(ModelSpec(smol_path, n_ctx=512, threads=1), ModelSpec(smol_draft_path, n_ctx=512, threads=1),
                     remember_costs=False)
    yield s
    s.close()


def _counters(ctx) -> tuple:
    return (ctx.native_seconds, ctx.launch_seconds, ctx.wait_seconds, ctx.evaluated, ctx.logits_bytes_copied,
            ctx.shape_changes, ctx.reshape_cost, ctx.last_batch_first, ctx.last_shape_changed, list(ctx.history))


def test_a_context_warms_each_shape_once_and_counts_none_of_it(fresh):
    ctx = fresh.target.ctx
    prompt = fresh.raw_prompt("The cat sat on the mat.")
    ctx.prefill(prompt[:-1], logits=False)
    row_before = ctx.eval([prompt[-1]], all_rows=False)
    ctx.rollback(len(prompt) - 1)
    before = _counters(ctx)
    seconds = ctx.warm_up([(PROMPT_BATCH, 0), (1, 1), (3, 3), (4, 1)], [1, 2, 3])
    assert seconds > 0
    assert _counters(ctx) == before  # no time, no token, no shape change, the same history
    for n, rows in [(3, 3), (4, 1)]:  # the warmed shapes' set-up was paid: their next use is no first
        ctx._decode([5] * n, rows == n, rows > 0)
        assert not ctx.last_batch_first, (n, rows)
        ctx.rollback(len(prompt) - 1)
    ctx._decode([5, 6], True, True)  # a shape it did not warm is
    assert ctx.last_batch_first
    ctx.rollback(len(prompt) - 1)
    # the positions after what it held were overwritten and rolled back: the same row again
    assert np.array_equal(ctx.eval([prompt[-1]], all_rows=False), row_before)


def test_a_generation_warms_what_its_configuration_runs_once(fresh):
    assert not on_device(fresh.target)  # this machine: the CPU's few shapes
    cfg = GenerationConfig(proposer="draft", k="auto", max_tokens=8)
    prompt = fresh.raw_prompt("Count: one, two, three,")
    steps = list(fresh.generate(prompt, cfg))
    assert fresh.warmed == {("target", s) for s in target_shapes("auto", False)} | {("draft model", ())}
    st = steps[-1].stats
    # the answer's own figures: its prompt and its steps, nothing of the warm-up
    assert fresh.target.ctx.evaluated == st.prompt_evaluated - 1 + sum(s.drafted + 1 for s in steps if s.tokens)
    assert fresh.warm_up(cfg) == 0.0  # warmed once per session
    assert fresh.warm_up(GenerationConfig(proposer="draft", k=5)) > 0  # a new verify batch: only that
    assert ("target", (6, 6)) in fresh.warmed


def test_auto_learns_nothing_from_the_warm_up(fresh):
    """Warmed before the first answer: auto's costs and outcomes are all its own steps'."""
    fresh.warm_up(GenerationConfig())
    assert fresh.auto.costs.verify == {} and fresh.auto.judges.sources == {} and fresh.auto.spent == 0
    assert fresh.target.ctx.evaluated == 0 and fresh.draft.ctx.evaluated == 0


def test_no_warmup_warms_nothing(fresh):
    fresh.warmup = False
    list(fresh.generate(fresh.raw_prompt("Hello"), GenerationConfig(proposer="none", max_tokens=4)))
    assert fresh.warmed == set()


@pytest.mark.parametrize("chained", [False, True], ids=["one head", "chained heads"])
def test_the_mtp_heads_context_is_warmed_when_they_will_draft(tmp_path, chained):
    """The heads' context is made for the first answer that drafts with them: its first
    decodes (the target's hidden states read in a batch, a draft step) run untimed, and
    both contexts hold what they held."""
    from synth.mtp import agreeing, write_step35_model

    path = write_step35_model(tmp_path / "m.gguf", heads=3, agree=True) if chained else agreeing(tmp_path / "m.gguf")
    s = Session.load(ModelSpec(path, n_ctx=256, threads=1), remember_costs=False)
    try:
        prompt = s.raw_prompt("one two three four")
        s.target.ctx.prefill(prompt[:-1], logits=False)
        s.warm_up(GenerationConfig(proposer="none"))
        assert (MTP_HEADS.name, ()) not in s.warmed  # target alone: no heads' context made
        assert s.warm_up(GenerationConfig(proposer="mtp")) > 0
        assert (MTP_HEADS.name, ()) in s.warmed
        heads = s.sources[MTP_HEADS].heads()
        assert heads.native_seconds == 0.0 and heads.history == [] and s.target.ctx.evaluated == len(prompt) - 1
        # making the heads rolled the target back to where its hidden states are known (none
        # were kept before), as a first answer with them does; the warm-up left it there
        assert s.target.ctx.history == []
        steps = list(s.generate(prompt, GenerationConfig(proposer="mtp", k=2, max_tokens=12)))
        assert sum(st.accepted for st in steps) > 0  # the heads draft as before the warm-up
    finally:
        s.close()
