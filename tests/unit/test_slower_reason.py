"""Why an answer was slower than target alone, as the chat's verdict says it."""

from specdesk.speculative.stats import Stats
from specdesk.session.text import slower_reason


def stats(**kw) -> Stats:
    s = Stats()
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def test_each_cause_is_named_from_the_answers_own_figures():
    assert "little was drafted" in slower_reason(stats(steps=100, drafted=2, accepted=0))
    assert "draft cost" in slower_reason(stats(steps=40, drafted=80, accepted=70, decode_seconds=10.0, draft_seconds=4.0))
    assert "acceptance" in slower_reason(stats(steps=40, drafted=80, accepted=20, decode_seconds=10.0, draft_seconds=1.0))
    assert "verify cost" in slower_reason(stats(steps=40, drafted=80, accepted=70, decode_seconds=10.0, draft_seconds=1.0))
