"""The cost model's ceilings: what a draft that is always right could reach."""

import pytest

from specdesk.speculative.costmodel import CostModel


def _costs(verify: dict, draft: dict | None = None) -> CostModel:
    cm = CostModel()
    for b, v in verify.items():
        cm.observe_verify(b, v)
    for k, v in (draft or {}).items():
        cm.observe_draft(k, v)
    return cm


def test_perfect_draft_bound_on_this_machine():
    # the architecture notes' measurements: b=2 1.9 steps, b=4 2.7, b=6 3.9, b=8 6.3
    cm = _costs({1: 1.0, 2: 1.9, 4: 2.7, 6: 3.9, 8: 6.3}, {k: 0.61 * k for k in range(1, 8)})
    k, per_token = cm.perfect_draft(7)
    assert k == 3 and abs(per_token - (2.7 + 3 * 0.61) / 4) < 1e-9
    assert abs(cm.perfect_draft_bound(7) - 4 / (2.7 + 3 * 0.61)) < 1e-9  # 0.88: no draft pays
    # free lookups on the same machine: 5 tokens for the cost of 2.7+ steps
    assert abs(cm.perfect_draft_bound(7, draft_costs=False) - 6 / 3.9) < 1e-9


def test_a_catch_up_is_paid_out_of_the_answer_left():
    cm = _costs({1: 1.0, 2: 1.05, 3: 1.1, 4: 1.15, 5: 1.2}, {k: 0.1 * k for k in range(1, 5)})
    steady = cm.perfect_draft_bound(4)
    assert abs(steady - 5 / 1.6) < 1e-9
    # 10 steps of catch-up against 100 tokens left, then against 5
    long_answer = cm.perfect_draft_bound(4, catch_up_seconds=10.0, tokens_left=100)
    short = cm.perfect_draft_bound(4, catch_up_seconds=10.0, tokens_left=5)
    assert abs(long_answer - 100 / (10 + 100 * 1.6 / 5)) < 1e-9 and long_answer > 2
    assert short < 1 < long_answer < steady
    assert cm.perfect_draft_bound(4, catch_up_seconds=10.0, tokens_left=0) == 0.0


def test_no_bound_before_a_target_step_was_measured():
    assert CostModel().perfect_draft_bound(8) is None
    # one step measured: unmeasured batches take the low prior slope (an optimistic
    # bound, which lets auto try a draft once and measure)
    assert _costs({1: 1.0}).perfect_draft_bound(8) > 2


def test_one_far_measurement_is_held_until_the_next_says_whether_it_was_a_one_off():
    """A page fault, a GC pause or another process's burst makes one call many times
    dearer: taken, it would price every draft length for a while. Held, the next
    measurement decides: near, it was a one-off; far too, the cost moved."""
    from specdesk.speculative.costmodel import FAR, FAR_FIRST, RunningCost

    rc = RunningCost(far=FAR)
    rc.add(0.010)
    rc.add(0.200)  # 20x: held
    assert (rc.n, rc.value, rc.held) == (1, 0.010, 0.200)
    rc.add(0.011)  # near: the held one was a one-off
    assert rc.n == 2 and rc.value == pytest.approx(0.0105) and rc.held is None
    rc.add(0.100)
    rc.add(0.090)  # far twice in a row: the cost moved, both count
    assert rc.n == 4 and rc.value == pytest.approx((0.010 + 0.011 + 0.100 + 0.090) / 4)
    first = RunningCost(far=FAR)
    first.add(0.030, prior=0.005)  # a first measurement 6x what the prior expected
    assert first.n == 0 and first.held == 0.030
    first.add(0.006, prior=0.005)
    assert (first.n, first.value) == (1, 0.006)
    plain = RunningCost()  # without far (the shape timer's, target alone's reference): every one counts
    plain.add(0.010)
    plain.add(0.200)
    assert plain.n == 2 and FAR_FIRST < FAR


def test_the_cost_tables_hold_a_far_first_measurement_out_of_the_prior():
    cm = CostModel()
    cm.observe_verify(1, 0.010)
    cm.observe_verify(3, 0.200)  # 20 steps for a batch of 3: held, not a cost of 3 yet
    assert 3 not in cm.verify and cm.verify_cost(3) == pytest.approx(0.012)
    cm.observe_verify(3, 0.014)
    assert cm.verify[3].value == pytest.approx(0.014)
    cm.observe_draft_decode(0.050)  # 5 target steps for one draft decode: held
    assert cm.draft_decode.n == 0
    cm.observe_draft_decode(0.004)
    assert cm.draft_decode.value == pytest.approx(0.004)


def test_a_one_off_among_like_calls_is_what_it_took_beyond_far_times_their_median():
    from specdesk.speculative.costmodel import FAR, one_off_excess

    assert one_off_excess([0.01, 0.01, 0.5, 0.012]) == pytest.approx(0.5 - FAR * 0.012)
    assert one_off_excess([0.01, 0.012, 0.011, 0.03]) == 0.0  # slower, not far
    assert one_off_excess([0.01, 0.5]) == 0.0  # two calls cannot tell which is the odd one
    assert one_off_excess([]) == 0.0


def test_the_hopeful_acceptance_of_positions_never_judged_is_the_pooled_rate_and_its_doubt():
    from specdesk.speculative.costmodel import PositionAcceptance

    two = PositionAcceptance()
    two.record(2, 2)  # one draft of 2, both kept: room for a draft that is always right
    assert two.hopeful(8, 1.5)[2:] == [1.0] * 6
    assert two.hopeful(8, 1.5)[:2] == two.alphas(2, z=1.5)  # the positions judged: their own bound
    ninety = PositionAcceptance(decay=1.0)
    for i in range(200):  # 200 tokens judged, 90% kept: not taken for a draft always right
        ninety.record(1, 1 if i % 10 else 0)
    beyond = ninety.hopeful(8, 1.5)[1:]
    assert len(set(beyond)) == 1 and 0.85 < beyond[0] < 0.95
