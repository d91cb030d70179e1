"""specdesk bench on real models (SmolLM2): the report's figures add up; bad input
changes nothing."""

import csv
import json
import math
import statistics

import pytest

from clirun import assert_one_line_error, cli


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    p = tmp_path_factory.mktemp("suite") / "mine.jsonl"
    p.write_text(
        '{"id": "colours", "prompt": "List three colours."}\n'
        '{"id": "add", "prompt": "Write a Python function add(a, b)."}\n'
    )
    return p


@pytest.fixture(scope="module")
def report(prompts, smol_path, smol_draft_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "out"
    r = cli("bench", "--target", smol_path, "--draft", smol_draft_path, "--ctx", "512", "--threads", "2",
            "--suite", prompts, "--configs", "none,draft:k=2", "--repeats", "2", "--max-tokens", "16",
            "--out", out, "--no-advisor", timeout=900)
    assert r.returncode == 0, r.stderr
    return out, r


def test_report_files_and_figures_add_up(report):
    out, r = report
    res = json.loads((out / "report.json").read_text())
    runs = res["runs"]
    assert len(runs) == 2 * 2 * 2  # prompts x repeats x configs
    # interleaved, repeat after repeat, the order rotated from one repeat to the next
    assert [(x["prompt_id"], x["repeat"], x["config"]) for x in runs] == [
        ("colours", 0, "none"), ("colours", 0, "draft:k=2"), ("add", 0, "none"), ("add", 0, "draft:k=2"),
        ("colours", 1, "draft:k=2"), ("colours", 1, "none"), ("add", 1, "draft:k=2"), ("add", 1, "none")]
    for x in runs:
        st = x["stats"]
        assert st["generated"] <= 16 and st["accepted"] <= st["drafted"]
        assert st["tokens_per_second"] == pytest.approx(st["generated"] / st["decode_seconds"])
        assert sum(x["timeline"]["n"]) == st["generated"]  # when each token was produced
    # the summary's speedup is the geometric mean of the paired ratios (per prompt, then over prompts)
    by = {(x["prompt_id"], x["repeat"], x["config"]): x["stats"]["tokens_per_second"] for x in runs}
    logs = {p: [math.log(by[(p, rep, "draft:k=2")] / by[(p, rep, "none")]) for rep in (0, 1)] for p in ("colours", "add")}
    centre = statistics.mean(statistics.mean(v) for v in logs.values())
    row = next(x for x in res["summary"]["per_suite"] if x["config"] == "draft:k=2")
    assert row["speedup"] == pytest.approx(math.exp(centre))
    lo, hi = row["speedup_ci"]
    assert lo < row["speedup"] < hi and row["pairs"] == 4 and row["spread_df"] == 2
    assert row["verdict"] == ("faster" if lo > 1 else "slower" if hi < 1 else "within-noise")
    assert row["detectable"] == pytest.approx(math.sqrt(hi / lo) - 1)
    assert res["stopping"] == {"mode": "fixed", "repeats": 2, "reason": "repeats"}
    assert res["summary"]["noise"]["runs"] == 4 and res["drift"]["by_batch"]  # the drift, as the app measures it
    drafted = sum(x["stats"]["drafted"] for x in runs if x["config"] == "draft:k=2")
    accepted = sum(x["stats"]["accepted"] for x in runs if x["config"] == "draft:k=2")
    assert row["acceptance"] == pytest.approx(accepted / drafted)
    assert row["compared"] == 4 and row["identical"] + row["near_ties"] + row["mismatches"] == 4
    rows = list(csv.DictReader(open(out / "report.csv")))
    assert len(rows) == len(runs)
    assert sum(int(x["generated"]) for x in rows) == sum(x["stats"]["generated"] for x in runs)
    md = (out / "report.md").read_text()
    assert "draft:k=2" in md and f"{row['speedup']:.2f}× ({lo:.2f}–{hi:.2f})" in md and "**How sure:**" in md
    for png in ("speedup.png", "acceptance_by_position.png", "tokens_per_second.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "draft:k=2" in r.stdout  # the markdown table is printed too


@pytest.mark.parametrize(
    "args,needles",
    [
        (["--suite", "no_such_suite"], ["unknown suite"]),
        (["--configs", "none,draft:k=0"], ["k must be"]),
        (["--configs", "none,warp"], ["unknown config"]),
        (["--configs", "none,draft+history"], ["only ngram takes history"]),
        (["--until-sure", "0"], ["until-sure must be in"]),
        (["--until-sure", "--max-repeats", "1"], ["max repeats must be at least 2"]),
        (["--until-sure", "--time-budget", "-1"], ["time-budget must be in"]),
    ],
)
def test_bad_suite_or_config(args, needles, smol_path, tmp_path):
    out = tmp_path / "out"
    r = cli("bench", "--target", smol_path, *args, "--out", out, "--no-advisor")
    assert_one_line_error(r, *needles)
    assert not out.exists()


def test_empty_and_malformed_prompt_files(smol_path, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert_one_line_error(cli("bench", "--target", smol_path, "--suite", empty, "--no-advisor", "--out", tmp_path / "o1"), "no prompts")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": "broken"\n')
    assert_one_line_error(cli("bench", "--target", smol_path, "--suite", bad, "--no-advisor", "--out", tmp_path / "o2"), "line 2")
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_unwritable_output_directory_fails_before_any_model_work(smol_path, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    r = cli("bench", "--target", smol_path, "--configs", "none,ngram", "--out", blocker / "out", "--no-advisor")
    assert_one_line_error(r, "cannot")
    assert blocker.read_text() == "x"
    # a folder where a report file goes: found after the whole run before, the report lost
    (tmp_path / "o3" / "report.md").mkdir(parents=True)
    one = tmp_path / "one.jsonl"
    one.write_text('{"prompt": "Say hi."}\n')  # short, should the check ever be lost
    r = cli("bench", "--target", smol_path, "--configs", "none", "--suite", one, "--repeats", "1", "--max-tokens", "4",
            "--out", tmp_path / "o3", "--no-advisor")
    assert_one_line_error(r, "report.md there is not a file")
    assert sorted(p.name for p in (tmp_path / "o3").iterdir()) == ["report.md"]
    # an empty --out was the current folder
    r = cli("bench", "--target", smol_path, "--configs", "none,ngram", "--out", "", "--no-advisor", "--seed", "-5")
    assert r.returncode == 2 and "--out needs a folder name" in r.stderr, r.stderr
    r = cli("bench", "--target", smol_path, "--configs", "none", "--seed", "-5", "--out", tmp_path / "o4", "--no-advisor")
    assert_one_line_error(r, "seed must be an integer >= 0")  # refused before the models load, not after
    # a run that fails after the check (here the model) leaves no empty report folder behind
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 60)
    r = cli("bench", "--target", bad, "--configs", "none", "--out", tmp_path / "o5" / "deep", "--no-advisor")
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "o5").exists()


def test_multi_turn_tasks_replay_the_chat_and_report_history_against_ngram(smol_path, tmp_path):
    """A two-turn task runs in `specdesk bench`: turn 2's prompt holds turn 1's question
    and answer, each turn is reported, and the history lookup is set against n-gram
    lookup without history on turn 2."""
    chats = tmp_path / "chats.jsonl"
    chats.write_text('{"id": "add", "turns": ["Write a Python function add(a, b). Code only.", '
                     '"Add type hints to it. Reply with the complete updated function only."]}\n')
    out = tmp_path / "out"
    r = cli("bench", "--target", smol_path, "--ctx", "1024", "--threads", "2", "--suite", chats,
            "--configs", "none,ngram,ngram+history", "--repeats", "1", "--max-tokens", "24", "--out", out,
            "--no-advisor", timeout=900)
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "report.json").read_text())
    runs = res["runs"]
    assert [(x["prompt_id"], x["turn"]) for x in runs] == [("add/turn1", 1)] * 3 + [("add/turn2", 2)] * 3
    t1 = {x["config"]: x for x in runs if x["turn"] == 1}
    t2 = {x["config"]: x for x in runs if x["turn"] == 2}
    # the replayed chat is longer than turn 2's question alone by at least turn 1's answer
    assert t2["none"]["prompt_tokens"] > t1["none"]["prompt_tokens"] + t1["none"]["stats"]["generated"]
    assert len({x["prompt_tokens"] for x in t2.values()}) == 1  # every config got the same chat
    assert all(x["identical"] for x in runs if x["config"] != "none")
    (h,) = res["summary"]["history"]
    assert (h["config"], h["without_history"]) == ("ngram+history:auto", "ngram:auto")
    assert {(x["turn"], x["config"]) for x in res["summary"]["per_turn"]} == {
        (t, c) for t in (1, 2) for c in ("none", "ngram:auto", "ngram+history:auto")}
    assert "## chats by turn" in r.stdout and "History lookup on turns 2+" in r.stdout


