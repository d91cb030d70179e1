"""The benchmark runner on a noisy scripted machine (tests/fakes.NoisyBenchTarget):
an A/A comparison is within noise, a real 1.15x effect is faster, and run-until-sure
stops early when the intervals are tight and at its budget otherwise."""

from __future__ import annotations

import pytest

from fakes import NoisyBenchTarget
from specdesk.bench.configs import parse_configs
from specdesk.bench.runner import BenchOptions, UntilSure, run_bench
from specdesk.bench.suites import Prompt, Suite
from specdesk.errors import Cancelled, SpecDeskError

SUITE = [Suite("s", tuple(Prompt(f"p{i}", f"prompt number {i}", "s") for i in range(2)), None, "")]
AA = parse_configs("none,ngram:k=1")  # ngram:k=1 runs target alone's computation (NoisyBenchTarget.same_as_none)
TRIALS = 200


def _overall(res, config="ngram:k=1"):
    return next(r for r in res["summary"]["overall"] if r["config"] == config)


def test_an_a_a_comparison_is_within_noise_in_95_percent_of_seeded_trials():
    """Two configurations doing the same computation, 2 prompts x 3 repeats interleaved,
    on a machine with run-to-run load, per-call jitter and bursts."""
    verdicts = []
    for seed in range(TRIALS):
        t = NoisyBenchTarget(seed, same_as_none=("ngram:k=1",))
        res = run_bench(t, SUITE, AA, BenchOptions(repeats=3, max_tokens=12))
        row = _overall(res)
        assert row["pairs"] == 6 and row["acceptance"] is None  # nothing was drafted
        verdicts.append(row["verdict"])
    share = verdicts.count("within-noise") / TRIALS
    assert share >= 0.95, share


def test_a_scripted_1_15x_effect_gets_faster():
    """The same machine, the second configuration's every call 1.15x faster, run until
    sure (the app's default): faster in every trial, never slower."""
    verdicts, speedups = [], []
    for seed in range(TRIALS // 4):
        t = NoisyBenchTarget(seed, same_as_none=("ngram:k=1",), speed={"ngram:k=1": 1.15})
        options = BenchOptions(max_tokens=12, until_sure=UntilSure(half_width=0.03, max_repeats=10))
        row = _overall(run_bench(t, SUITE, AA, options))
        verdicts.append(row["verdict"])
        speedups.append(row["speedup"])
    assert verdicts.count("faster") / len(verdicts) >= 0.95 and "slower" not in verdicts
    assert sorted(speedups)[len(speedups) // 2] == pytest.approx(1.15, rel=0.03)


def test_the_noise_floor_reflects_the_scripted_noise():
    t = NoisyBenchTarget(1, run_noise=0.04, call_noise=0.0, burst=0.0, same_as_none=("ngram:k=1",))
    res = run_bench(t, SUITE, AA, BenchOptions(repeats=8, max_tokens=12))
    noise = res["summary"]["noise"]
    assert noise["runs"] == 16 and noise["df"] == 14
    assert 0.02 < noise["run_to_run"] < 0.07


def test_run_until_sure_stops_early_when_the_intervals_are_tight():
    t = NoisyBenchTarget(2, run_noise=0.003, call_noise=0.002, burst=0.0, same_as_none=("ngram:k=1",))
    seen = []
    rule = UntilSure(half_width=0.03, max_repeats=10)
    res = run_bench(t, SUITE, AA, BenchOptions(max_tokens=12, until_sure=rule), progress=lambda d, n, w: seen.append(w))
    stop = res["stopping"]
    assert (stop["mode"], stop["reason"], stop["repeats"]) == ("until-sure", "sure", 2)
    assert len(res["runs"]) == 2 * 2 * 2  # prompts x configs x the two repeats it needed
    assert _overall(res)["detectable"] <= 0.03
    assert res["meta"]["settings"]["repeats"] == 2 and res["meta"]["settings"]["until_sure"]["max_repeats"] == 10
    assert "repeat 2 of at most 10; ngram:k=1 is within noise (±" in seen[-1]


def test_run_until_sure_stops_at_its_repeat_budget_when_noise_is_too_wide():
    t = NoisyBenchTarget(3, run_noise=0.15, same_as_none=("ngram:k=1",))
    seen = []
    rule = UntilSure(half_width=0.01, max_repeats=4)
    res = run_bench(t, SUITE, AA, BenchOptions(max_tokens=12, until_sure=rule), progress=lambda d, n, w: seen.append(w))
    stop = res["stopping"]
    assert (stop["reason"], stop["repeats"]) == ("repeats", 4)
    assert len(res["runs"]) == 4 * 2 * 2
    assert _overall(res)["detectable"] > 0.01
    rounds = [w for w in seen if w.startswith("repeat ")]
    assert [w.split(";")[0] for w in rounds] == [f"repeat {r} of at most 4" for r in (1, 2, 3, 4)]
    assert "still within noise" in rounds[-1]


def test_run_until_sure_starts_no_repeat_past_its_time_budget():
    """Each repeat here takes about 2 x 2 runs x 12 steps x 20 ms ~ 1 scripted second."""
    t = NoisyBenchTarget(4, run_noise=0.15, same_as_none=("ngram:k=1",))
    rule = UntilSure(half_width=0.01, max_repeats=50, seconds=3.5)
    res = run_bench(t, SUITE, AA, BenchOptions(max_tokens=12, until_sure=rule, warmup=False), clock=t.clock)
    stop = res["stopping"]
    assert stop["reason"] == "time"
    assert stop["seconds"] <= 3.5
    per_repeat = stop["seconds"] / stop["repeats"]
    assert stop["seconds"] + per_repeat > 3.5  # one more would not have fitted
    assert len(res["runs"]) == stop["repeats"] * 2 * 2


def test_run_until_sure_can_be_cancelled_between_runs():
    t = NoisyBenchTarget(5, run_noise=0.15, same_as_none=("ngram:k=1",))
    with pytest.raises(Cancelled):
        run_bench(t, SUITE, AA, BenchOptions(max_tokens=12, until_sure=UntilSure(half_width=0.01)),
                  cancel=lambda: t.runs >= 7)
    assert t.runs == 7


@pytest.mark.parametrize("kw", [{"half_width": 0.0}, {"half_width": 1.5}, {"min_repeats": 1}, {"max_repeats": 1},
                                {"seconds": 0.0}])
def test_bad_until_sure_settings_are_one_clear_error(kw):
    with pytest.raises(SpecDeskError) as e:
        UntilSure(**kw)
    assert "\n" not in str(e.value)
