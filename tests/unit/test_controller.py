"""The auto draft length: decisions from measured costs and acceptance."""

from specdesk.speculative.controller import AutoK, FixedK, StepCost, ngram_bucket
from specdesk.speculative.costmodel import CostModel, PositionAcceptance


def _auto(verify: dict, draft: dict | None = None) -> AutoK:
    cm = CostModel()
    for b, v in verify.items():
        cm.observe_verify(b, v)
    for k, v in (draft or {}).items():
        cm.observe_draft(k, v)
    return AutoK(costs=cm)


def _accept(auto: AutoK, source: str, k: int, n: int, times: int, match: int | None = None) -> None:
    for _ in range(times):
        auto.observe(StepCost(source, match, k, n, 0.0, auto.costs.verify_cost(k + 1) or 0.0))


def test_first_step_measures_target_alone():
    assert AutoK().budget("draft", None, 8) == 0


def test_explores_longer_batches_when_only_short_ones_were_measured():
    # b=2 looked expensive; nothing longer was measured: the optimistic plan must
    # still try a longer draft rather than extrapolate b=2's slope forever
    auto = _auto({1: 0.10, 2: 0.19})
    k = auto.budget("ngram", 10, 12)
    assert k >= 3


def test_uses_the_measured_concave_curve():
    # a memory-bound machine: verifying 5 tokens costs 1.8 steps
    auto = _auto({1: 0.10, 2: 0.144, 3: 0.167, 4: 0.14, 5: 0.18, 6: 0.215, 7: 0.254, 8: 0.313, 9: 0.346},
                 {k: 0.044 * k for k in range(1, 9)})
    _accept(auto, "draft", 8, 8, 60)  # the draft is always right
    k = auto.budget("draft", None, 16)
    assert 3 <= k <= 8
    rates = auto.plan("draft", None, 16)[1]
    assert rates[k] > rates[0] * 1.2


def test_stops_drafting_when_even_a_perfect_draft_cannot_pay():
    # a compute-bound CPU: verify b costs b steps, a draft token 0.6 of a step
    auto = _auto({b: 0.1 * b for b in range(1, 10)}, {k: 0.06 * k for k in range(1, 9)})
    _accept(auto, "draft", 4, 4, 5)
    assert auto.budget("draft", None, 8) == 0
    # and does not probe again: the optimistic plan agrees
    assert auto.plan("draft", None, 8, z=auto.z)[0] == 0


def test_ngram_drafts_long_only_where_matches_are_long():
    auto = _auto({1: 0.10, 2: 0.15, 3: 0.17, 4: 0.19, 5: 0.21, 6: 0.23, 7: 0.25, 8: 0.27, 9: 0.29, 13: 0.37})
    _accept(auto, "ngram", 6, 0, 40, match=1)  # one-token matches never hold
    _accept(auto, "ngram", 8, 8, 40, match=20)  # long matches always do
    assert auto.budget("ngram", 1, 12) == 0
    assert auto.budget("ngram", 20, 12) >= 6
    assert ngram_bucket(20) == 16 and ngram_bucket(1) == 1


def test_acceptance_is_conditional_on_reaching_a_position():
    acc = PositionAcceptance(decay=1.0)
    acc.record(4, 1)  # positions 1 and 2 reached, 1 accepted
    acc.record(4, 4)
    assert acc.reached == [2, 2, 1, 1] and acc.accepted == [2, 1, 1, 1]


def test_acceptance_follows_a_change_of_text():
    """Counts decay: after code (always accepted) comes prose (never), and within a
    few dozen steps the estimate is low enough for auto to stop drafting."""
    acc = PositionAcceptance()
    for _ in range(300):
        acc.record(4, 4)
    assert acc.alphas(1)[0] > 0.95
    for _ in range(40):
        acc.record(4, 0)
    assert acc.alphas(1)[0] < 0.35
    frozen = PositionAcceptance(decay=1.0)
    for _ in range(300):
        frozen.record(4, 4)
    for _ in range(40):
        frozen.record(4, 0)
    assert frozen.alphas(1)[0] > 0.85  # without decay the past would dominate


def test_fixed_k_respects_the_limit():
    assert FixedK(4).budget("draft", None, 2) == 2
    assert FixedK(4).budget("ngram", 3, 10) == 4


