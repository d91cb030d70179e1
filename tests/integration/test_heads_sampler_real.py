"""Speculative sampling with an EAGLE-3 or DFlash head follows the target's distribution
as llama.cpp computes it in the verify batch.

The method of test_mtp_sampler_real.py, with the real head proposers in the loop. The
pairs are written by tools/synth/heads.py with the successor only 3 logits above the
noise, so the target's T=1 distribution is spread: the EAGLE-3 head's logits are the
target's times 1/0.6 (it proposes as the target would at T=0.6), the DFlash head's come
from its own output matrix (a projection of the same structure). The first token after
the prompt is sampled many times through the real decoder and the real target context
with k = 1 and k = 3, and a chi-square test compares the counts with the target's
distribution from row 0 of a verify batch of k + 1 tokens. Two controls must fail the
same test: the head's own distribution, and a verifier that resamples a rejection from
p instead of max(0, p - q).

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
from synth.heads import write_dflash_pair, write_eagle3_pair  # noqa: E402

HEADS_T = 0.6  # the EAGLE-3 head proposes as the target would at this temperature
SAMPLES = {1: 1000, 3: 1000}
BIASED_SAMPLES = 1000
SEED = 43
WRITERS = {"eagle3": write_eagle3_pair, "dflash": write_dflash_pair}


@pytest.fixture(scope="module", params=tuple(WRITERS))
def session(request, tmp_path_factory):
    kind = request.param
    target, head = WRITERS[kind](tmp_path_factory.mktemp(kind), margin=3.0, head_scale=1.0 / HEADS_T, seed=3)
    s = Session.load(ModelSpec(target, n_ctx=512, threads=2), ModelSpec(head, n_ctx=512, threads=2),
                     remember_costs=False)
    yield kind, s
    s.close()


def _first_tokens(kind, session, prompt: list[int], k: int, n: int, seed: int) -> tuple[dict[int, int], int, int]:
    rng = np.random.default_rng(seed)
    proposer = session.make_proposer(GenerationConfig(proposer=kind, p_min=0.0))
    counts: dict[int, int] = {}
    drafted = accepted = 0
    for _ in range(n):
        steps = speculate(session.target.ctx, proposer, FixedK(k), prompt, params=TARGET, max_tokens=k + 1, rng=rng)
        step = next(steps)
        steps.close()
        assert len(step.draft_tokens) == k and step.source == kind
        tok = step.tokens[0].token
        counts[tok] = counts.get(tok, 0) + 1
        drafted += step.drafted
        accepted += step.accepted
    return counts, drafted, accepted


def _head_q(kind, session, prompt: list[int]) -> np.ndarray:
    """The head's distribution for the first token, as the proposer warps it."""
    session.reset()
    proposer = session.make_proposer(GenerationConfig(proposer=kind, p_min=0.0))
    session.target.ctx.prefill(prompt[:-1], logits=False)
    d = proposer.propose(prompt, lambda source, hint: 1, TARGET, np.random.default_rng(0))
    session.reset()
    return d.q[0].dense(session.target.model.n_vocab)


def test_sampling_with_a_head_follows_the_batched_target_distribution(session, monkeypatch):
    kind, s = session
    prompt = s.raw_prompt("the of and to in is")
    q = _head_q(kind, s, prompt)
    draws = lambda k, n, seed: _first_tokens(kind, s, prompt, k, n, seed)
    check_first_token_law(s, prompt, q, draws, monkeypatch, samples=SAMPLES, biased=BIASED_SAMPLES,
                          seed=SEED, q_name="the head's q",
                          header=f"{kind}: first token, target T={TARGET.temperature:g}")
