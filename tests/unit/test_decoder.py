"""The propose/verify loop on a scripted fake backend."""

import itertools

import numpy as np
import pytest

from specdesk.errors import Cancelled
from fakes import FakeBackend, FakeModel, exact_joint, pooled_chi_square
from specdesk.speculative.controller import FixedK
from specdesk.speculative.auto import AutoK
from specdesk.speculative.decoder import speculate
from specdesk.speculative.proposers import (
    DraftModelProposer,
    HybridProposer,
    NgramProposer,
    NoProposer,
)
from specdesk.speculative.sampling import SamplingParams, warp

PROMPT = [1, 2, 3]


GREEDY = SamplingParams()


def run(target, proposer, controller=None, params=GREEDY, max_tokens=40, seed=0, prompt=PROMPT, cancel=None, clock=None):
    return list(
        speculate(
            target,
            proposer,
            controller or FixedK(4),
            prompt,
            params=params,
            max_tokens=max_tokens,
            rng=np.random.default_rng(seed),
            cancel=cancel,
            **({"clock": clock} if clock is not None else {}),
        )
    )


def tokens(steps):
    return [t.token for s in steps for t in s.tokens]


def pair(noise=1.0, n_vocab=8, eog=None):
    tm = FakeModel(n_vocab=n_vocab, seed=0)
    dm = FakeModel(base=tm, seed=1, noise=noise)
    return FakeBackend(tm, eog=eog), FakeBackend(dm, eog=eog)


@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_greedy_speculation_reproduces_target_alone(k):
    t, _ = pair()
    base = tokens(run(t, NoProposer()))
    t2, d2 = pair()
    spec = run(t2, DraftModelProposer(d2, t2.n_vocab, p_min=0.0), FixedK(k))
    assert tokens(spec) == base
    assert sum(s.drafted for s in spec) > 0


def test_greedy_trace_every_token_is_the_verify_pass_argmax():
    t, d = pair()
    for s in run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0)):
        assert [x.token for x in s.tokens] == list(s.target_argmax)


def test_rollback_keeps_target_one_token_behind():
    t, d = pair()
    steps = run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), FixedK(5), max_tokens=30)
    seq = PROMPT + tokens(steps)
    # the context holds every token but the last one (pending)
    assert t.history == seq[:-1]
    # and the draft never holds anything that is not a prefix of seq + its own drafts
    assert d.history[: len(seq) - 2] == seq[: min(len(d.history), len(seq) - 2)]


def test_stats_add_up():
    t, d = pair(noise=2.0)
    steps = run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), FixedK(3), max_tokens=50)
    st = steps[-1].stats
    assert st.accepted <= st.drafted
    assert st.generated == sum(len(s.tokens) for s in steps) == 50
    assert st.drafted == sum(s.drafted for s in steps)
    assert st.accepted == sum(s.accepted for s in steps)
    assert st.steps == len(steps)
    assert sum(st.drafted_per_position) == st.drafted
    assert sum(st.accepted_per_position) == st.accepted
    # acceptance per position can only fall: position i+1 is only accepted after i
    assert all(a >= b for a, b in zip(st.accepted_per_position, st.accepted_per_position[1:]))
    assert st.mean_accepted_length == pytest.approx((st.accepted + st.steps) / st.steps)
    assert 0 < st.acceptance_rate < 1


def test_provenance_kinds():
    t, d = pair(noise=1.5)
    steps = run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), FixedK(3), max_tokens=60)
    kinds = {x.kind for s in steps if s.drafted for x in s.tokens}
    assert kinds == {"accepted", "correction", "bonus"}
    for s in steps:
        ks = [x.kind for x in s.tokens]
        if not s.drafted:  # e.g. the last step, with room for one token only
            assert ks == ["target"] and s.tokens[0].position is None
            continue
        assert ks[:-1] == ["accepted"] * (len(ks) - 1)
        assert ks[-1] == ("bonus" if s.accepted == s.drafted else "correction")
        assert [x.position for x in s.tokens] == list(range(1, len(ks) + 1))


