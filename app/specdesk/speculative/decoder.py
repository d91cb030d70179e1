"""The propose/verify loop, as a generator of Step events.

Invariant (llama.cpp's speculative-simple): the target context holds every token of
the sequence but the last one, which is *pending*. Each step drafts after the whole
sequence, evaluates ``[pending] + draft`` on the target in one batch with a logits
row per token, keeps the accepted prefix, rolls the rest back, and the target's own
next token (correction or bonus) becomes the new pending token.

With no draft the batch is the pending token alone: target-alone decoding goes
through the same code path and timers as speculation.

:func:`speculate` reads as the algorithm: propose, verify, roll back, emit. The parts
it names live below it: :func:`verify_rows` (the verifier over the batch's rows),
:func:`emitted_tokens` (what the step adds to the answer, with its provenance, cut
at the end of the answer) and :class:`_Loop` (the sequence, the clock and the
statistics of one generation).
"""

from __future__ import annotations

import codecs
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..errors import NonFiniteLogitsError
from .backend import Backend, argmax_rows
from .controller import LAST_TOKEN, NO_CANDIDATE, TARGET_ALONE, Controller, Decision, StepCost
from .proposers.base import EMPTY_DRAFT, Draft, Proposer
from .sampling import SamplingParams, WarpedRows, check_finite
from .stats import Stats
from .verify import Verdict, verify_greedy, verify_stochastic


# The records a step hands out are named tuples: immutable as frozen dataclasses, and
# built several times faster (a step builds one per emitted token).


class TokenInfo(NamedTuple):
    """One emitted token and where it came from."""

    token: int
    text: str
    # "target": a plain target step (nothing was drafted);
    # "accepted": a draft token the target kept;
    # "correction": the target's token after a rejection;
    # "bonus": the target's extra token after a full accept.
    kind: str
    # The Draft.source of the step's draft ("draft", "translated", "ngram" or
    # "history"), for the accepted tokens and the token that closed their step.
    source: str = ""
    position: int | None = None  # 1-based position in the draft (the closing token: k+1 or n+1)
    p: float | None = None  # target probability, where known
    q: float | None = None  # draft probability, where known
    lookup_start: int | None = None  # n-gram: index in prompt+output the token was copied from


class Step(NamedTuple):
    """One verify pass: the tokens it emitted and the statistics after it."""

    index: int
    tokens: tuple[TokenInfo, ...]
    # Draft tokens whose verdict counts: all of the draft, or those up to the end of
    # the answer when an accepted token ended it (draft_tokens holds the whole draft).
    drafted: int
    accepted: int
    source: str
    stats: Stats
    done: bool = False
    stop_reason: str | None = None  # "eos" | "max_tokens" | "context" | "cancelled"
    # Greedy verification: the target's argmax at each emitted position, from the
    # verify pass itself (a trace for tests and for explaining divergences).
    target_argmax: tuple[int, ...] = ()
    draft_tokens: tuple[int, ...] = ()
    # Why the controller drafted what it did this step (e.g. "draft: bound<1",
    # "ngram: k=4 by cost model", "draft: probe k=3").
    decision: str = ""
    # A last step with no tokens (cancelled, the context full): what was left of a
    # character an earlier token began (U+FFFD), so the answer's text matches its tokens.
    tail: str = ""

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens) + self.tail


@dataclass
class _Detok:
    """Token bytes to text, across tokens that split a UTF-8 character."""

    backend: Backend
    dec: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))

    def piece(self, token: int) -> str:
        return self.dec.decode(self.backend.token_bytes(token))

    def flush(self) -> str:
        """What is left of a character the last token began (shown as U+FFFD, as
        llama.cpp's detokenizer does), so the text always matches the tokens."""
        return self.dec.decode(b"", final=True)


