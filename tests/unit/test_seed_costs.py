"""Session.seed_costs: the one way a comparison starts auto from a calibration's costs."""

from specdesk.session.core import Session
from specdesk.speculative.costmodel import CostModel


def _costs(verify_5: float) -> CostModel:
    c = CostModel()
    c.set_verify(1, 0.020)
    for b in range(2, 10):
        c.set_verify(b, verify_5 * b / 5)
    for k in range(1, 9):
        c.set_draft(k, 0.004 * k)
    return c


def test_auto_starts_from_a_copy_of_the_calibrations_costs():
    s = Session(target=None)  # a session's auto needs no model
    cal = _costs(0.050)
    s.seed_costs(cal)
    assert (s.auto.costs.verify_cost(1), s.auto.costs.verify_cost(5), s.auto.costs.draft_cost(2)) == (0.020, 0.050, 0.008)
    cal.set_verify(1, 0.5)  # the calibration keeps its own numbers: auto's are a copy
    assert s.auto.costs.verify_cost(1) == 0.020 and s.auto.costs is not cal


def test_a_second_calibration_replaces_what_auto_predicted_from_the_first():
    """auto caches its prior's predictions; seeding new costs must not leave the
    old ones in use (the real controller, no stand-in)."""
    s = Session(target=None)
    s.seed_costs(_costs(0.100))  # a verify of 5 costs 5 steps: even a perfect draft cannot pay
    slow = s.auto.perfect_bound("draft")
    s.seed_costs(_costs(0.025))  # now 1.25 steps: a perfect draft pays well
    fast = s.auto.perfect_bound("draft")
    assert slow is not None and fast is not None
    assert slow < 1.0 < fast
