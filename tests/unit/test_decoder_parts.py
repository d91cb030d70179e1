"""The decoder's named parts, each on its own: the verifier over a batch's rows, the
emitted tokens with their provenance, and what a step records (drafts cut at the end of
the answer, a character split across the last token)."""

import numpy as np
import pytest

from fakes import FakeBackend
from specdesk.speculative.controller import FixedK, StepCost
from specdesk.speculative.decoder import emitted_tokens, speculate, verify_rows
from specdesk.speculative.proposers.base import Draft
from specdesk.speculative.sampling import SamplingParams, Warped
from specdesk.speculative.verify import Verdict

GREEDY = SamplingParams()


def onehot_rows(tokens, n_vocab=10):
    rows = np.full((len(tokens), n_vocab), -5.0, dtype=np.float32)
    for i, t in enumerate(tokens):
        rows[i, t] = 5.0
    return rows


def piece(t):
    return f"<{t}>"


# -- verify_rows ------------------------------------------------------------------------

def test_verify_rows_greedy_accepts_the_argmax_prefix():
    v = verify_rows([3, 4, 9], Draft(tokens=(3, 4, 9), source="draft"), onehot_rows([3, 4, 5, 6]), GREEDY,
                    np.random.default_rng(0))
    assert (v.n_accepted, v.next_token, v.next_kind) == (2, 5, "correction")
    assert v.target_argmax == (3, 4, 5)


def test_verify_rows_sampling_uses_the_drafts_q():
    # the draft put all its mass on token 1, the target on token 2: never accepted
    rows = onehot_rows([2, 2])
    q = np.zeros(10)
    q[1] = 1.0
    hot = SamplingParams(temperature=1.0)
    for seed in range(20):
        v = verify_rows([1], Draft(tokens=(1,), q=(Warped.from_dense(q),), source="draft"), rows * 10, hot,
                        np.random.default_rng(seed))
        assert v.n_accepted == 0 and v.next_token == 2


# -- emitted_tokens: provenance ------------------------------------------------------------

def test_provenance_of_an_accepted_prefix_and_its_correction():
    draft = Draft(tokens=(3, 4, 9), source="ngram", match_length=2, match_start=7, confidence=(0.9, 0.8, 0.7))
    verdict = Verdict(n_accepted=2, next_token=5, next_kind="correction")
    out, ended = emitted_tokens([3, 4, 9], draft, verdict, lambda t: False, piece)
    assert not ended
    assert [(t.token, t.kind, t.source, t.position, t.lookup_start) for t in out] == [
        (3, "accepted", "ngram", 1, 7), (4, "accepted", "ngram", 2, 8), (5, "correction", "ngram", 3, None)]
    assert [t.q for t in out] == [0.9, 0.8, None]  # the closing token was not drafted
    assert "".join(t.text for t in out) == "<3><4><5>"


def test_provenance_of_a_full_accept_and_of_a_plain_target_step():
    out, _ = emitted_tokens([3], Draft(tokens=(3,), source="draft"), Verdict(1, 4, "bonus", p=(0.5, 0.6)),
                            lambda t: False, piece)
    assert [(t.kind, t.position, t.p) for t in out] == [("accepted", 1, 0.5), ("bonus", 2, 0.6)]
    out, _ = emitted_tokens([], Draft(), Verdict(0, 7, "bonus"), lambda t: False, piece)
    assert [(t.token, t.kind, t.source, t.position) for t in out] == [(7, "target", "", None)]


def test_history_copies_have_no_position_in_the_sequence():
    draft = Draft(tokens=(3,), source="history", match_length=4)  # match_start None: copied from earlier turns
    out, _ = emitted_tokens([3], draft, Verdict(1, 4, "bonus"), lambda t: False, piece)
    assert out[0].source == "history" and out[0].lookup_start is None


def test_an_end_token_inside_the_accepted_draft_ends_the_answer_there():
    out, ended = emitted_tokens([3, 4, 5, 6, 7], Draft(tokens=(3, 4, 5, 6, 7), source="ngram"),
                                Verdict(5, 8, "bonus"), lambda t: t == 5, piece)
    assert ended and [t.token for t in out] == [3, 4, 5]
    assert out[-1].text == ""  # an end token shows no text


# -- what a step records --------------------------------------------------------------------

class Scripted:
    """A target whose argmax after the prompt follows ``script`` position by position."""

    def __init__(self, prompt_len, script, n_vocab=10):
        self.prompt_len, self.script, self.n_vocab = prompt_len, list(script), n_vocab

    def logits(self, history):
        i = len(history) - self.prompt_len
        row = np.full(self.n_vocab, -5.0, dtype=np.float32)
        row[self.script[i] if 0 <= i < len(self.script) else 0] = 5.0
        return row


