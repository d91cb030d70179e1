"""Benchmark runner and advisor logic on the fake backend and hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from fakes import FakeBackend, FakeModel, FakePairTarget
from specdesk.bench.advisor import Calibration, advise, draft_length_histogram, predict_fixed, predict_run
from specdesk.bench.configs import BenchConfig, ConfigError, parse_configs
from specdesk.bench.runner import BenchOptions, paired_ratios, run_bench, schedule, summarize
from specdesk.bench.suites import Prompt, Suite
from specdesk.session import Generation
from specdesk.speculative.controller import FixedK
from specdesk.speculative.auto import AutoK
from specdesk.speculative.costmodel import CostModel, PositionAcceptance, expected_tokens
from specdesk.speculative.decoder import speculate
from specdesk.speculative.proposers import DraftModelProposer, HybridProposer, NgramProposer, NoProposer


# -- configs --------------------------------------------------------------------------------

def test_parse_configs_puts_the_baseline_first_and_defaults_to_auto():
    cs = parse_configs("draft:k=2,ngram,none,draft:auto,hybrid:k=3:p_min=0.5")
    assert [c.name for c in cs] == ["none", "draft:k=2", "ngram:auto", "draft:auto", "hybrid:k=3:p_min=0.5"]
    assert parse_configs("ngram")[0].name == "none"


@pytest.mark.parametrize("bad", ["magic", "draft:k=0", "draft:k=x", "draft:q=1", "none:k=2", "draft:p_min=1.5", "ngram,ngram", ",",
                                 "draft+history", "hybrid:history", "none:history", "ngram+history,ngram:history"])
def test_bad_configs_are_one_clear_error(bad):
    with pytest.raises(ConfigError) as e:
        parse_configs(bad)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("bad", ["draft:k=2:k=3", "draft:k=4:auto", "hybrid:p_min=0.5:p-min=0.6", "ngram:history:history"])
def test_an_option_given_twice_is_refused_not_the_last_kept(bad):
    """draft:k=2:k=3 ran as k=3 without a word: the report then named a configuration
    the user did not think they asked for."""
    with pytest.raises(ConfigError, match="twice"):
        parse_configs(bad)


# -- schedule and aggregation -----------------------------------------------------------------

def _suite(name, n):
    return Suite(name, tuple(Prompt(f"p{i}", f"prompt {i}", name) for i in range(n)), None, "")


def test_schedule_interleaves_and_rotates_configs():
    cfgs = [BenchConfig("none"), BenchConfig("draft", 2), BenchConfig("ngram")]
    plan = schedule([_suite("s", 1)], cfgs, repeats=3)
    order = [c.name for _, _, _, _, c in plan]
    assert order == ["none", "draft:k=2", "ngram:auto", "draft:k=2", "ngram:auto", "none", "ngram:auto", "none", "draft:k=2"]


def _run(suite, prompt, repeat, config, tps, drafted=0, accepted=0, steps=10, identical=None, verdict=None):
    return {
        "suite": suite, "prompt_id": prompt, "repeat": repeat, "order": 0, "config": config,
        "stats": {"tokens_per_second": tps, "drafted": drafted, "accepted": accepted, "steps": steps,
                  "decode_seconds": 1.0, "overhead_seconds": 0.01, "generated": steps + accepted},
        "identical": identical, "divergence": {"verdict": verdict} if verdict else None,
    }


def test_paired_ratios_and_medians():
    runs = [
        _run("s", "a", 0, "none", 10.0), _run("s", "a", 0, "x", 12.0, 10, 8, identical=True),
        _run("s", "a", 1, "none", 20.0), _run("s", "a", 1, "x", 22.0, 10, 6, identical=False, verdict="near-tie"),
        _run("s", "a", 2, "none", 10.0), _run("s", "a", 2, "x", 9.0, 10, 5, identical=False, verdict="mismatch"),
        _run("s", "b", 0, "none", 10.0), _run("s", "b", 0, "x", 15.0, 10, 9, identical=True),
    ]
    r = paired_ratios(runs, "x")
    assert r[("s", "a")] == pytest.approx([1.2, 1.1, 0.9])
    summary = summarize(runs, ["none", "x"])
    row = next(x for x in summary["per_suite"] if x["config"] == "x")
    # the geometric mean over prompts of each prompt's geometric mean, the noise from
    # prompt a's three repeats (b ran once): a t-interval with 4 - 2 = 2 degrees of freedom
    la = np.log([1.2, 1.1, 0.9])
    centre = (la.mean() + np.log(1.5)) / 2
    se = np.sqrt(((la - la.mean()) ** 2).sum() / 2 * (1 / 3 + 1)) / 2
    t975 = 4.302652729911275  # Student's t, 2 degrees of freedom, 97.5%
    assert row["speedup"] == pytest.approx(np.exp(centre))
    assert row["speedup_ci"] == pytest.approx([np.exp(centre - t975 * se), np.exp(centre + t975 * se)])
    assert (row["pairs"], row["spread_df"], row["verdict"]) == (4, 2, "within-noise")
    assert row["detectable"] == pytest.approx(np.exp(t975 * se) - 1)
    assert row["acceptance"] == pytest.approx(28 / 40)
    assert row["mean_accepted_length"] == pytest.approx((28 + 40) / 40)
    assert (row["identical"], row["near_ties"], row["mismatches"], row["compared"]) == (2, 1, 1, 4)
    assert row["median_tps"] == pytest.approx(np.median([np.median([12, 22, 9]), 15.0]))
    base = next(x for x in summary["per_suite"] if x["config"] == "none")
    assert base["speedup"] == pytest.approx(1.0) and base["verdict"] == "baseline"
    # the noise floor: target alone's spread between a's repeats (10, 20, 10 tok/s)
    lt = np.log([10.0, 20.0, 10.0])
    assert summary["noise"]["run_to_run"] == pytest.approx(np.exp(np.sqrt(((lt - lt.mean()) ** 2).sum() / 2)) - 1)


# -- the runner on the fake backend -----------------------------------------------------------------

class FakeTarget(FakePairTarget):
    """A BenchTarget over fake backends (real decoder, scripted model)."""

    has_draft = True

    def __init__(self):
        tm = FakeModel(n_vocab=12, seed=0)
        self.t = FakeBackend(tm)
        self.d = FakeBackend(FakeModel(base=tm, seed=1, noise=0.8))
        self.auto = AutoK()
        self.order = []

    def prompt_tokens(self, text):
        return [1 + (ord(ch) % 11) for ch in text][:20]

    def run(self, prompt, config):
        self.order.append(config.describe())
        if config.proposer == "none":
            prop = NoProposer()
        elif config.proposer == "ngram":
            prop = NgramProposer()
        else:
            dm = DraftModelProposer(self.d, 12, p_min=config.p_min)
            prop = dm if config.proposer == "draft" else HybridProposer(dm)
        ctl = self.auto if config.k == "auto" else FixedK(config.k)
        steps = list(speculate(self.t, prop, ctl, prompt, params=config.sampling, max_tokens=config.max_tokens,
                               rng=np.random.default_rng(config.seed)))
        return Generation(steps=steps, config=config, prompt=prompt)


def test_run_bench_on_the_fake_backend():
    target = FakeTarget()
    suites = [_suite("alpha", 2), _suite("beta", 1)]
    cfgs = parse_configs("none,draft:k=3,ngram:k=2")
    seen = []
    res = run_bench(target, suites, cfgs, BenchOptions(repeats=2, max_tokens=24), on_run=seen.append)
    assert len(res["runs"]) == 3 * 2 * 3 == len(seen)
    # warm-up ran each config once, then the interleaved plan
    assert target.order[:3] == ["none", "draft:k=3", "ngram:k=2"]
    # greedy speculation on the fake backend reproduces target alone exactly
    spec = [r for r in res["runs"] if r["config"] != "none"]
    assert all(r["identical"] is True for r in spec)
    assert all(r["stats"]["generated"] == 24 for r in res["runs"])
    overall = {row["config"]: row for row in res["summary"]["overall"]}
    assert overall["none"]["speedup"] == pytest.approx(1.0)
    assert overall["draft:k=3"]["acceptance"] > 0 and overall["draft:k=3"]["compared"] == 6
    assert res["meta"]["settings"]["configs"] == ["none", "draft:k=3", "ngram:k=2"]
    assert res["memory"]["extra_ram_bytes"] == 40


def test_run_bench_needs_a_draft_for_draft_configs():
    from specdesk.errors import SpecDeskError

    target = FakeTarget()
    target.has_draft = False
    with pytest.raises(SpecDeskError, match="draft:k=2 cannot run on this pair .*needs a draft model"):
        run_bench(target, [_suite("s", 1)], parse_configs("none,draft:k=2"), BenchOptions(repeats=1, max_tokens=4))


def test_run_bench_writes_a_parseable_report(tmp_path):
    import csv
    import json

    from specdesk.bench.report import write_report

    res = run_bench(FakeTarget(), [_suite("s", 2)], parse_configs("none,draft:k=2"), BenchOptions(repeats=1, max_tokens=12))
    paths = write_report(res, tmp_path / "out")
    names = {p.name for p in paths}
    assert {"report.json", "report.csv", "report.md"} <= names
    assert json.loads((tmp_path / "out" / "report.json").read_text())["configs"] == ["none", "draft:k=2"]
    rows = list(csv.DictReader(open(tmp_path / "out" / "report.csv")))
    assert len(rows) == 4 and float(rows[0]["tokens_per_second"]) > 0


# -- advisor arithmetic -------------------------------------------------------------------------------

def expected_tokens_constant(alpha: float, k: int) -> float:
    """Leviathan et al.'s closed form for a constant acceptance rate: the oracle."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def test_expected_tokens_matches_leviathans_closed_form():
    for a in (0.0, 0.3, 0.8, 0.99):
        for k in range(0, 8):
            assert expected_tokens([a] * k)[k] == pytest.approx(expected_tokens_constant(a, k))
    assert expected_tokens_constant(1.0, 4) == 5.0


