import numpy as np
import pytest

from specdesk.speculative.sampling import SamplingParams, TopToken, sample, softmax, warp


def test_greedy_is_one_hot_on_argmax():
    p = warp(np.array([0.1, 3.0, 2.0]), SamplingParams(temperature=0.0))
    assert p.tolist() == [0.0, 1.0, 0.0]


def test_temperature_one_is_softmax():
    x = np.array([0.5, 1.0, -2.0, 0.0])
    assert np.allclose(warp(x, SamplingParams(temperature=1.0)), softmax(x))


def test_top_k_keeps_k_best():
    x = np.array([5.0, 1.0, 4.0, 3.0, 2.0])
    p = warp(x, SamplingParams(temperature=1.0, top_k=2))
    assert set(np.flatnonzero(p)) == {0, 2}
    assert p.sum() == pytest.approx(1.0)


def test_top_p_keeps_smallest_set_reaching_p():
    x = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    p = warp(x, SamplingParams(temperature=1.0, top_p=0.8))
    assert set(np.flatnonzero(p)) == {0, 1}
    p = warp(x, SamplingParams(temperature=1.0, top_p=0.81))
    assert set(np.flatnonzero(p)) == {0, 1, 2}


def test_top_p_on_a_large_vocab_matches_full_sort():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 3, size=50000)
    p = warp(x, SamplingParams(temperature=0.7, top_p=0.9))
    order = np.argsort(-x)
    cum = np.cumsum(softmax(x)[order])
    n = int(np.searchsorted(cum, 0.9)) + 1
    assert set(np.flatnonzero(p)) == set(order[:n].tolist())


def test_min_p_drops_tokens_below_share_of_best():
    x = np.log(np.array([0.6, 0.3, 0.05, 0.05]))
    p = warp(x, SamplingParams(temperature=1.0, min_p=0.1))
    assert set(np.flatnonzero(p)) == {0, 1}


def test_sample_follows_probs():
    rng = np.random.default_rng(0)
    probs = np.array([0.0, 0.2, 0.0, 0.8])
    draws = [sample(probs, rng) for _ in range(5000)]
    assert set(draws) <= {1, 3}
    assert 0.17 < draws.count(1) / 5000 < 0.23


@pytest.mark.parametrize("kw", [dict(temperature=-0.1), dict(top_p=0.0), dict(top_p=1.5), dict(min_p=1.0), dict(top_k=-1)])
def test_bad_params_are_rejected(kw):
    with pytest.raises(ValueError):
        SamplingParams(**kw)


def test_a_greedy_draft_step_reads_the_argmax_and_its_softmax_probability_from_the_row_as_it_lies():
    """p-min's check: the argmax of a read-only row (llama.cpp's buffer) and its
    probability under the plain softmax, to 1e-6 of a float64 softmax, from rows of
    two vocabulary sizes through one reader (its scratch row follows the size); the
    row itself is left as it was."""
    rng = np.random.default_rng(7)
    top = TopToken(0.75)
    for n, spread in ((49152, 3.0), (151936, 4.0), (49152, 0.5), (1000, 8.0)):
        row = (rng.standard_normal(n) * spread).astype(np.float32)
        row[rng.integers(n)] += 12.0
        before = row.copy()
        row.flags.writeable = False
        t, p = top(row)
        want = softmax(row)
        assert t == int(np.argmax(before))
        assert p == pytest.approx(float(want[t]), rel=1e-6, abs=1e-9)
        assert np.array_equal(row, before)
    assert np.isnan(TopToken(0.0)(row)[1]) and TopToken(0.0)(row)[0] == int(np.argmax(row))
