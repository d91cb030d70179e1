from specdesk.speculative.proposers.ngram import NgramProposer, find_ngram
from specdesk.speculative.sampling import SamplingParams
import numpy as np


def test_longest_suffix_match_and_continuation():
    seq = [1, 2, 3, 4, 5, 9, 9, 2, 3, 4]
    m = find_ngram(seq, max_tokens=3)
    assert m.length == 3  # "2 3 4" matched
    assert m.start == 4 and m.tokens == (5, 9, 9)


def test_most_recent_occurrence_wins_at_equal_length():
    seq = [7, 1, 8, 3, 7, 1, 9, 5, 7, 1]
    m = find_ngram(seq, max_tokens=1)
    assert m.length == 2 and m.tokens == (9,)


def test_prefers_longer_match_over_more_recent_shorter():
    seq = [5, 6, 7, 1, 0, 0, 7, 2, 0, 5, 6, 7]
    m = find_ngram(seq, max_tokens=1)
    assert m.length == 3 and m.tokens == (1,)


def test_no_match_returns_none():
    assert find_ngram([1, 2, 3, 4], max_tokens=4) is None
    assert find_ngram([], max_tokens=4) is None
    assert find_ngram([1, 1], max_tokens=0) is None


def test_min_match_is_respected():
    seq = [1, 2, 9, 2]
    assert find_ngram(seq, max_tokens=2, min_match=1).tokens == (9, 2)
    assert find_ngram(seq, max_tokens=2, min_match=2) is None


def test_continuation_may_run_into_the_suffix_itself():
    # repetition: "a b a b a b" -> keeps proposing the cycle
    seq = [1, 2, 1, 2, 1, 2]
    m = find_ngram(seq, max_tokens=4)
    assert m.tokens[:2] == (1, 2)


def test_match_length_is_capped():
    seq = list(range(50)) + list(range(50))
    m = find_ngram(seq, max_tokens=2, max_match=8)
    assert m.length == 8


def test_proposer_asks_the_budget_with_match_length():
    asked = []

    def budget(source, match_length):
        asked.append((source, match_length))
        return 2

    d = NgramProposer().propose([1, 2, 3, 4, 1, 2], budget, SamplingParams(), np.random.default_rng(0))
    assert asked == [("ngram", 2)]
    assert d.tokens == (3, 4) and d.source == "ngram" and d.match_start == 2 and d.q is None


def test_the_incremental_matcher_answers_as_find_ngram_does():
    """SuffixMatcher follows a growing sequence (and sequences cut back or replaced) and
    gives find_ngram's match, token for token, at every length and setting."""
    import random

    from specdesk.speculative.proposers.ngram import SuffixMatcher

    rng = random.Random(1)
    for _ in range(120):
        cap, min_match, max_tokens = rng.choice([1, 2, 3, 8, 32]), rng.choice([1, 2, 3]), rng.choice([0, 1, 4, 16])
        alphabet = rng.choice([2, 3, 5, 40, 60000])  # ids past the UTF-16 surrogates too
        matcher = SuffixMatcher(cap)
        seq: list[int] = []
        for _ in range(rng.randint(1, 120)):
            r = rng.random()
            if r < 0.05 and seq:
                seq = seq[: rng.randint(0, len(seq))]  # another list, cut back
            elif r < 0.08:
                seq = seq + [rng.randrange(alphabet) for _ in range(rng.randint(50, 120))]
            else:
                seq.extend(rng.randrange(alphabet) for _ in range(rng.randint(1, 5)))  # the same list, grown
            matcher.follow(seq)
            assert matcher.match(max_tokens, min_match) == find_ngram(seq, max_tokens, min_match, cap)


def test_a_long_repetitive_context_costs_the_matcher_a_few_searches():
    """The matcher's work per step does not grow with the match: the longest suffix is
    found by doubling and halving (at most 2 * log2(max_match) + 1 searches)."""
    from specdesk.speculative.proposers import ngram

    seq = list(range(40)) * 60  # every suffix up to the cap recurs
    matcher = ngram.SuffixMatcher(32)
    matcher.follow(seq)
    searches = []

    class Text(str):
        def rfind(self, *a):
            searches.append(a)
            return str.rfind(self, *a)

    matcher._text = Text(matcher._text)
    m = matcher.match(16)
    assert m.length == 32 and m == find_ngram(seq, 16)
    assert len(searches) <= 11
