"""History lookups: a bounded, incremental n-gram index over earlier turns."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import FakeBackend, FakeModel
from specdesk.speculative.controller import FixedK
from specdesk.speculative.auto import AutoK
from specdesk.speculative.decoder import speculate
from specdesk.speculative.proposers import NoProposer
from specdesk.speculative.proposers.history import HistoryIndex, HistoryProposer
from specdesk.speculative.sampling import SamplingParams

GREEDY = SamplingParams()


def run(target, proposer, controller=None, params=GREEDY, max_tokens=40, seed=0, prompt=(1, 2, 3)):
    return list(
        speculate(target, proposer, controller or FixedK(4), list(prompt), params=params, max_tokens=max_tokens,
                  rng=np.random.default_rng(seed))
    )


def tokens(steps):
    return [t.token for s in steps for t in s.tokens]


def test_longest_then_most_recent_match():
    h = HistoryIndex(min_n=2, max_n=4)
    h.add([1, 2, 3, 4, 5, 6])
    h.add([9, 2, 3, 7, 8])
    h.add([1, 2, 3, 4, 10, 11])
    m = h.lookup([0, 2, 3], 3)  # "2 3" occurred three times: the most recent wins
    assert m.tokens == (4, 10, 11) and m.length == 2
    m = h.lookup([9, 2, 3], 3)  # "9 2 3" occurred once: longer beats more recent
    assert m.tokens == (7, 8) and m.length == 3
    m = h.lookup([5, 1, 2, 3, 4], 5)
    assert m.tokens == (10, 11) and m.length == 4  # a longer match than max_n is not searched for more
    assert h.lookup([3, 9], 4) is None  # "3 9" never occurred
    assert h.lookup([2], 4) is None  # shorter than min_n


def test_match_length_extends_past_max_n_and_stops_at_documents():
    h = HistoryIndex(min_n=2, max_n=3, max_match=32)
    doc = list(range(10, 30))
    h.add(doc)
    m = h.lookup([0] + doc[:12], 4)
    assert m.length == 12 and m.tokens == tuple(doc[12:16])
    # continuations stop at the end of a document: the next turn's tokens are not copied
    h.add([50, 51])
    assert h.lookup(doc, 8) is None  # the last two tokens of doc end it: nothing follows
    assert h.lookup(doc[:-1], 8).tokens == (doc[-1],)
    # and no n-gram spans two documents
    assert h.lookup([doc[-1], 50], 4) is None


def test_the_index_is_bounded_by_tokens_kept():
    h = HistoryIndex(max_tokens=100, min_n=2, max_n=5)
    levels = 5 - 2 + 1
    rng = np.random.default_rng(0)
    docs = [list(rng.integers(0, 50, size=int(rng.integers(5, 40)))) for _ in range(60)]
    for d in docs:
        h.add(d)
        assert len(h) <= 100
        assert len(h._table) <= levels * len(h)
        # every entry's n-gram lies in the kept buffer and points at its continuation
        for gram, p in h._table.items():
            i = p - h._base
            assert 0 <= i - len(gram) and i < len(h._buf)
            assert tuple(h._buf[i - len(gram) : i]) == gram
    # what is left is the most recent 100 tokens
    kept = [t for t in h._buf if t != -1]
    assert kept == [t for d in docs for t in d][-100:]
    # the oldest documents cannot be matched any more, the newest can
    last = docs[-1]
    assert h.lookup(last[:5], 3) is not None
    h.clear()
    assert len(h) == 0 and len(h._table) == 0 and h.lookup(last[:5], 3) is None


def test_a_document_longer_than_the_bound_keeps_its_end():
    h = HistoryIndex(max_tokens=10, min_n=2, max_n=3)
    h.add(list(range(100, 130)))
    assert len(h) == 10 and h.lookup([120, 121], 3).tokens == (122, 123, 124)
    assert h.lookup([101, 102], 3) is None


def test_rejects_bad_bounds():
    with pytest.raises(ValueError):
        HistoryIndex(max_tokens=0)
    with pytest.raises(ValueError):
        HistoryIndex(min_n=3, max_n=2)


def test_a_repeated_answer_drafts_from_history_and_stays_exact():
    tm = FakeModel(n_vocab=32, seed=7)
    prompt = [1, 2, 3]
    base = tokens(run(FakeBackend(tm), NoProposer(), max_tokens=60, prompt=prompt))
    prop = HistoryProposer()
    first = run(FakeBackend(tm), prop, FixedK(6), max_tokens=60, prompt=prompt)
    assert tokens(first) == base
    assert sum(s.drafted for s in first) == 0  # nothing in the history yet
    prop.remember(prompt + base)  # the session adds the finished turn
    # the same question again (say in another chat): the answer is drafted from history
    second = run(FakeBackend(tm), prop, FixedK(6), max_tokens=60, prompt=[9] + prompt)
    assert tokens(second) == base
    st = second[-1].stats
    assert st.accepted == st.drafted and st.drafted >= 40
    assert {s.source for s in second if s.drafted} == {"history"}
    assert st.steps <= 60 // 7 + 2


def test_history_at_temperature_is_verified_as_a_lookup():
    tm = FakeModel(n_vocab=8, seed=2)
    prop = HistoryProposer(HistoryIndex(min_n=1))
    params = SamplingParams(temperature=0.8)
    prev = tokens(run(FakeBackend(tm), NoProposer(), params=params, max_tokens=30, seed=1))
    prop.remember([1, 2, 3] + prev)
    steps = run(FakeBackend(tm), prop, FixedK(4), params=params, max_tokens=30, seed=2)
    assert all(s.source == "history" for s in steps if s.drafted)
    assert sum(s.drafted for s in steps) > 0
    # the verifier saw a one-hot q: accepted tokens carry q = 1
    assert all(x.q == 1.0 for s in steps for x in s.tokens if x.kind == "accepted")


def test_auto_prices_history_by_match_length():
    tm = FakeModel(n_vocab=32, seed=7)
    prop = HistoryProposer()
    prop.remember([1, 2, 3] + tokens(run(FakeBackend(tm), NoProposer(), max_tokens=60)))
    auto = AutoK()
    steps = run(FakeBackend(tm), prop, auto, max_tokens=60)
    assert any(k.startswith("history") for k in auto.acceptance)
    assert sum(s.accepted for s in steps) > 0


def test_adding_and_looking_up_are_incremental():
    """Work per call does not grow with the history (counted, not timed)."""
    h = HistoryIndex(max_tokens=1_000_000, min_n=2, max_n=8)

    class Counting(dict):
        gets = 0

        def get(self, key, default=None):
            Counting.gets += 1
            return super().get(key, default)

    h._table = Counting()
    rng = np.random.default_rng(1)
    for _ in range(200):
        h.add(list(rng.integers(0, 1000, size=200)))
    before = Counting.gets
    h.lookup(list(rng.integers(0, 1000, size=500)), 16)
    assert Counting.gets - before <= 8 - 2 + 1
