"""Which models' MTP heads can draft: llama.cpp's rules (rules/mtp.py), read from GGUF
headers written here (library/gguf/mtp.py), and the engine's refusal of a build that
lacks the hidden-state calls."""

import ctypes
from dataclasses import replace

import pytest

from mtp_gguf import MtpSpec, write_mtp_model, write_step35_model
from specdesk.errors import ModelFileError, SpecDeskError
from specdesk.library.gguf import read_gguf
from specdesk.library.gguf.mtp import check_mtp, mtp_heads
from specdesk.rules import mtp as rules


def test_the_rules_follow_llama_cpps_mtp_graphs():
    assert rules.mtp_support("glm4moe", 1, 47).usable
    assert rules.mtp_support("glm4moe", 2, 48).problem == rules.TOO_MANY  # GGML_ASSERT(n_layer_nextn == 1)
    s = rules.mtp_support("step35", 3, 48)
    assert s.usable and s.chained
    assert rules.mtp_support("qwen35", 1, 33).problem == rules.RECURRENT  # llama.cpp #20039
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
