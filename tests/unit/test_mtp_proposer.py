"""The mtp proposer on scripted fake heads: exact whatever the heads guess, in step with
the target as llama.cpp's MTP driver is, and priced by auto as a model source."""

import numpy as np
import pytest

from fake_mtp import FakeHeads
from fakes import FakeBackend, FakeModel, exact_joint, pooled_chi_square
from specdesk.speculative.controller import FixedK
from specdesk.speculative.auto import AutoK
from specdesk.speculative.decoder import speculate
from specdesk.speculative.proposers import MtpProposer, NoProposer, model_sources, registry
from specdesk.speculative.sampling import SamplingParams

PROMPT = [1, 2, 3]
GREEDY = SamplingParams()


def run(target, proposer, controller=None, params=GREEDY, max_tokens=40, seed=0, prompt=PROMPT):
    return list(speculate(target, proposer, controller or FixedK(4), prompt, params=params, max_tokens=max_tokens,
                          rng=np.random.default_rng(seed)))


def tokens(steps):
    return [t.token for s in steps for t in s.tokens]


def test_agreeing_heads_are_always_accepted_and_change_nothing():
    tm = FakeModel(n_vocab=8, seed=0)
    base = tokens(run(FakeBackend(tm), NoProposer()))
    heads = FakeHeads(tm)
    steps = run(FakeBackend(tm), MtpProposer(heads, 8, p_min=0.0), FixedK(4))
    assert tokens(steps) == base
    st = steps[-1].stats
    assert st.drafted > 0 and st.accepted == st.drafted
    accepted = [t for s in steps for t in s.tokens if t.kind == "accepted"]
    assert accepted and {t.source for t in accepted} == {"mtp"}  # the provenance colours and per-position acceptance
    assert st.accepted_per_position[:4] == st.drafted_per_position[:4]


def test_heads_that_disagree_change_nothing_either():
    tm = FakeModel(n_vocab=8, seed=0)
    base = tokens(run(FakeBackend(tm), NoProposer()))
    steps = run(FakeBackend(tm), MtpProposer(FakeHeads(FakeModel(n_vocab=8, seed=7)), 8, p_min=0.0), FixedK(3))
    assert tokens(steps) == base
    st = steps[-1].stats
    assert st.drafted > 0 and st.accepted < st.drafted


def test_drafted_positions_are_read_again_with_the_targets_state():
    """After each step the heads evaluate, in one batch, the tokens the target
    accepted and the new pending token: the drafted positions paired the heads' own
    state, so they are never kept (llama.cpp's driver re-decodes the verify batch)."""
    tm = FakeModel(n_vocab=8, seed=0)
    heads = FakeHeads(tm)
    prop = MtpProposer(heads, 8, p_min=0.0)
    steps = run(FakeBackend(tm), prop, FixedK(3), max_tokens=13)
    prefills = [n for kind, n in heads.batches if kind == "prefill"]
    assert prefills[0] == len(PROMPT) - 1  # the prompt phase: all but the pending token
    # every later prefill: the pending token after a step, plus what that step accepted
    assert prefills[1] == 1
    assert prefills[2:] == [s.accepted + 1 for s in steps[:-1] if s.drafted][: len(prefills) - 2]
    assert [n for kind, n in heads.batches if kind == "eval"] == [1] * (2 * (len(prefills) - 1))
    assert heads.history == (PROMPT + tokens(steps))[: len(heads.history)]


