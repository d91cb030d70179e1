"""Fitting a chat into the target's context: the oldest turns give way first, and
the history always keeps the roles a strict chat template accepts.

A chat that fits is rendered once. One that does not is searched for the fewest
oldest turns to leave out, by bisection over how many (a prompt gets shorter with
every turn left out), so a long chat costs about log2(turns) renders, not one per
turn. ``cancel`` is checked before each render and polled during it."""

from __future__ import annotations

from typing import Callable, Sequence

from ..chat.sandbox import valid_roles
from ..errors import Cancelled
from .core import Session


def shortenings(messages: Sequence[dict]) -> list[list[dict]]:
    """``messages`` (made valid by ``valid_roles``) with 0, 1, 2, ... of the oldest
    user turns (and their answers) left out, down to the last user turn; a leading
    system message always stays. Entry i is what ``drop_oldest_turn`` gives when
    applied i times."""
    msgs = valid_roles(messages)
    head = msgs[:1] if msgs and msgs[0].get("role") == "system" else []
    body = msgs[len(head):]
    starts = [i for i, m in enumerate(body) if m.get("role") == "user"] or [0]
    return [head + body[s:] for s in starts]


def fit_chat(session: Session, messages: Sequence[dict], max_tokens: int,
             cancel: Callable[[], bool] | None = None) -> tuple[list[int], int]:
    """The chat's prompt tokens and how many messages were left out to fit
    ``max_tokens`` more into the context. When even the last turn does not fit, the
    shortest prompt is returned and ``Session.check_fits`` says why. Raises
    Cancelled when ``cancel()`` turns true."""
    n_ctx = session.target.ctx.n_ctx
    options = shortenings(messages)

    def prompt(i: int) -> list[int]:
        if cancel is not None and cancel():
            raise Cancelled("stopped")
        return session.chat_prompt(options[i], cancel=cancel)

    def fits(tokens: list[int]) -> bool:
        return len(tokens) + max_tokens <= n_ctx

    def result(i: int, tokens: list[int]) -> tuple[list[int], int]:
        return tokens, len(messages) - len(options[i])

    whole = prompt(0)
    if fits(whole) or len(options) == 1:
        return result(0, whole)
    hi = len(options) - 1
    best = prompt(hi)
    if not fits(best):
        return result(hi, best)
    lo = 0  # options[lo] does not fit, options[hi] does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        tokens = prompt(mid)
        if fits(tokens):
            hi, best = mid, tokens
        else:
            lo = mid
    return result(hi, best)
