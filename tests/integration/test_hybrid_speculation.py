"""Speculation on a hybrid target is exact: Qwen3.5's gated delta-net layers keep a
recurrent state that cannot drop positions, and the engine rolls it back by snapshots
(a verify batch of up to 16 drafts), checkpoints (a longer one, and the hybrid draft
model, which decodes a token at a time) or a re-prefill (engine/rollback.py).

On the synthetic qwen35 target (tests/hybrid_models.py: its next token depends on the
recurrent state, so a state rolled back wrongly changes what it says), with a qwen35
draft that disagrees after 15% of the tokens, the target's own MTP head, and n-gram
lookups, at k = 1, 4 and 16 (and 24, past the snapshots):

* T=0: every answer to 20 prompts is identical to target alone's; a context that
  forgets to restore the recurrent state (the control) is caught;
* T>0: every emitted token (not only the first: those after rollbacks too) is drawn from
  the target's distribution given the tokens before it; a chi-square test of their
  probability integral transforms passes, and fails for the control.
"""

from __future__ import annotations

import numpy as np
import pytest
from hybrid_models import GREEDY, conditionals, pit, prompts, run, skip_restore, write_models
from test_sampler_real import ALPHA, CONTROL_ALPHA, chi2_sf

from specdesk.engine.context import Context
from specdesk.session import GenerationConfig, ModelSpec, Session
from specdesk.speculative.sampling import SamplingParams

N_PROMPTS = 20
MAX_TOKENS = 40
T0_CONFIGS = [(p, k) for p in ("draft", "mtp", "ngram") for k in (1, 4, 16)] + [("draft", 24)]
T1 = SamplingParams(temperature=1.0)
T1_RUNS, T1_TOKENS, BINS = 40, 24, 10


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return write_models(tmp_path_factory.mktemp("hybrid"))


@pytest.fixture(scope="module")
def session(models):
    s = Session.load(ModelSpec(models["target"], n_ctx=1024, threads=1), ModelSpec(models["draft"], n_ctx=1024, threads=1),
                     remember_costs=False)
    yield s
    s.close()


@pytest.fixture(scope="module")
def alone(session):
    """Target alone's answers to the prompts."""
    ps = prompts(session, N_PROMPTS)
    return ps, [run(session, p, GenerationConfig(proposer="none", max_tokens=MAX_TOKENS, sampling=GREEDY))[0] for p in ps]


def test_the_target_rolls_back_by_snapshots_and_the_draft_by_checkpoints(session):
    t, d = session.target.ctx.rollback_costs, session.draft.ctx.rollback_costs
    assert (t.kind, t.n_rs_seq) == ("recurrent", 16) and t.snapshot_bytes > 0
    assert (d.kind, d.n_rs_seq) == ("recurrent", 0)
    m = session.memory().model("target")
    assert m.snapshot_bytes == t.snapshot_bytes and m.state_bytes > m.snapshot_bytes


@pytest.mark.parametrize("proposer, k", T0_CONFIGS)
def test_greedy_output_is_target_alones(session, alone, proposer, k):
    ps, base = alone
    costs = session.target.ctx.rollback_costs
    before = (costs.snapshots, costs.restores)
    drafted = accepted = 0
    config = GenerationConfig(proposer=proposer, k=k, max_tokens=MAX_TOKENS, sampling=GREEDY)
    differ = []
    for i, p in enumerate(ps):
        tokens, dr, ac = run(session, p, config)
        drafted, accepted = drafted + dr, accepted + ac
        if tokens != base[i]:
            differ.append(i)
    assert not differ, f"{proposer} k={k}: prompts {differ} differ from target alone"
    assert drafted > 0
    if proposer == "mtp":
        assert accepted == drafted  # the head agrees with the trunk at T=0
    else:
        assert accepted < drafted  # rejections: the target rolled back
        used = (costs.snapshots - before[0], costs.restores - before[1])
        assert used[0 if k <= 16 else 1] > 0, used  # snapshots up to 16 drafts, checkpoints past them