def test_translated_configs_name_a_draft_of_another_vocabulary(smol_path, qwen_draft_path, smol_draft_path, tmp_path):
    """A draft with another vocabulary runs as `translated` (draft configs are named so);
    on a same-vocabulary pair `translated` is a one-line error."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "count", "prompt": "Count from one to ten in words."}\n')
    out = tmp_path / "out"
    r = cli("bench", "--target", smol_path, "--draft", qwen_draft_path, "--ctx", "512", "--threads", "2",
            "--suite", prompts, "--configs", "none,draft:k=2", "--repeats", "1", "--max-tokens", "16", "--out", out,
            "--no-advisor", timeout=900)
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "report.json").read_text())
    assert res["configs"] == ["none", "translated:k=2"]
    (run,) = [x for x in res["runs"] if x["config"] == "translated:k=2"]
    assert run["stats"]["drafted"] > 0 and run["identical"] is not None
    assert "another vocabulary" in r.stderr
    r = cli("bench", "--target", smol_path, "--draft", smol_draft_path, "--ctx", "512", "--threads", "2",
            "--suite", prompts, "--configs", "none,translated", "--no-advisor", "--out", tmp_path / "o2")
    assert_one_line_error(r, "translated:auto", "another vocabulary")


def test_compare_names_a_translated_draft(smol_path, qwen_draft_path):
    r = cli("compare", "--target", smol_path, "--draft", qwen_draft_path, "--ctx", "512", "--threads", "2",
            "--prompt", "Count from one to ten in words.", "--proposer", "draft", "--k", "2", "--max-tokens", "12",
            timeout=900)
    assert r.returncode == 0, r.stderr
    assert "speculative (translated:k=2)" in r.stdout


def test_bench_until_sure_stops_at_its_repeat_budget_and_says_so(smol_path, tmp_path):
    """At +-0.5% three repeats of one prompt cannot be sure here: the bench stops at its
    budget, prints each repeat's state, and the report says why it stopped."""
    p = tmp_path / "one.jsonl"
    p.write_text('{"id": "count", "prompt": "Count from one to five."}\n')
    out = tmp_path / "out"
    r = cli("bench", "--target", smol_path, "--ctx", "512", "--threads", "2", "--suite", p, "--configs", "none,ngram",
            "--until-sure", "0.5", "--max-repeats", "3", "--max-tokens", "12", "--out", out, "--no-advisor", timeout=900)
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "report.json").read_text())
    assert res["stopping"]["mode"] == "until-sure" and res["stopping"]["repeats"] == 3
    assert res["stopping"]["reason"] == "repeats" and len(res["runs"]) == 3 * 2
    assert res["meta"]["settings"]["until_sure"]["half_width"] == 0.005
    assert "repeat 1 of at most 3; ngram:auto" in r.stderr and "Stopped at the budget of 3 repeats" in r.stderr
    assert "Stopped at the budget of 3 repeats" in (out / "report.md").read_text()
