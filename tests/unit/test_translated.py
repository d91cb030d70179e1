"""The translated-draft proposer on fake backends and fake tokenizers: a character-level
draft vocabulary against a longest-match ("word-piece-ish") target vocabulary."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from fakes import FakeBackend, FakeModel, exact_joint, pooled_chi_square
from specdesk.speculative.controller import FixedK
from specdesk.speculative.auto import AutoK
from specdesk.speculative.decoder import speculate
from specdesk.speculative.proposers import NoProposer
from specdesk.speculative.proposers.translated import (
    TranslatedDraftProposer,
    common_bytes,
    complete_utf8,
    tokenize_span,
)
from specdesk.speculative.sampling import SamplingParams

GREEDY = SamplingParams()


class VocabTokenizer:
    """Longest-match tokenization over a fixed list of pieces (id = index)."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = [p.encode() for p in pieces]
        self.longest = max(len(p) for p in self.pieces)
        self.ids = {p: i for i, p in enumerate(self.pieces)}

    def tokenize(self, text: str) -> list[int]:
        data = text.encode()
        out, i = [], 0
        while i < len(data):
            for n in range(min(self.longest, len(data) - i), 0, -1):
                t = self.ids.get(data[i : i + n])
                if t is not None:
                    out.append(t)
                    i += n
                    break
            else:
                raise ValueError(f"cannot tokenize {data[i:]!r}")
        return out

    def token_bytes(self, token: int) -> bytes:
        return self.pieces[token]

    def text(self, tokens) -> str:
        return b"".join(self.pieces[t] for t in tokens).decode()


CHARS = ["a", "b", "c", " "]
TARGET = VocabTokenizer(CHARS + ["ab", "abc", "ca", " a", " ab", "bb", "cab", "cc"])
DRAFT = VocabTokenizer(CHARS)  # one character per token: target tokens span several


def _h(*xs) -> int:
    return int.from_bytes(hashlib.blake2b(repr(xs).encode(), digest_size=8).digest(), "little")


class TextOracle:
    """A FakeModel-like "language model" that writes ``script`` in its own tokens (the
    longest piece that continues the script), wrong on purpose at some text offsets,
    and random (seeded by its last tokens) once off the script."""

    def __init__(self, tok: VocabTokenizer, script: str, error_every: int = 0, seed: int = 0, eog: int | None = None):
        self.tok = tok
        self.script = script.encode()
        self.error_every = error_every
        self.seed = seed
        self.eog = eog
        self.n_vocab = len(tok.pieces) + (1 if eog is not None else 0)

    def logits(self, history) -> np.ndarray:
        text = b"".join(self.tok.pieces[t] for t in history if t < len(self.tok.pieces))
        rng = np.random.default_rng(_h(self.seed, tuple(history[-2:])))
        row = rng.normal(0.0, 1.0, self.n_vocab).astype(np.float32)
        if self.script.startswith(text):
            rest = self.script[len(text) :]
            if not rest:
                if self.eog is not None:
                    row[self.eog] += 8.0
                return row
            best = max((i for i, p in enumerate(self.tok.pieces) if rest.startswith(p)), key=lambda i: len(self.tok.pieces[i]))
            if self.error_every and _h(self.seed, len(text)) % self.error_every == 0:
                best = (best + 1) % len(self.tok.pieces)
            row[best] += 8.0
        return row


def run(target, proposer, controller=None, params=GREEDY, max_tokens=40, seed=0, prompt=(0, 1, 3)):
    return list(
        speculate(target, proposer, controller or FixedK(4), list(prompt), params=params, max_tokens=max_tokens,
                  rng=np.random.default_rng(seed))
    )


def tokens(steps):
    return [t.token for s in steps for t in s.tokens]


SCRIPT = "ab ab cab abc ca bb a ba c abc ab cab ab abc ca bb a ba c cab ab abc " * 3
PROMPT = TARGET.tokenize("ab ")


