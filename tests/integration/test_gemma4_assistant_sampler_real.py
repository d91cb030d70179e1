"""Speculative sampling with a Gemma 4 assistant follows the target's distribution as
llama.cpp computes it in the verify batch.

The method of test_mtp_sampler_real.py, with the real gemma4-assistant proposer in the
loop: a gemma4 target and a gemma4-assistant written here (tools/synth/gemma4_assistant.py),
the assistant's logits the target's times 1/0.6, so that it proposes from the target's
distribution at T=0.6 while the target samples at T=1 (a q far enough from p that the
controls have power). The first token after the prompt is sampled many times through
the real decoder, the real target context and the assistant's context sharing its
cache, with k = 1 and k = 3, and a chi-square test compares the counts with the target's
distribution from row 0 of a verify batch of k + 1 tokens. Two controls must fail the
same test: the assistant's own distribution, and a verifier that resamples a rejection
from p instead of max(0, p - q).

Fixed seeds: the outcome is the same on every run of one build.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from test_sampler_real import TARGET, check_first_token_law

from specdesk.session import GenerationConfig, ModelSpec, Session
from specdesk.speculative.controller import FixedK
from specdesk.speculative.decoder import speculate

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from synth.gemma4_assistant import write_pair  # noqa: E402

HEAD_T = 0.6  # the assistant proposes as the target would at this temperature
SAMPLES = {1: 1500, 3: 1500}
BIASED_SAMPLES = 1000
SEED = 47
CONFIG = GenerationConfig(proposer="gemma4-assistant", p_min=0.0)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    t, h = write_pair(tmp_path_factory.mktemp("gemma4-sampler"), margin=3.0, head_scale=1.0 / HEAD_T, seed=3)
    s = Session.load(ModelSpec(t, n_ctx=512, threads=1), ModelSpec(h, n_ctx=512, threads=1), remember_costs=False)
    yield s
    s.close()


def _first_tokens(session, prompt: list[int], k: int, n: int, seed: int) -> tuple[dict[int, int], int, int]:
    rng = np.random.default_rng(seed)
    proposer = session.make_proposer(CONFIG)
    counts: dict[int, int] = {}
    drafted = accepted = 0
    for _ in range(n):
        steps = speculate(session.target.ctx, proposer, FixedK(k), prompt, params=TARGET, max_tokens=k + 1, rng=rng)
        step = next(steps)
        steps.close()
        # the first token went through a verify batch of k + 1
        assert len(step.draft_tokens) == k and step.source == "gemma4-assistant"
        tok = step.tokens[0].token
        counts[tok] = counts.get(tok, 0) + 1
        drafted += step.drafted
        accepted += step.accepted
    return counts, drafted, accepted


def _assistant_q(session, prompt: list[int]) -> np.ndarray:
    """The assistant's distribution for the first token, as the proposer warps it."""
    session.reset()
    proposer = session.make_proposer(CONFIG)
    session.target.ctx.prefill(prompt[:-1], logits=False)
    d = proposer.propose(prompt, lambda source, hint: 1, TARGET, np.random.default_rng(0))
    session.reset()
    return d.q[0].dense(session.target.model.n_vocab)


def test_sampling_with_an_assistant_follows_the_batched_target_distribution(session, monkeypatch):
    s = session
    prompt = s.raw_prompt("the of and to in is")
    q = _assistant_q(s, prompt)
    draws = lambda k, n, seed: _first_tokens(s, prompt, k, n, seed)
    check_first_token_law(s, prompt, q, draws, monkeypatch, samples=SAMPLES, biased=BIASED_SAMPLES,
                          seed=SEED, q_name="the assistant's q",
                          header=f"first token, target T={TARGET.temperature:g}, assistant as at T={HEAD_T:g}")
