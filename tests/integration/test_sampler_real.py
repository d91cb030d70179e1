"""Speculative sampling on a real model follows the target's distribution as llama.cpp
computes it in the verify batch.

SmolLM2 is the target; the draft is its Q4_0 requantization proposing at another
temperature (any draft distribution q keeps rejection sampling exact as long as the
verifier is told q, and a q far from the target's gives the controls power). The
first token of a prompt is sampled many times through the real decoder and the real
target context with k = 1 and k = 3, and a chi-square test compares the counts with
the target's distribution from row 0 of a verify batch of k + 1 tokens. In the same
test, two controls must fail the same test: the draft's own distribution, and a
verifier with the classic bug of resampling a rejection from p instead of
max(0, p - q).

Two things keep it fast without changing a number. llama.cpp computes the same
logits for the same batch on the same context every time, so the draft model's q
for the first position is computed once and replayed, and the target's verify
batches go through a memo keyed by the context's tokens and the batch: each distinct
batch is evaluated once by llama.cpp (checked against a fresh evaluation at the
end). Draft tokens after the first are a fixed token (a one-hot q, which the verifier
handles as any q): they cannot change the first token's distribution, nor the
batch's row 0 (checked below), and they keep the distinct batches few.

Fixed seeds: the outcome is the same on every run of one build.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specdesk.speculative import decoder as decoder_module
from specdesk.speculative.controller import FixedK
from specdesk.speculative.decoder import speculate
from specdesk.speculative.proposers import Draft, DraftModelProposer
from specdesk.speculative.sampling import SamplingParams, Warped, sample, warp
from specdesk.speculative.verify import Verdict

PROMPT = "My favourite colour is"
TARGET = SamplingParams(temperature=1.0)
# The draft proposes from a sharper q (TV 0.6 from the target's p here, 0.3 at T=1):
# enough for the biased verifier's error to show in 1,000 samples.
DRAFT = SamplingParams(temperature=0.6)
SAMPLES = {1: 1500, 3: 1500}
BIASED_SAMPLES = 1000
SEED = 20240
ALPHA = 0.001  # the sampler must pass at this level
CONTROL_ALPHA = 1e-4  # the controls must fail below this one


# -- chi-square ------------------------------------------------------------------------------


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for a chi-square variable with ``df`` degrees of freedom: the regularized
    upper incomplete gamma function Q(df/2, x/2) (series below a+1, continued fraction above)."""
    if x <= 0:
        return 1.0
    a, z = df / 2.0, x / 2.0
    log_front = a * math.log(z) - z - math.lgamma(a)
    if z < a + 1:
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-15:
            n += 1
            term *= z / n
            total += term
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = z + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return math.exp(log_front) * h


def chi_square(counts: dict[int, int], probs: np.ndarray, min_expected: float = 5.0) -> tuple[float, int, float]:
    """Pearson's statistic, degrees of freedom and p-value of ``counts`` against ``probs``:
    one bin per token with at least ``min_expected`` expected draws, the rest pooled."""
    n = sum(counts.values())
    expected = n * probs
    keep = [int(t) for t in np.flatnonzero(expected >= min_expected)]
    rest = float(n - expected[keep].sum())
    obs = [counts.get(t, 0) for t in keep]
    exp = [float(expected[t]) for t in keep]
    obs_rest = n - sum(obs)
    if rest >= min_expected:
        obs.append(obs_rest)
        exp.append(rest)
    elif obs_rest:
        # too little mass to test on its own: pool it with the smallest bin
        i = int(np.argmin(exp))
        obs[i] += obs_rest
        exp[i] += rest
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp))
    df = len(obs) - 1
    return stat, df, chi2_sf(stat, df)


def test_chi2_sf_matches_known_quantiles():
    assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-6)
    assert chi2_sf(18.307038053275146, 10) == pytest.approx(0.05, rel=1e-6)
    assert chi2_sf(2.0, 2) == pytest.approx(math.exp(-1.0), rel=1e-9)
    assert chi2_sf(100.0, 3) < 1e-20 and chi2_sf(0.0, 5) == 1.0


# -- the draft and the verifiers ---------------------------------------------------------------


class ReplayedDraft:
    """Proposes as the draft model does after the prompt: its first token drawn from
    the draft's q, the rest a fixed token (one-hot q), with q handed to the verifier."""

    name = "draft"
    drafts = True
    native_seconds = 0.0

    def __init__(self, q: np.ndarray, filler: int) -> None:
        self.q = q
        self.q_support = Warped.from_dense(q)
        self.one_hot = Warped(np.array([filler]), np.ones(1))
        self.filler = filler

    def prepare(self, prompt, budget) -> int:
        return 0

    def propose(self, seq, budget, params, rng) -> Draft:
        k = budget("draft", 0)
        first = sample(self.q, rng)
        tokens = (first,) + (self.filler,) * (k - 1)
        return Draft(tokens=tokens, q=(self.q_support,) + (self.one_hot,) * (k - 1), source="draft",
                     confidence=(float(self.q[first]),) + (1.0,) * (k - 1))