def script_pair(error_every=0, seed=0):
    target = FakeBackend(TextOracle(TARGET, SCRIPT, seed=seed))
    draft = FakeBackend(TextOracle(DRAFT, SCRIPT, error_every=error_every, seed=seed + 100))
    return target, draft, TranslatedDraftProposer(draft, DRAFT, TARGET)


# -- helpers --------------------------------------------------------------------------

def test_byte_helpers():
    assert common_bytes(b"abcd", b"abxd") == 2
    assert common_bytes(b"abc", b"abc") == 3 and common_bytes(b"", b"x") == 0
    assert common_bytes(b"ab", b"abc") == 2
    e = "é".encode()  # 2 bytes
    assert complete_utf8(b"x" + e) == 3 and complete_utf8(b"x" + e[:1]) == 1
    assert complete_utf8("€".encode()[:2]) == 0 and complete_utf8(b"") == 0
    ids, ends = tokenize_span(TARGET, b"ab cab")
    assert TARGET.text(ids) == "ab cab" and ends[-1] == 6
    assert tokenize_span(TARGET, b"x" + e[:1]) is None  # not valid UTF-8


def test_a_leading_space_tokenizer_is_allowed_for():
    class SpaceFirst(VocabTokenizer):
        def tokenize(self, text):
            return super().tokenize(" " + text)

    tok = SpaceFirst(CHARS + [" a"])
    ids, ends = tokenize_span(tok, b"ab")
    assert [tok.pieces[i] for i in ids] == [b" a", b"b"] and ends == [1, 2]


# -- exactness at T = 0 ----------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_output_equals_target_alone_for_random_targets(seed, k):
    """A random target (its tokens need not be a canonical tokenization) and a random
    character-level draft: the output is target alone's, token for token."""
    tm = FakeModel(n_vocab=len(TARGET.pieces), seed=seed)
    base = tokens(run(FakeBackend(tm), NoProposer(), max_tokens=50))
    draft = FakeBackend(FakeModel(n_vocab=len(DRAFT.pieces), seed=seed + 50))
    steps = run(FakeBackend(tm), TranslatedDraftProposer(draft, DRAFT, TARGET), FixedK(k), max_tokens=50)
    assert tokens(steps) == base
    assert sum(s.drafted for s in steps) > 0
    assert {s.source for s in steps if s.drafted} == {"translated"}


@pytest.mark.parametrize("error_every", [0, 3, 7])
@pytest.mark.parametrize("k", [2, 5])
def test_greedy_with_a_draft_that_knows_the_text(error_every, k):
    t, _, _ = script_pair()
    base = tokens(run(t, NoProposer(), max_tokens=40, prompt=PROMPT))
    assert TARGET.text(base).startswith(SCRIPT[3:20])  # the oracle target writes the script
    t, d, prop = script_pair(error_every)
    steps = run(t, prop, FixedK(k), max_tokens=40, prompt=PROMPT)
    assert tokens(steps) == base
    st = steps[-1].stats
    if error_every == 0:
        assert st.accepted == st.drafted > 0  # a draft that is always right
    else:
        assert 0 < st.accepted < st.drafted
    # the draft context only ever holds a prefix of its tokens for the text (plus its
    # last continuation), and re-evaluated far less than everything each step
    full = prop.prefix + prop.draft_tokens
    assert d.history == full[: len(d.history)]
    assert d.evaluated < 3 * len(DRAFT.tokenize(TARGET.text(PROMPT + base)))


def test_eog_of_the_draft_ends_its_text_and_keeps_the_last_token():
    script = "ab cab"
    eog = len(DRAFT.pieces)
    d = FakeBackend(TextOracle(DRAFT, script, eog=eog), eog=eog)
    prop = TranslatedDraftProposer(d, DRAFT, TARGET)
    seq = TARGET.tokenize("ab ")
    draft = prop.propose(seq, lambda s, h: 8, GREEDY, np.random.default_rng(0))
    assert TARGET.text(draft.tokens) == "cab" and prop.last_dropped is None


