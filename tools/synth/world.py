"""The rules of the synthetic models' text, shared by a target and its drafts: what makes
their next token depend on more than the last one, in a form that a delta-net layer, a
sliding-window layer and an MTP head can each compute exactly.

Every token ``x`` has a sign ``sign[x]`` (+1 or -1) and two successors, ``up[x]`` among the
"plus" tokens and ``down[x]`` among the "minus" ones. The text's next token after
``... x_prev x`` is ``up[x]`` when the model's *context signal* is positive and
``down[x]`` when it is negative; the signal is what a model's sequence layer computes from
the tokens before ``x`` (the delta-net's: mostly ``sign[x_prev]``; the sliding window's:
the signs in the window). A layer that reads the wrong tokens (a recurrent state rolled
back wrongly, a window that lost a token) gets the signal wrong about half the time.

The embedding puts each of these facts on its own axis, so that a layer reads them with a
single weight (:data:`BIAS`: a constant; :data:`SIGN`: ``a * sign[x]``; :data:`SIGNAL`:
empty in the embedding, where the sequence layer writes its signal; from :data:`IDENT`
on, one axis per token, so the successor logits are exact). Every row has the same
length, so llama.cpp's RMS norms scale them all alike.

The LM head gives ``up[x]`` and ``down[x]`` ``margin`` logits (times the norm's scale)
and adds ``tie * signal`` to every plus token and subtracts it from every minus token:
the signal's sign picks the successor; its size sets how sure the model is (at T=1,
``up`` over ``down`` by ``exp(2 * tie * signal)``). Control tokens (end of text among them)
are never predicted, so nothing ends an answer early.

A draft that disagrees: ``flip`` is the share of tokens whose sign its embedding gets
wrong, so it picks the other successor after them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BIAS, SIGN, SIGNAL, IDENT = 0, 1, 2, 3
BIAS_VALUE = 4.0  # the constant on BIAS
SIGN_VALUE = 4.0  # |the value on SIGN|


@dataclass(frozen=True)
class World:
    sign: np.ndarray  # (n_vocab,) +1 / -1
    up: np.ndarray  # (n_vocab,) a plus token
    down: np.ndarray  # (n_vocab,) a minus token
    plus: np.ndarray  # (n_vocab,) bool
    control: np.ndarray  # (n_vocab,) bool

    @property
    def n_vocab(self) -> int:
        return len(self.sign)

    def next_token(self, x_prev_sign: float, x: int) -> int:
        """The greedy successor of ``x`` under a signal of this sign (0: a tie, ``up``)."""
        return int(self.up[x] if x_prev_sign >= 0 else self.down[x])


def make_world(n_vocab: int, control: list[int], seed: int) -> World:
    rng = np.random.default_rng(seed)
    is_control = np.zeros(n_vocab, bool)
    is_control[control] = True
    ordinary = np.flatnonzero(~is_control)
    order = rng.permutation(ordinary)
    plus_ids, minus_ids = order[: len(order) // 2], order[len(order) // 2:]
    plus = np.zeros(n_vocab, bool)
    plus[plus_ids] = True

    def successors(pool: np.ndarray) -> np.ndarray:  # every token gets one; each of pool about equally often
        return rng.permutation(np.resize(rng.permutation(pool), n_vocab))

    sign = np.where(rng.random(n_vocab) < 0.5, 1.0, -1.0)
    return World(sign=sign, up=successors(plus_ids), down=successors(minus_ids), plus=plus, control=is_control)


def model_signs(world: World, flip: float, seed: int) -> np.ndarray:
    """The signs one model's embedding carries: the world's, with a ``flip`` share of tokens wrong."""
    if flip <= 0:
        return world.sign.copy()
    rng = np.random.default_rng([seed, 7])
    wrong = rng.random(world.n_vocab) < flip
    return np.where(wrong, -world.sign, world.sign)


def embedding(world: World, n_embd: int, signs: np.ndarray) -> np.ndarray:
    """(n_vocab, n_embd) rows of squared length n_embd (mean square 1: RMS norm keeps them)."""
    n = world.n_vocab
    if n_embd < IDENT + n:
        raise ValueError(f"the embedding needs {IDENT + n} dimensions for {n} tokens, not {n_embd}")
    e = np.zeros((n, n_embd), np.float32)
    e[:, BIAS] = BIAS_VALUE
    e[:, SIGN] = SIGN_VALUE * signs
    rho = np.sqrt(n_embd - BIAS_VALUE**2 - SIGN_VALUE**2)
    e[np.arange(n), IDENT + np.arange(n)] = rho
    return e


def lm_head(world: World, n_embd: int, margin: float, tie: float) -> np.ndarray:
    """(n_vocab, n_embd): a token's successors score ``margin``, the signal ``+-tie`` per unit."""
    n = world.n_vocab
    rho = np.sqrt(n_embd - BIAS_VALUE**2 - SIGN_VALUE**2)
    out = np.zeros((n, n_embd), np.float32)
    src = np.arange(n)
    np.add.at(out, (world.up, IDENT + src), margin / rho)
    np.add.at(out, (world.down, IDENT + src), margin / rho)
    out[:, SIGNAL] = np.where(world.plus, tie, -tie)
    out[world.control] = 0.0
    return out
