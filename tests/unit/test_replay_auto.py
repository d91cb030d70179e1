"""The real decode loop and the real auto on measured machines' costs (a replay, no
model): on an H200 a draft model pays only in long drafts, a one-layer draft (the cost
of an MTP head) pays at any length and most in long ones; on a 2-core CPU no draft
pays. auto must take what each machine offers, from the costs it measures as it runs."""

from __future__ import annotations

import statistics

import pytest

from specdesk.bench.replay import ModelCosts, Profile, load_profile, profile_names, run_config, run_replay
from specdesk.errors import SpecDeskError

KS = [4, 8, 12, 16, 24, 32]


@pytest.mark.parametrize("name", ["h200-7b-d0.5", "h200-7b-d1l"])
def test_on_an_h200_auto_reaches_the_best_fixed_k(name):
    """acceptance 0.98 a token; 4 rounds of 4 answers of 512 tokens, interleaved."""
    res = run_replay(load_profile(name), KS, rounds=4, answers=4, tokens=512)
    best = res.best_fixed
    assert statistics.median(res.ratio(best)) > 1.4  # long drafts pay on this machine
    assert statistics.median(res.auto_vs_best()) >= 0.9, (best, res.speeds)


def test_on_this_cpu_auto_keeps_pace_with_target_alone():
    """A verify batch of 4 costs 2.3 target steps and a draft step 0.45 of one: every
    fixed k loses, and auto drafts next to nothing."""
    res = run_replay(load_profile("cpu-2core"), KS, rounds=3, answers=4, tokens=512)
    assert max(statistics.median(res.ratio(f"k={k}")) for k in KS) < 1.0
    assert min(res.ratio("auto")) >= 0.97, res.speeds


def test_a_short_draft_that_loses_does_not_condemn_long_ones():
    """A machine whose batched kernels cost 2.4 steps from two tokens on, and little more
    for 33: k=2 loses to target alone, k=16 wins. auto's first drafts are short and lose;
    the loss stays in their band of draft lengths, and the long drafts are still found."""
    p = Profile("batched-jump", "", ModelCosts({1: 0.010, 2: 0.024, 3: 0.026, 33: 0.031}),
                ModelCosts({1: 0.0015, 64: 0.004}), 0.98)
    none = statistics.mean(run_config(p, None, answers=2, tokens=256))
    assert statistics.mean(run_config(p, 2, answers=2, tokens=256)) < none
    assert statistics.mean(run_config(p, 16, answers=2, tokens=256)) > 2 * none
    assert statistics.mean(run_config(p, "auto", answers=2, tokens=256)) > 1.5 * none


def test_profiles_are_built_in_and_a_bad_one_is_one_line(tmp_path):
    assert {"h200-7b-d0.5", "h200-7b-d1l", "cpu-2core"} <= set(profile_names())
    bad = tmp_path / "bad.json"
    bad.write_text('{"target": {"batch_ms": {"2": 3.0}}, "draft": {"batch_ms": {"1": 1.0}}}')
    with pytest.raises(SpecDeskError, match="needs batch_ms"):
        load_profile(str(bad))
    with pytest.raises(SpecDeskError, match="unknown replay profile"):
        load_profile("tpu-v9")
    p = Profile("flat", "", ModelCosts({1: 0.01}), ModelCosts({1: 0.002}), 0.5)
    assert run_config(p, None, answers=1, tokens=16)[0] == pytest.approx(100.0)  # 10 ms a token, exactly