def _cal(verify_ratios, draft_per_token, acceptance=None, step=0.04):
    cm = CostModel()
    for b, r in verify_ratios.items():
        cm.set_verify(b, r * step)
    for k in range(1, 9):
        cm.set_draft(k, draft_per_token * k * step)
    return Calibration(costs=cm, context_tokens=300, seconds=1.0, draft_acceptance=acceptance,
                       draft_bytes=512 * 2**20, kv_bytes_per_token=28 * 1024)


def test_predict_fixed_by_hand():
    cal = _cal({1: 1.0, 2: 1.9, 3: 2.3, 4: 2.7, 5: 3.2}, draft_per_token=0.6)
    # k=2, alphas 0.8, 0.5: E = 1 + 0.8 + 0.4 = 2.2; cost = V(3) + D(2) = 2.3 + 1.2 = 3.5
    assert predict_fixed(cal, 2, [0.8, 0.5]) == pytest.approx(2.2 / 3.5)
    # n-gram drafts cost nothing to make: k=4 at acceptance 1 -> 5 tokens for 3.2 steps
    assert predict_fixed(cal, 4, [1.0] * 4, draft_cost=False) == pytest.approx(5 / 3.2)
    assert predict_fixed(cal, 0, []) == 1.0


def test_draft_length_histogram_and_run_prediction():
    stats = {"steps": 10, "generated": 25, "drafted_per_position": [7, 5, 2]}
    assert draft_length_histogram(stats) == {0: 3, 1: 2, 2: 3, 3: 2}
    cal = _cal({1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}, draft_per_token=0.5)
    # time in steps: 3*1 + 2*(2+0.5) + 3*(3+1) + 2*(4+1.5) = 3 + 5 + 12 + 11 = 31
    assert predict_run(cal, stats, "draft") == pytest.approx(25 / 31)
    # the same steps without draft cost (n-gram): 3 + 4 + 9 + 8 = 24
    assert predict_run(cal, stats, "ngram") == pytest.approx(25 / 24)
    # hybrid: only the steps the draft model drafted pay for drafting. Here the
    # model drafted one step of 1 token and one of 3; lookups made the rest.
    hybrid = dict(stats, model_draft_lengths=[1, 0, 1])
    assert predict_run(cal, hybrid, "hybrid") == pytest.approx(25 / (24 + 0.5 + 1.5))
    # a report without the counter charges every draft, as a draft model's
    assert predict_run(cal, stats, "hybrid") == pytest.approx(25 / 31)


