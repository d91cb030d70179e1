"""Fitting a chat into the target's context: the oldest turns give way first, and
the history always keeps the roles a strict chat template accepts."""

from __future__ import annotations

from typing import Sequence

from ..engine.chat import drop_oldest_turn, valid_roles
from .core import Session


def fit_chat(session: Session, messages: Sequence[dict], max_tokens: int) -> tuple[list[int], int]:
    """The chat's prompt tokens and how many messages were left out to fit
    ``max_tokens`` more into the context. When even the last turn does not fit, the
    shortest prompt is returned and ``Session.check_fits`` says why."""
    n_ctx = session.target.ctx.n_ctx
    msgs = valid_roles(messages)
    dropped = len(messages) - len(msgs)
    while True:
        prompt = session.chat_prompt(msgs)
        if len(prompt) + max_tokens <= n_ctx:
            return prompt, dropped
        shorter = drop_oldest_turn(msgs)
        if not shorter:
            return prompt, dropped
        dropped += len(msgs) - len(shorter)
        msgs = shorter
