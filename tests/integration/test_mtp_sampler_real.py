"""Speculative sampling with a model's own MTP heads follows the target's distribution as
llama.cpp computes it in the verify batch.

The method of test_sampler_real.py, with the real mtp proposer in the loop (no replay:
the model is tiny, a sample costs a few milliseconds). The target is a GLM-4.5-shaped
GGUF written here (tools/synth/mtp.py) whose heads compute the trunk's logits times
1/0.6, so they propose from the target's distribution at T=0.6 while it samples at
T=1: a q far enough from p (total variation 0.55 here) that the controls have power.
The first token after the prompt is sampled many times through the real decoder and
the real target context with k = 1 and k = 3, and a chi-square test compares the counts
with the target's distribution from row 0 of a verify batch of k + 1 tokens. Two
controls must fail the same test: the heads' own distribution, and a verifier that
resamples a rejection from p instead of max(0, p - q).

Fixed seeds: the outcome is the same on every run of one build.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from test_sampler_real import ALPHA, CONTROL_ALPHA, TARGET, _target_row0, chi_square, resample_from_p

from synth.mtp import MtpSpec, write_mtp_model
from specdesk.session import GenerationConfig, ModelSpec, Session
from specdesk.speculative import decoder as decoder_module
from specdesk.speculative.controller import FixedK
from specdesk.speculative.decoder import speculate
from specdesk.speculative.sampling import warp

HEADS_T = 0.6  # the heads propose as the target would at this temperature
SAMPLES = {1: 1500, 3: 1500}
BIASED_SAMPLES = 1000
SEED = 43


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    path = write_mtp_model(tmp_path_factory.mktemp("mtp") / "sampler.gguf",
                           replace(MtpSpec(), margin=3.0, head_scale=1.0 / HEADS_T, seed=3))
    s = Session.load(ModelSpec(path, n_ctx=512, threads=2), remember_costs=False)
    yield s
    s.close()


def _first_tokens(session, prompt: list[int], k: int, n: int, seed: int) -> tuple[dict[int, int], int, int]:
    rng = np.random.default_rng(seed)
    proposer = session.make_proposer(GenerationConfig(proposer="mtp", p_min=0.0))
    counts: dict[int, int] = {}
    drafted = accepted = 0
    for _ in range(n):
        steps = speculate(session.target.ctx, proposer, FixedK(k), prompt, params=TARGET, max_tokens=k + 1, rng=rng)
        step = next(steps)
        steps.close()
        # the first token went through a verify batch of k + 1 (an end token accepted before the last cuts the count)
        assert len(step.draft_tokens) == k and step.source == "mtp"
        tok = step.tokens[0].token
        counts[tok] = counts.get(tok, 0) + 1
        drafted += step.drafted
        accepted += step.accepted
    return counts, drafted, accepted


def _heads_q(session, prompt: list[int]) -> np.ndarray:
    """The heads' distribution for the first token, as the proposer warps it."""
    session.reset()
    proposer = session.make_proposer(GenerationConfig(proposer="mtp", p_min=0.0))
    session.target.ctx.prefill(prompt[:-1], logits=False)
    d = proposer.propose(prompt, lambda source, hint: 1, TARGET, np.random.default_rng(0))
    session.reset()
    return d.q[0].dense(session.target.model.n_vocab)


def test_sampling_with_mtp_heads_follows_the_batched_target_distribution(session, monkeypatch):
    s = session
    prompt = s.raw_prompt("the of and to in is")
    fill = s.raw_prompt(" that it for was", parse_special=False)
    other = s.raw_prompt(" on are as with", parse_special=False)
    q = _heads_q(s, prompt)
    lines = [f"first token, target T={TARGET.temperature:g}, heads as at T={HEADS_T:g}"]
    for k, n in SAMPLES.items():
        row0 = _target_row0(s, prompt, fill[:k])
        assert np.array_equal(row0, _target_row0(s, prompt, other[:k]))  # row 0 depends on the batch's size only
        p = warp(row0, TARGET)
        s.reset()
        counts, drafted, accepted = _first_tokens(s, prompt, k, n, SEED + k)
        stat, df, pv = chi_square(counts, p)
        _, df_q, pv_q = chi_square(counts, q)
        tv = 0.5 * float(np.abs(p - q).sum())
        lines.append(f"k={k}: n={n}, accepted {accepted}/{drafted}; vs batched p: chi2={stat:.1f}, df={df}, p={pv:.3g}; "
                     f"vs the heads' q: df={df_q}, p={pv_q:.3g} (TV {tv:.3f})")
        assert 0 < accepted < drafted, lines[-1]  # both branches of the verifier
        assert pv > ALPHA, lines[-1]
        assert pv_q < CONTROL_ALPHA, lines[-1]

    monkeypatch.setattr(decoder_module, "verify_stochastic", resample_from_p)
    p1 = warp(_target_row0(s, prompt, fill[:1]), TARGET)
    s.reset()
    counts, _, _ = _first_tokens(s, prompt, 1, BIASED_SAMPLES, SEED + 100)
    stat, df, pv = chi_square(counts, p1)
    lines.append(f"biased verifier, k=1: n={BIASED_SAMPLES}; chi2={stat:.1f}, df={df}, p={pv:.3g}")
    print("\n" + "\n".join(lines))
    assert pv < CONTROL_ALPHA, lines[-1]
