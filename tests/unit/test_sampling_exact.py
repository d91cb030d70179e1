"""The warp that finds top-k and top-p without sorting the vocabulary nor summing all
of it is the warp of the definition: the same support and the same probabilities, on
rows of every shape a model gives (peaked, flat, heavy-tailed, tied, with a tail that
decides the cut), against a dense reference written here from the definition."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdesk.speculative.sampling import SamplingParams, sample, warp_support


def reference(x: np.ndarray, params: SamplingParams) -> dict[int, float]:
    """The definition, dense: top-k, then top-p over what is left (sorted by logit, ties
    by index), then min-p against the best, then the temperature, all in float64."""
    v = np.asarray(x, dtype=np.float64)
    ids = np.arange(v.shape[0])
    if 0 < params.top_k < v.shape[0]:
        order = np.argsort(-v, kind="stable")
        kth = v[order[params.top_k - 1]]
        ids = ids[v >= kth]  # every tie at the k-th logit (the test rows avoid them)
    if params.top_p < 1.0:
        vals = v[ids]
        m = vals.max()
        log_z = m + math.log(float(np.exp(vals - m).sum()))
        order = np.argsort(-vals, kind="stable")
        cum = np.cumsum(np.exp(vals[order] - log_z))
        n_keep = min(int(np.searchsorted(cum, params.top_p, side="left")) + 1, order.shape[0])
        ids = ids[order[:n_keep]]
    if params.min_p > 0.0:
        ids = ids[v[ids] >= v.max() + math.log(params.min_p)]
    vals = v[ids]
    e = np.exp((vals - vals.max()) / params.temperature)
    return dict(zip(ids.tolist(), (e / e.sum()).tolist()))


def assert_same(x: np.ndarray, params: SamplingParams) -> None:
    got = warp_support(x, params)
    want = reference(x, params)
    assert np.all(np.diff(got.ids) > 0)
    assert set(got.ids.tolist()) == set(want), (len(got.ids), len(want))
    assert np.allclose(got.probs, [want[i] for i in got.ids.tolist()], rtol=1e-9, atol=1e-15)


def qwen_like(rng: np.random.Generator, n: int = 151_936, peak: float = 10.0) -> np.ndarray:
    """A row shaped as a real model's: a bulk around 0, a few tokens well above it."""
    x = rng.normal(0.0, 2.0, n).astype(np.float32)
    top = rng.choice(n, 40, replace=False)
    x[top] = (x.max() + rng.exponential(peak / 4, 40)).astype(np.float32)
    return x


PARAMS = [
    SamplingParams(temperature=0.7, top_p=0.95),
    SamplingParams(temperature=1.0, top_p=0.9),
    SamplingParams(temperature=0.7, top_p=0.5),
    SamplingParams(temperature=0.8, top_k=40, top_p=0.95),
    SamplingParams(temperature=0.8, top_k=40),
    SamplingParams(temperature=0.7, min_p=0.05),
    SamplingParams(temperature=0.7, top_p=0.95, min_p=0.05),
    SamplingParams(temperature=1.3),
]


@pytest.mark.parametrize("params", PARAMS, ids=str)
@pytest.mark.parametrize("peak", [0.5, 4.0, 10.0, 25.0])
def test_on_rows_shaped_as_a_large_vocabulary_it_is_the_definition(params, peak):
    rng = np.random.default_rng(int(peak * 10))
    for _ in range(3):
        assert_same(qwen_like(rng, peak=peak), params)


def test_a_nucleus_that_reaches_into_the_tail():
    """One best token, and 200k more than 16 below it that weigh 1.4% together: at
    top-p 0.99 the nucleus holds tokens of the tail."""
    rng = np.random.default_rng(3)
    x = (-16.5 - rng.random(200_000)).astype(np.float32)
    x[123] = 0.0
    x[124] = -15.0
    for top_p in (0.5, 0.98, 0.99, 0.995):
        assert_same(x, SamplingParams(temperature=0.7, top_p=top_p))
    assert len(warp_support(x, SamplingParams(temperature=0.7, top_p=0.995)).ids) > 1000


def test_a_cut_that_the_tail_decides_is_made_with_the_tail_summed():
    """Two best tokens at 0.949 and the rest of the mass in a tail 17 below: whether the
    second token is needed depends on the tail's exact weight."""
    for tail_logit in (-17.0, -16.5, -18.0):
        x = np.full(200_000, tail_logit, dtype=np.float32)
        x[7] = 0.0
        x[8] = -0.05
        x[9] = -2.9
        for top_p in (0.45, 0.5, 0.51, 0.9, 0.95):
            assert_same(x, SamplingParams(temperature=0.9, top_p=top_p))


