"""Session.seed_costs: the one way a comparison starts auto from a calibration's costs."""

from specdesk.session.core import Session
from specdesk.speculative.costmodel import CostModel


def test_auto_starts_from_a_copy_of_the_calibrations_costs_and_looks_again():
    s = Session(target=None)  # a session's auto needs no model
    stopped = []
    s.auto.reseeded = lambda: stopped.append(True)  # auto is told its costs changed outside its measurements
    cal = CostModel()
    cal.set_verify(1, 0.020)
    cal.set_verify(5, 0.050)
    cal.set_draft(2, 0.012)
    s.seed_costs(cal)
    assert stopped == [True]
    assert (s.auto.costs.verify_cost(1), s.auto.costs.verify_cost(5), s.auto.costs.draft_cost(2)) == (0.020, 0.050, 0.012)
    cal.set_verify(1, 0.5)  # the calibration keeps its own numbers: auto's are a copy
    assert s.auto.costs.verify_cost(1) == 0.020 and s.auto.costs is not cal
