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
    GenerationConfig(proposer="draft", k=4, max_tokens=24),  # p-min 0.75: the draft's top probability too
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

