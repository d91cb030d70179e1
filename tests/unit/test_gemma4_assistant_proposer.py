"""The gemma4-assistant proposer on a scripted fake assistant: exact whatever the
assistant guesses, drafting after the target's own state with nothing to catch up on (its
cache is the target's), and priced by auto as a model source."""

import numpy as np
import pytest

from fake_assistant import FakeAssistant
from fakes import FakeBackend, FakeModel, exact_joint, pooled_chi_square
from specdesk.speculative.auto import AutoK
from specdesk.speculative.controller import FixedK
from specdesk.speculative.decoder import speculate
from specdesk.speculative.proposers import Gemma4AssistantProposer, NoProposer, Source, model_sources, registry
from specdesk.speculative.sampling import SamplingParams

PROMPT = [1, 2, 3]
GREEDY = SamplingParams()


def run(target, proposer, controller=None, params=GREEDY, max_tokens=40, seed=0, prompt=PROMPT):
    return list(speculate(target, proposer, controller or FixedK(4), prompt, params=params, max_tokens=max_tokens,
                          rng=np.random.default_rng(seed)))


def tokens(steps):
    return [t.token for s in steps for t in s.tokens]


def test_an_agreeing_assistant_is_always_accepted_and_changes_nothing():
    tm = FakeModel(n_vocab=8, seed=0)
    base = tokens(run(FakeBackend(tm), NoProposer()))
    t = FakeBackend(tm)
    steps = run(t, Gemma4AssistantProposer(FakeAssistant(tm, t), 8, p_min=0.0), FixedK(4))
    assert tokens(steps) == base
    st = steps[-1].stats
    assert st.drafted > 0 and st.accepted == st.drafted
    accepted = [t for s in steps for t in s.tokens if t.kind == "accepted"]
    assert accepted and {t.source for t in accepted} == {"gemma4-assistant"}  # provenance colours, per-position acceptance
    assert st.accepted_per_position[:4] == st.drafted_per_position[:4]


def test_an_assistant_that_disagrees_changes_nothing_either():
    tm = FakeModel(n_vocab=8, seed=0)
    base = tokens(run(FakeBackend(tm), NoProposer()))
    t = FakeBackend(tm)
    steps = run(t, Gemma4AssistantProposer(FakeAssistant(FakeModel(n_vocab=8, seed=7), t), 8, p_min=0.0), FixedK(3))
    assert tokens(steps) == base
    st = steps[-1].stats
    assert st.drafted > 0 and st.accepted < st.drafted


def test_it_drafts_after_the_targets_state_and_never_catches_up():
    """Each draft is one call with the sequence the target holds plus the pending token
    (the fake checks it), then one call per further token; the prompt phase reads
    nothing, and auto is told there is nothing to catch up on, after steps that drafted
    and after steps that did not."""
    tm = FakeModel(n_vocab=8, seed=0)
    t = FakeBackend(tm)
    a = FakeAssistant(tm, t)
    prop = Gemma4AssistantProposer(a, 8, p_min=0.0)
    assert prop.prepare(PROMPT, lambda s, hint: 4) == 0
    hints = []
    ks = iter([3, 0, 0, 2] * 10)

    class Scripted(FixedK):
        def budget(self, source, hint, limit):
            hints.append((source, hint))
            return super().budget(source, hint, min(limit, next(ks)))

    steps = run(t, prop, Scripted(4), max_tokens=16)
    assert hints and set(hints) == {("gemma4-assistant", 0)}
    assert [kind for kind, _ in a.calls].count("first") == sum(1 for s in steps if s.drafted)
    assert [kind for kind, _ in a.calls].count("next") == sum(s.drafted - 1 for s in steps if s.drafted)
    assert any(not s.drafted for s in steps[:-1]) and tokens(steps) == tokens(run(FakeBackend(tm), NoProposer(),
                                                                                  max_tokens=16))


def test_a_draft_says_it_synced_nothing_and_a_one_token_sequence_drafts_nothing():
    tm = FakeModel(n_vocab=8, seed=0)
    t = FakeBackend(tm)
    t.prefill([5, 6], logits=False)
    prop = Gemma4AssistantProposer(FakeAssistant(tm, t), 8, p_min=0.0)
    d = prop.propose([5, 6, 7], lambda s, h: 3, GREEDY, np.random.default_rng(0))
    assert len(d) == 3 and d.synced == 0 and d.source == "gemma4-assistant" and d.q is None
    t.rollback(0)
    assert len(prop.propose([5], lambda s, h: 3, GREEDY, np.random.default_rng(0))) == 0  # no target state before it


def test_p_min_stops_drafting_where_the_assistant_is_unsure():
    tm = FakeModel(n_vocab=8, seed=0, scale=0.3)  # flat logits: the top token is rarely above 0.75
    t = FakeBackend(tm)
    steps = run(t, Gemma4AssistantProposer(FakeAssistant(tm, t), 8, p_min=0.75), FixedK(4))
    assert sum(s.drafted for s in steps) < 4 * len(steps) / 2


@pytest.mark.parametrize("params,k", [(SamplingParams(temperature=1.0), 3),
                                      (SamplingParams(temperature=0.7, top_k=3, top_p=0.9), 2)])
def test_sampling_with_the_assistant_follows_the_target_distribution(params, k):
    """The assistant samples from its own distribution and hands it to the verifier as
    q: many seeded runs of the first 3 tokens against the exact target distribution."""
    n_vocab, n_tokens, runs = 4, 3, 6000
    tm = FakeModel(n_vocab=n_vocab, seed=5, scale=1.0)
    am = FakeModel(base=tm, seed=6, noise=1.0)  # an assistant that half agrees
    exact = exact_joint(tm, params, PROMPT, n_tokens)
    counts = dict.fromkeys(exact, 0)
    t = FakeBackend(tm)
    prop = Gemma4AssistantProposer(FakeAssistant(am, t), n_vocab, p_min=0.0)
    drafted = accepted = 0
    for seed in range(runs):
        steps = run(t, prop, FixedK(k), params=params, max_tokens=n_tokens, seed=seed)
        counts[tuple(tokens(steps))] += 1
        drafted += steps[-1].stats.drafted
        accepted += steps[-1].stats.accepted
    assert 0 < accepted < drafted
    chi2, crit, df, tv = pooled_chi_square(counts, exact, runs)
    assert chi2 < crit, f"chi2 {chi2:.1f} >= {crit:.1f} (df {df}), TV {tv:.3f}"


def test_auto_prices_the_assistant_as_a_model_source():
    src = Source.of("gemma4-assistant")
    assert src in model_sources() and src.is_model and not src.is_lookup and src.code == "g"
    auto = AutoK()
    for _ in range(auto.first_steps):
        auto.budget("gemma4-assistant", 0, 400)
    assert auto.take_decision() is not None


def test_the_registry_row_builds_it_from_the_draft_file():
    kind = registry.kind("gemma4-assistant")
    assert kind.needs == registry.GEMMA4_ASSISTANT and kind.needs_draft and kind.sources == ("gemma4-assistant",)
    assert registry.drafting_with(registry.GEMMA4_ASSISTANT) == "gemma4-assistant"
    tm = FakeModel(n_vocab=8)
    t = FakeBackend(tm)

    def sources(need):
        if need != registry.GEMMA4_ASSISTANT:
            raise ValueError(f"no {need}")
        return Gemma4AssistantProposer(FakeAssistant(tm, t), 8)

    p = kind.build(registry.Parts(sources=sources, history=None))
    assert isinstance(p, Gemma4AssistantProposer) and p.drafts