def test_a_draft_that_fell_behind_costs_its_catch_up():
    """After a long n-gram streak the draft model must evaluate the tokens it missed
    before it can draft; auto prices that instead of drafting blindly."""
    auto = _auto({1: 0.10, 2: 0.11, 3: 0.12, 4: 0.13, 5: 0.14}, {k: 0.02 * k for k in range(1, 9)})
    _accept(auto, "draft", 4, 4, 40)
    assert auto.budget("draft", 1, 8) >= 3
    # learn the catch-up cost: a 4-token draft that first caught up on 30 tokens took 0.6 s more
    for _ in range(5):
        auto.observe(StepCost("draft", None, 4, 4, 0.08 + 0.6, 0.14, draft_synced=32))
    assert auto.catch_up.value > 0.015
    assert auto.budget("draft", 200, 8) == 0  # 200 tokens behind: catching up costs more than it saves
    assert auto.budget("draft", 2, 8) >= 3  # caught up: draft as before


def test_draft_proposer_reports_how_far_behind_it_is():
    import numpy as np

    from fakes import FakeBackend, FakeModel
    from specdesk.speculative.proposers import DraftModelProposer
    from specdesk.speculative.sampling import SamplingParams

    d = FakeBackend(FakeModel(seed=1))
    prop = DraftModelProposer(d, d.n_vocab, p_min=0.0)
    seen = []
    prop.propose([1, 2, 3, 4, 5], lambda s, hint: seen.append(hint) or 2, SamplingParams(), np.random.default_rng(0))
    assert seen == [5] and d.history[:5] == [1, 2, 3, 4, 5]
    prop.propose([1, 2, 3, 4, 5, 6, 7, 8, 9], lambda s, hint: seen.append(hint) or 0, SamplingParams(), np.random.default_rng(0))
    # it held 1..5 plus its own first drafted token: 4 new tokens to evaluate (from the 6th on), or 5 if its draft differed
    assert seen[1] in (4, 5)


def test_probes_back_off_when_they_do_not_pay():
    """Acceptance around break-even: the estimate says no, the optimistic bound says
    maybe. auto probes, and waits twice as long after every probe that changes
    nothing."""
    auto = _auto({b: 0.1 + 0.045 * (b - 1) for b in range(1, 10)}, {k: 0.03 * k for k in range(1, 9)})
    for i in range(60):  # two thirds accepted: k = 1 needs three quarters to pay here
        auto.observe(StepCost("draft", None, 1, 1 if i % 3 else 0, 0.03, 0.145))
    assert auto.plan("draft", 1, 8)[0] == 0 and auto.plan("draft", 1, 8, z=auto.z)[0] > 0
    probes = [step for step in range(300) if auto.budget("draft", 1, 8)]
    assert probes == [0, 8, 24, 56, 120, 248]


def test_fixed_k_runs_teach_the_auto_controller():
    auto = AutoK()
    fixed = FixedK(3, teach=auto)
    fixed.observe(StepCost("", None, 0, 0, 0.0, 0.1))
    fixed.observe(StepCost("draft", None, 3, 2, 0.05, 0.14))
    assert fixed.budget("draft", None, 8) == 3  # a fixed k stays fixed
    assert auto.costs.step_cost == 0.1 and auto.costs.verify_cost(4) == 0.14 and auto.costs.draft_cost(3) == 0.05
    assert auto.acceptance["draft"].reached  # and the acceptance is recorded


def test_a_catch_up_is_priced_once_over_the_answer_left():
    """Resuming after a pause pays the catch-up once, then drafts in sync: with a long
    answer ahead it is worth it; with a few tokens left it is not."""
    auto = _auto({1: 0.10, 2: 0.11, 3: 0.12, 4: 0.13, 5: 0.14}, {k: 0.02 * k for k in range(1, 9)})
    _accept(auto, "draft", 4, 4, 40)
    for _ in range(5):
        auto.observe(StepCost("draft", None, 4, 4, 0.08 + 0.6, 0.14, draft_synced=32))
    assert auto.budget("draft", 20, 400) >= 3  # 20 behind, 400 tokens to go: resume
    assert auto.budget("draft", 20, 4) == 0  # 20 behind, 4 tokens to go: not worth it