def test_ties_are_kept_in_index_order_as_the_definition_sorts_them():
    x = np.zeros(5000, dtype=np.float32)
    x[[10, 20, 30, 40]] = 5.0
    for top_p in (0.2, 0.3, 0.5, 0.99):
        assert_same(x, SamplingParams(temperature=1.0, top_p=top_p))


def test_a_nucleus_exactly_at_top_p_stops_there():
    x = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    assert warp_support(x, SamplingParams(temperature=1.0, top_p=0.8)).ids.tolist() == [0, 1]


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 3000),
    scale=st.sampled_from([0.1, 1.0, 3.0, 8.0, 30.0]),
    temperature=st.floats(0.05, 3.0),
    top_p=st.sampled_from([1.0, 0.99, 0.95, 0.8, 0.5, 0.1]),
    min_p=st.sampled_from([0.0, 0.01, 0.2]),
    top_k=st.sampled_from([0, 1, 5, 50]),
)
def test_on_any_row_it_is_the_definition(seed, n, scale, temperature, top_p, min_p, top_k):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * scale).astype(np.float32)
    x = x + rng.random(n).astype(np.float32) * 1e-3  # no ties at the k-th logit (where a partition may pick any)
    assert_same(x, SamplingParams(temperature=temperature, top_p=top_p, min_p=min_p, top_k=top_k))


def test_a_band_that_barely_holds_the_nucleus():
    """The band's mass is just above top_p of the most Z could be: the cut may fall in
    its last bucket."""
    x = np.full(1000, -40.0, dtype=np.float32)
    x[0] = 0.0
    x[1:200] = -15.5
    for top_p in (0.9, 0.96, 0.97, 0.975):
        assert_same(x, SamplingParams(temperature=0.7, top_p=top_p))


def walk_over_non_zeros(p: np.ndarray, rng: np.random.Generator) -> int:
    """The draw by its definition: the cumulative sum over the non-zero tokens only,
    the first above u times their total (one token: no draw at all)."""
    nz = np.flatnonzero(p)
    if nz.shape[0] == 1:
        return int(nz[0])
    cum = np.cumsum(p[nz])
    u = rng.random() * cum[-1]
    return int(nz[min(int(np.searchsorted(cum, u, side="right")), nz.shape[0] - 1)])


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 3000), zeros=st.sampled_from([0.0, 0.5, 0.99, 1.0]))
def test_a_draw_over_a_whole_vocabulary_is_the_draw_over_its_non_zeros(seed, n, zeros):
    """sample() walks the whole vector, zeros included, without gathering the non-zeros
    (a 152k copy when nothing truncates the row): it draws what the walk over the
    non-zeros draws, from the same random stream, and never a token of probability 0."""
    rng = np.random.default_rng(seed)
    p = rng.random(n) ** 4
    p[rng.random(n) < zeros] = 0.0
    if not p.any():
        p[rng.integers(n)] = 1.0  # one token left: drawn without a random number
    p /= p.sum()
    got_rng, want_rng = np.random.default_rng(seed + 1), np.random.default_rng(seed + 1)
    for _ in range(20):
        got = sample(p, got_rng)
        assert got == walk_over_non_zeros(p, want_rng) and p[got] > 0
    assert got_rng.random() == want_rng.random()  # the same numbers were used up


def test_an_untruncated_row_draws_as_its_dense_probabilities_say():
    """T>0 with neither top-k, top-p nor min-p: the support is the whole vocabulary, and
    the draws follow its probabilities (the draw and the warp share no buffer: each warp
    keeps its own)."""
    rng = np.random.default_rng(3)
    x = qwen_like(rng, n=20_000, peak=4.0)
    params = SamplingParams(temperature=1.0)
    w = warp_support(x, params)
    other = warp_support(qwen_like(rng, n=20_000, peak=4.0), params)  # a second warp leaves the first as it was
    assert w.ids.shape[0] == 20_000 and np.array_equal(w.probs, warp_support(x, params).probs)
    assert not np.array_equal(w.probs, other.probs)
    draws = np.bincount([w.sample(rng) for _ in range(4000)], minlength=20_000)
    top = np.argsort(-w.probs)[:5]
    expected = w.probs[top] * 4000
    assert np.all(np.abs(draws[top] - expected) < 5 * np.sqrt(expected) + 3), (draws[top], expected)
