"""Drafting with EAGLE-3 and DFlash heads that read the target's layers, on real GGUFs
written by tools/synth/heads.py (a small bigram target, and a head of each kind that
agrees with it, reads its features only, or is random): exact at T=0 over many
prompts, accepted where they agree, given up by auto where they are random, and run
through the CLI, compare, bench and the server as a user would."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from clirun import cli
from specdesk.session import GenerationConfig, ModelSpec, Session

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from synth.heads import write_dflash_pair, write_eagle3_pair  # noqa: E402

KINDS = ("eagle3", "dflash")
WRITERS = {"eagle3": write_eagle3_pair, "dflash": write_dflash_pair}
_WORDS = ("the of and to in is that it for was on are as with his they at be this from have or by one had not but "
          "what all were when we there can an your which their said if do will each about how up out them then").split()
#: 24 prompts of 3 to 10 words, and one of a single token (EAGLE-3 has nothing to draft from there)
PROMPTS = [" ".join(_WORDS[(7 * i + j) % len(_WORDS)] for j in range(3 + i % 8)) for i in range(24)] + ["a"]
COMMON = ["--ctx", "512", "--threads", "2", "--raw"]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("heads")
    out = {}
    for kind in KINDS:
        for mode in ("agree", "random", "features"):
            out[kind, mode] = WRITERS[kind](root / f"{kind}-{mode}", mode=mode)
    return out


@pytest.fixture(scope="module", params=KINDS)
def agreeing(request, pairs):
    target, head = pairs[request.param, "agree"]
    s = Session.load(ModelSpec(target, n_ctx=512, threads=2), ModelSpec(head, n_ctx=512, threads=2), remember_costs=False)
    yield request.param, s
    s.close()


def test_t0_is_identical_to_the_target_alone_and_agreeing_heads_are_accepted(agreeing):
    kind, s = agreeing
    drafted = accepted = 0
    for i, text in enumerate(PROMPTS):  # raw text, and chats (their template's control tokens in the history)
        prompt = s.chat_prompt([{"role": "user", "content": text}]) if i % 2 else s.raw_prompt(text)
        alone = s.run(prompt, GenerationConfig(proposer="none", max_tokens=24))
        spec = s.run(prompt, GenerationConfig(proposer=kind, k=3, max_tokens=24))
        assert spec.tokens == alone.tokens, text
        st = spec.stats
        drafted, accepted = drafted + st.drafted, accepted + st.accepted
        assert {t.source for step in spec.steps for t in step.tokens if t.kind == "accepted"} <= {kind}
    assert drafted >= 20 * 15 and accepted / drafted >= 0.9, (accepted, drafted)
    assert st.drafted_per_position[2] > 0 and st.accepted_per_position[2] > 0  # per-position acceptance
    assert s.memory().model("draft").kv_bytes > 0  # the head's own context counts


def test_the_head_reads_the_right_positions_of_the_target(pairs):
    """Heads that predict from the target's features alone: the first EAGLE-3 draft
    token two steps on from the features at N-2, every DFlash position from the
    injected features. On text that follows the target's cycle they are right only if
    each position's features are the target's at that position."""
    for kind in KINDS:
        target, head = pairs[kind, "features"]
        with Session.load(ModelSpec(target, n_ctx=512, threads=2), ModelSpec(head, n_ctx=512, threads=2),
                          remember_costs=False) as s:
            seed = s.raw_prompt("the of and")
            chain = seed + s.run(seed, GenerationConfig(proposer="none", max_tokens=20)).tokens  # the target's own text
            spec = s.run(chain, GenerationConfig(proposer=kind, k=1 if kind == "eagle3" else 3, max_tokens=48))
            st = spec.stats
            assert st.drafted >= 20 and st.acceptance_rate >= 0.9, (kind, st.drafted, st.accepted)


@pytest.mark.parametrize("kind", KINDS)
def test_random_heads_change_nothing_and_auto_stops_drafting(pairs, kind):
    target, head = pairs[kind, "random"]
    run = ["generate", "--target", target, "--draft", head, *COMMON, "--prompt", PROMPTS[3], "--json",
           "--max-tokens", "96", "--p-min", "0"]
    alone = json.loads(cli(*run, "--proposer", "none").stdout)
    fixed = cli(*run, "--proposer", kind, "--k", "3")
    assert fixed.returncode == 0, fixed.stderr
    fixed = json.loads(fixed.stdout)
    assert fixed["tokens"] == alone["tokens"]
    assert fixed["stats"]["drafted"] > 60 and fixed["stats"]["acceptance_rate"] < 0.1
    auto = json.loads(cli(*run, "--proposer", kind).stdout)
    assert auto["tokens"] == alone["tokens"]
    later = auto["steps"][len(auto["steps"]) // 3:]
    # auto explored within its bound and then left the head alone: the rest ran as the target alone would
    assert sum(s["drafted"] for s in later) <= 3, [s["decision"] for s in later]


@pytest.mark.parametrize("kind", KINDS)
def test_the_cli_takes_a_head_as_the_draft_file(pairs, kind):
    target, head = pairs[kind, "agree"]
    r = cli("generate", "--target", target, "--draft", head, *COMMON, "--prompt", PROMPTS[0], "--proposer", kind,
            "--k", "3", "--max-tokens", "32", "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)["stats"]
    assert st["drafted"] >= 24 and st["acceptance_rate"] >= 0.9 and st["model_draft_lengths"]
    info = cli("models", "inspect", head, "--json")
    assert info.returncode == 0, info.stderr
    assert "draft head for a target 64 wide" in json.loads(info.stdout)["head"]


def test_compare_and_bench_report_the_heads_with_intervals(pairs, tmp_path):
    target, head = pairs["eagle3", "agree"]
    r = cli("compare", "--target", target, "--draft", head, *COMMON, "--prompt", PROMPTS[1], "--proposer", "eagle3",
            "--k", "3", "--max-tokens", "24", "--repeats", "2", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["config"].startswith("eagle3:k=3") and len(out["speedup_ci"]) == 2
    suite = tmp_path / "p.txt"
    suite.write_text("the of and to\nin is that it\n")
    target, head = pairs["dflash", "agree"]
    b = cli("bench", "--target", target, "--draft", head, "--ctx", "2048", "--threads", "2", "--suite", suite,
            "--configs", "none,dflash:k=3,dflash:auto", "--repeats", "2", "--max-tokens", "16", "--out", tmp_path / "out")
    assert b.returncode == 0, b.stderr
    res = json.loads((tmp_path / "out" / "report.json").read_text())
    rows = {row["config"]: row for row in res["summary"]["overall"]}
    assert set(rows) >= {"none", "dflash:k=3", "dflash:auto"}
    lo, hi = rows["dflash:k=3"]["speedup_ci"]
    assert lo <= rows["dflash:k=3"]["speedup"] <= hi and rows["dflash:k=3"]["acceptance"] >= 0.9


def test_the_server_drafts_with_a_head(pairs, tmp_path):
    from serving import start_serve

    target, head = pairs["dflash", "agree"]
    s = start_serve(["--target", target, "--draft", head, "--ctx", "512", "--threads", "2", "--proposer", "dflash",
                     "--k", "3"], tmp_path)
    try:
        r = s.post("/v1/completions", {"prompt": PROMPTS[2], "max_tokens": 24, "temperature": 0})
        assert r.status == 200, r.text
        spec = r.json()["speculation"]
        assert spec["proposer"] == "dflash" and spec["drafted"] > 0 and spec["acceptance_rate"] >= 0.9
    finally:
        s.stop()
