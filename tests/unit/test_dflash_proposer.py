"""The dflash proposer on a scripted block head (tests/fake_heads.py): a block of draft
tokens from one call, exact whatever the head guesses (each position's row is its q at
T>0), in step with the target, and priced by auto as a model source; the eagle3
proposer is the MTP heads' loop under its own source."""

import numpy as np
import pytest

from fake_heads import FakeBlockHead
from fake_mtp import FakeHeads
from fakes import FakeBackend, FakeModel, exact_joint, pooled_chi_square
from specdesk.speculative.controller import FixedK
from specdesk.speculative.decoder import speculate
from specdesk.speculative.proposers import DFlashProposer, Eagle3Proposer, NoProposer, model_sources, registry
from specdesk.speculative.sampling import SamplingParams

PROMPT = [1, 2, 3]
GREEDY = SamplingParams()


def run(target, proposer, controller=None, params=GREEDY, max_tokens=40, seed=0):
    return list(speculate(target, proposer, controller or FixedK(3), PROMPT, params=params, max_tokens=max_tokens,
                          rng=np.random.default_rng(seed)))


def tokens(steps):
    return [t.token for s in steps for t in s.tokens]


@pytest.mark.parametrize("kind", ["dflash", "eagle3"])
def test_an_agreeing_head_is_always_accepted_and_changes_nothing(kind):
    tm = FakeModel(n_vocab=8, seed=0)
    base = tokens(run(FakeBackend(tm), NoProposer()))
    prop = DFlashProposer(FakeBlockHead(tm), 8, p_min=0.0) if kind == "dflash" else Eagle3Proposer(FakeHeads(tm), 8, 0.0)
    steps = run(FakeBackend(tm), prop, FixedK(3))
    assert tokens(steps) == base
    st = steps[-1].stats
    assert st.drafted > 0 and st.accepted == st.drafted
    accepted = [t for s in steps for t in s.tokens if t.kind == "accepted"]
    assert accepted and {t.source for t in accepted} == {kind}  # provenance and per-position acceptance
    assert st.accepted_per_position[:3] == st.drafted_per_position[:3] and st.drafted_per_position[2] > 0


def test_a_head_that_disagrees_changes_nothing_either():
    tm = FakeModel(n_vocab=8, seed=0)
    base = tokens(run(FakeBackend(tm), NoProposer()))
    steps = run(FakeBackend(tm), DFlashProposer(FakeBlockHead(FakeModel(n_vocab=8, seed=7)), 8, p_min=0.0))
    assert tokens(steps) == base
    assert 0 < steps[-1].stats.drafted and steps[-1].stats.accepted < steps[-1].stats.drafted


def test_one_block_per_step_sized_by_the_budget_and_the_trained_block():
    tm = FakeModel(n_vocab=8, seed=0)
    head = FakeBlockHead(tm, block_size=4)
    steps = run(FakeBackend(tm), DFlashProposer(head, 8, p_min=0.0), FixedK(6), max_tokens=20)
    assert {k for _, k in head.blocks} == {3}  # a block of 4 drafts at most 3 tokens, whatever k asks
    assert len(head.blocks) == sum(1 for s in steps if s.drafted)
    assert head.history == (PROMPT + tokens(steps))[: len(head.history)]


def test_the_catch_up_auto_prices_is_what_lies_beyond_a_step_in_sync():
    head = FakeBlockHead(FakeModel(n_vocab=8, seed=0))
    prop = DFlashProposer(head, 8, p_min=0.0)
    seen = []
    seq = [1, 2, 3, 4, 5]
    prop.propose(seq, lambda s, hint: seen.append((s, hint)) or 2, GREEDY, np.random.default_rng(0))
    assert seen == [("dflash", 4)]  # nothing taken in yet: every position the target decoded
    seq2 = seq + [6, 7, 0]
    prop.propose(seq2, lambda s, hint: seen.append((s, hint)) or 0, GREEDY, np.random.default_rng(0))
    assert seen[-1] == ("dflash", 2)  # in step
    seq3 = seq2 + [1, 2, 3, 4]
    prop.propose(seq3, lambda s, hint: seen.append((s, hint)) or 1, GREEDY, np.random.default_rng(0))
    assert seen[-1] == ("dflash", 7)  # behind: a catch-up
    prop.reset()
    assert head.history == []


def test_p_min_cuts_the_block_where_the_head_is_unsure():
    tm = FakeModel(n_vocab=8, seed=0, scale=0.3)
    steps = run(FakeBackend(tm), DFlashProposer(FakeBlockHead(tm), 8, p_min=0.75), FixedK(3))
    assert sum(s.drafted for s in steps) < 3 * len(steps) / 2


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_k=3)])
def test_sampling_a_block_follows_the_target_distribution(params):
    """Each position is sampled from its own row, which is its q: many seeded runs of the
    first 3 tokens against the exact target distribution."""
    n_vocab, n_tokens, runs = 4, 3, 6000
    tm = FakeModel(n_vocab=n_vocab, seed=5, scale=1.0)
    hm = FakeModel(base=tm, seed=6, noise=1.0)
    exact = exact_joint(tm, params, PROMPT, n_tokens)
    counts = dict.fromkeys(exact, 0)
    t, prop = FakeBackend(tm), DFlashProposer(FakeBlockHead(hm), n_vocab, p_min=0.0)
    drafted = accepted = 0
    for seed in range(runs):
        steps = run(t, prop, FixedK(2), params=params, max_tokens=n_tokens, seed=seed)
        counts[tuple(tokens(steps))] += 1
        drafted += steps[-1].stats.drafted
        accepted += steps[-1].stats.accepted
    assert 0 < accepted < drafted
    chi2, crit, df, tv = pooled_chi_square(counts, exact, runs)
    assert chi2 < crit, f"chi2 {chi2:.1f} >= {crit:.1f} (df {df}), TV {tv:.3f}"


def test_the_registry_rows_name_the_heads_as_draft_files():
    for name, need in (("eagle3", registry.EAGLE3_HEAD), ("dflash", registry.DFLASH_HEAD)):
        kind = registry.kind(name)
        assert kind.needs == need and kind.needs_draft and kind.sources == (name,)
        assert registry.drafting_with(need) == name and name in model_sources()
        assert any(p.startswith(name + ":") for p in registry.PRESETS)
