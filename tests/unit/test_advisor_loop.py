"""The advisor on scripted machines: a real Session over fake backends whose eval calls
cost scripted seconds on one FakeClock, so the calibration (components, then short
runs of the real decode loop) and a benchmark on held-out prompts afterwards are
exact and repeatable. Each machine is one a user has: a CPU where no draft pays,
machines where the isolated calls say drafting pays but the loop does not (caches
evicted between the two models), a draft whose batched path is slow (which the loop
no longer takes), and machines
where drafting truly pays."""

from __future__ import annotations

import csv
import json

import pytest
from fakes import fake_session, linear_cost
from specdesk.bench.advisor import advise, advisor_section, calibrate, loop_candidates
from specdesk.bench.configs import parse_configs
from specdesk.bench.loop_calibration import CALIBRATION_PROMPTS, LoopOptions
from specdesk.bench.runner import BenchOptions, SessionTarget, run_bench
from specdesk.bench.suites import Prompt, Suite, load_suite
from specdesk.errors import Cancelled

# Seconds per eval call of n tokens (target, draft), in units of one target step.
CPU = (linear_cost(1.0, 0.767), linear_cost(0.61, 0.12))  # 2 CPU cores, the default pair: no draft pays
GPU = (linear_cost(1.0, 0.05), linear_cost(0.25, 0.02))  # a verify batch costs about one step: drafting pays a lot
CHEAP = (linear_cost(1.0, 0.3), linear_cost(0.15, 0.02))  # cheaper batches, a cheap draft: it pays about 1.5x
# A batch on the draft costs 12 steps a token beyond the first (a slow batched path).
# The loop once paid it at every catch-up (the two tokens it missed after a full
# accept), which no draft call from a fixed position shows; now the draft evaluates its
# last token as it drafts, and every decode of the loop is a single token.
CATCH_UP = (linear_cost(1.0, 0.15), linear_cost(0.15, 12.0))

MACHINES = {
    "cpu": dict(profile=CPU),
    "catch-up": dict(profile=CATCH_UP),
    "evicted caches": dict(profile=CHEAP, switch_cost=3.0),  # every call after the other model's pays 3 steps
    "gpu": dict(profile=GPU),
    "cheap": dict(profile=CHEAP),
}
# The loop's time budget in scripted seconds: one target step is a second here, so
# 3000 is about a minute of a 20 ms target.
LOOP = LoopOptions(seconds=3000.0)
NOISE = 0.15  # the draft model: the target's logits plus this much noise

HELD_OUT = Suite("held-out", (
    Prompt("bash-backup", "Write a bash script that backs up a directory into a dated tar.gz and keeps only the "
           "last 7 backups.", "held-out"),
    Prompt("rename", "Rename the variable x to count in this function and reply with the code only: "
           "def f(x):\n    return x + 1", "held-out"),
    Prompt("poem", "Write a short poem about autumn rain on a tin roof.", "held-out"),
), None, "")


def _calibrated(machine: str, seed: int = 0):
    s = fake_session(run_noise=0.03, noise=NOISE, seed=seed, **MACHINES[machine])
    cal = calibrate(s, drift=False, clock=s.clock, loop_options=LOOP)
    return s, cal


def _held_out(s, configs: str, repeats: int = 3) -> dict:
    return run_bench(SessionTarget(s), [HELD_OUT], parse_configs(configs), BenchOptions(repeats=repeats, max_tokens=128),
                     clock=s.clock)


_CACHE: dict[str, tuple] = {}


def _checked(machine: str):
    """Calibrate, then benchmark every configuration the advisor predicted (and auto) on
    the held-out prompts, on the same scripted machine: (calibration, advice, rows of
    the advisor's section, benchmark result)."""
    if machine not in _CACHE:
        s, cal = _calibrated(machine)
        adv = advise(cal)
        res = _held_out(s, ",".join(cal.loop.configs) + ",draft:auto")
        _CACHE[machine] = (cal, adv, advisor_section(cal, res)["predictions"], res)
    return _CACHE[machine]


def test_the_calibration_prompts_are_not_any_built_in_suites():
    texts = {p.text for suite in load_suite("all") for p in suite.prompts}
    assert not texts & {p.text for p in CALIBRATION_PROMPTS}


