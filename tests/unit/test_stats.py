"""Paired speed statistics (specdesk.bench.stats): the t distribution, the interval by
hand, its coverage by simulation (normal and heavy-tailed noise, one prompt or many,
repeats or not), the verdicts an A/A comparison and a real effect get, the noise
floor, one answer's band, and the stopping rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specdesk.bench import stats
from specdesk.bench.stats import (
    FASTER,
    SLOWER,
    WITHIN_NOISE,
    noise_floor,
    paired_speedup,
    single_run_band,
    single_run_verdict,
    sure,
    t_cdf,
    t_quantile,
)

# Student's t quantiles from the standard tables (two-sided 95% and 99%).
T_TABLE = {1: (12.706, 63.657), 2: (4.303, 9.925), 3: (3.182, 5.841), 4: (2.776, 4.604), 5: (2.571, 4.032),
           7: (2.365, 3.499), 10: (2.228, 3.169), 20: (2.086, 2.845), 30: (2.042, 2.750), 120: (1.980, 2.617)}


@pytest.mark.parametrize("df", sorted(T_TABLE))
def test_t_quantiles_match_the_tables(df):
    q95, q99 = T_TABLE[df]
    assert t_quantile(0.975, df) == pytest.approx(q95, abs=6e-4)
    assert t_quantile(0.995, df) == pytest.approx(q99, abs=6e-4)
    assert t_quantile(0.025, df) == pytest.approx(-t_quantile(0.975, df))
    assert t_cdf(t_quantile(0.9, df), df) == pytest.approx(0.9, abs=1e-9)


def test_the_t_cdf_approaches_the_normal_and_is_a_cdf():
    from statistics import NormalDist

    assert t_cdf(1.96, 2000) == pytest.approx(NormalDist().cdf(1.96), abs=2e-4)
    xs = np.linspace(-6, 6, 61)
    for df in (1, 2, 3, 8, 9):
        ys = [t_cdf(float(x), df) for x in xs]
        assert all(b >= a for a, b in zip(ys, ys[1:])) and ys[0] < 0.06 and ys[-1] > 0.94
        assert t_cdf(0.0, df) == 0.5 and t_cdf(1.3, df) + t_cdf(-1.3, df) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        t_cdf(1.0, 0)


def test_the_interval_by_hand():
    ratios = {"p": [1.10, 1.20, 1.15, 1.05]}
    logs = np.log(ratios["p"])
    se = logs.std(ddof=1) / 2
    h = 3.182446305284263 * se  # t, 3 degrees of freedom
    r = paired_speedup(ratios)
    assert r.speedup == pytest.approx(math.exp(logs.mean()))  # the geometric mean
    assert r.ci == pytest.approx((math.exp(logs.mean() - h), math.exp(logs.mean() + h)))
    assert (r.pairs, r.prompts, r.df, r.spread, r.verdict) == (4, 1, 3, "repeats", FASTER)
    assert r.detectable == pytest.approx(math.exp(h) - 1)
    d = r.to_dict()
    assert d["speedup_ci"] == pytest.approx(list(r.ci)) and d["verdict"] == "faster" and d["pairs"] == 4


def test_prompts_that_differ_do_not_count_as_noise():
    """Two prompts with very different but steady speedups: the noise is measured
    within each prompt, so the interval is narrow around their mean."""
    r = paired_speedup({"edit": [1.50, 1.52, 1.49], "poem": [0.98, 1.00, 0.99]})
    assert r.spread == "repeats" and r.df == 4
    assert r.detectable < 0.02
    assert r.speedup == pytest.approx(math.exp((np.log([1.5, 1.52, 1.49]).mean() + np.log([0.98, 1.0, 0.99]).mean()) / 2))


def test_one_repeat_per_prompt_measures_the_spread_between_prompts():
    r = paired_speedup({"a": [1.1], "b": [0.9], "c": [1.3]})
    assert (r.spread, r.df, r.pairs) == ("prompts", 2, 3)
    logs = np.log([1.1, 0.9, 1.3])
    h = 4.302652729911275 * logs.std(ddof=1) / math.sqrt(3)
    assert r.ci == pytest.approx((math.exp(logs.mean() - h), math.exp(logs.mean() + h)))


def test_one_pair_has_no_interval_and_says_within_noise():
    r = paired_speedup({"a": [1.08]})
    assert r.speedup == pytest.approx(1.08) and r.ci is None and r.detectable is None
    assert r.verdict == WITHIN_NOISE
    empty = paired_speedup({})
    assert empty.speedup is None and empty.verdict is None and empty.pairs == 0
    # unusable ratios (a run that produced nothing) are left out, not counted as pairs
    assert paired_speedup({"a": [1.1, None, 0.0, float("nan")]}).pairs == 1


def test_verdicts_follow_the_interval():
    assert paired_speedup({"p": [0.80, 0.82, 0.79, 0.81]}).verdict == SLOWER
    assert paired_speedup({"p": [0.95, 1.07, 1.02, 0.97]}).verdict == WITHIN_NOISE
    assert stats.verdict_of((1.001, 1.2)) == FASTER and stats.verdict_of((0.9, 1.0)) == WITHIN_NOISE
    assert stats.baseline_row(6).to_dict()["verdict"] == "baseline"


# -- coverage by simulation ------------------------------------------------------------------

TRIALS = 2000


def _coverage(rng, prompts: int, repeats: int, noise, effects) -> float:
    """Share of simulated runs whose 95% interval holds the true speedup: the mean over
    the prompts of their true log ratios (drawn by ``effects``), seen through ``noise``."""
    hits = 0
    for _ in range(TRIALS):
        true = effects(rng, prompts)
        ratios = {p: list(np.exp(true[p] + noise(rng, repeats))) for p in range(prompts)}
        lo, hi = paired_speedup(ratios).ci
        hits += lo <= math.exp(float(np.mean(true))) <= hi
    return hits / TRIALS


def _normal(sigma):
    return lambda rng, n: rng.normal(0.0, sigma, n)


def _heavy(scale):
    """Student t with 3 degrees of freedom: the occasional run hit by another process."""
    return lambda rng, n: scale * rng.standard_t(3, n)


def _steady(log_speedup):
    return lambda rng, n: np.full(n, log_speedup)


def _differing(sd):
    """Prompts whose true speedups differ (n-gram lookup pays on some, not others)."""
    return lambda rng, n: np.log(1.1) + rng.normal(0.0, sd, n)


# three standard errors of a 95% share over TRIALS: the band a correct interval stays in
BAND = 3 * math.sqrt(0.95 * 0.05 / TRIALS)


@pytest.mark.parametrize("prompts,repeats,effects", [
    (1, 2, _steady(0.0)), (1, 3, _steady(0.2)), (1, 6, _steady(-0.1)), (1, 12, _steady(0.0)),
    (3, 4, _differing(0.2)), (5, 2, _differing(0.3)),
])
def test_the_interval_covers_the_true_speedup_95_percent_of_the_time(prompts, repeats, effects):
    rng = np.random.default_rng(1000 * prompts + repeats)
    c = _coverage(rng, prompts, repeats, _normal(0.05), effects)
    assert abs(c - 0.95) < BAND, c


def test_with_one_run_per_prompt_it_covers_the_mean_over_prompts():
    """Prompts drawn from a population of speedups, one repeat each: the interval
    (from the spread between prompts) covers the population's mean."""
    rng = np.random.default_rng(5)
    hits = 0
    for _ in range(TRIALS):
        true = np.log(1.05) + rng.normal(0.0, 0.15, 6)
        ratios = {p: [math.exp(true[p] + rng.normal(0.0, 0.05))] for p in range(6)}
        lo, hi = paired_speedup(ratios).ci
        hits += lo <= 1.05 <= hi
    assert abs(hits / TRIALS - 0.95) < BAND