class MemoTarget:
    """The target context with a memo: a batch evaluated after the same tokens returns
    the rows llama.cpp computed for it the first time (it computes the same again)."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.history: list[int] = []
        self.memo: dict[tuple, np.ndarray] = {}
        self.native_seconds = 0.0
        self.last_prefill_evaluated = 0
        self.last_batch_first = False  # its runs are not timed: no one-off to report
        self.shape_changes, self.last_shape_changed, self.last_reshape_seconds = 0, False, 0.0  # nor a change of shape
        self.n_vocab, self.n_ctx = ctx.n_vocab, ctx.n_ctx

    @property
    def reshape_cost(self) -> float:
        return float("nan")  # never measured: the memo's replays cost nothing

    @property
    def n_past(self) -> int:
        return len(self.history)

    def prefill(self, tokens, logits=True, cancel=None, fn=None):
        assert not logits
        self.ctx.prefill(list(tokens), logits=False, cancel=cancel)
        self.history = list(tokens)
        self.last_prefill_evaluated = self.ctx.last_prefill_evaluated

    def eval(self, tokens, all_rows=True, fn=None):
        key = (tuple(self.history), tuple(tokens), all_rows)
        if key not in self.memo:
            self.ctx.prefill(self.history, logits=False)  # the real context holds exactly this history
            self.memo[key] = self.ctx.eval(list(tokens), all_rows)
            self.memo[key].flags.writeable = False  # as the context's own view
        self.history.extend(int(t) for t in tokens)
        rows = self.memo[key]
        return fn(rows) if fn is not None else rows

    def rollback(self, n_past: int) -> None:
        del self.history[n_past:]

    def is_eog(self, token: int) -> bool:
        return self.ctx.is_eog(token)

    def token_bytes(self, token: int) -> bytes:
        return self.ctx.token_bytes(token)

    def check(self, n: int = 3) -> None:
        """A few memo entries against a fresh evaluation on the real context."""
        for (history, tokens, all_rows), rows in list(self.memo.items())[:n]:
            self.ctx.rollback(0)
            self.ctx.prefill(list(history), logits=False)
            assert np.array_equal(self.ctx.eval(list(tokens), all_rows), rows)
        self.ctx.rollback(0)


def draft_q(session, prompt: list[int]) -> np.ndarray:
    """The draft model's distribution for the first token, at DRAFT's settings, computed
    as DraftModelProposer computes it (its first proposal after the prompt)."""
    session.reset()
    proposer = DraftModelProposer(session.draft.ctx, session.target.model.n_vocab, p_min=0.0)
    proposer.prepare(prompt, lambda source, hint: 1)
    d = proposer.propose(prompt, lambda source, hint: 1, DRAFT, np.random.default_rng(0))
    session.reset()
    return d.q[0].dense(session.target.model.n_vocab)


def resample_from_p(draft, p_rows, q_rows, rng) -> Verdict:
    """A biased verifier: accepts with min(1, p/q) but draws a rejection's replacement
    from p instead of normalize(max(0, p - q))."""
    for i, x in enumerate(draft):
        p_x, q_x = p_rows[i].prob(x), q_rows[i].prob(x)
        if not (p_x >= q_x or rng.random() < p_x / q_x):
            return Verdict(i, p_rows[i].sample(rng), "correction")
    return Verdict(len(draft), p_rows[len(draft)].sample(rng), "bonus")


# -- the test ------------------------------------------------------------------------------------


def _first_tokens(target: MemoTarget, prompt: list[int], proposer: ReplayedDraft, k: int, n: int,
                  seed: int) -> dict[int, int]:
    rng = np.random.default_rng(seed)
    counts: dict[int, int] = {}
    for _ in range(n):
        steps = speculate(target, proposer, FixedK(k), prompt, params=TARGET, max_tokens=k + 1, rng=rng)
        step = next(steps)
        steps.close()
        assert step.drafted == k  # the first token really went through a verify batch of k + 1
        tok = step.tokens[0].token
        counts[tok] = counts.get(tok, 0) + 1
    return counts


def _target_row0(session, prompt: list[int], fill: list[int]) -> np.ndarray:
    """The target's logits for the first token: row 0 of a batch [last prompt token] + fill."""
    ctx = session.target.ctx
    ctx.rollback(0)
    ctx.prefill(prompt[:-1], logits=False)
    rows = ctx.eval([prompt[-1]] + fill, all_rows=True)
    ctx.rollback(0)
    return np.array(rows[0], dtype=np.float32)