@pytest.mark.parametrize("machine", ["evicted caches"])
def test_parts_that_do_not_add_up_to_the_loop_do_not_make_it_pay(machine):
    """The isolated calls predict a gain (the old advisor said so), the loop's realized
    cost is higher: the advisor does not say pays, and what it predicts is within 7%
    of what a benchmark measures on prompts it never saw."""
    cal, adv, rows, _ = _checked(machine)
    assert max(r["predicted_speedup"] for r in adv.components) > 1.3  # what the parts alone say
    assert adv.best == "none" and not any(p["pays"] for p in adv.table)
    assert "pays on this machine" not in adv.text
    assert {r["config"] for r in rows} == set(cal.loop.configs[1:]) | {"draft:auto"}
    for r in rows:
        assert r["component_predicted_speedup"] > 1.1 or r["config"] == "draft:auto"
        assert r["measured_speedup"] < 1.0 or r["config"] == "draft:auto"
        assert abs(r["error"]) <= 0.07, r


def test_a_slow_batched_path_on_the_draft_is_never_taken_in_the_loop():
    """The draft's batches cost 12 steps a token: the loop's catch-up is one token
    whatever was accepted, so what the parts predict is what the loop measures."""
    cal, adv, rows, _ = _checked("catch-up")
    assert rows
    for r in rows:
        if r["config"] != "draft:auto":
            assert abs(r["error"]) <= 0.07, r
    s, _ = _calibrated("catch-up")
    s.draft.ctx.batches.clear()
    _held_out(s, "draft:k=4", repeats=1)
    prompt_reads = [b for b in s.draft.ctx.batches if b > 1]
    assert len(prompt_reads) <= len(HELD_OUT.prompts) * 2  # a prompt's prefill (and warm-up) only


@pytest.mark.parametrize("machine", ["gpu", "cheap"])
def test_where_drafting_pays_it_says_so_and_picks_a_good_k(machine):
    cal, adv, rows, _ = _checked(machine)
    s, _ = _calibrated(machine)
    every_k = _held_out(s, "none," + ",".join(f"draft:k={k}" for k in range(1, 9)), repeats=2)
    measured = {row["config"]: row["speedup"] for row in every_k["summary"]["overall"] if row["config"] != "none"}
    assert adv.best.startswith("draft:k=") and "pays on this machine" in adv.text
    assert measured[adv.best] >= 0.95 * max(measured.values()), (adv.best, measured)
    best = next(r for r in rows if r["config"] == adv.best)
    assert best["pays"] and best["predicted_ci"][0] <= best["predicted_speedup"] <= best["predicted_ci"][1]
    for r in rows:
        assert r["predicted_verdict"] != "slower" and r["measured_speedup"] > 1.0
        if r["config"] == "draft:auto":
            # auto's prediction is the best fixed k less the whole probe budget: it may
            # under-promise (auto also changes k step by step), never over-promise
            assert r["error"] <= 0.07, r
        else:
            assert abs(r["error"]) <= 0.07, r


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_it_never_says_pays_for_a_configuration_measured_below_097(machine):
    _, adv, rows, _ = _checked(machine)
    assert rows
    for r in rows:
        if r["measured_speedup"] < 0.97:
            assert not r["pays"], r
        if r["pays"]:
            assert r["predicted_ci"][0] > 1.0
    if adv.best != "none":
        assert next(r for r in rows if r["config"] == adv.best)["measured_speedup"] >= 0.97


def test_the_components_choose_the_ks_to_try_and_the_comparison_adds_its_own():
    _, cal = _calibrated("cpu")
    names = [c.name for c in loop_candidates(cal)]
    assert names[0] == "none" and "draft:k=1" in names and 2 <= len(names) - 1 <= 3
    more = [c.name for c in loop_candidates(cal, parse_configs("none,draft:k=6,draft:auto,ngram:k=3,hybrid"))]
    assert more[: len(names)] == names and more[len(names):] == ["draft:k=6", "ngram:k=3"]


def test_the_loop_repeats_at_least_three_times_interleaved_and_stops_at_its_budget():
    s, cal = _calibrated("cpu")
    loop = cal.loop
    assert loop.repeats >= 3 and loop.runs == loop.repeats * len(loop.configs) * len(CALIBRATION_PROMPTS)
    assert loop.reason in ("sure", "time", "repeats")
    # a budget that one round already spends: three rounds all the same, then it stops
    short = calibrate(s, drift=False, clock=s.clock, loop_options=LoopOptions(seconds=1.0))
    assert short.loop.repeats == 3 and short.loop.reason == "time"
    assert all(row.pairs == 3 * len(CALIBRATION_PROMPTS) for row in short.loop.rows.values() if not row.baseline)