# -- the boundary ------------------------------------------------------------------------

def propose_after(text, draft_script, k=8, **kw):
    d = FakeBackend(TextOracle(DRAFT, draft_script))
    prop = TranslatedDraftProposer(d, DRAFT, TARGET, **kw)
    seq = TARGET.tokenize(text)
    return prop, prop.propose(seq, lambda s, h: k, GREEDY, np.random.default_rng(0)), d


def test_a_target_token_spread_over_draft_tokens_is_proposed_whole():
    prop, draft, _ = propose_after("c ", "c abc ab ab", k=8)
    # the draft wrote "abc ab ab..." one character per token
    assert prop.last_generated >= 4
    assert [TARGET.pieces[t] for t in draft.tokens][0] == b"abc"
    assert draft.source == "translated" and draft.q is None


def test_the_trailing_piece_that_may_still_merge_is_not_proposed():
    # k=2 target tokens: the draft writes about 2*1.3+2 characters, "abc " -> "abc", " ",
    # and the text ends in the middle of what may become " ab"
    prop, draft, _ = propose_after("c ", "c abc abc", k=2, max_draft_tokens=5)
    cont = b"abc abc"[: prop.last_generated]
    full = TARGET.tokenize(cont.decode())
    assert list(draft.tokens) == full[:-1][:2]
    assert prop.last_dropped == full[-1]
    assert b"".join(TARGET.pieces[t] for t in draft.tokens) + TARGET.pieces[prop.last_dropped] == cont


class UnsureAfter:
    """A character-level draft that writes ``text`` surely, then is unsure: its best
    guess at the next character is ``guess``, at a probability under p-min."""

    def __init__(self, text: str, guess: str) -> None:
        self.text, self.guess = text, guess
        self.n_vocab = len(DRAFT.pieces)

    def logits(self, history) -> np.ndarray:
        written = DRAFT.text(history)
        row = np.zeros(self.n_vocab, dtype=np.float32)
        if self.text.startswith(written) and len(written) < len(self.text):
            row[DRAFT.ids[self.text[len(written)].encode()]] = 12.0
        else:
            row[DRAFT.ids[self.guess.encode()]] = 0.5  # the argmax, at about 0.35
        return row


@pytest.mark.parametrize(("guess", "complete"), [(" ", True), ("a", True), ("b", True), ("c", False)])
def test_where_p_min_stopped_the_draft_its_guess_decides_whether_the_last_token_is_whole(guess, complete):
    # After "c ", the draft writes "ab" and p-min stops it. With " ", "a" or "b" next,
    # the target's tokenizer still ends a token after "ab" ("ab"+" ", "ab"+"a",
    # "ab"+"b"): the draft paid for that token and it is proposed. With "c" next it
    # would be "abc": "ab" may still merge, and it is held back, as when the draft was
    # stopped by its length alone.
    d = FakeBackend(UnsureAfter("c ab", guess))
    prop = TranslatedDraftProposer(d, DRAFT, TARGET, p_min=0.75)
    seq = TARGET.tokenize("c ")
    draft = prop.propose(seq, lambda s, h: 4, GREEDY, np.random.default_rng(0))
    assert prop.last_generated == 2  # "a", "b": then p-min refused the guess
    if complete:
        assert [TARGET.pieces[t] for t in draft.tokens] == [b"ab"] and prop.last_dropped is None
    else:
        assert draft.tokens == () and TARGET.pieces[prop.last_dropped] == b"ab"
    # the same text, stopped by its length (k tokens' worth) rather than by p-min: held back
    d = FakeBackend(UnsureAfter("c ab", guess))
    prop = TranslatedDraftProposer(d, DRAFT, TARGET, p_min=0.0, max_draft_tokens=2)
    draft = prop.propose(seq, lambda s, h: 4, GREEDY, np.random.default_rng(0))
    assert draft.tokens == () and TARGET.pieces[prop.last_dropped] == b"ab"