def _acceptance(rate, n=200, k=8):
    acc = PositionAcceptance()
    rng = np.random.default_rng(0)
    for _ in range(n):
        a = 0
        while a < k and rng.random() < rate:
            a += 1
        acc.record(k, a)
    return acc


def test_advice_on_a_cpu_like_machine_offers_context_instead():
    cal = _cal({b: 0.95 * b for b in range(1, 10)} | {1: 1.0}, draft_per_token=0.6, acceptance=_acceptance(0.85))
    adv = advise(cal)
    assert adv.best == "none"
    assert adv.memory_alternative and f"{int(512 * 2**20 / (28 * 1024)):,} more tokens" in adv.memory_alternative


def test_the_components_alone_never_say_speculation_pays():
    """Costs that predict 1.5x and more from the isolated calls, but no run of the loop:
    the advisor gives the components' figures without an interval, and no verdict
    (the parts did not add up to the loop on a real CPU: 1.10x predicted, 0.88x measured)."""
    cal = _cal({b: 1.0 + 0.05 * (b - 1) for b in range(1, 10)}, draft_per_token=0.1, acceptance=_acceptance(0.85))
    adv = advise(cal)
    assert max(r["predicted_speedup"] for r in adv.components) > 1.5
    assert adv.best == "none" and "does not say speculation pays" in adv.text
    assert all(r["predicted_ci"] is None and not r["pays"] for r in adv.table)