def test_each_round_continues_target_alones_answer_so_the_rounds_sample_new_text():
    """At T = 0 a repeat of the same context generates the same tokens: it re-times them
    but tells nothing more about the draft's acceptance. Each round runs every
    configuration on one context (the runs stay paired), and the next round continues
    target alone's answer; an answer that ended starts again from its prompt."""
    s = fake_session(CPU)
    seen = []
    real_run = s.run

    def recorded(prompt, config, cancel=None):
        gen = real_run(prompt, config, cancel)
        seen.append((list(prompt), config.proposer, gen.tokens, gen.stop_reason))
        return gen

    s.run = recorded
    opts = LoopOptions(max_tokens=12, min_repeats=3, max_repeats=3, seconds=1e9)
    calibrate(s, drift=False, clock=s.clock, loop_options=opts)
    seen = seen[-3 * 3 * 3:]  # the loop's runs (3 rounds, 3 prompts, none and two k), after the components
    per_round = len(seen) // 3
    for r in range(3):
        this = seen[r * per_round:(r + 1) * per_round]
        for i in range(0, per_round, 3):  # a round runs prompt after prompt, every config on each
            assert len({tuple(run[0]) for run in this[i:i + 3]}) == 1  # one context for a prompt's runs
        if r:
            before = {tuple(p): (t, why) for p, who, t, why in seen[(r - 1) * per_round:r * per_round] if who == "none"}
            for prompt, *_ in this:
                grown = [(p, t, why) for p, (t, why) in before.items() if list(p) + list(t) == prompt]
                restarted = [p for p, (t, why) in before.items() if why != "max_tokens" and p[:len(prompt)] == tuple(prompt)]
                assert grown or restarted, "a round's context is neither the last round's continued nor a prompt again"
                if grown:
                    assert grown[0][2] == "max_tokens" and len(prompt) == len(grown[0][0]) + 12
    assert len(seen[-1][0]) > len(seen[0][0])  # the last round ran on a longer context than the first


def test_progress_names_the_configuration_and_the_repeat_and_cancel_stops_it():
    s = fake_session(CPU)
    seen = []
    calibrate(s, drift=False, clock=s.clock, loop_options=LOOP, progress=lambda m, f: seen.append((m, f)))
    msgs = [m for m, _ in seen]
    assert "advisor: draft:k=1, repeat 1 of 3" in msgs and "advisor: none, repeat 3 of 3" in msgs
    fracs = [f for _, f in seen]
    assert fracs == sorted(fracs) and 0 <= fracs[0] and fracs[-1] <= 1

    runs = []
    s2 = fake_session(CPU)
    real_run = s2.run

    def counted(prompt, config, cancel=None):
        runs.append(config.proposer)
        return real_run(prompt, config, cancel)

    s2.run = counted
    with pytest.raises(Cancelled):
        calibrate(s2, drift=False, clock=s2.clock, loop_options=LOOP, cancel=lambda: len(runs) >= 5)
    assert len(runs) == 5  # it stopped at the next run


def test_auto_is_predicted_from_the_best_measured_k_less_its_probe_budget():
    _, cal = _calibrated("gpu")
    best = max((cal.loop.measured(c) for c in cal.loop.configs[1:]), key=lambda p: p.speedup)
    auto = cal.loop.predict("draft:auto")
    assert auto.via == best.config and auto.speedup == pytest.approx(best.speedup * 0.975)
    _, cpu = _calibrated("cpu")
    auto = cpu.loop.predict("draft:auto")  # no k pays: about target alone, less the probes
    assert auto.speedup == pytest.approx(0.975) and not auto.pays
    assert auto.ci[0] < auto.speedup < auto.ci[1]


def test_the_interval_and_verdict_reach_advise_json_and_the_reports(tmp_path):
    from specdesk.bench.report import markdown, write_report

    cal, adv, rows, res = _checked("evicted caches")
    out = json.loads(json.dumps({"calibration": cal.to_dict(), **adv.to_dict()}))
    for p in out["predictions"]:
        assert len(p["predicted_ci"]) == 2 and p["verdict"] in ("faster", "slower", "within-noise")
        assert p["pays"] is False
    assert out["calibration"]["loop"]["runs"] == cal.loop.runs
    assert out["component_predictions"] and out["best"] == "none"
    result = dict(res, advisor=advisor_section(cal, res))
    md = markdown(result)
    k1 = next(r for r in rows if r["config"] == "draft:k=1")
    lo, hi = k1["predicted_ci"]
    assert f"{k1['predicted_speedup']:.2f}× ({lo:.2f}–{hi:.2f}) | slower |" in md
    write_report(result, tmp_path)
    with open(tmp_path / "report.csv") as fh:
        by = {r["config"]: r for r in csv.DictReader(fh)}
    assert float(by["draft:k=1"]["predicted_low"]) == pytest.approx(lo)
    assert by["draft:k=1"]["predicted_verdict"] == "slower"
    assert json.loads((tmp_path / "report.json").read_text())["advisor"]["predictions"][0]["predicted_ci"]