def test_random_heads_roll_back_exactly(models, alone):
    """The MTP heads drafting badly (a random head): rollbacks every step, still target alone's output."""
    ps, base = alone
    s = Session.load(ModelSpec(models["random_heads"], n_ctx=1024, threads=1), remember_costs=False)
    try:
        for k in (1, 4, 16):
            outs = [run(s, p, GenerationConfig(proposer="mtp", k=k, max_tokens=MAX_TOKENS, sampling=GREEDY)) for p in ps[:8]]
            assert [o[0] for o in outs] == base[:8]
            assert sum(o[2] for o in outs) < sum(o[1] for o in outs)
    finally:
        s.close()


def test_a_rollback_that_skips_the_state_restore_is_caught(models, alone):
    """The control: the same target, its attention cache rolled back but its recurrent
    state left as after the rejected tokens; the T=0 comparison sees it."""
    ps, base = alone
    s = Session.load(ModelSpec(models["target"], n_ctx=1024, threads=1), ModelSpec(models["draft"], n_ctx=1024, threads=1),
                     remember_costs=False)
    try:
        skip_restore(s.target.ctx)
        config = GenerationConfig(proposer="draft", k=4, max_tokens=MAX_TOKENS, sampling=GREEDY)
        differ = sum(run(s, p, config)[0] != b for p, b in zip(ps, base))
        assert differ >= N_PROMPTS // 2, f"the broken rollback changed only {differ} of {N_PROMPTS} answers"
    finally:
        s.close()


def _pit_test(session, proposer: str, k: int, seed: int) -> tuple[float, int, int, int]:
    """(p-value, tokens tested, drafted, accepted) of the emitted tokens' PITs against uniform."""
    ref = _reference(session)
    prompt = prompts(session, 1, seed=7)[0]
    rng = np.random.default_rng(seed)
    us, drafted, accepted = [], 0, 0
    for r in range(T1_RUNS):
        config = GenerationConfig(proposer=proposer, k=k, max_tokens=T1_TOKENS, sampling=T1, seed=seed * 1000 + r)
        tokens, dr, ac = run(session, prompt, config)
        drafted, accepted = drafted + dr, accepted + ac
        us.append(pit(conditionals(ref, prompt, tokens), tokens, 1.0, rng))
    u = np.concatenate(us)
    counts = np.bincount(np.minimum((u * BINS).astype(int), BINS - 1), minlength=BINS)
    expected = len(u) / BINS
    stat = float(((counts - expected) ** 2 / expected).sum())
    return chi2_sf(stat, BINS - 1), len(u), drafted, accepted


_REF: dict = {}


def _reference(session) -> Context:
    """A context of the target of its own (plain reset between uses: no rollback involved)."""
    key = id(session)
    if key not in _REF:
        _REF.clear()
        _REF[key] = Context(session.target.model, n_ctx=1024, threads=1)
    return _REF[key]


@pytest.mark.parametrize("proposer, k", [(p, k) for p in ("draft", "mtp", "ngram") for k in (1, 4, 16)])
def test_sampling_follows_the_target_given_every_earlier_token(session, proposer, k):
    pv, n, drafted, accepted = _pit_test(session, proposer, k, seed=11 + k)
    assert 0 < accepted < drafted, (drafted, accepted)  # both branches of the verifier, and rollbacks
    assert pv > ALPHA, f"{proposer} k={k}: {n} tokens, PIT chi-square p={pv:.3g}"


@pytest.mark.parametrize("broken", [False, True])
def test_sampling_with_random_heads_and_its_control(models, broken):
    """A random MTP head is rejected nearly every step, so nearly every token follows a
    rollback: the exact one passes; one that skips the state restore fails (the control
    of the PIT test: with the agreeing drafts above, too few tokens follow a rejection
    to give it power in this many samples)."""
    s = Session.load(ModelSpec(models["random_heads"], n_ctx=1024, threads=1), remember_costs=False)
    try:
        if broken:
            skip_restore(s.target.ctx)
        pv, n, drafted, accepted = _pit_test(s, "mtp", 1, seed=99)
        assert drafted > 0 and accepted < drafted / 2, (drafted, accepted)
        if broken:
            assert pv < CONTROL_ALPHA, f"the broken rollback passed: {n} tokens, p={pv:.3g} ({accepted}/{drafted} accepted)"
        else:
            assert pv > ALPHA, f"random heads: {n} tokens, PIT chi-square p={pv:.3g}"
    finally:
        _REF.clear()
        s.close()
