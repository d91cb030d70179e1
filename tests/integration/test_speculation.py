"""The propose/verify loop on real models (SmolLM2 pair; the Qwen default pair)."""

import numpy as np
import pytest

from specdesk.session import GenerationConfig
from specdesk.speculative.divergence import explain, replay_logits
from specdesk.speculative.sampling import SamplingParams

CODE_PROMPT = "Write a Python function that returns the n-th Fibonacci number."


def test_greedy_tokens_are_the_targets_argmax_in_each_verify_pass(smol_session):
    s = smol_session
    prompt = s.chat_prompt([{"role": "user", "content": CODE_PROMPT}])
    s.reset()
    steps = list(s.generate(prompt, GenerationConfig(proposer="draft", k=4, p_min=0.0, max_tokens=48)))
    assert sum(st.drafted for st in steps) > 0
    for st in steps:
        assert [t.token for t in st.tokens] == list(st.target_argmax)
    # and independently: recompute the target's logits for a few positions from an
    # empty context, with the same batches, and check the emitted token is their argmax
    emitted = [t.token for st in steps for t in st.tokens]
    for pos in (0, 7, 19, len(emitted) - 1):
        row = replay_logits(s.target.ctx, prompt, steps, pos)
        assert int(np.argmax(row)) == emitted[pos]
    s.reset()


def test_statistics_add_up_on_real_models(smol_session):
    s = smol_session
    prompt = s.chat_prompt([{"role": "user", "content": "List five colours, one per line."}])
    for cfg in (
        GenerationConfig(proposer="draft", k=3, p_min=0.0, max_tokens=40),
        GenerationConfig(proposer="draft", k="auto", max_tokens=40),
        GenerationConfig(proposer="ngram", k=4, max_tokens=40),
        GenerationConfig(proposer="draft", k=3, max_tokens=40, sampling=SamplingParams(temperature=0.8, top_p=0.95), seed=3),
    ):
        steps = list(s.generate(prompt, cfg))
        st = steps[-1].stats
        assert st.accepted <= st.drafted
        assert st.generated == sum(len(x.tokens) for x in steps)
        assert st.drafted == sum(x.drafted for x in steps) and st.accepted == sum(x.accepted for x in steps)
        assert sum(st.accepted_per_position) == st.accepted
        assert sum(st.drafted_per_position) == st.drafted
        assert st.decode_seconds >= st.draft_seconds + st.verify_seconds * 0.99
        assert st.native_seconds <= st.decode_seconds
        assert st.tokens_per_second > 0


def test_second_chat_turn_evaluates_only_new_tokens(smol_session):
    s = smol_session
    s.reset()
    msgs = [{"role": "user", "content": "Name a fruit."}]
    p1 = s.chat_prompt(msgs)
    steps = list(s.generate(p1, GenerationConfig(proposer="draft", k=3, p_min=0.0, max_tokens=24)))
    answer = [t.token for st in steps for t in st.tokens]
    reply = s.detokenize([t for t in answer if not s.target.model.is_eog(t)])
    msgs += [{"role": "assistant", "content": reply}, {"role": "user", "content": "And a vegetable?"}]
    p2 = s.chat_prompt(msgs)
    held = list(s.target.ctx.history)  # everything but the last generated (pending) token
    assert held == (p1 + answer)[: len(held)] and len(held) == len(p1) + len(answer) - 1
    common = next((i for i, (a, b) in enumerate(zip(held, p2)) if a != b), min(len(held), len(p2)))
    assert common >= len(held) - 1, "the chat template re-tokenizes the answer differently"
    t_before = s.target.ctx.evaluated
    steps2 = list(s.generate(p2, GenerationConfig(proposer="draft", k=3, p_min=0.0, max_tokens=1)))
    # the target evaluated only what follows the common prefix: the prefill up to the
    # pending token, and the pending token in the first verify pass
    assert steps2[0].stats.prompt_evaluated == len(p2) - common
    assert steps2[0].stats.prompt_evaluated < 20 < len(p1)
    assert s.target.ctx.evaluated - t_before == len(p2) - common + steps2[0].drafted


def test_memory_readout_has_both_models(smol_session):
    rep = smol_session.memory()
    t, d = rep.model("target"), rep.model("draft")
    assert t.weights_bytes > 50_000_000 and d.weights_bytes > 50_000_000
    # SmolLM2: 30 layers x 3 KV heads x (64 + 64) dims x 2 bytes per position
    assert t.kv_bytes == 30 * 3 * 128 * 2 * 1024
    assert 0 < rep.draft_share < 1
    assert rep.rss_bytes > 0
    assert rep.gpu_status in ("ok", "no NVIDIA GPU") or rep.gpu_status.startswith("n/a")


@pytest.mark.slow
@pytest.mark.parametrize(
    "prompt",
    [
        "Write a Python function that checks whether a number is prime.",
        "Explain what a hash map is in two sentences.",
        "Write a JSON object describing a book with title, author and year.",
    ],
)
def test_default_pair_greedy_is_identical_or_a_near_tie(qwen_session, prompt):
    s = qwen_session
    p = s.chat_prompt([{"role": "user", "content": prompt}])
    s.reset()
    base = list(s.generate(p, GenerationConfig(proposer="none", max_tokens=64)))
    s.reset()
    spec = list(s.generate(p, GenerationConfig(proposer="draft", k=4, p_min=0.0, max_tokens=64)))
    div = explain(s.target.ctx, p, base, spec)
    if div is not None:
        assert div.verdict == "near-tie", div
        assert div.reproduced and div.margin < 0.5


def test_auto_starts_a_new_session_with_the_costs_measured_last_time(smol_path, smol_draft_path, tmp_path, monkeypatch):
    """A second process on the same pair does not spend its first steps re-measuring."""
    from specdesk.session import GenerationConfig, ModelSpec, Session

    monkeypatch.setenv("SPECDESK_CACHE_DIR", str(tmp_path / "cache"))
    specs = (ModelSpec(smol_path, n_ctx=512, threads=2), ModelSpec(smol_draft_path, n_ctx=512, threads=2))
    with Session.load(*specs) as s:
        assert s.auto.costs.step_cost is None  # nothing measured on this pair yet
        prompt = s.chat_prompt([{"role": "user", "content": "Count from one to ten."}])
        s.run(prompt, GenerationConfig(proposer="draft", k="auto", max_tokens=24))
        measured = s.auto.costs.to_dict()
    assert (tmp_path / "cache" / "auto-costs.json").is_file()
    with Session.load(*specs) as s2:
        assert s2.auto.costs.step_cost is not None
        assert s2.auto.costs.to_dict()["verify"] == measured["verify"]
    # another setup of the same files starts fresh
    with Session.load(ModelSpec(smol_path, n_ctx=512, threads=1), specs[1]) as s3:
        assert s3.auto.costs.step_cost is None
