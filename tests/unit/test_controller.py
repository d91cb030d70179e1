"""The auto draft length: decisions from measured costs and acceptance."""

from specdesk.speculative.controller import AutoK, FixedK, StepCost, ngram_bucket
from specdesk.speculative.costmodel import CostModel, PositionAcceptance, RunningCost


def _auto(verify: dict, draft: dict | None = None) -> AutoK:
    cm = CostModel()
    for b, v in verify.items():
        cm.observe_verify(b, v)
    for k, v in (draft or {}).items():
        cm.observe_draft(k, v)
    return AutoK(costs=cm)


def _accept(auto: AutoK, source: str, k: int, n: int, times: int, match: int | None = None) -> None:
    for _ in range(times):
        seconds = auto.costs.draft_cost(k) if source == "draft" else 0.0  # as measured: no news about costs
        auto.observe(StepCost(source, match, k, n, seconds, auto.costs.verify_cost(k + 1) or 0.0))


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


# -- the perfect-draft bound and the catch-up price -------------------------------------

# This kind of machine (2 CPU cores, the default pair): a verify batch of b tokens costs
# about 1 + 0.77 (b - 1) target steps (4 tokens: 3.3 steps) and a draft step 0.61 of one.
CPU_VERIFY = {b: 0.037 * (1 + 0.767 * (b - 1)) for b in range(1, 10)}
CPU_DRAFT = {k: 0.037 * 0.61 * k for k in range(1, 9)}
# A GPU: a verify batch costs about one step, a draft step a tenth of one.
GPU_VERIFY = {b: 0.020 * (1 + 0.05 * (b - 1)) for b in range(1, 10)}
GPU_DRAFT = {k: 0.002 * k for k in range(1, 9)}


def test_no_probe_when_even_a_perfect_draft_cannot_pay():
    auto = _auto(CPU_VERIFY, CPU_DRAFT)
    assert auto.perfect_bound("draft") < 0.9  # the advisor's "always right would reach only …"
    _accept(auto, "draft", 4, 4, 3)  # even a draft that was always right so far
    ks = []
    for _ in range(400):
        ks.append(auto.budget("draft", 2, 200))
        d = auto.take_decision()
        assert d is not None and d.reason == "bound<1" and str(d) == "draft: bound<1"
        auto.observe(StepCost("", None, 0, 0, 0.0, CPU_VERIFY[1]))  # target steps go on being measured
    assert sum(ks) == 0
    assert auto.peek("draft", 1, 200) == 0  # nor does the draft evaluate the prompt up front
    # n-gram lookups cost nothing to propose: on the same machine they still may pay
    assert auto.perfect_bound("ngram") > 1.1 and not auto.stopped("ngram")


def test_a_stop_holds_through_load_swings_and_is_rechecked_when_batches_cost_less():
    auto = _auto({b: 0.10 * (1 + 1.04 * (b - 1)) for b in range(1, 10)}, {k: 0.002 * k for k in range(1, 9)})
    assert 0.9 < auto.perfect_bound("draft") < 1.0 and auto.budget("draft", 2, 200) == 0
    # the target step swings 30% with the machine's load: next to the batch costs
    # measured before, the bound would seem above 1, but no one measured a change of
    # ratio (the batches would have slowed down alike): still stopped, no probe
    for _ in range(20):
        auto.observe(StepCost("", None, 0, 0, 0.0, 0.13))
    assert auto.perfect_bound("draft") > 1.0
    assert [auto.budget("draft", 2, 200) for _ in range(50)] == [0] * 50
    assert auto.take_decision().reason == "bound<1"
    # a 10% change in the batch costs (n-gram steps measure them too) is noise
    for _ in range(3):
        for b in range(2, 10):
            auto.costs.observe_verify(b, 0.92 * auto.costs.verify_cost(b))
    assert auto.budget("draft", 2, 200) == 0
    # batches measured 30% cheaper: a material change; look again, and probe
    for _ in range(30):
        for b in range(2, 10):
            auto.costs.observe_verify(b, 0.10 * 0.7 * (1 + 1.04 * (b - 1)))
    assert auto.budget("draft", 2, 200) > 0
    assert auto.take_decision().reason in ("probe", "by cost model")


def test_a_load_swing_does_not_leak_into_interpolated_batch_costs():
    """Only b = 1 and b = 3 measured: the costs in between are interpolated from the
    target step, which swings with the load; that swing must not reopen a stop."""
    auto = _auto({1: 0.10, 3: 0.26}, {2: 0.12})
    assert auto.perfect_bound("draft") < 1 and auto.budget("draft", 2, 200) == 0
    for step in (0.05, 0.2, 0.05, 0.2):
        for _ in range(20):
            auto.observe(StepCost("", None, 0, 0, 0.0, step))
        assert auto.budget("draft", 2, 200) == 0 and auto.take_decision().reason == "bound<1"


