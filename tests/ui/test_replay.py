"""The race you can watch (specdesk.ui.replay) on a comparison run on the fake backend
with scripted costs, driven by a scripted clock; and the chat's verdict line, which
calls an answer faster only beyond the machine's noise."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtGui import QColor, QTextCursor

from fakes import FakeBackend, FakeClock, FakeModel, FakePairTarget, linear_cost
from specdesk.bench.configs import parse_configs
from specdesk.bench.runner import BenchOptions, run_bench
from specdesk.bench.suites import Prompt, Suite
from specdesk.session import Generation
from specdesk.session.text import REPLAY_NOTE
from specdesk.speculative.controller import FixedK
from specdesk.speculative.decoder import speculate
from specdesk.speculative.proposers import DraftModelProposer, NgramProposer, NoProposer
from specdesk.speculative.stats import Stats
from specdesk.ui.chat_view import PROVENANCE
from specdesk.ui.replay import RaceView, pieces
from specdesk.ui.stats_panel import VERDICT_BACKGROUNDS, StatsPanel


class ClockedTarget(FakePairTarget):
    """Target alone, a draft model and n-gram lookup on the fake backend, their calls
    costing scripted seconds on one clock (the draft's steps cost a fifth of the
    target's), so every run's timeline is known exactly."""

    has_draft = True

    def __init__(self):
        self.clock = FakeClock()
        tm = FakeModel(n_vocab=12, seed=0)
        self.t = FakeBackend(tm, clock=self.clock, cost=linear_cost(0.05, 0.01))
        self.d = FakeBackend(FakeModel(base=tm, seed=1, noise=0.3), clock=self.clock, cost=linear_cost(0.01, 0.002))

    def prompt_tokens(self, text):
        return [1 + (ord(ch) % 11) for ch in text][:16]

    def run(self, prompt, config):
        prop = {"none": lambda: NoProposer(), "ngram": lambda: NgramProposer(),
                "draft": lambda: DraftModelProposer(self.d, 12, p_min=0.0)}[config.proposer]()
        steps = list(speculate(self.t, prop, FixedK(3), prompt, params=config.sampling, max_tokens=config.max_tokens,
                               rng=np.random.default_rng(config.seed), clock=self.clock))
        return Generation(steps=steps, config=config, prompt=prompt)


@pytest.fixture(scope="module")
def result():
    suite = Suite("s", (Prompt("p0", "the cat sat on the mat and the cat sat", "s"),), None, "")
    return run_bench(ClockedTarget(), [suite], parse_configs("none,draft:k=3,ngram:k=3"),
                     BenchOptions(repeats=2, max_tokens=20, warmup=False))


class ScriptedClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _expected(run: dict, t: float) -> str:
    """The run's text as far as the tokens its steps had produced by ``t`` seconds."""
    tl = run["timeline"]
    start, chars, shown, i = tl["prompt_seconds"], tl["chars"], 0, 0
    for step_end, n in zip(tl["t"], tl["n"]):
        if start + step_end <= t:
            shown += sum(chars[i:i + n])
        i += n
    return run["text"][:shown]


def test_runs_record_when_each_token_was_produced(result):
    for run in result["runs"]:
        tl = run["timeline"]
        st = run["stats"]
        assert sum(tl["n"]) == len(tl["chars"]) == len(tl["kind"]) == len(tl["source"]) == st["generated"]
        assert sum(tl["chars"]) == len(run["text"])
        assert tl["t"] == sorted(tl["t"]) and tl["t"][-1] == pytest.approx(st["decode_seconds"])
        assert tl["prompt_seconds"] == pytest.approx(st["prompt_seconds"])
        if run["config"] == "none":
            assert set(tl["kind"]) == {"t"} and set(tl["source"]) == {"-"}
        elif run["config"] == "draft:k=3":
            assert "a" in tl["kind"] and set(tl["source"]) <= {"d", "-"}
            assert tl["kind"].count("a") == st["accepted"]


def test_replay_types_each_answer_out_at_its_recorded_times(qtbot, result):
    clock = ScriptedClock()
    view = RaceView(clock=clock)
    qtbot.addWidget(view)
    view.set_result(result)
    assert view.note.text() == REPLAY_NOTE and "fight over" in REPLAY_NOTE
    # at rest: every answer in full, one lane per configuration, repeat 1
    assert [lane.config for lane in view.lanes] == result["configs"]
    runs = {r["config"]: r for r in result["runs"] if r["repeat"] == 0}
    assert [lane.text() for lane in view.lanes] == [runs[c]["text"] for c in result["configs"]]
    view.replay()
    assert view.replaying and all(lane.text() == "" for lane in view.lanes)
    ends = sorted(lane.end for lane in view.lanes)
    assert ends[0] < ends[-1]  # the configurations really ran at different speeds
    for t in np.linspace(0.0, ends[-1] * 1.01, 40):
        clock.t = 100.0 + float(t)
        view.tick()
        for lane in view.lanes:
            assert lane.text() == _expected(runs[lane.config], float(t)), (lane.config, t)
    assert not view.replaying  # the last answer finished: the clock stopped
    assert view.clock_label.text() == f"{view.end:.2f} s of {view.end:.2f} s"
    assert all("done at" in lane.head.text() for lane in view.lanes)


def test_the_fastest_answer_finishes_first_and_speed_scales_the_clock(qtbot, result):
    clock = ScriptedClock()
    view = RaceView(clock=clock)
    qtbot.addWidget(view)
    view.set_result(result)
    view.speed.setCurrentIndex(view.speed.findData(2.0))
    view.replay()
    first = min(view.lanes, key=lambda lane: lane.end)
    clock.t = 100.0 + first.end / 2 + 1e-9  # 2x: the first answer's end is reached in half its time
    view.tick()
    assert first.text() == first.run["text"]
    slowest = max(view.lanes, key=lambda lane: lane.end)
    assert len(slowest.text()) < len(slowest.run["text"])
    assert "at 2×" in view.clock_label.text()


def test_replayed_tokens_wear_the_chats_provenance_colours(qtbot, result):
    view = RaceView(clock=ScriptedClock())
    qtbot.addWidget(view)
    view.set_result(result)
    lane = next(lane for lane in view.lanes if lane.config == "draft:k=3")
    tl = lane.run["timeline"]
    i = tl["kind"].index("a")  # the first accepted draft token
    pos = sum(tl["chars"][:i])
    cur = QTextCursor(lane.view.document())
    cur.setPosition(pos + 1)
    assert cur.charFormat().background().color() == QColor(PROVENANCE["accepted"][0])
    if "c" in tl["kind"]:  # the target's correction after a rejection
        k = tl["kind"].index("c")
        cur.setPosition(sum(tl["chars"][:k]) + 1)
        assert cur.charFormat().background().color() == QColor(PROVENANCE["correction"][0])
    plain = next(lane for lane in view.lanes if lane.config == "none")  # plain target steps are left uncoloured
    cur = QTextCursor(plain.view.document())
    cur.setPosition(2)
    assert cur.charFormat().background().style().name == "NoBrush"


def test_another_prompt_or_repeat_shows_its_own_answers(qtbot, result):
    view = RaceView(clock=ScriptedClock())
    qtbot.addWidget(view)
    view.set_result(result)
    view.repeat.setCurrentIndex(1)
    runs = {r["config"]: r for r in result["runs"] if r["repeat"] == 1}
    assert [lane.run is runs[lane.config] for lane in view.lanes] == [True] * 3
    assert view.answer_split.count() == 3


def test_a_run_without_a_timeline_shows_whole_at_its_end():
    run = {"text": "hello", "stats": {"prompt_seconds": 0.5, "decode_seconds": 1.5}}
    (p,) = pieces(run)
    assert (p.at, p.text) == (2.0, "hello")


# -- the chat's verdict line ---------------------------------------------------------------------

def _answer(tps: float) -> Stats:
    return Stats(generated=100, decode_seconds=100 / tps, steps=100, drafted=50, accepted=40)


@pytest.mark.parametrize("tps,noise,verdict,words", [
    (10.8, None, "within-noise", "within this machine's noise"),  # 1.08x with the assumed noise
    (10.8, 0.01, "faster", "faster, beyond this machine's noise"),  # the same with a quiet, measured machine
    (7.0, None, "slower", "slower,"),
    (9.8, 0.01, "within-noise", "within this machine's noise"),
])
def test_the_chats_verdict_is_green_only_beyond_the_noise(qtbot, tps, noise, verdict, words):
    p = StatsPanel()
    qtbot.addWidget(p)
    p.set_reference(10.0)
    p.set_noise(noise)
    p.update_stats(_answer(tps), live=False)
    assert words in p.verdict.text() and p.verdict.text().startswith(f"{tps / 10:.2f}×")
    assert VERDICT_BACKGROUNDS[verdict] in p.verdict.styleSheet()
    if verdict == "within-noise":
        assert "±" in p.verdict.text() and "pays" not in p.verdict.text()