def verify_rows(draft_tokens: Sequence[int], draft: Draft, rows: np.ndarray, params: SamplingParams,
                rng: np.random.Generator) -> Verdict:
    """The verifier over the target's rows for ``[pending] + draft_tokens``, read where
    they lie (the backend's view: nothing is copied): the argmax rule at temperature 0,
    else rejection sampling against the rows warped over their support, each only once
    the verifier reaches it (q one-hot where the draft is deterministic)."""
    if params.greedy:
        if not draft_tokens:  # a target step: one row, one argmax
            best = int(rows.argmax())  # the one row's (the flat index of a 1-row view)
            check_finite(rows[0, best])
            return Verdict(0, best, "bonus", target_argmax=(best,))
        best_rows = argmax_rows(rows)
        check_finite(rows[np.arange(best_rows.shape[0]), best_rows].max())
        return verify_greedy(draft_tokens, best_rows)
    q = draft.q[: len(draft_tokens)] if draft.q is not None else None
    return verify_stochastic(draft_tokens, WarpedRows(rows, params), q, rng)


def _token_info(i: int, tok: int, text: str, draft_tokens: Sequence[int], draft: Draft, verdict: Verdict) -> TokenInfo:
    """Where the ``i``-th token the step emits came from."""
    closing = i == verdict.n_accepted
    if not draft_tokens:
        return TokenInfo(token=tok, text=text, kind="target")
    q = None
    if not closing:
        if i < len(verdict.q):
            q = verdict.q[i]
        elif i < len(draft.confidence):
            q = draft.confidence[i]
        if q is not None and math.isnan(q):
            q = None
    return TokenInfo(
        token=tok,
        text=text,
        kind=verdict.next_kind if closing else "accepted",
        source=draft.source,
        position=i + 1,
        p=verdict.p[i] if i < len(verdict.p) else None,
        q=q,
        lookup_start=draft.match_start + i if (draft.match_start is not None and not closing) else None,
    )


def emitted_tokens(draft_tokens: Sequence[int], draft: Draft, verdict: Verdict,
                   is_eog: Callable[[int], bool], piece: Callable[[int], str]) -> tuple[list[TokenInfo], bool]:
    """The tokens a step adds to the answer: the accepted draft tokens, then the
    target's correction or bonus, each with its provenance; cut after an
    end-of-generation token (the second value says whether one ended the answer).
    An end token's text is empty."""
    if not draft_tokens:  # a plain target step
        tok = verdict.next_token
        eog = is_eog(tok)
        return [TokenInfo(tok, "" if eog else piece(tok), "target")], eog
    ids = list(draft_tokens[: verdict.n_accepted]) + [verdict.next_token]
    out: list[TokenInfo] = []
    for i, tok in enumerate(ids):
        eog = is_eog(tok)
        out.append(_token_info(i, int(tok), "" if eog else piece(tok), draft_tokens, draft, verdict))
        if eog:
            return out, True
    return out, False


# The decisions of steps the controller was not asked about.
_UNDECIDED = {reason: Decision(0, reason) for reason in (LAST_TOKEN, NO_CANDIDATE, TARGET_ALONE)}