def test_a_probe_once_reseeded_costs_could_pay():
    """A settings change or a reload reseeds the costs: the bound is looked at again
    and, where a draft could now pay, auto tries one."""
    auto = _auto(CPU_VERIFY, CPU_DRAFT)
    assert auto.budget("draft", 2, 200) == 0 and auto.take_decision().reason == "bound<1"
    gpu = _auto(GPU_VERIFY, GPU_DRAFT)
    auto.restore_costs(gpu.saved_costs())
    assert auto.perfect_bound("draft") > 3
    k = auto.budget("draft", 2, 200)
    d = auto.take_decision()
    assert k > 0 and d.reason in ("probe", "by cost model") and d.k == k
    # and from costs measured the ordinary way (say, the machine got a GPU layer offload
    # mid-session and the n-gram steps measured cheap batches): no reseed needed
    auto = _auto(CPU_VERIFY, CPU_DRAFT)
    assert auto.budget("draft", 2, 200) == 0
    for _ in range(30):
        for b, v in GPU_VERIFY.items():
            auto.costs.observe_verify(b, v)
        for kk, v in GPU_DRAFT.items():
            auto.costs.observe_draft(kk, v)
    assert auto.budget("draft", 2, 200) > 0


def _due_for_a_probe() -> AutoK:
    """Costs where a perfect draft would pay (about 1.4x) but the measured acceptance
    says no: the optimistic bound keeps probes coming now and then."""
    verify = {b: 0.10 * (1 + 0.6 * (b - 1)) for b in range(1, 10)}
    auto = _auto(verify, {k: 0.005 * k for k in range(1, 9)})
    for i in range(30):  # two thirds of first positions accepted, no second one
        auto.observe(StepCost("draft", None, 2, 1 if i % 3 else 0, 0.01, verify[3]))
    auto.catch_up = RunningCost.seeded(0.004, 8)  # 4 ms a token, as measured
    assert 1.3 < auto.perfect_bound("draft") < 1.6
    assert auto.plan("draft", 2, 400)[0] == 0 and auto.plan("draft", 2, 400, z=auto.z)[0] > 0
    return auto


def test_a_long_catch_up_suppresses_a_probe_near_the_end_but_not_at_the_start():
    # 300 tokens behind: 1.2 s to catch up. With 400 tokens left a perfect draft wins
    # about 12 s over target alone; with 20 left at most about 0.6 s.
    start = _due_for_a_probe()
    k = start.budget("draft", 300, 400)
    assert k > 0 and start.take_decision().reason == "probe"
    end = _due_for_a_probe()
    assert end.budget("draft", 300, 20) == 0
    assert end.take_decision().reason == "catch-up too dear"
    # in sync, the same few tokens left still allow the probe
    assert _due_for_a_probe().budget("draft", 2, 20) > 0


def test_the_catch_up_is_priced_at_the_drafts_measured_prefill_cost():
    auto = _auto(GPU_VERIFY, GPU_DRAFT)
    prior = auto.catch_up_seconds_per_token()
    assert prior == auto.prior_catch_up_share * auto.costs.draft_cost(1)
    auto.observe_prefill(100, 0.5)  # the draft's prompt prefill: 5 ms a token
    assert abs(auto.catch_up_seconds_per_token() - 0.005) < 1e-12
    assert abs(auto.catch_up_price(52) - 0.25) < 1e-12  # 50 beyond the two every call evaluates
    assert auto.catch_up_price(2) == 0.0


def test_every_budget_leaves_a_decision():
    auto = AutoK()
    assert auto.budget("draft", None, 8) == 0 and str(auto.take_decision()) == "draft: first step"
    assert auto.take_decision() is None  # taken once
    auto = _auto(GPU_VERIFY, GPU_DRAFT)
    _accept(auto, "draft", 4, 4, 20)
    k = auto.budget("draft", 2, 100)
    d = auto.take_decision()
    assert k > 0 and str(d) == f"draft: k={k} by cost model" and d.key == "draft: k>0 by cost model"
    assert auto.budget("draft", 2, 0) == 0 and auto.take_decision().reason == "last token"
    f = FixedK(3)
    f.budget("ngram", 5, 10)
    assert str(f.take_decision()) == "ngram: k=3 fixed"