def test_a_target_token_straddling_the_accepted_end_falls_back_to_the_bare_continuation():
    # The accepted text ends with "c"; the draft continues "ab": re-tokenized together
    # they form "cab", which would rewrite an accepted token. The proposal starts at the
    # accepted end instead.
    prop, draft, _ = propose_after("ab c", "ab cabc abc abc abc", k=4, target_lookbehind=1)
    got = b"".join(TARGET.pieces[t] for t in draft.tokens)
    assert got and b"abc abc abc abc".startswith(got)
    assert TARGET.tokenize("c" + got.decode())[0] == TARGET.ids[b"cab"]  # the straddle was real
    assert TARGET.pieces[draft.tokens[0]] == b"abc"


def test_partial_accept_rolls_the_draft_back_through_text_offsets():
    d = FakeBackend(TextOracle(DRAFT, "ab ab cab abc ca"))
    prop = TranslatedDraftProposer(d, DRAFT, TARGET, lookbehind=2)
    rng = np.random.default_rng(0)
    seq = TARGET.tokenize("ab ab ")
    draft = prop.propose(seq, lambda s, h: 4, GREEDY, rng)
    assert TARGET.text(draft.tokens).startswith("cab")
    held = len(d.history)
    assert held > len(DRAFT.tokenize("ab ab "))
    # the target accepts the first proposed token, then corrects with "a" (not the draft's)
    seq2 = seq + [draft.tokens[0], TARGET.ids[b"a"]]
    text2 = TARGET.text(seq2)
    behind = []
    prop.propose(seq2, lambda s, h: behind.append(h) or 0, GREEDY, rng)  # sync only: k = 0
    # the draft keeps its tokens for the common text but the look-behind, re-tokenizes the rest
    assert DRAFT.text(prop.draft_tokens) == text2
    assert prop.draft_ends == [i + 1 for i in range(len(text2))]
    common = len("ab ab cab ")
    kept = next(i for i, (a, b) in enumerate(zip(d.history, prop.draft_tokens)) if a != b) if any(
        a != b for a, b in zip(d.history, prop.draft_tokens)) else min(len(d.history), len(prop.draft_tokens))
    assert kept >= common - 2 - 1
    # only what differs must be evaluated (the controller is told how far behind it is)
    assert behind == [len(prop.draft_tokens) - kept]
    assert behind[0] <= 4


def test_auto_measures_the_translated_source_on_its_own():
    t, d, prop = script_pair(error_every=5)
    auto = AutoK()
    steps = run(t, prop, auto, max_tokens=60, prompt=PROMPT)
    assert any(key.startswith("translated") for key in auto.acceptance)
    assert any(k.startswith("translated:") for k in steps[-1].stats.decisions)


# -- T > 0: the output follows the target's distribution ----------------------------------

T_SMALL = VocabTokenizer(["a", "b", "ab", "ba"])
D_SMALL = VocabTokenizer(["a", "b"])