@pytest.mark.parametrize("repeats", [3, 6, 10])
def test_outliers_make_the_interval_conservative_not_overconfident(repeats):
    rng = np.random.default_rng(repeats)
    c = _coverage(rng, 2, repeats, _heavy(0.03), _steady(0.05))
    assert c >= 0.95 - BAND, c


def test_an_a_a_comparison_is_within_noise_and_a_real_effect_is_faster():
    """The issue's numbers on the statistics alone: identical computations (true ratio
    1) under this machine's noise, 6 pairs a trial; and a 1.15x effect."""
    rng = np.random.default_rng(23)
    noise = _normal(0.06)  # paired ratios of identical runs spread 0.89-1.12 here
    aa = [paired_speedup({"a": list(np.exp(noise(rng, 3))), "b": list(np.exp(noise(rng, 3)))}).verdict
          for _ in range(TRIALS)]
    assert aa.count(WITHIN_NOISE) / TRIALS >= 0.95 - BAND
    effect = [paired_speedup({"a": list(1.15 * np.exp(noise(rng, 3))), "b": list(1.15 * np.exp(noise(rng, 3)))}).verdict
              for _ in range(TRIALS)]
    assert effect.count(FASTER) / TRIALS >= 0.95
    assert SLOWER not in effect


def test_the_detectable_difference_shrinks_with_the_pairs():
    rng = np.random.default_rng(3)
    noise = rng.normal(0.0, 0.05, 40)
    d = [paired_speedup({"p": list(np.exp(noise[:n]))}).detectable for n in (4, 10, 40)]
    assert d[0] > d[1] > d[2] > 0
    assert d[2] < 0.03 < d[0]


# -- noise floor, one answer, stopping ---------------------------------------------------------

def test_the_noise_floor_is_the_pooled_spread_of_target_alones_repeats():
    tps = {"a": [20.0, 21.0, 19.0], "b": [10.0, 10.5], "c": [30.0]}
    la, lb = np.log(tps["a"]), np.log(tps["b"])
    ss = ((la - la.mean()) ** 2).sum() + ((lb - lb.mean()) ** 2).sum()
    nf = noise_floor(tps)
    assert nf.run_to_run == pytest.approx(math.exp(math.sqrt(ss / 3)) - 1)
    assert (nf.runs, nf.df) == (6, 3)
    assert noise_floor({"a": [20.0], "b": [10.0]}).run_to_run is None  # nothing repeated


def test_one_answer_is_within_noise_unless_beyond_what_one_run_can_move():
    band = single_run_band(0.04)
    assert band == pytest.approx(math.exp(1.959964 * math.sqrt(2) * math.log(1.04)) - 1, rel=1e-5)
    assert single_run_verdict(1.08, band) == WITHIN_NOISE  # the README's old "1.08x" in green
    assert single_run_verdict(1.0 + band + 0.01, band) == FASTER
    assert single_run_verdict(1 / (1 + band) - 0.01, band) == SLOWER
    assert single_run_band(None) == pytest.approx(single_run_band(stats.ASSUMED_RUN_NOISE))


def test_sure_needs_every_interval_narrow_enough():
    narrow = paired_speedup({"p": [1.01, 1.0, 1.02, 0.99, 1.0, 1.01]})
    wide = paired_speedup({"p": [1.2, 0.9, 1.1]})
    single = paired_speedup({"p": [1.0]})
    assert sure([narrow], 0.03) and not sure([narrow, wide], 0.03)
    assert not sure([single], 0.5) and not sure([], 0.03)
