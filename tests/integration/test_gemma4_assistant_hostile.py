"""Hostile Gemma 4 pairs: none aborts.

Copies of the synthetic gemma4 target and its gemma4-assistant (tools/synth/) with their
metadata or tensors edited: every change from a list of the ones llama.cpp's loader,
memory and graph read (widths, layer counts and kinds, head sizes and counts, rotary
dimensions, windows, the assistant's NextN count, its projections), alone and in seeded
random combinations. Each pair goes through what SpecDesk does with a target and a draft
file (validation, the pair's fit, the load, a few drafted tokens), in a subprocess
(tests/data/gguf/assistant_pair_worker.py) so that an abort is seen as one. Every pair
must be refused in one line or run; none may crash or hang; a refusal of a misfit comes
before llama.cpp sees the pair; and a pair that runs gives target alone's tokens.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from gguf import GGUFValueType as VT

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "gguf"))
from head_pair_worker import CRASHED, ERROR, TIMEOUT, run_pairs  # noqa: E402
from isolated import EXITED  # noqa: E402
from synth.gemma4_assistant import write_pair  # noqa: E402
from synth.tiny_llama import rebuild_gguf  # noqa: E402

H, T = "gemma4-assistant.", "gemma4."
U32 = VT.UINT32


def bools(*xs):
    return (VT.ARRAY, (VT.BOOL, list(xs)))


#: (which file, key, new value or None to delete)
EDITS = [
    ("head", H + "embedding_length_out", (U32, v)) for v in (0, 32, 96, 2**31)
] + [
    ("head", H + "nextn_predict_layers", (U32, v)) for v in (0, 1, 3)
] + [
    ("head", H + "nextn_predict_layers", None),
    ("head", H + "embedding_length_out", None),
    ("head", H + "attention.sliding_window_pattern", None),
    ("head", H + "attention.sliding_window_pattern", bools(False, False)),
    ("head", H + "attention.sliding_window_pattern", bools(True, True)),
    ("head", H + "attention.sliding_window_pattern", bools(False, True)),
    ("head", H + "attention.sliding_window_pattern", bools(True)),
    ("head", H + "attention.sliding_window_pattern", bools(*[True] * 600)),
    ("head", H + "attention.sliding_window_pattern", (VT.ARRAY, (VT.FLOAT32, [1.0, 0.0]))),
] + [
    ("head", H + key, (U32, v)) for key, vs in {
        "block_count": (0, 1, 3, 513),
        "embedding_length": (0, 16, 64),
        "feed_forward_length": (0, 1),
        "attention.head_count": (0, 3, 8),
        "attention.head_count_kv": (0, 1, 3, 4),
        "attention.key_length": (0, 16, 64, 2**31),
        "attention.value_length": (16,),
        "attention.key_length_swa": (0, 8, 32),
        "attention.value_length_swa": (8,),
        "rope.dimension_count": (0, 31, 64),
        "rope.dimension_count_swa": (15, 32),
        "attention.sliding_window": (0, 8, 2**31 - 1),
    }.items() for v in vs
] + [
    ("target", T + "attention.sliding_window_pattern", bools(False, False)),
    ("target", T + "attention.sliding_window_pattern", bools(True, True)),
    ("target", T + "attention.sliding_window_pattern", bools(False, True)),
] + [
    ("target", T + key, (U32, v)) for key, vs in {
        "attention.shared_kv_layers": (1, 2, 5),
        "rope.dimension_count_swa": (15, 32),
        "rope.dimension_count": (48,),
        "attention.key_length_swa": (32,),
        "attention.sliding_window": (0, 4),
        "embedding_length": (32,),
    }.items() for v in vs
]
#: (which file, tensor, new shape or None to drop it)
TENSOR_EDITS = [
    ("head", "nextn.pre_projection.weight", None),
    ("head", "nextn.pre_projection.weight", (96, 32)),
    ("head", "nextn.post_projection.weight", (32, 32)),
    ("head", "rope_freqs.weight", None),
    ("head", "blk.1.attn_q.weight", (32, 64)),
    ("target", "rope_freqs.weight", (4,)),
]
N_RANDOM = 40
SEED = 20261205


def _mutate(src: Path, dst: Path, kv: dict, tensors: dict) -> Path:
    def tensor_map(t):
        if t.name not in tensors:
            return t.name, t.shape, t.ggml_type
        shape = tensors[t.name]
        return None if shape is None else (t.name, shape, t.ggml_type)

    return rebuild_gguf(src, dst, set_kv=kv, tensor_map=tensor_map)


@pytest.fixture(scope="module")
def hostile_pairs(tmp_path_factory):
    d = tmp_path_factory.mktemp("gemma4-hostile")
    target, head = write_pair(d)
    rng = random.Random(SEED)
    singles = [[e] for e in EDITS] + [[("tensor",) + e] for e in TENSOR_EDITS]
    combos = [rng.sample(EDITS, rng.randint(2, 3)) for _ in range(N_RANDOM)]
    pairs = []
    for i, edits in enumerate(singles + combos):
        kv = {"head": {}, "target": {}}
        tensors = {"head": {}, "target": {}}
        for e in edits:
            if e[0] == "tensor":
                tensors[e[1]][e[2]] = e[3]
            else:
                kv[e[0]][e[1]] = e[2]
        t = _mutate(target, d / f"t{i}.gguf", kv["target"], tensors["target"]) if kv["target"] or tensors["target"] else target
        h = _mutate(head, d / f"h{i}.gguf", kv["head"], tensors["head"]) if kv["head"] or tensors["head"] else head
        pairs.append((edits, str(t), str(h)))
    return target, head, pairs


def test_no_hostile_pair_aborts_and_every_refusal_is_one_line(hostile_pairs, capsys):
    target, head, pairs = hostile_pairs
    kind = "gemma4-assistant"
    results = run_pairs([(kind, str(target), str(head))] + [(kind, t, h) for _, t, h in pairs])
    assert results[0][0] == "ran-same", results[0]  # the unedited pair drafts
    tally: dict[str, int] = {}
    for (edits, _, _), (outcome, message) in zip(pairs, results[1:]):
        tally[outcome] = tally.get(outcome, 0) + 1
        assert outcome not in (CRASHED, TIMEOUT, EXITED, ERROR), f"{outcome} on {edits}: {message}"
        assert outcome != "ran-different", f"a head that ran changed target alone's answer: {edits}"
        assert "\n" not in message and "Traceback" not in message, (edits, message)
    with capsys.disabled():
        print(f"\n{len(pairs)} hostile pairs: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    # validation and the fit check answer most of them before llama.cpp sees the files
    assert tally.get("refused", 0) >= len(pairs) // 2 and tally.get("ran-same", 0) >= 1, tally


MISREADS = [H + k for k in ("embedding_length_out", "attention.head_count_kv", "attention.key_length_swa",
                            "attention.sliding_window")]


@pytest.mark.parametrize("edit", [e for e in EDITS if e[1] in MISREADS and e[2] is not None])
def test_a_head_that_misreads_the_targets_cache_is_refused_before_llama_cpp(hostile_pairs, edit):
    """The edits that make the assistant read the target's cache or states at another
    width, head count, head size or window: SpecDesk's own checks say no."""
    target, head, pairs = hostile_pairs
    (_, _, h), = [(e, t, h) for e, t, h in pairs if e == [edit]]
    from specdesk.errors import SpecDeskError
    from specdesk.session.core import check_head, check_model_file

    with pytest.raises(SpecDeskError) as e:
        check_head(check_model_file(Path(target)), check_model_file(Path(h)))
    assert "\n" not in str(e.value)
