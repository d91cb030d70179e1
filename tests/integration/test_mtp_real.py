"""Drafting with a model's own MTP heads, on real GGUFs written here (tests/mtp_gguf.py):
tiny GLM-4.5-shaped models whose heads agree with the trunk, or are random, or are
missing or malformed; the CLI run on them as a user would."""

import json
from dataclasses import replace

import pytest

from mtp_gguf import MtpSpec, agreeing, no_heads, random_heads, write_mtp_model, write_step35_model
from clirun import assert_one_line_error, cli

PROMPT = "the of and to in is that it for was"
COMMON = ["--ctx", "512", "--threads", "2", "--raw", "--prompt", PROMPT]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("mtp")
    return {
        "agree": agreeing(d / "agree.gguf"),
        "random": random_heads(d / "random.gguf"),
        "none": no_heads(d / "none.gguf"),
        # declares a head but carries none of its tensors (llama.cpp would abort in the MTP graph)
        "trunk-only": write_mtp_model(d / "trunk-only.gguf", replace(MtpSpec(), heads="none", nextn_key=1)),
        # two heads for an architecture whose MTP graph asserts one
        "two": write_mtp_model(d / "two.gguf", replace(MtpSpec(), nextn_key=2)),
        # more heads than blocks: llama.cpp asserts it at every load
        "too-many": write_mtp_model(d / "too-many.gguf", replace(MtpSpec(), nextn_key=9)),
        # Step 3.5's chained heads: draft token i by head i
        "step-agree": write_step35_model(d / "step-agree.gguf", heads=3, agree=True),
        "step-random": write_step35_model(d / "step-random.gguf", heads=3, agree=False),
    }


