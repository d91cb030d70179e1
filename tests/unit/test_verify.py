"""The verifiers: greedy acceptance and exact rejection sampling."""

import numpy as np
import pytest

from specdesk.speculative.sampling import Warped
from specdesk.speculative.verify import verify_greedy, verify_stochastic


def rows(*argmaxes):
    """The target's argmax at each position (what greedy verification reads of its rows)."""
    return np.array(argmaxes)


def dists(dense):
    """Dense probability rows as the verifier takes them: each over its support."""
    return [Warped.from_dense(r) for r in np.atleast_2d(dense)]


def test_greedy_full_accept_gives_bonus():
    v = verify_greedy([1, 2, 3], rows(1, 2, 3, 4))
    assert (v.n_accepted, v.next_token, v.next_kind) == (3, 4, "bonus")
    assert v.target_argmax == (1, 2, 3, 4)


def test_greedy_rejection_gives_targets_token():
    v = verify_greedy([1, 2, 3], rows(1, 5, 3, 4))
    assert (v.n_accepted, v.next_token, v.next_kind) == (1, 5, "correction")
    assert v.target_argmax == (1, 5)


def test_greedy_empty_draft_is_a_plain_step():
    v = verify_greedy([], rows(2))
    assert (v.n_accepted, v.next_token, v.next_kind) == (0, 2, "bonus")


def test_greedy_rejects_wrong_row_count():
    with pytest.raises(ValueError):
        verify_greedy([1, 2], rows(1, 2))


def test_stochastic_accepts_when_p_at_least_q():
    p = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    q = np.array([[0.0, 0.5, 0.5]])
    v = verify_stochastic([1], dists(p), dists(q), np.random.default_rng(0))
    assert (v.n_accepted, v.next_token, v.next_kind) == (1, 2, "bonus")


def test_stochastic_never_accepts_a_token_the_target_rules_out():
    p = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    q = np.array([[0.0, 1.0, 0.0]])
    for seed in range(50):
        v = verify_stochastic([1], dists(p), dists(q), np.random.default_rng(seed))
        assert (v.n_accepted, v.next_token, v.next_kind) == (0, 0, "correction")


def test_stochastic_one_hot_draft_residual_excludes_the_rejected_token():
    # n-gram drafts have q one-hot: after rejecting x, x must never be the correction.
    p = np.array([[0.3, 0.3, 0.4], [1.0, 0.0, 0.0]])
    for seed in range(200):
        v = verify_stochastic([2], dists(p), None, np.random.default_rng(seed))
        if v.n_accepted == 0:
            assert v.next_token != 2


def _chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    n = counts.sum()
    exp = probs * n
    mask = exp > 0
    assert counts[~mask].sum() == 0, "a token with zero target probability was emitted"
    return float(((counts[mask] - exp[mask]) ** 2 / exp[mask]).sum())


# 99.9% quantiles of chi-square for the degrees of freedom used below.
CHI2_999 = {5: 20.52, 7: 24.32}


@pytest.mark.parametrize("q_kind", ["model", "one-hot"])
def test_single_position_output_follows_p(q_kind):
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(6))
    q = rng.dirichlet(np.ones(6))
    bonus = rng.dirichlet(np.ones(6))
    counts = np.zeros(6)
    n = 20000
    for _ in range(n):
        x = int(rng.choice(6, p=q)) if q_kind == "model" else 3
        v = verify_stochastic([x], dists(np.stack([p, bonus])), dists(q) if q_kind == "model" else None, rng)
        first = x if v.n_accepted else v.next_token
        counts[first] += 1
    assert _chi_square(counts, p) < CHI2_999[5]


def test_chi_square_detects_a_biased_verifier():
    """The statistical check can fail: accepting every draft token emits q, not p."""
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(6))
    q = rng.dirichlet(np.ones(6))
    counts = np.zeros(6)
    for _ in range(20000):
        counts[int(rng.choice(6, p=q))] += 1
    assert _chi_square(counts, p) > CHI2_999[5]


def test_a_distribution_over_its_support_is_the_dense_one():
    """Warped keeps only the support; reading, sampling and the dense vector agree with
    the dense row token for token, draw for draw (the same generator state)."""
    rng = np.random.default_rng(3)
    dense = rng.dirichlet(np.ones(9))
    dense[[1, 4, 7]] = 0.0
    dense /= dense.sum()
    w = Warped.from_dense(dense)
    assert list(w.ids) == [0, 2, 3, 5, 6, 8]
    assert np.array_equal(w.dense(9), dense)
    assert [w.prob(t) for t in range(9)] == [float(x) for x in dense]
    assert list(w.probs_at(np.arange(9))) == list(dense)
    from specdesk.speculative.sampling import sample

    a, b = np.random.default_rng(5), np.random.default_rng(5)
    assert [w.sample(a) for _ in range(200)] == [sample(dense, b) for _ in range(200)]
