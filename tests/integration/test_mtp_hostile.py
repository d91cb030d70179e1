"""Hostile GGUF files with MTP heads (issue 51, defect 2), run as SpecDesk runs them.

llama.cpp's MTP graphs assert what its loaders let pass (a glm4moe NextN block that
``leading_dense_block_count`` makes dense loaded, then ``GGML_ASSERT(layer.ffn_gate_inp
&& "MTP block missing ffn_gate_inp")`` aborted the CLI, the server or the app). The
cases are written from two tiny bases of tools/synth/mtp.py, a glm4moe with one NextN
block (block 2) and a step35 with two chained heads (blocks 2 and 3):

- heads missing: each tensor of a NextN block left out, in turn; and the trunk's
  ``blk.0.attn_norm``, whose absence makes llama.cpp take a file for heads alone and
  stop checking the trunk's tensors;
- extra: an unknown tensor in a NextN block, a NextN tensor in a trunk block, dense
  tensors in a mixture-of-experts block, a router without experts;
- dense where MoE is asserted: the NextN block inside ``leading_dense_block_count``,
  written dense (the issue's file) or as experts;
- counts out of range: ``nextn_predict_layers`` from 0 to past ``block_count``,
  ``leading_dense_block_count`` and the expert counts at their edges;
- shapes: a NextN projection transposed, heads of unequal key and value lengths.

Every file must be refused in one line (by SpecDesk, or by llama.cpp's loader through
SpecDesk) or load and generate: with its heads where SpecDesk accepts them, as a trunk
where it refuses only the heads. None may abort. All files run in one subprocess
(tests/data/gguf/mtp_run_worker.py) that attributes a death to the file it died on.

Then the other half of the agreement, as in test_gguf_llama_agreement.py: llama.cpp
alone, without SpecDesk's checks, does abort on the files whose heads SpecDesk refuses
for what the MTP graphs assert, so the checks are needed, not stricter than llama.cpp.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as VT

from synth.mtp import MtpSpec, write_mtp_model, write_step35_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "gguf"))
from mtp_run_worker import CRASHED, MTP, REFUSED, TRUNK, run_many  # noqa: E402
from synth.tiny_llama import rebuild_gguf  # noqa: E402

pytest.importorskip("llama_cpp")

#: llama.cpp's loader refused it (through SpecDesk: one line naming the file)
BY_LLAMA = "llama.cpp could not load this model"


@dataclass
class Case:
    base: str  # "glm" or "step"
    expect: str  # MTP, TRUNK or REFUSED
    says: str = ""  # a phrase of the message
    drop: tuple[str, ...] = ()  # tensors left out
    kv: dict = field(default_factory=dict)  # metadata edits (rebuild_gguf's set_kv)
    extra: tuple = ()  # (name, dims, ggml type) added with zero data
    shapes: dict = field(default_factory=dict)  # tensor name -> new dims
    spec: MtpSpec | None = None  # written afresh from this spec instead


def _u32(n: int) -> tuple:
    return (VT.UINT32, n)


F16, F32 = int(Q.F16), int(Q.F32)
NEXTN_GLM = "blk.2."  # the glm4moe base's NextN block
CASES: dict[str, Case] = {
    # -- heads missing (glm4moe: the NextN block's own tensors, and the block's layer) --
    "glm no eh_proj": Case("glm", TRUNK, "no tensor 'blk.2.nextn.eh_proj.weight'", drop=("blk.2.nextn.eh_proj.weight",)),
    "glm no enorm": Case("glm", REFUSED, BY_LLAMA, drop=("blk.2.nextn.enorm.weight",)),
    "glm no hnorm": Case("glm", REFUSED, BY_LLAMA, drop=("blk.2.nextn.hnorm.weight",)),
    "glm no shared_head_norm": Case("glm", MTP, drop=("blk.2.nextn.shared_head_norm.weight",)),  # optional
    "glm no router": Case("glm", REFUSED, BY_LLAMA, drop=("blk.2.ffn_gate_inp.weight",)),
    "glm no expert bias": Case("glm", REFUSED, BY_LLAMA, drop=("blk.2.exp_probs_b.bias",)),
    "glm no down experts": Case("glm", REFUSED, BY_LLAMA, drop=("blk.2.ffn_down_exps.weight",)),
    "glm no shared expert up": Case("glm", REFUSED, BY_LLAMA, drop=("blk.2.ffn_up_shexp.weight",)),
    "glm no attn_norm": Case("glm", REFUSED, BY_LLAMA, drop=("blk.2.attn_norm.weight",)),
    "glm no q bias": Case("glm", MTP, drop=("blk.2.attn_q.bias",)),  # optional
    "glm no eh_proj, enorm, hnorm": Case("glm", TRUNK, "no tensor 'blk.2.nextn.eh_proj.weight'",
                                         drop=("blk.2.nextn.eh_proj.weight", "blk.2.nextn.enorm.weight",
                                               "blk.2.nextn.hnorm.weight")),
    "glm no trunk probe": Case("glm", REFUSED, "file of heads alone", drop=("blk.0.attn_norm.weight",)),
    "glm no trunk probe, no q": Case("glm", REFUSED, "file of heads alone",
                                     drop=("blk.0.attn_norm.weight", "blk.0.attn_q.weight")),
    "glm no trunk probe, no router": Case("glm", REFUSED, "file of heads alone",
                                          drop=("blk.0.attn_norm.weight", "blk.1.ffn_gate_inp.weight")),
    # -- heads missing (step35: the second chained head) --
    "step no second eh_proj": Case("step", REFUSED, BY_LLAMA, drop=("blk.3.nextn.eh_proj.weight",)),
    "step no first eh_proj": Case("step", TRUNK, "no tensor 'blk.2.nextn.eh_proj.weight'",
                                  drop=("blk.2.nextn.eh_proj.weight",)),
    "step no ffn_down": Case("step", TRUNK, "whole of a dense feed-forward", drop=("blk.3.ffn_down.weight",)),
    "step no ffn_gate": Case("step", TRUNK, "whole of a dense feed-forward", drop=("blk.3.ffn_gate.weight",)),
    "step no ffn": Case("step", TRUNK, "whole of a dense feed-forward",
                        drop=("blk.3.ffn_gate.weight", "blk.3.ffn_up.weight", "blk.3.ffn_down.weight")),
    "step no attn_q": Case("step", REFUSED, BY_LLAMA, drop=("blk.3.attn_q.weight",)),
    "step no shared_head_norm": Case("step", MTP, drop=("blk.3.nextn.shared_head_norm.weight",)),
    "step no trunk probe": Case("step", REFUSED, "file of heads alone",
                                drop=("blk.0.attn_norm.weight", "blk.1.ffn_down.weight")),
    # -- extra --
    "glm unknown NextN tensor": Case("glm", REFUSED, BY_LLAMA, extra=(("blk.2.nextn.extra.weight", (64,), F32),)),
    "glm NextN tensor in the trunk": Case("glm", REFUSED, BY_LLAMA,
                                          extra=(("blk.1.nextn.eh_proj.weight", (128, 64), F16),)),
    "glm dense tensor in the MoE head": Case("glm", REFUSED, BY_LLAMA, extra=(("blk.2.ffn_gate.weight", (64, 128), F16),)),
    "glm a third block of heads": Case("glm", REFUSED, "does not belong to any of the 3 layers",
                                       extra=(("blk.3.nextn.eh_proj.weight", (128, 64), F16),)),
    "step router without experts": Case("step", REFUSED, BY_LLAMA, extra=(("blk.3.ffn_gate_inp.weight", (64, 4), F32),)),
    "step half a shared expert": Case("step", REFUSED, BY_LLAMA, extra=(("blk.3.ffn_up_shexp.weight", (64, 32), F16),)),
    # -- dense where MoE is asserted --
    "glm dense head (the issue's file)": Case("glm", TRUNK, "is dense (leading_dense_block_count 3 covers it)",
                                              spec=replace(MtpSpec(), n_dense=3)),
    "glm all dense": Case("glm", TRUNK, "is dense (leading_dense_block_count 4 covers it)",
                          spec=replace(MtpSpec(), n_dense=4)),
    "glm MoE head declared dense": Case("glm", REFUSED, BY_LLAMA, kv={"glm4moe.leading_dense_block_count": _u32(3)}),
    "glm dense count past everything": Case("glm", REFUSED, BY_LLAMA,
                                            kv={"glm4moe.leading_dense_block_count": _u32(2**32 - 1)}),
    # -- counts out of range --
    "glm no heads declared": Case("glm", REFUSED, BY_LLAMA, kv={"glm4moe.nextn_predict_layers": _u32(0)}),
    "glm two heads": Case("glm", TRUNK, "takes one head", kv={"glm4moe.nextn_predict_layers": _u32(2)}),
    "glm heads = blocks": Case("glm", REFUSED, "no trunk", kv={"glm4moe.nextn_predict_layers": _u32(3)}),
    "glm heads > blocks": Case("glm", REFUSED, "more than the 3 blocks", kv={"glm4moe.nextn_predict_layers": _u32(4)}),
    "glm heads 2^32-1": Case("glm", REFUSED, "more than the 3 blocks",
                             kv={"glm4moe.nextn_predict_layers": _u32(2**32 - 1)}),
    "glm heads as int32": Case("glm", REFUSED, "llama.cpp needs a uint32",
                               kv={"glm4moe.nextn_predict_layers": (VT.INT32, 1)}),
    "glm no experts": Case("glm", REFUSED, "is 0; glm4moe is a mixture of experts",
                           kv={"glm4moe.expert_count": _u32(0), "glm4moe.expert_used_count": _u32(0)}),
    "glm no shared expert count": Case("glm", REFUSED, BY_LLAMA, kv={"glm4moe.expert_shared_count": _u32(0)}),
    "step one head of two": Case("step", REFUSED, BY_LLAMA, kv={"step35.nextn_predict_layers": _u32(1)}),
    "step three heads of two": Case("step", TRUNK, "no tensor 'blk.1.nextn.eh_proj.weight'",
                                    kv={"step35.nextn_predict_layers": _u32(3)}),
    "step heads = blocks": Case("step", REFUSED, "no trunk", kv={"step35.nextn_predict_layers": _u32(4)}),
    # -- shapes --
    # (SpecDesk refuses the heads; llama.cpp checks a shape even of heads it skips)
    "glm eh_proj transposed": Case("glm", REFUSED, BY_LLAMA, shapes={"blk.2.nextn.eh_proj.weight": (64, 128)}),
    "glm short enorm": Case("glm", REFUSED, BY_LLAMA, shapes={"blk.2.nextn.enorm.weight": (32,)}),
    "glm short keys": Case("glm", REFUSED, "key heads (8) and value heads (16) differ", kv={
        "glm4moe.attention.key_length": _u32(8), "glm4moe.attention.value_length": _u32(16)}, shapes={
        f"blk.{i}.{t}": s for i in range(3) for t, s in (("attn_q.weight", (64, 32)), ("attn_k.weight", (64, 16)),
                                                         ("attn_q.bias", (32,)), ("attn_k.bias", (16,)))}),
}


def _write(case: Case, name: str, bases: dict[str, Path], folder: Path) -> Path:
    path = folder / (name.replace(" ", "-").replace(",", "").replace("'", "").replace("^", "") + ".gguf")
    if case.spec is not None:
        return write_mtp_model(path, case.spec)

    def tensor(t):
        if t.name in case.drop:
            return None
        return t.name, case.shapes.get(t.name, t.shape), t.ggml_type

    return rebuild_gguf(bases[case.base], path, set_kv=dict(case.kv), tensor_map=tensor, extra_tensors=list(case.extra))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("mtp-hostile")
    bases = {"glm": write_mtp_model(folder / "base-glm.gguf"),
             "step": write_step35_model(folder / "base-step.gguf", heads=2)}
    return {name: _write(case, name, bases, folder) for name, case in CASES.items()} | {
        "glm as written": bases["glm"], "step as written": bases["step"]}


@pytest.fixture(scope="module")
def outcomes(files) -> dict[str, tuple[str, str]]:
    status = run_many(list(files.values()))
    return {name: status[str(path)] for name, path in files.items()}


def test_the_bases_draft_with_their_heads(outcomes):
    assert outcomes["glm as written"][0] == MTP and outcomes["step as written"][0] == MTP, outcomes


@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_mtp_file_is_refused_in_one_line_or_runs(name, files, outcomes):
    outcome, message = outcomes[name]
    case = CASES[name]
    assert outcome in (MTP, TRUNK, REFUSED), f"{name}: {outcome} {message}"  # never crashed, hung or a traceback
    if outcome != MTP:
        assert message and "\n" not in message and files[name].name in message, message
    assert outcome == case.expect and case.says in message, (outcome, message)
    if BY_LLAMA in message:  # the loader's own reason, not its wrapper's "failed to load model"
        assert not message.endswith("failed to load model"), message


#: Cases whose heads SpecDesk refuses for what the MTP graphs (or the trunk-less loader)
#: assert, and on which llama.cpp alone aborts: the checks are needed.
LLAMA_ABORTS = ["glm dense head (the issue's file)", "glm two heads", "glm heads = blocks", "glm no trunk probe, no q",
                "step no ffn_down", "step three heads of two"]


def test_llama_cpp_alone_aborts_where_specdesk_refuses(files):
    status = run_many([files[name] for name in LLAMA_ABORTS], mode="raw", confirm=False)
    survived = [name for name in LLAMA_ABORTS if status[str(files[name])][0] != CRASHED]
    assert not survived, f"llama.cpp no longer aborts on these, so SpecDesk's check is stricter than needed: {survived}"
