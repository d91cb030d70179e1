"""A draft with another vocabulary on real models: SmolLM2-135M (49k tokens) drafts for
the Qwen2.5-Coder 1.5B target (151k tokens) through the translated proposer, at T = 0,
through the real decoder and the real target context."""

from __future__ import annotations

import numpy as np
import pytest

from specdesk.speculative.controller import FixedK
from specdesk.speculative.decoder import speculate
from specdesk.speculative.divergence import explain
from specdesk.speculative.proposers import NoProposer
from specdesk.speculative.proposers.translated import TranslatedDraftProposer
from specdesk.speculative.sampling import SamplingParams

pytestmark = pytest.mark.slow

PROMPT = "Write a Python function that returns the n-th Fibonacci number."
MAX_TOKENS = 48


class ModelTokenizer:
    """The Tokenizer protocol over an engine Model: plain text, special tokens parsed."""

    def __init__(self, model) -> None:
        self.model = model

    def tokenize(self, text: str) -> list[int]:
        return self.model.tokenize(text, add_special=False, parse_special=True)

    def token_bytes(self, token: int) -> bytes:
        return self.model.token_bytes(token)


@pytest.fixture(scope="module")
def translated_pair(qwen_target_path, smol_path):
    from specdesk.session import ModelSpec, Session

    target = Session.load(ModelSpec(qwen_target_path, n_ctx=1024, threads=2), remember_costs=False)
    try:
        draft = Session.load(ModelSpec(smol_path, n_ctx=1024, threads=2), remember_costs=False)
    except BaseException:
        target.close()
        raise
    yield target, draft
    draft.close()
    target.close()


def test_smollm2_drafts_for_qwen_through_translation(translated_pair):
    target, draft = translated_pair
    tm, dm = target.target.model, draft.target.model
    assert tm.n_vocab != dm.n_vocab  # really different vocabularies
    prompt = target.chat_prompt([{"role": "user", "content": PROMPT}])
    ctx = target.target.ctx

    def run(proposer, k=4):
        ctx.rollback(0)
        return list(speculate(ctx, proposer, FixedK(k), prompt, params=SamplingParams(), max_tokens=MAX_TOKENS,
                              rng=np.random.default_rng(0)))

    base = run(NoProposer())
    vi = dm.vocab_info()
    prop = TranslatedDraftProposer(
        draft.target.ctx, ModelTokenizer(dm), ModelTokenizer(tm), prefix=[vi.bos] if vi.add_bos and vi.bos >= 0 else []
    )
    draft.target.ctx.rollback(0)
    spec = run(prop)
    a = [t.token for s in base for t in s.tokens]
    b = [t.token for s in spec for t in s.tokens]
    st = spec[-1].stats
    print(f"\ntranslated SmolLM2 -> Qwen 1.5B: drafted {st.drafted}, accepted {st.accepted} "
          f"({st.accepted / max(1, st.drafted):.1%}), {st.steps} verify passes for {st.generated} tokens")
    print("text:", repr(tm.detokenize(b)))
    assert st.drafted > 0 and st.accepted > 0
    assert {s.source for s in spec if s.drafted} == {"translated"}
    # the draft's tokens spell the target's text (the translation kept in step)
    text = b"".join(tm.token_bytes(t) for t in prompt + b)
    dtext = b"".join(dm.token_bytes(t) for t in prop.draft_tokens)
    common = next((i for i, (x, y) in enumerate(zip(text, dtext)) if x != y), min(len(text), len(dtext)))
    assert common >= len(text) - 64
    if a != b:
        d = explain(ctx, prompt, base, spec)
        assert d is not None and d.verdict == "near-tie", d
        print("divergence:", d)
    ctx.rollback(0)


@pytest.mark.slow
def test_a_translated_pair_through_the_session_api(qwen_target_path, smol_path):
    """Session.load(translate=True) keeps a draft of another vocabulary and drafts
    through translation; without it the pair is refused with llama.cpp's reason."""
    from specdesk.errors import IncompatibleDraftError
    from specdesk.session import GenerationConfig, ModelSpec, Session

    t, d = ModelSpec(qwen_target_path, n_ctx=1024, threads=2), ModelSpec(smol_path, n_ctx=1024, threads=2)
    with pytest.raises(IncompatibleDraftError):
        Session.load(t, d, remember_costs=False)
    with Session.load(t, d, remember_costs=False, translate=True) as s:
        assert s.translated
        prompt = s.chat_prompt([{"role": "user", "content": PROMPT}])
        base = s.run(prompt, GenerationConfig(proposer="none", max_tokens=32))
        s.reset()
        spec = s.run(prompt, GenerationConfig(proposer="draft", k=3, max_tokens=32))
        assert spec.stats.drafted > 0 and spec.stats.accepted > 0
        if base.tokens != spec.tokens:
            d = explain(s.target.ctx, prompt, base.steps, spec.steps)
            assert d is not None and d.verdict == "near-tie", d
        # the answers are in the session's history: a hybrid run can copy from them
        assert len(s.history.index) > 0
