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
from test_sampler_real import TARGET, check_first_token_law

from synth.mtp import MtpSpec, write_mtp_model
from specdesk.session import GenerationConfig, ModelSpec, Session
from specdesk.speculative.controller import FixedK
from specdesk.speculative.decoder import speculate

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
    q = _heads_q(s, prompt)
    draws = lambda k, n, seed: _first_tokens(s, prompt, k, n, seed)
    check_first_token_law(s, prompt, q, draws, monkeypatch, samples=SAMPLES, biased=BIASED_SAMPLES,
                          seed=SEED, q_name="the heads' q",
                          header=f"first token, target T={TARGET.temperature:g}, heads as at T={HEADS_T:g}")
