"""auto's current estimate in words, as the app's statistics panel shows it."""

from specdesk.session.text import auto_estimate_text
from specdesk.speculative.controller import StepCost
from specdesk.speculative.auto import AutoK


def _auto(step_seconds_per_token: float, steps: int = 30) -> AutoK:
    """Target alone at 40 ms a token; drafting 2 (3 tokens a step) at the given cost."""
    auto = AutoK()
    for _ in range(steps):
        k = auto.budget("draft", 2, 400)
        d = auto.take_decision()
        if k:
            auto.observe(StepCost("draft", None, k, k, 0.01 * k, 0.04 + 0.01 * k, draft_synced=2, emitted=k + 1,
                                  step_seconds=step_seconds_per_token * (k + 1), decision=d))
        else:
            auto.observe(StepCost("", None, 0, 0, 0.0, 0.04, emitted=1, step_seconds=0.04, decision=d))
    return auto


def test_before_anything_was_timed():
    auto = AutoK()
    auto.budget("draft", 2, 400)
    assert auto_estimate_text(auto.estimate) == "auto: measuring target alone first."


def test_drafting_measured_dearer_says_both_costs_and_why():
    e = _auto(0.06).estimate
    text = auto_estimate_text(e)
    assert e.decision.k == 0 and e.drafting > e.target_alone
    assert text.startswith("auto: drafting 60.0 ms/token (")
    assert " vs target alone 40.0 ms/token (" in text
    lo, hi = (1000 * x for x in e.drafting_interval)
    ms = lambda x: f"{x:.1f}" if x < 100 else f"{x:.0f}"  # noqa: E731 - a tenth of a ms below 100 ms
    assert f"({ms(lo)}–{ms(hi)})" in text
    # measured dearer, or not yet decided with the exploring budget spent: it does not draft either way
    assert "so it does not draft" in text or "cannot pay" in text or "trying has used its budget" in text
    assert "trying drafting cost" in text and "allowed" in text


def test_drafting_measured_cheaper_says_what_it_saved():
    e = _auto(0.02, steps=60).estimate
    text = auto_estimate_text(e)
    assert e.decision.k > 0
    assert text.startswith(f"auto: drafting (k={e.decision.k}) 20.0 ms/token (")
    assert "measured cheaper per token, so it drafts" in text and "drafting saved" in text
