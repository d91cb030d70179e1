"""The synthetic hybrid models the rollback tests share (tools/synth), and the tools the
exactness tests use on them: prompts, target-alone runs, the conditional distribution of
every emitted token, and a rollback broken on purpose (the controls).

* ``target``: qwen35, 4 layers (delta-net, attention, delta-net, attention) and one MTP
  head that agrees with the trunk; ``random_heads``: the same trunk with a random head;
* ``draft``: qwen35, 2 layers, the same text's rules but 15% of the signs wrong (it
  disagrees after those tokens: rejections, so rollbacks).
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import llama_cpp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from synth.hybrid import HybridSpec, write_hybrid_model  # noqa: E402

from specdesk.session import GenerationConfig  # noqa: E402
from specdesk.speculative.sampling import SamplingParams  # noqa: E402

TARGET = HybridSpec(heads="agree", n_layer=4)
RANDOM_HEADS = HybridSpec(heads="random", n_layer=4)
DRAFT = HybridSpec(n_layer=2, flip=0.15, seed=5)
WORDS = ("the of and to in is that it for was on are as with his they at be this from have or by one had not but what "
         "all were when we there can an your which their said if do will each about how up out them then she many").split()
GREEDY = SamplingParams(temperature=0.0)


def write_models(folder: Path) -> dict[str, Path]:
    return {"target": write_hybrid_model(folder / "target.gguf", TARGET),
            "random_heads": write_hybrid_model(folder / "random-heads.gguf", RANDOM_HEADS),
            "draft": write_hybrid_model(folder / "draft.gguf", DRAFT)}


def prompts(session, n: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [session.raw_prompt(" ".join(rng.choice(WORDS, size=int(rng.integers(3, 12)))), parse_special=False)
            for _ in range(n)]


def run(session, prompt: list[int], config: GenerationConfig) -> tuple[list[int], int, int]:
    """The answer's tokens, and the draft tokens drafted and accepted."""
    g = session.run(prompt, config)
    return g.tokens, g.stats.drafted, g.stats.accepted


def conditionals(ref, prompt: list[int], answer: list[int]) -> np.ndarray:
    """The target's logits for every answer token, from one batch on a fresh context:
    row j is the distribution ``answer[j]`` was drawn from."""
    ref.reset()
    rows = ref.eval(prompt + answer[:-1], all_rows=True)
    return rows[len(prompt) - 1:]


def pit(rows: np.ndarray, tokens: list[int], temperature: float, rng: np.random.Generator) -> np.ndarray:
    """The randomized probability integral transform of each token under its row's
    distribution (tokens ordered by probability): uniform on [0, 1), independent across
    positions, exactly when every token was drawn from its row (Rosenblatt)."""
    z = rows.astype(np.float64) / temperature
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    out = np.empty(len(tokens))
    for j, t in enumerate(tokens):
        order = np.argsort(-p[j], kind="stable")
        rank = int(np.flatnonzero(order == t)[0])
        below = p[j][order[:rank]].sum()
        out[j] = below + rng.random() * p[j][t]
    return out


def skip_restore(ctx) -> None:
    """Break ``ctx``'s rollback as a context that forgot to restore the recurrent state
    would: the attention cache drops the rejected positions, but the recurrent state
    stays the one after them (its position set back). A control: the exactness tests
    must catch it."""
    g = ctx._guard
    exact_sync = g.sync
    flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY

    def sync(merge: bool = False, room: int = 0) -> int:
        if g.phys <= len(ctx.history):
            return exact_sync(merge, room)
        size = llama_cpp.llama_state_seq_get_size_ext(ctx.ptr, 0, flags)
        state = (ctypes_u8 * size)()
        llama_cpp.llama_state_seq_get_data_ext(ctx.ptr, state, size, 0, flags)
        exact_sync(False, 0)  # the exact rollback, its replay decoded now
        # magic, seq id, cell count, then the cell's position: the state after the rejected tokens, put back at n - 1
        struct.pack_into("<i", state, 12, len(ctx.history) - 1)
        assert llama_cpp.llama_state_seq_set_data_ext(ctx.ptr, state, size, 0, flags) == size
        g._last = None
        return 0

    g.sync = sync


ctypes_u8 = llama_cpp.ctypes.c_uint8
