"""The cost model's ceilings: what a draft that is always right could reach."""

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
