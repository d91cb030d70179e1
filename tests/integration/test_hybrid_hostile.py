"""Hostile qwen35 files: SpecDesk accepts Qwen3.5's hybrid architecture, so every way its
tensors or hyper-parameters can be missing, misshapen or out of range must end in one
line (a refusal before llama.cpp sees the file, or llama.cpp's own clean error), never
an abort.

The base is the synthetic qwen35 target with an MTP head (tools/synth/hybrid.py). Each
case rewrites it with one hostile change; a random fuzz of its header adds more. Every
file runs, in a child process, through what ``specdesk generate`` does
(tests/data/gguf/specdesk_run_worker.py: validate, load with the heads where they can
draft, generate with them, else with lookups): the child must never die. The cases
marked ``aborts`` are the rules that stand between llama.cpp and an abort: unguarded
(the engine on the file, no check), llama.cpp dies on each, which shows the rule is
needed.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as VT

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "gguf"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from specdesk_run_worker import CRASHED, FAILED, RAN, REFUSED, TIMEOUT, run_many  # noqa: E402
from synth.hybrid import HybridSpec, write_hybrid_model  # noqa: E402
from synth.mutations import apply_mutations, header_fields, random_ops  # noqa: E402
from synth.tiny_llama import rebuild_gguf  # noqa: E402

from specdesk.errors import ModelFileError  # noqa: E402
from specdesk.library.gguf import clear_memo, read_gguf, validate_gguf  # noqa: E402

A = "qwen35."


@dataclass(frozen=True)
class Case:
    name: str
    kv: dict | None = None  # rebuild_gguf's set_kv
    drop: str | None = None  # a tensor to drop
    reshape: tuple[str, tuple[int, ...]] | None = None  # a tensor's new dims
    retype: tuple[str, int] | None = None
    extra: tuple[str, tuple[int, ...]] | None = None
    spec: HybridSpec | None = None  # a file written whole by the writer instead of a rewrite of the base
    refused: str | None = None  # a part of the one-line refusal expected from validation
    aborts: bool = False  # unguarded, llama.cpp dies on it


def u32(v: int):
    return (VT.UINT32, v)


def ints(vals: list[int]):
    return (VT.ARRAY, (VT.INT32, vals))


CASES = [
    Case("conv kernel 0", kv={A + "ssm.conv_kernel": u32(0)}, refused="conv_kernel 0"),
    Case("conv kernel 1", kv={A + "ssm.conv_kernel": u32(1)}, refused="kernel of 2 or more"),
    Case("state size 0", kv={A + "ssm.state_size": u32(0)}, refused="state_size 0"),
    Case("no value heads", kv={A + "ssm.time_step_rank": u32(0)}, refused="time_step_rank 0"),
    Case("no key groups", kv={A + "ssm.group_count": u32(0)}, refused="group_count 0"),
    Case("groups do not divide heads", kv={A + "ssm.group_count": u32(3)}, refused="does not divide"),
    Case("inner size off", kv={A + "ssm.inner_size": u32(17)}, refused="inner_size is 17", aborts=True),
    Case("no conv kernel key", kv={A + "ssm.conv_kernel": None}, refused="missing metadata key 'qwen35.ssm.conv_kernel'"),
    Case("attention interval 0", kv={A + "full_attention_interval": u32(0)}, refused="is 0", aborts=True),
    Case("no attention layer", kv={A + "full_attention_interval": u32(100)}, refused="no full-attention layer"),
    Case("only delta-net layers", spec=HybridSpec(n_layer=1), refused="no full-attention layer", aborts=True),
    Case("interval as int32", kv={A + "full_attention_interval": (VT.INT32, 2)}, refused="llama.cpp needs a uint32"),
    Case("recurrent layers too short", kv={A + "attention.recurrent_layers": ints([1, 0])},
         refused="one value per block"),
    Case("rope sections all 0", kv={A + "rope.dimension_sections": ints([0, 0, 0, 0])}, refused="one of the first three",
         aborts=True),
    Case("rope sections too wide", kv={A + "rope.dimension_sections": ints([100, 0, 0, 0])},
         refused="at most the rotated", aborts=True),
    Case("rope sections negative", kv={A + "rope.dimension_sections": ints([-4, 8, 4, 0])}, refused="0 or more"),
    Case("rope sections 5", kv={A + "rope.dimension_sections": ints([2, 2, 2, 2, 0])}, refused="at most 4"),
    Case("no rope sections", kv={A + "rope.dimension_sections": None}, refused="rope.dimension_sections"),
    Case("odd rope dims", kv={A + "rope.dimension_count": u32(15)}, refused="even count", aborts=True),
    Case("rope dims past the head", kv={A + "rope.dimension_count": u32(64)}, refused="even count", aborts=True),
    Case("key and value lengths differ", kv={A + "attention.key_length": u32(16)}, refused="differs from value length"),
    Case("nextn past the blocks", kv={A + "nextn_predict_layers": u32(9)}, refused="more than the 5 blocks", aborts=True),
    Case("every block a head", kv={A + "nextn_predict_layers": u32(5)}, refused="no trunk"),
    Case("no qkv projection", drop="blk.0.attn_qkv.weight", refused="missing tensor 'blk.0.attn_qkv.weight'", aborts=True),
    Case("no output gate", drop="blk.0.attn_gate.weight", refused="missing tensor 'blk.0.attn_gate.weight'", aborts=True),
    Case("no decay", drop="blk.2.ssm_a", refused="missing tensor 'blk.2.ssm_a'"),
    Case("no q norm", drop="blk.1.attn_q_norm.weight", refused="missing tensor 'blk.1.attn_q_norm.weight'"),
    Case("heads only", drop="blk.0.attn_norm.weight", refused="'blk.0.attn_norm.weight'"),
    # llama.cpp wants a declared NextN block's tensors even when it does not load the heads
    Case("a head without eh_proj", drop="blk.4.nextn.eh_proj.weight", refused="missing tensor 'blk.4.nextn.eh_proj.weight'"),
    Case("a head without its ffn", drop="blk.4.ffn_up.weight", refused="missing tensor 'blk.4.ffn_up.weight'"),
    Case("heads undeclared", kv={A + "nextn_predict_layers": u32(0)}, refused="missing tensor 'blk.4.attn_qkv.weight'"),
    Case("conv kernel misshapen", reshape=("blk.0.ssm_conv1d.weight", (5, 48)), refused="has shape [5, 48]"),
    Case("state out misshapen", reshape=("blk.0.ssm_out.weight", (8, 512)), refused="ssm_out.weight' has shape"),
    Case("query misshapen", reshape=("blk.1.attn_q.weight", (512, 64)), refused="attn_q.weight' has shape"),
    Case("eh_proj misshapen", reshape=("blk.4.nextn.eh_proj.weight", (512, 512)), refused="eh_proj.weight' has shape"),
    Case("an integer weight", retype=("blk.0.ssm_out.weight", int(Q.I32)), refused="not a weight type", aborts=True),
    Case("an unused tensor", extra=("blk.0.ssm_extra.weight", (4,)), refused="unexpected tensor"),
]


def _build(base: Path, dst: Path, case: Case) -> Path:
    if case.spec is not None:
        return write_hybrid_model(dst, case.spec)
    def tensor_map(t):
        if t.name == case.drop:
            return None
        if case.reshape and t.name == case.reshape[0]:
            return t.name, case.reshape[1], t.ggml_type
        if case.retype and t.name == case.retype[0]:
            return t.name, t.shape, case.retype[1]
        return t.name, t.shape, t.ggml_type

    extra = [(case.extra[0], case.extra[1], int(Q.F32))] if case.extra else []
    return rebuild_gguf(base, dst, set_kv=case.kv, tensor_map=tensor_map, extra_tensors=extra)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return write_hybrid_model(tmp_path_factory.mktemp("hostile") / "base.gguf", HybridSpec(heads="agree"))


@pytest.fixture(scope="module")
def built(base, tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cases")
    return {c.name: _build(base, d / f"{i:02d}.gguf", c) for i, c in enumerate(CASES)}


def test_the_base_and_its_rewrite_run(base, tmp_path):
    control = rebuild_gguf(base, tmp_path / "control.gguf")
    status = run_many([base, control])
    assert status[str(base)] == (RAN, "mtp") and status[str(control)] == (RAN, "mtp"), status


def test_every_hostile_case_is_refused_in_one_line_or_runs(built):
    clear_memo()
    problems = []
    for case in CASES:
        path = built[case.name]
        try:
            validate_gguf(path)
            why = None
        except ModelFileError as e:
            why = str(e)
        if case.refused is None:
            ok = why is None
        else:
            ok = why is not None and case.refused in why and "\n" not in why and why.startswith(path.name)
        if not ok:
            problems.append(f"{case.name}: {why!r}")
    assert not problems, "\n".join(problems)
    status = run_many(list(built.values()))
    bad = {name: status[str(p)] for name, p in built.items() if status[str(p)][0] not in (RAN, REFUSED, FAILED)
           or "\\n" in status[str(p)][1]}
    assert not bad, bad


def test_unguarded_llama_cpp_aborts_where_a_rule_stands(built):
    """Each rule marked ``aborts`` is needed: the engine on the file with no check, and
    llama.cpp dies (an assert, a division by zero, a null tensor)."""
    cases = [c for c in CASES if c.aborts]
    status = run_many([built[c.name] for c in cases], checked=False, timeout=120)
    survived = {c.name: status[str(built[c.name])] for c in cases if status[str(built[c.name])][0] not in (CRASHED, TIMEOUT)}
    assert not survived, survived


def test_a_fuzzed_header_is_refused_in_one_line_or_runs(base, tmp_path):
    data = base.read_bytes()
    fields = header_fields(data, read_gguf(base))
    rng = random.Random(4848)
    paths = []
    for i in range(48):
        p = tmp_path / f"fuzz{i:02d}.gguf"
        p.write_bytes(apply_mutations(data, random_ops(rng, data, fields)))
        paths.append(p)
    status = run_many(paths)
    bad = {p.name: status[str(p)] for p in paths if status[str(p)][0] not in (RAN, REFUSED, FAILED) or "\\n" in status[str(p)][1]}
    assert not bad, bad