def test_the_catch_up_auto_prices_is_what_lies_beyond_a_step_in_sync():
    tm = FakeModel(n_vocab=8, seed=0)
    heads = FakeHeads(tm)
    prop = MtpProposer(heads, 8, p_min=0.0)
    seen = []
    seq = [1, 2, 3, 4, 5]
    prop.propose(seq, lambda s, hint: seen.append((s, hint)) or 2, GREEDY, np.random.default_rng(0))
    assert seen == [("mtp", 5)]  # nothing read yet: the whole sequence
    seq2 = seq + [6, 7, 0]  # a step that accepted two drafted tokens and added one
    prop.propose(seq2, lambda s, hint: seen.append((s, hint)) or 0, GREEDY, np.random.default_rng(0))
    assert seen[-1] == ("mtp", 2)  # in step: the accepted tokens are part of drafting's cost
    seq3 = seq2 + [1, 2, 3, 4]  # four target-alone steps later (it drafted nothing)
    prop.propose(seq3, lambda s, hint: seen.append((s, hint)) or 1, GREEDY, np.random.default_rng(0))
    assert seen[-1] == ("mtp", 7)  # behind (they read up to 5): a catch-up
    prop.reset()
    assert heads.history == []


def test_chained_heads_draft_one_token_each():
    tm = FakeModel(n_vocab=8, seed=0)
    heads = FakeHeads(tm, max_draft=3)
    steps = run(FakeBackend(tm), MtpProposer(heads, 8, p_min=0.0), FixedK(6), max_tokens=20)
    assert max(s.drafted for s in steps) == 3


def test_p_min_stops_drafting_where_the_heads_are_unsure():
    tm = FakeModel(n_vocab=8, seed=0, scale=0.3)  # flat logits: the top token is rarely above 0.75
    steps = run(FakeBackend(tm), MtpProposer(FakeHeads(tm), 8, p_min=0.75), FixedK(4))
    assert sum(s.drafted for s in steps) < 4 * len(steps) / 2


@pytest.mark.parametrize("params,k", [(SamplingParams(temperature=1.0), 3),
                                      (SamplingParams(temperature=0.7, top_k=3, top_p=0.9), 2)])
def test_sampling_with_the_heads_follows_the_target_distribution(params, k):
    """The heads sample from their own distribution and hand it to the verifier as q:
    many seeded runs of the first 3 tokens against the exact target distribution."""
    n_vocab, n_tokens, runs = 4, 3, 6000
    tm = FakeModel(n_vocab=n_vocab, seed=5, scale=1.0)
    hm = FakeModel(base=tm, seed=6, noise=1.0)  # heads that half agree
    exact = exact_joint(tm, params, PROMPT, n_tokens)
    counts = dict.fromkeys(exact, 0)
    t, heads = FakeBackend(tm), FakeHeads(hm)
    prop = MtpProposer(heads, n_vocab, p_min=0.0)
    drafted = accepted = 0
    for seed in range(runs):
        steps = run(t, prop, FixedK(k), params=params, max_tokens=n_tokens, seed=seed)
        counts[tuple(tokens(steps))] += 1
        drafted += steps[-1].stats.drafted
        accepted += steps[-1].stats.accepted
        assert all(s.draft_tokens == () or s.source == "mtp" for s in steps)
    assert 0 < accepted < drafted
    chi2, crit, df, tv = pooled_chi_square(counts, exact, runs)
    assert chi2 < crit, f"chi2 {chi2:.1f} >= {crit:.1f} (df {df}), TV {tv:.3f}"


def test_auto_prices_mtp_as_a_model_source():
    """A draft that costs a decode per token: auto weighs it as it weighs a draft model."""
    assert "mtp" in model_sources()
    auto = AutoK()
    for _ in range(auto.first_steps):
        auto.budget("mtp", 1, 400)
    assert auto.take_decision() is not None


def test_the_registry_row_builds_it_from_the_session_part():
    kind = registry.kind("mtp")
    assert kind.needs == registry.MTP_HEADS and not kind.needs_draft and kind.sources == ("mtp",)
    assert "mtp" not in registry.WITHOUT_DRAFT and registry.drafting_with(registry.MTP_HEADS) == "mtp"
    tm = FakeModel(n_vocab=8)

    def sources(need):
        if need != registry.MTP_HEADS:
            raise ValueError(f"no {need}")
        return MtpProposer(FakeHeads(tm), 8)

    p = kind.build(registry.Parts(sources=sources, history=None))
    assert p.source == "mtp" and p.drafts
    with pytest.raises(ValueError):
        registry.kind("draft").build(registry.Parts(sources=sources, history=None))
