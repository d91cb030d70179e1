"""The hot path on real models: at T = 0 a generation copies no logits row out of
llama.cpp, neither for the target's verification nor for a greedy draft (the argmax,
and the draft's top probability for p-min, are read where llama.cpp wrote the rows).
The bytes are counted by the engine's own contexts, through the API every copy goes
through."""

from __future__ import annotations

import pytest

from specdesk.session import GenerationConfig

PROMPT = "Write a Python function that checks whether a string is a palindrome."


@pytest.mark.parametrize("config", [
    GenerationConfig(proposer="none", max_tokens=24),
    GenerationConfig(proposer="ngram", k=4, max_tokens=24),
    GenerationConfig(proposer="draft", k=4, p_min=0.75, max_tokens=24),  # the draft's top probability too
    GenerationConfig(proposer="draft", k=3, p_min=0.0, max_tokens=24),
    GenerationConfig(proposer="hybrid", k=4, max_tokens=24),
], ids=lambda c: f"{c.proposer}-k{c.k}-pmin{c.p_min:g}")
def test_a_greedy_generation_copies_no_logits_row(smol_session, config):
    s = smol_session
    s.reset()
    prompt = s.chat_prompt([{"role": "user", "content": PROMPT}])
    before = s.target.ctx.logits_bytes_copied, s.draft.ctx.logits_bytes_copied
    g = s.run(prompt, config)
    assert g.stats.generated == 24
    if config.proposer != "none":
        assert g.stats.drafted > 0  # the draft and the verify batches really ran
    copied = s.target.ctx.logits_bytes_copied - before[0], s.draft.ctx.logits_bytes_copied - before[1]
    row = 4 * s.target.model.n_vocab
    assert copied == (0, 0), f"copied {copied[0] / row:.1f} target rows and {copied[1] / row:.1f} draft rows"


@pytest.fixture(scope="module")
def translated_small_ctx(qwen_draft_path, smol_path):
    """Qwen2.5-Coder-0.5B as the target, SmolLM2-135M as its translated draft with a
    context of 256 tokens (llama.cpp's least), as a user may set it for a small draft."""
    from specdesk.session import ModelSpec, Session

    s = Session.load(ModelSpec(qwen_draft_path, n_ctx=512, threads=2), ModelSpec(smol_path, n_ctx=256, threads=2),
                     remember_costs=False, translate=True)
    yield s
    s.close()


def test_a_translated_draft_that_needs_more_tokens_than_its_context_never_fails_the_answer(translated_small_ctx):
    """Issue 21, defect 3: Chinese text takes SmolLM2's vocabulary about three times the
    tokens Qwen's needs; a prompt that fits the target's context overflows the draft's.
    The answer is the target's, token for token, and the draft keeps a window that fits."""
    s = translated_small_ctx
    text = ("长城是中国古代的军事防御工程，修建的历史可以上溯到西周时期。秦始皇统一六国以后，把各国的长城连接起来。"
            "明朝对长城进行了大规模的修缮，今天我们看到的长城大多是明代修建的。长城东起山海关，西至嘉峪关，"
            "全长两万多公里。请用三句话介绍一下长城的历史，以及它为什么这么有名。")
    prompt = s.chat_prompt([{"role": "user", "content": text}])
    draft_side = s.draft.model.tokenize(s.detokenize(prompt), add_special=False)
    assert len(draft_side) > s.draft.ctx.n_ctx > len(prompt) + 24  # fits the target, not the draft
    s.reset()
    base = s.run(prompt, GenerationConfig(proposer="none", max_tokens=24))
    s.reset()
    spec = s.run(prompt, GenerationConfig(proposer="draft", k=3, max_tokens=24))
    assert spec.stats.generated == 24
    if base.tokens != spec.tokens:
        from specdesk.speculative.divergence import explain

        d = explain(s.target.ctx, prompt, base.steps, spec.steps)
        assert d is not None and d.verdict == "near-tie", d
    assert s.draft.ctx.n_past <= s.draft.ctx.n_ctx


def test_a_greedy_translated_generation_copies_no_logits_row(translated_small_ctx):
    s = translated_small_ctx
    s.reset()
    prompt = s.chat_prompt([{"role": "user", "content": PROMPT}])
    before = s.target.ctx.logits_bytes_copied, s.draft.ctx.logits_bytes_copied
    g = s.run(prompt, GenerationConfig(proposer="draft", k=4, max_tokens=24))
    assert g.stats.generated == 24 and g.stats.drafted > 0
    assert (s.target.ctx.logits_bytes_copied - before[0], s.draft.ctx.logits_bytes_copied - before[1]) == (0, 0)


def test_the_engine_says_which_batch_paid_its_sizes_set_up(smol_session):
    """llama.cpp sets up each batch size on its first decode in a context (1.2-1.8x the
    size's later batches on this machine): the context says which decode that was, so
    that auto does not take the one-off for what the size costs a step."""
    s = smol_session
    s.reset()
    ctx = s.target.ctx
    text = " ".join(f"word{i}" for i in range(40))
    toks = s.target.model.tokenize(text, add_special=True)
    assert len(toks) >= 31
    for size in (29, 31):  # sizes no other test here decodes
        seen = []
        for _ in range(2):
            ctx.eval(toks[:size], all_rows=True, fn=lambda rows: None)
            seen.append(ctx.last_batch_first)
            ctx.rollback(0)
        assert seen == [True, False], size
    ctx.eval(toks[:29], all_rows=False, fn=lambda rows: None)  # the same size, one row: another shape
    assert ctx.last_batch_first
    ctx.rollback(0)