def test_speculative_sampling_follows_the_batched_target_distribution(smol_session, monkeypatch):
    s = smol_session
    prompt = s.raw_prompt(PROMPT)
    fill = s.target.model.tokenize(" blue, red and green", add_special=False)
    other_fill = s.target.model.tokenize(" purple. I love it", add_special=False)

    q = draft_q(s, prompt)
    s.reset()
    target = MemoTarget(s.target.ctx)
    proposer = ReplayedDraft(q, filler=fill[0])

    lines = [f"first token after {PROMPT!r}, target T={TARGET.temperature:g}, draft T={DRAFT.temperature:g}"]
    single = warp(_target_row0(s, prompt, []), TARGET)
    for k, n in SAMPLES.items():
        row0 = _target_row0(s, prompt, fill[:k])
        # the row does not depend on what follows it in the batch, only on the batch's size
        assert np.array_equal(row0, _target_row0(s, prompt, other_fill[:k]))
        p = warp(row0, TARGET)
        counts = _first_tokens(target, prompt, proposer, k, n, SEED + k)
        stat, df, pv = chi_square(counts, p)
        _, df_single, pv_single = chi_square(counts, single)
        _, df_q, pv_q = chi_square(counts, q)
        tv = lambda a, b: 0.5 * float(np.abs(a - b).sum())  # noqa: E731
        lines.append(
            f"k={k}: n={n}; vs batched p (batch of {k + 1}): chi2={stat:.1f}, df={df}, p={pv:.3g}; "
            f"vs single-step p: df={df_single}, p={pv_single:.3g} (TV {tv(p, single):.4f}); "
            f"vs the draft's q: df={df_q}, p={pv_q:.3g} (TV {tv(p, q):.3f})"
        )
        assert pv > ALPHA, lines[-1]
        assert pv_q < CONTROL_ALPHA, lines[-1]  # the control: the test can tell the draft's distribution apart

    # The other control: a verifier with a bias must fail the same test.
    monkeypatch.setattr(decoder_module, "verify_stochastic", resample_from_p)
    p1 = warp(_target_row0(s, prompt, fill[:1]), TARGET)
    counts = _first_tokens(target, prompt, proposer, 1, BIASED_SAMPLES, SEED + 100)
    stat, df, pv = chi_square(counts, p1)
    lines.append(f"biased verifier (resamples a rejection from p), k=1: n={BIASED_SAMPLES}; chi2={stat:.1f}, df={df}, p={pv:.3g}")
    lines.append(f"distinct verify batches evaluated by llama.cpp: {len(target.memo)}")
    print("\n" + "\n".join(lines))
    assert pv < CONTROL_ALPHA, lines[-1]
    target.check()


def check_first_token_law(s, prompt: list[int], q: np.ndarray, first_tokens, monkeypatch, *, samples: dict[int, int],
                          biased: int, seed: int, header: str, q_name: str) -> None:
    """The first token a source's speculative sampling emits, drawn ``samples[k]`` times
    at each k (``first_tokens(k, n, seed) -> (counts, drafted, accepted)``), follows the
    target's batched distribution; it fails against the source's own ``q``, and a
    verifier that resamples from p unconditionally fails too (the controls)."""
    fill = s.raw_prompt(" that it for was", parse_special=False)
    other = s.raw_prompt(" on are as with", parse_special=False)
    lines = [header]
    for k, n in samples.items():
        row0 = _target_row0(s, prompt, fill[:k])
        assert np.array_equal(row0, _target_row0(s, prompt, other[:k]))  # row 0 depends on the batch's size only
        p = warp(row0, TARGET)
        s.reset()
        counts, drafted, accepted = first_tokens(k, n, seed + k)
        stat, df, pv = chi_square(counts, p)
        _, df_q, pv_q = chi_square(counts, q)
        tv = 0.5 * float(np.abs(p - q).sum())
        lines.append(f"k={k}: n={n}, accepted {accepted}/{drafted}; vs batched p: chi2={stat:.1f}, df={df}, p={pv:.3g}; "
                     f"vs {q_name}: df={df_q}, p={pv_q:.3g} (TV {tv:.3f})")
        assert 0 < accepted < drafted, lines[-1]  # both branches of the verifier
        assert pv > ALPHA, lines[-1]
        assert pv_q < CONTROL_ALPHA, lines[-1]

    monkeypatch.setattr(decoder_module, "verify_stochastic", resample_from_p)
    p1 = warp(_target_row0(s, prompt, fill[:1]), TARGET)
    s.reset()
    counts, _, _ = first_tokens(1, biased, seed + 100)
    stat, df, pv = chi_square(counts, p1)
    lines.append(f"biased verifier, k=1: n={biased}; chi2={stat:.1f}, df={df}, p={pv:.3g}")
    print("\n" + "\n".join(lines))
    assert pv < CONTROL_ALPHA, lines[-1]