def test_max_tokens_is_exact_even_mid_draft():
    t, d = pair(noise=0.0)  # the draft agrees with everything
    steps = run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), FixedK(8), max_tokens=13)
    assert len(tokens(steps)) == 13
    assert steps[-1].stop_reason == "max_tokens"


def test_stops_at_end_of_generation_token_even_inside_a_draft():
    t, d = pair(noise=0.0)
    base = tokens(run(t, NoProposer(), max_tokens=30))
    eog = base[5]
    t, d = pair(noise=0.0, eog=eog)
    steps = run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), FixedK(8), max_tokens=30)
    out = tokens(steps)
    assert out[-1] == eog and eog not in out[:-1]
    assert steps[-1].stop_reason == "eos"
    assert steps[-1].tokens[-1].text == ""


def test_context_limit_stops_cleanly():
    tm = FakeModel(seed=0)
    t = FakeBackend(tm, n_ctx=12)
    d = FakeBackend(FakeModel(base=tm, seed=1, noise=0.0), n_ctx=12)
    steps = run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), FixedK(8), max_tokens=100)
    assert len(PROMPT) + len(tokens(steps)) <= 13  # the last token need not be evaluated
    assert steps[-1].stop_reason == "context"


def test_cancel_between_steps():
    t, d = pair()
    calls = itertools.count()
    # Stop is checked once in the prompt phase (before the prompt's chunk), then before every step
    steps = run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), FixedK(2), max_tokens=100, cancel=lambda: next(calls) >= 4)
    assert steps[-1].stop_reason == "cancelled"
    assert len([s for s in steps if s.tokens]) == 3


def test_stop_during_the_prompt_raises_cancelled():
    t, d = pair()
    with pytest.raises(Cancelled):
        run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), FixedK(2), max_tokens=100, cancel=lambda: True)


def test_p_min_stops_the_draft_early():
    t, d = pair(noise=3.0)
    steps = run(t, DraftModelProposer(d, t.n_vocab, p_min=0.9), FixedK(6), max_tokens=40)
    assert any(0 < s.drafted < 6 for s in steps) or any(s.drafted == 0 for s in steps)
    for s in steps:
        for x in s.tokens:
            if x.kind == "accepted":
                assert x.q >= 0.9


def test_prefix_reuse_second_turn_evaluates_only_new_tokens():
    t, d = pair()
    first = run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), max_tokens=10)
    turn2 = PROMPT + tokens(first) + [4, 5, 6]
    before = t.evaluated
    steps = run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), prompt=turn2, max_tokens=1)
    # the prefill evaluates the 3 new tokens minus the pending one, plus the last
    # generated token of turn 1 that was never evaluated; step 1 evaluates the pending one
    assert steps[0].stats.prompt_evaluated == 4
    assert t.evaluated - before == 4 + steps[0].drafted


def test_ngram_drafts_from_repetition():
    t = FakeBackend(FakeModel(seed=3))
    base = tokens(run(t, NoProposer(), max_tokens=60))
    t = FakeBackend(FakeModel(seed=3))
    steps = run(t, NgramProposer(), FixedK(4), max_tokens=60)
    assert tokens(steps) == base
    ng = [x for s in steps for x in s.tokens if x.source == "ngram" and x.kind == "accepted"]
    seq = PROMPT + base
    assert ng, "a 2-gram model repeats itself; lookups should be accepted"
    for x in ng:
        assert seq[x.lookup_start] == x.token


def test_hybrid_uses_both_sources():
    t, d = pair(noise=1.0)
    steps = run(t, HybridProposer(DraftModelProposer(d, t.n_vocab, p_min=0.0)), FixedK(3), max_tokens=80)
    assert {s.source for s in steps if s.drafted} == {"ngram", "draft"}
    # the stats count the draft model's own drafts by length, lookups apart
    model = [s.drafted for s in steps if s.drafted and s.source == "draft"]
    lengths = steps[-1].stats.model_draft_lengths
    assert sum(lengths) == len(model)
    assert sum(k * n for k, n in enumerate(lengths, start=1)) == sum(model)