def test_advice_states_the_exact_claim_with_the_measured_drift():
    from specdesk.speculative.drift import BatchDrift, Drift

    cal = _cal({b: 0.95 * b for b in range(1, 10)} | {1: 1.0}, draft_per_token=0.6, acceptance=_acceptance(0.85))
    assert "not measured" in advise(cal).exactness and cal.to_dict()["drift"] is None
    cal.drift = Drift(by_batch=(BatchDrift(2, 64, 0.0081, 0.053, 0.21, 0.05, 1, 0.115),), positions=64, near_ties=4,
                      temperature=1.0)
    adv = advise(cal)
    assert "as llama.cpp computes it in a verify batch" in adv.exactness
    assert "0.81% in total variation" in adv.exactness and "5.30% at worst" in adv.exactness
    assert "flipped at 1.56% of positions" in adv.exactness
    assert adv.to_dict()["exactness"] == adv.exactness
    assert cal.to_dict()["drift"]["by_batch"][0]["tv_max"] == 0.053


# -- translated and history configurations ------------------------------------------------------

def test_translated_and_history_configs_name_what_runs():
    from specdesk.bench.configs import resolve_configs

    cs = parse_configs("ngram,ngram+history,translated:k=3,ngram:history:k=2")
    assert [c.name for c in cs] == ["none", "ngram:auto", "ngram+history:auto", "translated:k=3", "ngram+history:k=2"]
    hist, tr = cs[2], cs[3]
    g = hist.generation(SamplingParamsT0, 8, 0)
    assert (g.proposer, g.needs_draft) == ("ngram+history", False)
    g = tr.generation(SamplingParamsT0, 8, 0)
    assert (g.proposer, tr.needs_draft) == ("translated", True)
    assert cs[1].generation(SamplingParamsT0, 8, 0).proposer == "ngram"
    # on a pair whose draft has another vocabulary, draft configs are named translated
    both = parse_configs("none,draft:k=2,hybrid")
    assert [c.name for c in resolve_configs(both, translated=True)] == ["none", "translated:k=2", "hybrid:auto"]
    assert resolve_configs(both, translated=False) == both
    # translated needs such a draft; listing both names of one config is an error
    with pytest.raises(ConfigError, match="another vocabulary") as e:
        resolve_configs(parse_configs("translated"), translated=False)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="listed twice"):
        resolve_configs(parse_configs("draft:k=2,translated:k=2"), translated=True)


from specdesk.speculative.sampling import SamplingParams as _SP  # noqa: E402

SamplingParamsT0 = _SP()


# -- multi-turn replay ------------------------------------------------------------------------------

class ChatFakeTarget(FakeTarget):
    """FakeTarget that renders a chat (every message's characters) and keeps a history
    index as the session does, recording what each run saw."""

    def __init__(self):
        super().__init__()
        from specdesk.speculative.proposers import HistoryProposer

        self.history = HistoryProposer()
        self.seen = []  # (config, prompt tokens, history documents)
        self.docs = []

    def _enc(self, text):
        return [1 + (ord(ch) % 11) for ch in text]

    def chat_tokens(self, messages, max_tokens):
        toks = []
        for m in messages:
            toks += [11] + self._enc(m["content"])
        return toks, 0

    def set_history(self, turns):
        self.history.index.clear()
        self.docs = [list(p) + list(a) for p, a in turns]
        for d in self.docs:
            self.history.remember(d)

    def run(self, prompt, config):
        self.seen.append((config.proposer.replace("+history", ":h"), list(prompt), [list(d) for d in self.docs]))
        if config.proposer == "ngram+history":
            prop = HybridProposer(NoProposer(), history=self.history)
            ctl = self.auto if config.k == "auto" else FixedK(config.k)
            steps = list(speculate(self.t, prop, ctl, prompt, params=config.sampling, max_tokens=config.max_tokens,
                                   rng=np.random.default_rng(config.seed)))
            return Generation(steps=steps, config=config, prompt=prompt)
        return super().run(prompt, config)


def _multi(name, n_turns=3):
    msgs = tuple(f"turn {i} asks to revise it" for i in range(n_turns))
    return Suite(name, (Prompt("task", msgs[0], name, turns=msgs),), None, "")


