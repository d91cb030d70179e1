"""Fitting a chat into the context: the fewest oldest turns are left out, found
in about log2(turns) renders instead of one render per turn, and a cancel stops
the search. A fake session whose prompt is one token per character."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from specdesk.chat.sandbox import drop_oldest_turn, valid_roles
from specdesk.errors import Cancelled
from specdesk.session.fit import fit_chat, shortenings


class CountingSession:
    def __init__(self, n_ctx: int) -> None:
        self.target = SimpleNamespace(ctx=SimpleNamespace(n_ctx=n_ctx))
        self.renders = 0

    def chat_prompt(self, messages, cancel=None) -> list[int]:
        self.renders += 1
        return [0] * sum(len(m["content"]) + 2 for m in messages)


def _chat(turns: int, system: bool = True) -> list[dict]:
    msgs = [{"role": "system", "content": "be brief"}] if system else []
    for i in range(turns):
        msgs += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i} " * 3}]
    return msgs + [{"role": "user", "content": "the last question"}]


def _reference(session, messages, max_tokens):
    """What fitting did before: drop the oldest turn until the prompt fits."""
    msgs = valid_roles(messages)
    while True:
        prompt = session.chat_prompt(msgs)
        shorter = drop_oldest_turn(msgs)
        if len(prompt) + max_tokens <= session.target.ctx.n_ctx or not shorter:
            return prompt, len(messages) - len(msgs)
        msgs = shorter


@pytest.mark.parametrize("n_ctx", [40, 120, 300, 700, 1500, 3000, 5000])
def test_the_fewest_oldest_turns_are_left_out_in_log_renders(n_ctx):
    chat = _chat(64)
    want = _reference(CountingSession(n_ctx), chat, 16)
    s = CountingSession(n_ctx)
    assert fit_chat(s, chat, 16) == want
    assert s.renders <= 2 + math.ceil(math.log2(65)), s.renders


def test_a_chat_that_fits_is_rendered_once():
    s = CountingSession(100_000)
    prompt, dropped = fit_chat(s, _chat(200), 16)
    assert dropped == 0 and s.renders == 1


def test_when_even_the_last_turn_does_not_fit_the_shortest_prompt_comes_back():
    s = CountingSession(10)
    prompt, dropped = fit_chat(s, _chat(30), 16)
    assert len(prompt) == len("be brief") + 2 + len("the last question") + 2
    assert dropped == 60 and s.renders == 2


def test_shortenings_are_what_dropping_the_oldest_turn_gives():
    rng = random.Random(7)
    for _ in range(300):
        chat = [{"role": rng.choice(["system", "user", "assistant"]), "content": str(i)} for i in range(rng.randrange(12))]
        want = [valid_roles(chat)]
        while (shorter := drop_oldest_turn(want[-1])) is not None:
            want.append(shorter)
        assert shortenings(chat) == want, chat


def test_cancel_stops_the_search_before_the_next_render():
    s = CountingSession(200)
    with pytest.raises(Cancelled):
        fit_chat(s, _chat(64), 16, cancel=lambda: s.renders >= 2)
    assert s.renders == 2


def test_cancel_reaches_the_render():
    seen = []
    s = CountingSession(100_000)
    s.chat_prompt = lambda messages, cancel=None: seen.append(cancel) or [0]
    flag = lambda: False  # noqa: E731
    fit_chat(s, _chat(3), 16, cancel=flag)
    assert seen == [flag]