class _Loop:
    """One generation's state: the sequence, the clock, the statistics."""

    def __init__(self, target: Backend, proposer: Proposer, controller: Controller, prompt: Sequence[int],
                 params: SamplingParams, max_tokens: int, rng: np.random.Generator, clock: Callable[[], float]) -> None:
        self.target, self.proposer, self.controller = target, proposer, controller
        self.params, self.max_tokens, self.rng, self.now = params, max_tokens, rng, clock
        self.seq = list(prompt)
        self.stats = Stats(prompt_tokens=len(prompt))
        self.detok = _Detok(target)
        self.index = 0
        self._words: dict[Decision, tuple[str, str]] = {}
        self._said: tuple[Decision | None, tuple[str, str]] = (None, ("", ""))  # the last one worded
        self.native0 = 0.0
        self.loop_start = 0.0

    def read_prompt(self, cancel: Callable[[], bool] | None) -> None:
        """The prompt phase: the target evaluates the prompt but its last token, and a
        draft model evaluates it too (when it may draft), so that decode time holds
        only decoding. The draft's prefill also measures its cost per token."""
        t0 = self.now()
        prompt = self.seq
        self.target.prefill(prompt[:-1], logits=False, cancel=cancel)  # a long prompt stops between chunks (Cancelled)
        self.stats.prompt_evaluated = self.target.last_prefill_evaluated + 1  # the pending token is evaluated in step 1
        room0 = min(self.max_tokens - 1, self.target.n_ctx - len(prompt))
        tp = self.now()
        prepared = self.proposer.prepare(prompt, lambda source, hint: self.controller.peek(source, hint, room0))
        if prepared:
            self.controller.observe_prefill(prepared, self.now() - tp)
        self.stats.prompt_seconds = self.now() - t0
        self.native0 = self.target.native_seconds + self.proposer.native_seconds
        self.loop_start = self.now()

    def stop_reason(self, cancel: Callable[[], bool] | None) -> str | None:
        if cancel is not None and cancel():
            return "cancelled"
        if self.max_tokens - self.stats.generated <= 0:
            return "max_tokens"
        if self.target.n_ctx - len(self.seq) < 0:
            return "context"
        return None

    def propose(self) -> tuple[list[int], Draft, Decision]:
        """The draft for this step, cut to what the answer and the context have room
        for, and the controller's decision about it."""
        limit = min(self.max_tokens - self.stats.generated - 1, self.target.n_ctx - len(self.seq))
        if not self.proposer.drafts:  # target alone: nothing to ask
            return [], EMPTY_DRAFT, _UNDECIDED[LAST_TOKEN if limit <= 0 else TARGET_ALONE]
        ctl = self.controller

        def budget(source: str, hint: int | None) -> int:
            return max(0, min(ctl.budget(source, hint, limit), limit))

        ctl.take_decision()  # forget any decision not made for this step
        try:
            draft = self.proposer.propose(self.seq, budget, self.params, self.rng) if limit > 0 else EMPTY_DRAFT
        except NonFiniteLogitsError as e:
            raise NonFiniteLogitsError("the draft model") from e
        decision = ctl.take_decision()
        if decision is None:
            decision = _UNDECIDED[LAST_TOKEN if limit <= 0 else (NO_CANDIDATE if self.proposer.drafts else TARGET_ALONE)]
        return list(draft.tokens[: max(0, limit)]), draft, decision

    def verify(self, draft_tokens: list[int], draft: Draft) -> Verdict:
        """The target's batch ``[pending] + draft_tokens``, verified on its rows where
        they lie (nothing copied)."""
        params, rng = self.params, self.rng
        try:
            return self.target.eval([self.seq[-1]] + draft_tokens, all_rows=True,
                                    fn=lambda rows: verify_rows(draft_tokens, draft, rows, params, rng))
        except NonFiniteLogitsError as e:
            raise NonFiniteLogitsError("the target model") from e

    def roll_back(self, n_accepted: int) -> None:
        """The target keeps the pending token and the accepted draft tokens."""
        self.target.rollback(len(self.seq) + n_accepted)

    def append(self, emitted: list[TokenInfo], ended: bool) -> None:
        self.seq.extend([t.token for t in emitted])
        if ended:
            # the end token is the answer's last: nothing after it stays in the context,
            # including accepted draft tokens that followed it in the batch
            self.target.rollback(min(self.target.n_past, len(self.seq) - 1))

    def record(self, draft_tokens: list[int], draft: Draft, verdict: Verdict, emitted: list[TokenInfo], ended: bool,
               decision: Decision, seconds: tuple[float, float, float]) -> tuple[int, int]:
        """Count the step; returns (drafted, accepted) as the statistics count them:
        draft tokens after an end token that ended the answer were never part of it
        and count as neither drafted nor accepted (their cost counts: the batch ran)."""
        cut = ended and len(emitted) <= verdict.n_accepted  # an accepted draft token ended the answer
        accepted = len(emitted) if cut else verdict.n_accepted
        drafted = accepted if cut else len(draft_tokens)
        t_draft, t_verify, t_step = seconds
        st = self.stats
        st.record_step(drafted, accepted, len(emitted), draft.source)
        st.draft_seconds += t_draft
        st.verify_seconds += t_verify
        st.record_decision(*self.words(decision))
        self.controller.observe(StepCost(
            source=draft.source, match_length=draft.match_length, drafted=len(draft_tokens), accepted=accepted,
            judged=drafted, emitted=len(emitted), draft_seconds=t_draft, verify_seconds=t_verify,
            step_seconds=t_step, draft_synced=draft.synced, decision=decision,
            verify_setup=self.target.last_batch_first, verify_reshape=self.target.last_reshape_seconds,
            verify_change_cost=self.target.reshape_cost,
            draft_reshape=draft.reshape, draft_steady=draft.steady, draft_oneoff=draft.oneoff,
        ))
        return drafted, accepted

    def words(self, decision: Decision) -> tuple[str, str]:
        """The decision's kind and its text (the same few decisions recur: each is
        worded once per answer)."""
        if decision is self._said[0]:
            return self._said[1]
        w = self._words.get(decision)
        if w is None:
            w = self._words[decision] = (decision.key, str(decision))
        self._said = (decision, w)
        return w

    def clock_stats(self) -> None:
        self.stats.decode_seconds = self.now() - self.loop_start
        self.stats.native_seconds = self.target.native_seconds + self.proposer.native_seconds - self.native0

    def step(self, emitted: list[TokenInfo], counts: tuple[int, int], draft: Draft, verdict: Verdict,
             draft_tokens: list[int], decision: Decision, stop: str | None) -> Step:
        if stop is not None and emitted:
            tail = self.detok.flush()
            if tail:
                emitted[-1] = emitted[-1]._replace(text=emitted[-1].text + tail)
        self.clock_stats()
        s = Step(index=self.index, tokens=tuple(emitted), drafted=counts[0], accepted=counts[1], source=draft.source,
                 stats=self.stats.copy(), done=stop is not None, stop_reason=stop,
                 target_argmax=verdict.target_argmax, draft_tokens=tuple(draft_tokens), decision=self.words(decision)[1])
        self.index += 1
        return s

    def final(self, reason: str) -> Step:
        self.clock_stats()
        return Step(index=self.index, tokens=(), drafted=0, accepted=0, source="", stats=self.stats.copy(),
                    done=True, stop_reason=reason, tail=self.detok.flush())


