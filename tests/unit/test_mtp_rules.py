"""Which models' MTP heads can draft: llama.cpp's rules (rules/mtp.py), read from GGUF
headers written here (library/gguf/mtp.py), and the engine's refusal of a build that
lacks the hidden-state calls."""

import ctypes
from dataclasses import replace

import pytest

from synth.mtp import MtpSpec, write_mtp_model, write_step35_model
from specdesk.errors import ModelFileError, SpecDeskError
from specdesk.library.gguf import read_gguf
from specdesk.library.gguf.mtp import check_mtp, mtp_heads
from specdesk.rules import mtp as rules


def test_the_rules_follow_llama_cpps_mtp_graphs():
    assert rules.mtp_support("glm4moe", 1, 47).usable
    assert rules.mtp_support("glm4moe", 2, 48).problem == rules.TOO_MANY  # GGML_ASSERT(n_layer_nextn == 1)
    s = rules.mtp_support("step35", 3, 48)
    assert s.usable and s.chained
    assert rules.mtp_support("qwen35", 1, 33).usable  # its hybrid trunk rolls back (engine.rollback)
    assert rules.mtp_support("qwen35", 2, 34).problem == rules.TOO_MANY  # graph_mtp: n_layer_nextn == 1
    assert rules.mtp_support("qwen35moe", 1, 41).problem == rules.RECURRENT  # a trunk SpecDesk does not check
    assert rules.mtp_support("glm4", 1, 41).problem == rules.UNSUPPORTED  # heads kept, no MTP graph
    assert rules.mtp_support("llama", 0, 32).problem == rules.NO_HEADS
    assert rules.mtp_support("glm4moe", 1, 1).problem == rules.NO_TRUNK
    assert list(rules.nextn_blocks(47, 1)) == [46]


def test_the_library_reads_the_heads_from_the_header(tmp_path):
    agree = read_gguf(write_mtp_model(tmp_path / "a.gguf"))
    assert (mtp_heads(agree).heads, mtp_heads(agree).usable) == (1, True)
    assert check_mtp(agree).usable
    none = read_gguf(write_mtp_model(tmp_path / "n.gguf", replace(MtpSpec(), heads="none")))
    assert mtp_heads(none).problem == rules.NO_HEADS
    step = read_gguf(write_step35_model(tmp_path / "s.gguf", heads=3))
    assert check_mtp(step).chained and check_mtp(step).heads == 3


def test_a_head_without_its_tensors_is_refused_in_one_line(tmp_path):
    g = read_gguf(write_mtp_model(tmp_path / "t.gguf", replace(MtpSpec(), heads="none", nextn_key=1)))
    assert mtp_heads(g).usable  # the metadata alone cannot tell
    with pytest.raises(ModelFileError, match=r"no tensor 'blk\.1\.nextn\.eh_proj\.weight'") as e:
        check_mtp(g)
    assert "\n" not in str(e.value)


def test_a_build_without_the_hidden_state_calls_is_refused_in_one_line():
    from specdesk.engine.mtp import nextn_api_of

    with pytest.raises(SpecDeskError, match="does not export llama_set_embeddings_nextn") as e:
        nextn_api_of(ctypes.CDLL(None))  # the process itself: no llama.cpp symbols
    assert "\n" not in str(e.value)


def _has(*names):
    return lambda n: n in names


MOE = ("ffn_gate_inp.weight", "ffn_down_exps.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight")
DENSE = ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")


def test_each_mtp_graph_asks_its_own_feed_forward_of_a_nextn_block():
    """Issue 51, defect 2: what each architecture's graph_mtp asserts (or multiplies by)
    that its loader lets pass; the architectures the tests cannot run (their GGUFs are
    not written here) are held to the table read from src/models/*.cpp."""
    assert set(rules.MTP_GRAPHS) == set(rules.MTP_ARCHITECTURES)
    for arch in ("glm4moe", "deepseek2", "deepseek32", "glm-dsa"):  # GGML_ASSERT(... ffn_gate_inp ...)
        assert "is dense (leading_dense_block_count 48 covers it)" in rules.mtp_block_problem(arch, _has(*MOE), 47, 48)
        assert rules.mtp_block_problem(arch, _has(*MOE), 47, 3) is None
    assert rules.mtp_block_problem("cohere2moe", _has(), 47, 48) is None  # its loader makes every head MoE
    # mimo2: a fused attn_qkv and a dense feed-forward, both optional to its loader
    assert "fused" in rules.mtp_block_problem("mimo2", _has(*DENSE), 48, 0)
    assert "ffn_down.weight" in rules.mtp_block_problem("mimo2", _has("attn_qkv.weight", *DENSE[:2]), 48, 0)
    assert rules.mtp_block_problem("mimo2", _has("attn_qkv.weight", *DENSE), 48, 0) is None
    # step35 and hy_v3: a router picks the experts, else the dense branch; each whole
    for arch in ("step35", "hy_v3"):
        assert rules.mtp_block_problem(arch, _has(*MOE), 45, 0) is None
        assert rules.mtp_block_problem(arch, _has("ffn_gate_inp.weight", "ffn_down_exps.weight",
                                                  "ffn_gate_up_exps.weight"), 45, 0) is None  # fused gate+up
        assert "no ffn_down_exps.weight" in rules.mtp_block_problem(arch, _has(*MOE[:1], *MOE[2:]), 45, 0)
        assert "part of a shared expert" in rules.mtp_block_problem(arch, _has(*MOE, "ffn_up_shexp.weight"), 45, 0)
        assert rules.mtp_block_problem(arch, _has(*DENSE), 45, 0) is None
        assert "dense feed-forward" in rules.mtp_block_problem(arch, _has(*DENSE[1:]), 45, 0)
    assert rules.mtp_block_problem("llama", _has(), 1, 0) is None  # no MTP graph: nothing asked


def test_deepseek2s_mtp_graph_asks_for_latent_attention_and_a_q_lora():
    ok = dict(mla_k=192, mla_v=128, q_lora=1536, temperature=0.0, n_trunk=61, n_vocab=129280)
    assert rules.mtp_model_problem("deepseek2", **ok) is None
    assert "latent attention" in rules.mtp_model_problem("deepseek2", **{**ok, "mla_v": 0})
    assert "no q LoRA rank (it has none)" in rules.mtp_model_problem("deepseek2", **{**ok, "q_lora": 0})
    assert "lite model" in rules.mtp_model_problem("deepseek2", **{**ok, "n_trunk": 27})
    assert "lite model" in rules.mtp_model_problem("deepseek2", **{**ok, "n_trunk": 48, "n_vocab": 128256})
    assert rules.mtp_model_problem("deepseek2", **{**ok, "n_trunk": 48}) is None
    assert "temperature" in rules.mtp_model_problem("deepseek2", **{**ok, "temperature": 0.1})
    assert rules.mtp_model_problem("glm4moe", **{**ok, "mla_k": 0, "q_lora": 0}) is None  # asked of deepseek2 alone


def test_the_issues_dense_head_is_refused_by_the_header_alone(tmp_path):
    g = read_gguf(write_mtp_model(tmp_path / "d.gguf", replace(MtpSpec(), n_dense=3)))
    assert mtp_heads(g).usable  # the metadata alone cannot tell
    with pytest.raises(ModelFileError, match=r"MTP block 2 is dense \(leading_dense_block_count 3 covers it\)") as e:
        check_mtp(g)
    assert "\n" not in str(e.value)
