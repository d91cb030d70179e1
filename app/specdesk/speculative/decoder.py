"""The propose/verify loop, as a generator of Step events.

Invariant (llama.cpp's speculative-simple): the target context holds every token of
the sequence but the last one, which is *pending*. Each step drafts after the whole
sequence, evaluates ``[pending] + draft`` on the target in one batch with a logits
row per token, keeps the accepted prefix, rolls the rest back, and the target's own
next token (correction or bonus) becomes the new pending token.

With no draft the batch is the pending token alone: target-alone decoding goes
through the same code path and timers as speculation.
"""

from __future__ import annotations

import codecs
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from .backend import Backend
from .controller import (
    LAST_TOKEN,
    NO_CANDIDATE,
    TARGET_ALONE,
    Controller,
    Decision,
    StepCost,
)
from .proposers.base import EMPTY_DRAFT, Draft, Proposer
from .sampling import SamplingParams, warp
from .stats import Stats
from .verify import Verdict, verify_greedy, verify_stochastic


@dataclass(frozen=True)
class TokenInfo:
    """One emitted token and where it came from."""

    token: int
    text: str
    # "target": a plain target step (nothing was drafted);
    # "accepted": a draft token the target kept;
    # "correction": the target's token after a rejection;
    # "bonus": the target's extra token after a full accept.
    kind: str
    source: str = ""  # "draft" | "ngram" for accepted tokens and the token that closed their step
    position: int | None = None  # 1-based position in the draft (the closing token: k+1 or n+1)
    p: float | None = None  # target probability, where known
    q: float | None = None  # draft probability, where known
    lookup_start: int | None = None  # n-gram: index in prompt+output the token was copied from


@dataclass(frozen=True)
class Step:
    index: int
    tokens: tuple[TokenInfo, ...]
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

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)


@dataclass
class _Detok:
    backend: Backend
    dec: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))

    def piece(self, token: int) -> str:
        return self.dec.decode(self.backend.token_bytes(token))


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
    stats = Stats(prompt_tokens=len(prompt))
    detok = _Detok(target)

    now = clock

    def budget_for(limit: int):
        return lambda source, hint: max(0, min(controller.budget(source, hint, limit), limit))

    # The prompt phase: the target evaluates the prompt but its last token, and a
    # draft model evaluates it too (when it may draft), so that decode time holds
    # only decoding. The draft's prefill also measures its cost per token.
    t0 = now()
    target.prefill(prompt[:-1], logits=False, cancel=cancel)  # a long prompt stops between chunks (Cancelled)
    stats.prompt_evaluated = target.last_prefill_evaluated + 1  # the pending token is evaluated in step 1
    room0 = min(max_tokens - 1, target.n_ctx - len(prompt))
    tp = now()
    prepared = proposer.prepare(prompt, lambda source, hint: controller.peek(source, hint, room0))
    if prepared:
        controller.observe_prefill(prepared, now() - tp)
    stats.prompt_seconds = now() - t0

    seq = list(prompt)
    native0 = target.native_seconds + proposer.native_seconds
    loop_start = now()
    index = 0

    def clock_stats() -> None:
        stats.decode_seconds = now() - loop_start
        stats.native_seconds = target.native_seconds + proposer.native_seconds - native0

    def final(reason: str) -> Step:
        clock_stats()
        return Step(index=index, tokens=(), drafted=0, accepted=0, source="", stats=stats.copy(), done=True, stop_reason=reason)

    while True:
        if cancel is not None and cancel():
            yield final("cancelled")
            return
        remaining = max_tokens - stats.generated
        room = target.n_ctx - len(seq)  # positions left after the pending token's
        if remaining <= 0:
            yield final("max_tokens")
            return
        if room < 0:
            yield final("context")
            return
        limit = min(remaining - 1, room)

        controller.take_decision()  # forget any decision not made for this step
        ts = now()
        draft: Draft = proposer.propose(seq, budget_for(limit), params, rng) if limit > 0 else EMPTY_DRAFT
        td = now()
        decision = controller.take_decision()
        if decision is None:
            reason = LAST_TOKEN if limit <= 0 else (TARGET_ALONE if proposer.name == "none" else NO_CANDIDATE)
            decision = Decision(0, reason)
        draft_tokens = list(draft.tokens[:limit])
        rows = target.eval([seq[-1]] + draft_tokens, all_rows=True)
        tv = now()

        verdict: Verdict
        if params.greedy:
            verdict = verify_greedy(draft_tokens, rows)
            p_rows = None
        else:
            p_rows = np.stack([warp(r, params) for r in rows])
            q = draft.q[: len(draft_tokens)] if draft.q is not None else None
            verdict = verify_stochastic(draft_tokens, p_rows, q, rng)
        n = verdict.n_accepted
        target.rollback(len(seq) + n)

        emitted_ids = draft_tokens[:n] + [verdict.next_token]
        infos: list[TokenInfo] = []
        stop_reason = None
        for i, tok in enumerate(emitted_ids):
            is_next = i == n
            if not draft_tokens:
                kind, source = "target", ""
            elif is_next:
                kind, source = verdict.next_kind, draft.source
            else:
                kind, source = "accepted", draft.source
            p = verdict.p[i] if i < len(verdict.p) else None
            q = None
            if not is_next:
                if i < len(verdict.q):
                    q = verdict.q[i]
                elif i < len(draft.confidence):
                    q = draft.confidence[i]
                if q is not None and math.isnan(q):
                    q = None
            lookup = draft.match_start + i if (draft.source == "ngram" and not is_next) else None
            eog = target.is_eog(tok)
            infos.append(
                TokenInfo(
                    token=int(tok),
                    text="" if eog else detok.piece(tok),
                    kind=kind,
                    source=source,
                    position=i + 1 if draft_tokens else None,
                    p=p,
                    q=q,
                    lookup_start=lookup,
                )
            )
            if eog:
                stop_reason = "eos"
                break
        seq.extend(t.token for t in infos)
        if len(infos) <= n:
            # an accepted draft token ended the answer: the tokens drafted after it were
            # evaluated but are not part of the answer, so the context gives them back
            target.rollback(len(seq) - 1)

        stats.record_step(len(draft_tokens), n, len(infos), draft.source)
        stats.draft_seconds += td - ts
        stats.record_decision(decision.key, str(decision))
        stats.verify_seconds += tv - td
        controller.observe(
            StepCost(
                source=draft.source,
                match_length=draft.match_length,
                drafted=len(draft_tokens),
                accepted=n,
                draft_seconds=td - ts,
                verify_seconds=tv - td,
                draft_synced=draft.synced,
            )
        )
        if stop_reason is None and stats.generated >= max_tokens:
            stop_reason = "max_tokens"
        clock_stats()
        done = stop_reason is not None
        yield Step(
            index=index,
            tokens=tuple(infos),
            drafted=len(draft_tokens),
            accepted=n,
            source=draft.source,
            stats=stats.copy(),
            done=done,
            stop_reason=stop_reason,
            target_argmax=verdict.target_argmax,
            draft_tokens=tuple(draft_tokens),
            decision=str(decision),
        )
        index += 1
        if done:
            return