def test_the_comparison_calibrates_on_the_loop_and_still_seeds_auto():
    from specdesk.bench.comparison import ComparisonOptions, run_comparison

    s = fake_session(CHEAP, switch_cost=3.0)
    seeded = []
    s.seed_costs = lambda costs: seeded.append(costs)
    msgs = []
    res = run_comparison(s, [HELD_OUT], parse_configs("none,draft:k=5"),
                         ComparisonOptions(bench=BenchOptions(repeats=2, max_tokens=32), drift=False),
                         progress=lambda m, f: msgs.append(m))
    assert seeded and seeded[0] is res.calibration.costs
    assert "draft:k=5" in res.calibration.loop.configs  # the comparison's own config is tried in the loop
    assert any(m.startswith("advisor: draft:k=5, repeat ") for m in msgs)
    preds = res.to_dict()["advisor"]["predictions"]
    assert [p["config"] for p in preds] == ["draft:k=5"] and preds[0]["predicted_ci"] and not preds[0]["pays"]


def test_a_calibration_seeds_a_real_auto_controller():
    s = fake_session(CPU)
    cal = calibrate(s, drift=False, clock=s.clock, loop_options=LOOP)
    s.seed_costs(cal.costs)
    assert s.auto.costs.verify_cost(1) == cal.costs.verify_cost(1)


def test_where_verifying_is_cheap_the_advisor_looks_at_long_drafts():
    """A GPU's verify batch costs little more for 33 tokens than for 9, and a draft that
    agrees almost always: the calibration measures batches and drafts up to 32, the loop
    tries the long k the costs rate best, and the advisor recommends one, within 7% of
    what a benchmark measures on prompts it never saw (it stopped at k=8 before)."""
    s = fake_session(GPU, noise=0.02, run_noise=0.03, seed=0)
    cal = calibrate(s, drift=False, clock=s.clock, loop_options=LOOP)
    assert cal.k_max == 32 and 33 in cal.costs.verify and 32 in cal.costs.draft
    adv = advise(cal)
    assert adv.best.startswith("draft:k=") and int(adv.best.split("=")[1]) > 8, adv.best
    res = _held_out(s, ",".join(cal.loop.configs), repeats=2)
    row = next(r for r in advisor_section(cal, res)["predictions"] if r["config"] == adv.best)
    assert row["pays"] and row["measured_speedup"] > 1.0 and abs(row["error"]) <= 0.07, row
    # on this machine's CPU the range stays short: long batches cost as much a token as short ones
    _, cpu = _calibrated("cpu")
    assert cpu.k_max == 8


def seeds_report(seeds: list[int]) -> float:
    """The figure the bound above is checked on, over more seeds than the tests run (a
    seed changes the draft's noise and the run-to-run jitter): per machine and seed,
    each predicted configuration's error on the held-out prompts (predicted / measured
    - 1); returns the worst of a fixed k over all. Exact and repeatable, no model."""
    worst = 0.0
    for seed in seeds:
        for machine in MACHINES:
            s, cal = _calibrated(machine, seed)
            rows = advisor_section(cal, _held_out(s, ",".join(cal.loop.configs) + ",draft:auto"))["predictions"]
            fixed = [abs(r["error"]) for r in rows if r["config"] != "draft:auto"]
            worst = max([worst, *fixed])
            errors = "  ".join(f"{r['config']} {100 * r['error']:+.1f}%" for r in rows)
            print(f"seed {seed}  {machine:<15} rounds {cal.loop.repeats}  worst fixed-k |error| "
                  f"{100 * max(fixed, default=0):.1f}%   {errors}")
    print(f"worst |error| of a fixed k over all: {100 * worst:.1f}% (the tests' bound: 7%)")
    return worst


if __name__ == "__main__":
    # When the 7% bound is in doubt, or after changing the advisor:
    #   PYTHONPATH=app:tests python tests/unit/test_advisor_loop.py [--seeds 0,1,2,3]
    import argparse

    ap = argparse.ArgumentParser(description="the advisor's held-out error on the scripted machines, over several seeds")
    ap.add_argument("--seeds", default="0,1,2,3")
    seeds_report([int(s) for s in ap.parse_args().seeds.split(",")])