class FixedDraft:
    """Drafts ``tokens`` once, then nothing."""

    name = "scripted"
    drafts = True
    native_seconds = 0.0

    def __init__(self, tokens):
        self.tokens = tuple(tokens)
        self.used = False

    def prepare(self, prompt, budget):
        return 0

    def propose(self, seq, budget, params, rng):
        if self.used:
            return Draft()
        self.used = True
        k = budget("ngram", 3)
        return Draft(tokens=self.tokens[:k], source="ngram", match_length=3)

    def reset(self):
        pass


class Recording(FixedK):
    def __init__(self, k):
        super().__init__(k)
        self.costs: list[StepCost] = []

    def observe(self, cost):
        self.costs.append(cost)


def test_draft_tokens_after_the_end_of_the_answer_are_not_counted_as_accepted():
    # the target writes 3 4 5 6 7; the draft proposes the same five; 5 ends the answer
    prompt = [1, 2]
    target = FakeBackend(Scripted(len(prompt), [3, 4, 5, 6, 7, 8]), eog=5)
    ctl = Recording(5)
    steps = list(speculate(target, FixedDraft([3, 4, 5, 6, 7]), ctl, prompt, params=GREEDY, max_tokens=20,
                           rng=np.random.default_rng(0)))
    assert [t.token for s in steps for t in s.tokens] == [3, 4, 5]
    assert steps[-1].stop_reason == "eos"
    st = steps[-1].stats
    assert (st.drafted, st.accepted, st.generated) == (3, 3, 3)
    assert st.accepted_per_position == [1, 1, 1] and st.drafted_per_position == [1, 1, 1]
    assert (steps[0].drafted, steps[0].accepted) == (3, 3)
    cost = ctl.costs[0]
    # the batch was six tokens (its cost is what it is), but only three were part of the answer
    assert (cost.drafted, cost.accepted, cost.judged, cost.emitted) == (5, 3, 3, 3)
    assert target.history == prompt + [3, 4]  # the end token is pending; nothing after it stays


class SplitChar(FakeBackend):
    """Token 3 is the first two bytes of '€' (E2 82 AC), token 4 its last byte."""

    PIECES = {3: b"\xe2\x82", 4: b"\xac"}

    def token_bytes(self, token):
        return self.PIECES.get(token, b"x")


@pytest.mark.parametrize("max_tokens", [1, 2])
def test_text_matches_the_tokens_when_the_last_one_splits_a_character(max_tokens):
    prompt = [1, 2]
    target = SplitChar(Scripted(len(prompt), [3, 4, 6]))
    steps = list(speculate(target, FixedDraft([]), FixedK(1), prompt, params=GREEDY, max_tokens=max_tokens,
                           rng=np.random.default_rng(0)))
    toks = [t.token for s in steps for t in s.tokens]
    text = "".join(s.text for s in steps)
    assert text == b"".join(SplitChar.PIECES[t] for t in toks).decode("utf-8", "replace")
    assert text == ("\ufffd" if max_tokens == 1 else "€")


def test_a_cancelled_answer_keeps_the_partial_character():
    prompt = [1, 2]
    target = SplitChar(Scripted(len(prompt), [3, 4, 6]))
    stop = [False]
    steps = []
    for s in speculate(target, FixedDraft([]), FixedK(1), prompt, params=GREEDY, max_tokens=5,
                       rng=np.random.default_rng(0), cancel=lambda: stop[0]):
        steps.append(s)
        stop[0] = True  # Stop pressed after the first token
    assert steps[-1].stop_reason == "cancelled"
    assert "".join(s.text for s in steps) == "\ufffd"




def test_each_step_keeps_the_statistics_as_they_were_at_that_step():
    """Step.stats is a snapshot: later steps change neither its counters, nor its lists
    per position, nor its decisions (the app keeps every step of an answer)."""
    prompt = [1, 2]
    target = FakeBackend(Scripted(len(prompt), [3, 4, 5, 6, 7, 8, 9, 3, 4]))
    steps = list(speculate(target, FixedDraft([3, 4, 9]), FixedK(3), prompt, params=GREEDY, max_tokens=8,
                           rng=np.random.default_rng(0)))
    first = steps[0].stats
    assert (first.steps, first.drafted, first.accepted, first.generated) == (1, 3, 2, 3)
    assert first.drafted_per_position == [1, 1, 1] and first.accepted_per_position == [1, 1, 0]
    assert first.decisions == {"ngram: fixed": 1}
    last = steps[-1].stats
    assert last.steps == len(steps) and last.generated == 8
    assert last.decisions == {"ngram: fixed": 1, "no candidate": len(steps) - 2, "last token": 1}
    assert first is not last and first.decisions is not last.decisions