def test_multi_turn_tasks_replay_the_earlier_turns_with_their_answers():
    target = ChatFakeTarget()
    cfgs = parse_configs("none,ngram:k=2,ngram+history:k=2")
    res = run_bench(target, [_multi("m")], cfgs, BenchOptions(repeats=2, max_tokens=10, warmup=False))
    runs = res["runs"]
    assert len(runs) == 3 * 2 * 3  # turns x repeats x configs
    assert [(r["turn"], r["prompt_id"]) for r in runs[:3]] == [(1, "task/turn1")] * 3
    assert {r["task"] for r in runs} == {"task"} and {r["turns"] for r in runs} == {3}
    base = {(r["repeat"], r["turn"]): r for r in runs if r["config"] == "none"}
    # turn 2's prompt is turn 1's message, turn 1's answer (target alone's), then turn 2's message
    for (cfg, prompt, docs), rec in zip(target.seen, runs):
        t, r = rec["turn"], rec["repeat"]
        assert (":h" in cfg) == ("+history" in rec["config"])  # the history option reaches the session
        msgs = [{"role": "user", "content": f"turn {i} asks to revise it"} for i in range(3)]
        chat = []
        for i in range(t - 1):
            chat += [msgs[i], {"role": "assistant", "content": base[(r, i + 1)]["text"]}]
        if t == 1:  # a chat of one message: the single-prompt path
            assert prompt == target.prompt_tokens(msgs[0]["content"])
        else:
            assert prompt == target.chat_tokens(chat + [msgs[t - 1]], 10)[0]
        assert rec["prompt_tokens"] == len(prompt)
        # every configuration sees exactly the earlier turns in its history, never another run's answer
        assert len(docs) == t - 1
    # the answers replayed are the target's own tokens
    run_docs = [d for c, p, d in target.seen if len(d) == 2]
    assert run_docs and all(len(d[0]) > 0 for d in run_docs)
    # T=0: every configuration reproduces target alone on every turn
    assert all(r["identical"] for r in runs if r["config"] != "none")
    turns = {(x["turn"], x["config"]) for x in res["summary"]["per_turn"]}
    assert turns == {(t, c.name) for t in (1, 2, 3) for c in cfgs}
    (h,) = res["summary"]["history"]
    assert h["config"] == "ngram+history:k=2" and h["without_history"] == "ngram:k=2" and h["prompts"] == 2
    assert h["speedup_over_without_history"] is not None


def test_single_prompts_run_with_an_empty_history():
    """A run never copies from another run's answer to the same prompt (the session's
    history would otherwise hold target alone's answer when hybrid runs)."""
    target = ChatFakeTarget()
    run_bench(target, [_suite("s", 2)], parse_configs("none,ngram+history:k=2"), BenchOptions(repeats=2, max_tokens=8))
    assert all(docs == [] for _, _, docs in target.seen)


def test_the_report_shows_turns_and_history_against_ngram(tmp_path):
    from specdesk.bench.report import markdown, write_report

    res = run_bench(ChatFakeTarget(), [_multi("m"), _suite("s", 1)], parse_configs("none,ngram:k=2,ngram+history:k=2"),
                    BenchOptions(repeats=1, max_tokens=10, warmup=False))
    md = markdown(res)
    assert "## m by turn" in md and "## s by turn" not in md
    assert "History lookup on turns 2+" in md and "`ngram+history:k=2`" in md and "without history (`ngram:k=2`)" in md
    write_report(res, tmp_path / "out")
    import csv

    rows = list(csv.DictReader(open(tmp_path / "out" / "report.csv")))
    assert [r["turn"] for r in rows if r["suite"] == "m"] == ["1"] * 3 + ["2"] * 3 + ["3"] * 3


def test_the_advisor_predicts_every_turn_and_charges_a_translated_draft():
    cal = _cal({b: float(b) for b in range(1, 10)}, 0.2)
    stats = {"generated": 20, "steps": 10, "drafted_per_position": [10, 10], "model_draft_lengths": [0, 10]}
    assert predict_run(cal, stats, "translated") == pytest.approx(predict_run(cal, stats, "draft"))
    assert predict_run(cal, stats, "translated") < predict_run(cal, stats, "ngram+history")
    from specdesk.bench.advisor import validate

    res = run_bench(ChatFakeTarget(), [_multi("m")], parse_configs("none,ngram+history:k=2"),
                    BenchOptions(repeats=1, max_tokens=10, warmup=False))
    rows = validate(cal, res)
    assert sorted(r.get("turn", 0) for r in rows) == [0, 1, 2, 3]