def generate(path, *args):
    r = cli("generate", "--target", path, *COMMON, "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def alone(models):
    return generate(models["agree"], "--proposer", "none", "--max-tokens", "64")


def test_agreeing_heads_draft_are_accepted_and_change_nothing(models, alone):
    out = generate(models["agree"], "--proposer", "mtp", "--k", "4", "--max-tokens", "64")
    st = out["stats"]
    assert st["drafted"] >= 32 and st["acceptance_rate"] >= 0.9, st
    assert out["tokens"] == alone["tokens"] and out["text"] == alone["text"]
    assert st["mean_accepted_length"] > 3
    # per draft position, as every proposer's
    assert len(st["drafted_per_position"]) == 4 and st["accepted_per_position"][3] > 0
    assert st["model_draft_lengths"], "mtp is a model source: its drafts cost a decode each"
    assert st["draft_seconds"] > 0 and alone["stats"]["drafted"] == 0


def test_random_heads_change_nothing_and_auto_stops_drafting(models):
    alone = generate(models["random"], "--proposer", "none", "--max-tokens", "96")
    fixed = generate(models["random"], "--proposer", "mtp", "--k", "3", "--p-min", "0", "--max-tokens", "96")
    assert fixed["tokens"] == alone["tokens"]
    assert fixed["stats"]["drafted"] > 60 and fixed["stats"]["acceptance_rate"] < 0.1
    auto = generate(models["random"], "--proposer", "mtp", "--p-min", "0", "--max-tokens", "96")
    assert auto["tokens"] == alone["tokens"]
    later = auto["steps"][len(auto["steps"]) // 3:]
    assert sum(s["drafted"] for s in later) <= 3, [s["decision"] for s in later]
    assert all(s["decision"].startswith(("mtp", "last token")) for s in auto["steps"])


def test_a_target_without_heads_exits_2_in_one_line(models):
    r = cli("generate", "--target", models["none"], *COMMON, "--proposer", "mtp", "--max-tokens", "4")
    assert_one_line_error(r, "none.gguf", "no MTP heads", "nextn_predict_layers")


@pytest.mark.parametrize("name,needles", [
    ("trunk-only", ["declares 1 MTP head", "blk.1.nextn.eh_proj.weight"]),
    ("two", ["takes one head", "declares 2"]),
])
def test_malformed_heads_are_refused_in_one_line_and_the_trunk_still_runs(models, name, needles):
    r = cli("generate", "--target", models[name], *COMMON, "--proposer", "mtp", "--max-tokens", "4")
    assert_one_line_error(r, *needles)
    ok = cli("generate", "--target", models[name], *COMMON, "--proposer", "none", "--max-tokens", "4")
    assert ok.returncode == 0, ok.stderr


def test_more_heads_than_blocks_is_refused_before_llama_cpp_aborts(models):
    for proposer in ("none", "mtp"):
        r = cli("generate", "--target", models["too-many"], *COMMON, "--proposer", proposer, "--max-tokens", "4")
        assert_one_line_error(r, "nextn_predict_layers is 9", "more than the")


def test_inspect_says_how_many_heads(models):
    for name, heads, problem in (("agree", 1, None), ("none", 0, None), ("two", 2, "too many heads")):
        r = cli("models", "inspect", models[name], "--json")
        assert r.returncode == 0, r.stderr
        info = json.loads(r.stdout)
        assert (info["mtp_heads"], info["mtp_problem"]) == (heads, problem)


def test_compare_and_bench_report_mtp_with_intervals(models, tmp_path):
    r = cli("compare", "--target", models["agree"], *COMMON, "--proposer", "mtp", "--k", "4", "--max-tokens", "24",
            "--repeats", "2", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["config"].startswith("mtp:k=4") and len(out["speedup_ci"]) == 2 and out["identical"]
    assert out["speculative"]["stats"]["drafted"] > 0
    suite = tmp_path / "p.txt"
    suite.write_text("the of and to\nin is that it\n")
    b = cli("bench", "--target", models["agree"], "--ctx", "512", "--threads", "2", "--suite", suite,
            "--configs", "none,mtp:k=4,mtp:auto", "--repeats", "2", "--max-tokens", "16", "--out", tmp_path / "out",
            "--no-advisor")
    assert b.returncode == 0, b.stderr
    res = json.loads((tmp_path / "out" / "report.json").read_text())
    rows = {row["config"]: row for row in res["summary"]["overall"]}
    assert set(rows) >= {"none", "mtp:k=4", "mtp:auto"}
    lo, hi = rows["mtp:k=4"]["speedup_ci"]
    assert lo <= rows["mtp:k=4"]["speedup"] <= hi and rows["mtp:k=4"]["acceptance"] >= 0.9


def test_chained_heads_draft_one_token_each_and_change_nothing(models):
    alone = generate(models["step-agree"], "--proposer", "none", "--max-tokens", "48")
    out = generate(models["step-agree"], "--proposer", "mtp", "--k", "6", "--p-min", "0", "--max-tokens", "48")
    st = out["stats"]
    assert out["tokens"] == alone["tokens"]
    assert len(st["drafted_per_position"]) == 3  # three heads: three draft tokens at most
    assert st["drafted"] >= 30 and st["acceptance_rate"] >= 0.9, st
    rand = generate(models["step-random"], "--proposer", "mtp", "--k", "3", "--p-min", "0", "--max-tokens", "48")
    assert rand["tokens"] == generate(models["step-random"], "--proposer", "none", "--max-tokens", "48")["tokens"]
    assert rand["stats"]["drafted"] > 30 and rand["stats"]["acceptance_rate"] < 0.1
    r = cli("models", "inspect", models["step-agree"], "--json")
    assert json.loads(r.stdout)["mtp_heads"] == 3


def test_the_server_drafts_with_the_heads(models, tmp_path):
    from serving import start_serve

    s = start_serve(["--target", models["agree"], "--ctx", "512", "--threads", "2", "--proposer", "mtp", "--k", "4"], tmp_path)
    try:
        r = s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0})
        assert r.status == 200, r.text
        spec = r.json()["speculation"]
        assert spec["proposer"] == "mtp" and spec["draft_model"] is None
        assert spec["drafted"] > 0 and spec["acceptance_rate"] >= 0.9
    finally:
        s.stop()