def speculate(
    target: Backend,
    proposer: Proposer,
    controller: Controller,
    prompt: Sequence[int],
    *,
    params: SamplingParams,
    max_tokens: int,
    rng: np.random.Generator,
    cancel: Callable[[], bool] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Iterator[Step]:
    """Generate up to ``max_tokens`` tokens after ``prompt``, one Step per verify pass.

    ``clock`` times every part (a scripted clock in tests replays a machine's costs)."""
    if not prompt:
        raise ValueError("the prompt is empty")
    if max_tokens <= 0:
        raise ValueError(f"max tokens must be positive, got {max_tokens}")
    loop = _Loop(target, proposer, controller, prompt, params, max_tokens, rng, clock)
    loop.read_prompt(cancel)
    while True:
        stop = loop.stop_reason(cancel)
        if stop is not None:
            yield loop.final(stop)
            return
        ts = clock()
        draft_tokens, draft, decision = loop.propose()                        # propose
        td = clock()
        verdict = loop.verify(draft_tokens, draft)                            # verify: one batch
        tv = clock()
        loop.roll_back(verdict.n_accepted)                                    # roll back the rejected
        emitted, ended = emitted_tokens(draft_tokens, draft, verdict, target.is_eog, loop.detok.piece)
        loop.append(emitted, ended)                                           # emit
        counts = loop.record(draft_tokens, draft, verdict, emitted, ended, decision, (td - ts, tv - td, clock() - ts))
        stop = "eos" if ended else ("max_tokens" if loop.stats.generated >= max_tokens else None)
        yield loop.step(emitted, counts, draft, verdict, draft_tokens, decision, stop)
        if stop is not None:
            return