def test_vocab_size_difference_uses_common_range():
    tm = FakeModel(n_vocab=8, seed=0)
    t = FakeBackend(tm)
    # a draft with 2 extra tokens it may never propose
    dm = FakeModel(n_vocab=10, seed=1)
    dm.table = np.concatenate([np.pad(tm.table, ((0, 2), (0, 2), (0, 0))), np.full((10, 10, 2), 50.0, np.float32)], axis=-1)
    d = FakeBackend(dm)
    steps = run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), FixedK(3), max_tokens=20)
    assert all(x.token < 8 for s in steps for x in s.tokens)
    assert all(tok < 8 for s in steps for tok in s.draft_tokens)


# -- exactness at temperature > 0 ---------------------------------------------------------


@pytest.mark.parametrize(
    "params,k",
    [
        (SamplingParams(temperature=1.0), 3),
        (SamplingParams(temperature=0.7, top_k=3, top_p=0.9), 2),
    ],
)
def test_speculative_sampling_follows_the_target_distribution(params, k):
    """Many seeded runs of the first 3 tokens against the exact target distribution."""
    n_vocab, n_tokens, runs = 4, 3, 6000
    tm = FakeModel(n_vocab=n_vocab, seed=5, scale=1.0)
    dm = FakeModel(base=tm, seed=6, noise=1.0)
    exact = exact_joint(tm, params, PROMPT, n_tokens)
    counts = dict.fromkeys(exact, 0)
    t, d = FakeBackend(tm), FakeBackend(dm)
    prop = DraftModelProposer(d, n_vocab, p_min=0.0)
    drafted = accepted = 0
    for seed in range(runs):
        steps = run(t, prop, FixedK(k), params=params, max_tokens=n_tokens, seed=seed)
        combo = tuple(tokens(steps))
        assert combo in counts, f"{combo} has probability 0 under the target"
        counts[combo] += 1
        drafted += steps[-1].stats.drafted
        accepted += steps[-1].stats.accepted
    assert 0 < accepted < drafted  # both branches of the verifier were exercised
    # chi-square over cells with enough expected mass, the rest pooled
    chi2, crit, df, tv = pooled_chi_square(counts, exact, runs)
    assert chi2 < crit, f"chi2 {chi2:.1f} >= {crit:.1f} (df {df}), TV {tv:.3f}"


def test_exactness_check_detects_a_draft_distribution_leak():
    """Control: sampling the draft's own distribution fails the same check."""
    n_vocab, runs = 4, 6000
    params = SamplingParams(temperature=1.0)
    tm = FakeModel(n_vocab=n_vocab, seed=5, scale=1.0)
    dm = FakeModel(base=tm, seed=6, noise=1.0)
    exact = exact_joint(tm, params, PROMPT, 2)
    rng = np.random.default_rng(0)
    counts = dict.fromkeys(exact, 0)
    for _ in range(runs):
        hist = list(PROMPT)
        for _ in range(2):
            hist.append(int(rng.choice(n_vocab, p=warp(dm.logits(hist), params))))
        counts[tuple(hist[-2:])] += 1
    chi2, crit, _, _ = pooled_chi_square(counts, exact, runs)
    assert chi2 > crit


def test_same_seed_same_output():
    params = SamplingParams(temperature=0.9)
    outs = []
    for _ in range(2):
        t, d = pair()
        outs.append(tokens(run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), params=params, seed=42)))
    assert outs[0] == outs[1]


def test_steps_say_why_they_drafted_or_not():
    t, d = pair(noise=0.3)
    steps = run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), AutoK(), max_tokens=30)
    assert steps[0].decision == "draft: first step"
    assert all(s.decision for s in steps)
    st = steps[-1].stats
    assert sum(st.decisions.values()) == st.steps and st.last_decision == steps[-1].decision
    assert st.to_dict()["decisions"] == st.decisions
    steps = run(t, NoProposer(), AutoK(), max_tokens=5)
    assert steps[-1].stats.decisions == {"target alone": 4, "last token": 1}
    steps = run(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), FixedK(3), max_tokens=9)
    assert steps[0].decision == "draft: k=3 fixed"
