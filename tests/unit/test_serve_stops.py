"""Stop strings cut out of a stream, whatever the pieces they arrive in."""

from __future__ import annotations

import pytest

from specdesk.server.stops import StopMatcher

TEXT = "Roses are red.\nViolets are blue.\nSugar is sweet."


def stream(matcher: StopMatcher, pieces) -> str:
    out = "".join(matcher.feed(p) for p in pieces)
    return out + matcher.flush()


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 100])
@pytest.mark.parametrize("stops,want", [
    (["\n"], "Roses are red."),
    (["blue"], "Roses are red.\nViolets are "),
    (["sweet.", "are"], "Roses "),  # the earliest of several
    (["Violets are green"], TEXT),  # a prefix that never completes is sent in the end
    ([], TEXT),
])
def test_cut_at_the_first_stop_whatever_the_pieces(size, stops, want):
    pieces = [TEXT[i:i + size] for i in range(0, len(TEXT), size)]
    m = StopMatcher(stops)
    assert stream(m, pieces) == want
    assert m.hit == (None if want == TEXT else next(s for s in stops if want + s == TEXT[: len(want) + len(s)]))


def test_nothing_after_a_stop_and_nothing_held_back_needlessly():
    m = StopMatcher(["END"])
    assert m.feed("abc E") == "abc "  # "E" may begin END: held back
    assert m.feed("x") == "Ex"  # it did not
    assert m.feed("EN") == ""
    assert m.feed("Dmore") == "" and m.hit == "END"
    assert m.feed("later") == "" and m.flush() == ""