@pytest.mark.parametrize(
    "params,k",
    [(SamplingParams(temperature=1.0), 3), (SamplingParams(temperature=0.7, top_k=3, top_p=0.9), 2)],
)
def test_speculative_sampling_with_translated_drafts_follows_the_target(params, k):
    """The chi-square method of test_decoder, with the translated proposer (q one-hot)."""
    n_tokens, runs = 3, 6000
    prompt = [0, 1, 2]
    tm = FakeModel(n_vocab=len(T_SMALL.pieces), seed=5, scale=1.0)
    exact = exact_joint(tm, params, prompt, n_tokens)
    counts = dict.fromkeys(exact, 0)
    t = FakeBackend(tm)
    d = FakeBackend(TextOracle(D_SMALL, "abababbaabbaab" * 2, error_every=4, seed=3))
    prop = TranslatedDraftProposer(d, D_SMALL, T_SMALL)
    drafted = accepted = 0
    for seed in range(runs):
        steps = run(t, prop, FixedK(k), params=params, max_tokens=n_tokens, seed=seed, prompt=prompt)
        combo = tuple(tokens(steps))
        assert combo in counts, f"{combo} has probability 0 under the target"
        counts[combo] += 1
        drafted += steps[-1].stats.drafted
        accepted += steps[-1].stats.accepted
    assert 0 < accepted < drafted
    chi2, crit, df, _ = pooled_chi_square(counts, exact, runs)
    assert chi2 < crit, f"chi2 {chi2:.1f} >= {crit:.1f} (df {df})"


# -- the draft's own context (issue 21, defect 3) ---------------------------------------------

@pytest.mark.parametrize("draft_ctx", [100, 40, 12])
def test_a_draft_whose_context_cannot_hold_the_text_keeps_a_window_and_never_fails_the_answer(draft_ctx):
    """The character-level draft needs about twice the target's tokens for the same text:
    a prompt of 60 target tokens is 118 draft tokens, more than its context holds. The
    answer is the target's own, the draft keeps drafting from a window that fits its
    context, and its context never overflows."""
    prompt = TARGET.tokenize(SCRIPT[:118])
    assert len(DRAFT.tokenize(SCRIPT[:118])) == 118 > draft_ctx and len(prompt) < 70
    t = FakeBackend(TextOracle(TARGET, SCRIPT))
    base = tokens(run(t, NoProposer(), max_tokens=60, prompt=prompt))
    t = FakeBackend(TextOracle(TARGET, SCRIPT))
    d = FakeBackend(TextOracle(DRAFT, SCRIPT), n_ctx=draft_ctx)
    steps = run(t, TranslatedDraftProposer(d, DRAFT, TARGET), FixedK(4), max_tokens=60, prompt=prompt)
    assert tokens(steps) == base
    st = steps[-1].stats
    assert st.generated == 60
    if draft_ctx >= 40:
        assert st.accepted > 0  # the window still drafts well
    assert len(d.history) <= draft_ctx


class Counting(VocabTokenizer):
    """A tokenizer that records the size of every text it is given."""

    def __init__(self, pieces):
        super().__init__([p.decode() for p in pieces])
        self.sizes: list[int] = []

    def tokenize(self, text):
        self.sizes.append(len(text))
        return super().tokenize(text)


@pytest.mark.parametrize("repeat", [1, 12])
def test_a_step_re_tokenizes_a_bounded_window_however_long_the_text(repeat):
    """After the prompt, every text either tokenizer is given is bounded by the look-behind
    windows and what is new, not by the length of the text so far (the same bound for a
    prompt twelve times as long), and the draft evaluates each token of its text about
    once."""
    script = SCRIPT * repeat + SCRIPT
    dtok, ttok = Counting(DRAFT.pieces), Counting(TARGET.pieces)
    prompt = TARGET.tokenize(SCRIPT * repeat)
    t = FakeBackend(TextOracle(TARGET, script))
    d = FakeBackend(TextOracle(DRAFT, script, error_every=5))
    prop = TranslatedDraftProposer(d, dtok, ttok)
    prop.prepare(prompt, lambda source, hint: 1)
    dtok.sizes.clear(), ttok.sizes.clear()
    evaluated = d.evaluated
    steps = run(t, prop, FixedK(4), max_tokens=60, prompt=prompt)
    st = steps[-1].stats
    assert 0 < st.accepted < st.drafted
    assert max(dtok.sizes) <= 40 and max(ttok.sizes) <= 40  # bytes: a few tokens each side, and the new ones
    generated = len(TARGET.text(tokens(steps)))
    assert d.evaluated - evaluated < 3 * generated
