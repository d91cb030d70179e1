"""Drafting with a Gemma 4 assistant, on real GGUFs written here (tools/synth/gemma4_assistant.py):
a tiny gemma4 target with sliding-window and global layers, and a gemma4-assistant head
that agrees with it or is random, run by llama.cpp with the head's context sharing the
target's KV cache; the CLI run on them as a user would.

The target's trunk is a bigram table (what the agreeing head predicts exactly), except in
the sliding-window tests, where its attention output weighs in: the next token then depends
on what each layer attends to, so a cache that lost or kept the wrong positions after a
rollback would change the answer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from specdesk.engine.context import Context
from specdesk.engine.gemma4_assistant import Gemma4Assistant
from specdesk.engine.model import Model
from specdesk.session import GenerationConfig, ModelSpec, Session
from clirun import assert_one_line_error, cli

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from synth.gemma4_assistant import PairSpec, write_head, write_pair, write_target  # noqa: E402

WORDS = ("the of and to in is that it for was on are as with his they at be this from have or by one had not but "
         "what all were when we there can an your which their said if do will each about how up out them then").split()
PROMPTS = [" ".join(WORDS[(7 * i + j) % len(WORDS)] for j in range(4 + i % 5)) for i in range(20)]
# one thread: on a machine shared with other work, llama.cpp's threads wait for each other in spin loops
ARGS = ["--ctx", "1024", "--threads", "1", "--raw"]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    d = tmp_path_factory.mktemp("gemma4")
    return {
        "agree": write_pair(d / "agree"),
        "random": write_pair(d / "random", random=True),
        # the target's attention weighs in (the answer depends on the window), the head still guesses the bigram
        "window": write_pair(d / "window", attention=6.0, n_swa=8, n_layer=4),
    }


def _load(pair, n_ctx: int = 1024) -> Session:
    t, h = pair
    return Session.load(ModelSpec(t, n_ctx=n_ctx, threads=1), ModelSpec(h, n_ctx=n_ctx, threads=1), remember_costs=False)


def _run(s: Session, prompt: str, **cfg):
    return s.run(s.raw_prompt(prompt), GenerationConfig(p_min=0.0, **cfg))


def test_an_agreeing_assistant_changes_nothing_over_many_prompts_and_is_accepted(pairs):
    with _load(pairs["agree"]) as s:
        drafted = accepted = 0
        for prompt in PROMPTS:
            alone = _run(s, prompt, proposer="none", max_tokens=32)
            spec = _run(s, prompt, proposer="gemma4-assistant", k=4, max_tokens=32)
            assert spec.tokens == alone.tokens, prompt
            st = spec.stats
            drafted += st.drafted
            accepted += st.accepted
            assert {t.source for step in spec.steps for t in step.tokens if t.kind == "accepted"} <= {"gemma4-assistant"}
        assert len(PROMPTS) >= 20 and drafted >= 20 * 24 and accepted / drafted >= 0.9, (accepted, drafted)
        assert spec.stats.accepted_per_position[3] > 0 and spec.stats.model_draft_lengths


def test_a_random_assistant_changes_nothing_and_auto_stops_drafting(pairs):
    with _load(pairs["random"]) as s:
        prompt = PROMPTS[0]
        alone = _run(s, prompt, proposer="none", max_tokens=96)
        fixed = _run(s, prompt, proposer="gemma4-assistant", k=3, max_tokens=96)
        assert fixed.tokens == alone.tokens
        assert fixed.stats.drafted > 60 and fixed.stats.acceptance_rate < 0.1
        auto = _run(s, prompt, proposer="gemma4-assistant", k="auto", max_tokens=96)
        assert auto.tokens == alone.tokens
        steps = auto.to_dict()["steps"]
        later = steps[len(steps) // 3:]
        # what drafting costs auto past its first third: at most a probe (it drafts nothing of a source
        # it judged a loss), so the run stays within a probe's cost of target alone
        assert sum(x["drafted"] for x in later) <= 3, [x["decision"] for x in later]
        assert all(x["decision"].startswith(("gemma4-assistant", "last token")) for x in steps)


def test_rollbacks_across_the_sliding_window_leave_the_answer_as_target_alones(pairs):
    """A window of 8 tokens and answers of 200: every verify batch and every rollback of a
    rejected draft happens with most of the sequence outside the window, in the cache
    the assistant shares, and the answer is target alone's, token for token; and a
    prompt that reuses an old prefix of that cache reads what a fresh context reads."""
    with _load(pairs["window"]) as s:
        for prompt in PROMPTS[:3]:
            alone = _run(s, prompt, proposer="none", max_tokens=200)
            spec = _run(s, prompt, proposer="gemma4-assistant", k=3, max_tokens=200)
            assert spec.tokens == alone.tokens, prompt
            st = spec.stats
            assert 0 < st.accepted < st.drafted and st.steps < 200  # both branches: accepted, and rolled back
        again = s.run(s.raw_prompt(PROMPTS[0]) + alone.tokens[:5], GenerationConfig(proposer="none", max_tokens=30))
    with _load(pairs["window"]) as fresh:
        assert again.tokens == fresh.run(fresh.raw_prompt(PROMPTS[0]) + alone.tokens[:5],
                                         GenerationConfig(proposer="none", max_tokens=30)).tokens


def test_the_assistant_reads_the_targets_cache_and_rolls_back_with_it(pairs):
    """The same pending token and state drafted after two different contexts of the
    target: a random assistant's attention reads the cache, so the logits differ; rolled
    back to the first context, the target holds what it held, and so does the assistant."""
    t_path, h_path = pairs["random"]
    tm, hm = Model(t_path), Model(h_path)
    ctx = Context(tm, n_ctx=512, threads=1)
    a = Gemma4Assistant(hm, ctx)
    try:
        a.activate()
        base = tm.tokenize("the of and to in", add_special=False)
        other = tm.tokenize(" was on are as with his they", add_special=False)
        seq = base + [base[-1]]

        def first(prefix):
            ctx.rollback(0)
            ctx.prefill(prefix + seq[:-1], logits=False)
            return a.first(prefix + seq)

        one = first([])
        assert a.next(int(one.argmax())).shape == one.shape
        two = first(other)  # the same last token and state (a bigram trunk), another context before them
        assert not np.allclose(one, two)
        ctx.prefill(seq[:-1], logits=False)  # rolled back to the first context
        assert np.array_equal(a.first(seq), one)
        assert ctx.n_past == len(seq) - 1  # drafting wrote nothing into the target's cache
    finally:
        a.close()
        ctx.close()
        hm.close()
        tm.close()


def test_the_cli_drafts_with_an_assistant_as_the_draft_file(pairs):
    t, h = pairs["agree"]
    base = ["generate", "--target", t, "--draft", h, *ARGS, "--prompt", PROMPTS[1], "--max-tokens", "48", "--json"]
    r = cli(*base, "--proposer", "gemma4-assistant", "--k", "4")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    alone = json.loads(cli(*base, "--proposer", "none").stdout)
    assert out["tokens"] == alone["tokens"] and out["stats"]["acceptance_rate"] >= 0.9
    assert out["memory"]["models"]["draft"]["kv_bytes"] == 0  # it reads the target's cache
    r = cli("generate", "--target", t, "--draft", h, *ARGS, "--prompt", "x", "--max-tokens", "4")
    assert_one_line_error(r, "needs a draft model", "gemma4-assistant")


def _misfit(d: Path, name: str, target: PairSpec, head: PairSpec) -> tuple[Path, Path]:
    return write_target(d / f"{name}-t.gguf", target), write_head(d / f"{name}-h.gguf", head)


MISFITS = {
    "width": (PairSpec(), PairSpec(head_out=96), ["reads hidden states 96 wide", "64"]),
    "vocabulary": (PairSpec(), PairSpec(head_vocab_extra=5), ["vocabulary has 410 tokens", "405"]),
    "window": (PairSpec(), PairSpec(head_n_swa=32), ["sliding window is 32", "16"]),
    "head size": (PairSpec(), PairSpec(head_dim_swa_a=8), ["sliding layer 0 reads 2 key/value heads of 8",
                                                          "caches 2 of 16"]),
    "kv heads": (PairSpec(), PairSpec(head_n_head_kv=1, head_n_head=4), ["1 key/value heads", "caches 2"]),
    # a target whose last two layers are both global
    "last layers": (PairSpec(n_layer=3, swa_period=2), PairSpec(), ["sliding then a global", "global, global"]),
}


@pytest.mark.parametrize("name", list(MISFITS))
def test_an_assistant_that_does_not_fit_its_target_is_refused_in_one_line(pairs, tmp_path, name):
    target, head, needles = MISFITS[name]
    t, h = _misfit(tmp_path, name.replace(" ", "-"), target, head)
    r = cli("generate", "--target", t, "--draft", h, *ARGS, "--proposer", "gemma4-assistant", "--prompt", "x",
            "--max-tokens", "4")
    assert_one_line_error(r, "does not fit", *needles)


def test_an_assistant_is_refused_as_a_target_and_beside_another_architecture(pairs, smol_path):
    t, h = pairs["agree"]
    r = cli("generate", "--target", h, *ARGS, "--prompt", "x", "--max-tokens", "4")
    assert_one_line_error(r, "is a Gemma 4 assistant", "--draft")
    r = cli("generate", "--target", smol_path, "--draft", h, *ARGS, "--proposer", "gemma4-assistant", "--prompt", "x",
            "--max-tokens", "4")
    assert_one_line_error(r, "does not fit", "gemma4 target")


def test_serve_drafts_with_an_assistant_as_generate_does(pairs, tmp_path):
    from serving import start_serve

    t, h = pairs["agree"]
    s = start_serve(["--target", t, "--draft", h, "--ctx", "1024", "--threads", "1", "--proposer", "gemma4-assistant",
                     "--k", "4"], tmp_path, key="test-key-1234")
    try:
        c = s.client()
        model = c.models.list().data[0].id
        r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPTS[2]}], max_tokens=24,
                                      temperature=0)
        spec = r.model_extra["speculation"]
        assert spec["proposer"] == "gemma4-assistant" and spec["drafted"] > 0 and spec["acceptance_rate"] >= 0.9
        out = json.loads(cli("generate", "--target", t, "--draft", h, "--ctx", "1024", "--threads", "1",
                             "--proposer", "none", "--prompt", PROMPTS[2], "--max-tokens", "24", "--json").stdout)
        assert r.choices[0].message.content == out["text"]
    finally:
        assert s.stop() == 0, s.stderr()
    assert "Traceback" not in s.stderr()
