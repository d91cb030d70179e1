"""Speculative sampling with a translated draft on real models follows the target's
distribution as llama.cpp computes it in the verify batch.

The method of test_sampler_real.py, with a draft of another vocabulary: SmolLM2-135M
(49k tokens) drafts for Qwen2.5-Coder-0.5B (152k tokens, a small target that keeps
the test fast) through the translated proposer, which drafts greedily, so the
verifier treats its tokens as one-hot q. The first token of a prompt is sampled many
times through the real decoder and the real target context with k = 1 and k = 3, and
a chi-square test compares the counts with the target's distribution from row 0 of a
verify batch of k + 1 tokens. Two controls must fail the same test: the classic bug
of resampling a rejection from p instead of max(0, p - q) (with a one-hot q the
drafted token then comes out too often), and a verifier that keeps a deterministic
draft outright (as if a proposal that cannot be wrong were the target's).

The translated proposer's first proposal after the prompt is computed by the real
proposer on the real draft model, checked to be the same on a second computation
(it is a deterministic function of the context), and replayed; the target's verify
batches go through test_sampler_real's memo. Fixed seeds: the outcome is the same on
every run of one build.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_sampler_real import BIASED_SAMPLES, SAMPLES, SEED, TARGET, MemoTarget, _first_tokens, _target_row0, chi_square, resample_from_p

from specdesk.session import GenerationConfig
from specdesk.speculative import decoder as decoder_module
from specdesk.speculative.proposers import Draft, TranslatedDraftProposer
from specdesk.speculative.sampling import Warped, warp
from specdesk.speculative.verify import Verdict

pytestmark = pytest.mark.slow

PROMPT = "Python is a programming language that"
ALPHA = 0.001  # the sampler must pass at this level
CONTROL_ALPHA = 1e-4  # the controls must fail below this one


@pytest.fixture(scope="module")
def translated_small(qwen_draft_path, smol_path):
    """Qwen2.5-Coder-0.5B as the target, SmolLM2-135M as its translated draft."""
    from specdesk.session import ModelSpec, Session

    s = Session.load(ModelSpec(qwen_draft_path, n_ctx=512, threads=2), ModelSpec(smol_path, n_ctx=512, threads=2),
                     remember_costs=False, translate=True)
    yield s
    s.close()


class ReplayedTranslated:
    """Proposes what the translated proposer proposed after the prompt (it drafts
    greedily, so the same every time), q one-hot (None), under its source name."""

    name = "translated"
    drafts = True
    native_seconds = 0.0

    def __init__(self, tokens: tuple[int, ...]) -> None:
        self.tokens = tokens

    def prepare(self, prompt, budget) -> int:
        return 0

    def propose(self, seq, budget, params, rng) -> Draft:
        return Draft(tokens=self.tokens[: budget("translated", 0)], source="translated")


def translated_first_draft(session, prompt: list[int], k: int) -> Draft:
    """The real translated proposer's first proposal of k tokens after the prompt."""
    session.reset()
    proposer = session.make_proposer(GenerationConfig(proposer="draft", p_min=0.0))
    assert isinstance(proposer, TranslatedDraftProposer)
    proposer.prepare(prompt, lambda source, hint: k)
    d = proposer.propose(prompt, lambda source, hint: k, TARGET, np.random.default_rng(0))
    session.reset()
    return d


def resample_one_hot_from_p(draft, p_rows, q_rows, rng) -> Verdict:
    """test_sampler_real's biased verifier, handed the one-hot q of a deterministic draft."""
    assert q_rows is None  # only translated drafts here
    q = [Warped(np.array([x]), np.ones(1)) for x in draft]
    return resample_from_p(draft, p_rows, q, rng)


def keep_deterministic_drafts(draft, p_rows, q_rows, rng) -> Verdict:
    """A biased verifier: a draft without q (a lookup, a greedy or translated draft) is
    kept whole, as if it could not be wrong, and the bonus token drawn from p."""
    assert q_rows is None  # only translated drafts here
    return Verdict(len(draft), p_rows[len(draft)].sample(rng), "bonus")


def test_sampling_with_a_translated_draft_follows_the_batched_target_distribution(translated_small, monkeypatch):
    s = translated_small
    assert s.translated and s.target.model.n_vocab != s.draft.model.n_vocab  # really another vocabulary
    prompt = s.raw_prompt(PROMPT)
    k_max = max(SAMPLES)
    d = translated_first_draft(s, prompt, k_max)
    assert d.q is None and d.source == "translated" and len(d.tokens) == k_max
    assert translated_first_draft(s, prompt, k_max).tokens == d.tokens  # deterministic: replaying it is exact
    target = MemoTarget(s.target.ctx)
    proposer = ReplayedTranslated(d.tokens)
    x = d.tokens[0]

    lines = [f"first token after {PROMPT!r}, target T={TARGET.temperature:g}, translated draft "
             f"{s.detokenize(list(d.tokens))!r} (one-hot q)"]
    for k, n in SAMPLES.items():
        p = warp(_target_row0(s, prompt, list(d.tokens[:k])), TARGET)
        counts = _first_tokens(target, prompt, proposer, k, n, SEED + k)
        stat, df, pv = chi_square(counts, p)
        lines.append(f"k={k}: n={n}; vs batched p (batch of {k + 1}): chi2={stat:.1f}, df={df}, p={pv:.3g}; "
                     f"drafted token {counts.get(x, 0) / n:.3f} of draws, p(x)={p[x]:.3f}")
        assert pv > ALPHA, lines[-1]
    # the controls have power only where the drafted token is neither sure nor hopeless
    p1 = warp(_target_row0(s, prompt, list(d.tokens[:1])), TARGET)
    assert 0.05 < p1[x] < 0.9, p1[x]

    # Control 1: resampling a rejection from p (not max(0, p - q)) must fail the same test.
    monkeypatch.setattr(decoder_module, "verify_stochastic", resample_one_hot_from_p)
    counts = _first_tokens(target, prompt, proposer, 1, BIASED_SAMPLES, SEED + 100)
    stat, df, pv = chi_square(counts, p1)
    lines.append(f"biased verifier (resamples a rejection from p), k=1: n={BIASED_SAMPLES}; chi2={stat:.1f}, df={df}, p={pv:.3g}")
    assert pv < CONTROL_ALPHA, lines[-1]
    monkeypatch.undo()

    # Control 2: keeping a deterministic draft outright must fail it too.
    monkeypatch.setattr(decoder_module, "verify_stochastic", keep_deterministic_drafts)
    counts = _first_tokens(target, prompt, proposer, 1, BIASED_SAMPLES, SEED + 200)
    stat, df, pv = chi_square(counts, p1)
    lines.append(f"biased verifier (keeps a deterministic draft), k=1: n={BIASED_SAMPLES}; chi2={stat:.1f}, df={df}, p={pv:.3g}")
    lines.append(f"distinct verify batches evaluated by llama.cpp: {len(target.memo)}")
    print("\n" + "\n".join(lines))
    assert pv < CONTROL_ALPHA, lines[-2]
    target.check()
