"""Gemma 4 targets and assistants read from their headers alone (no llama.cpp): what
validation refuses of each file, whether an assistant fits a target, and what the library,
the draft picker and ``models drafts`` say of an assistant."""

import sys
from pathlib import Path

import pytest
from gguf import GGUFValueType as VT

from specdesk.errors import ModelFileError
from specdesk.library.gguf import inspect_gguf, validate_gguf
from specdesk.library.gguf.gemma4 import pair_problem
from specdesk.library.pairing import check_pair, drafts_for
from specdesk.session.source_table import file_rows, head_file

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "gguf"))
from synth.gemma4_assistant import PairSpec, write_pair, write_target  # noqa: E402
from synth.tiny_llama import rebuild_gguf  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return write_pair(tmp_path_factory.mktemp("g4"))



@pytest.mark.parametrize("which,key,value,needle", [
    ("target", "gemma4.attention.sliding_window_pattern", (VT.ARRAY, (VT.BOOL, [False, False])), "no layer of its 2 slides"),
    ("target", "gemma4.attention.shared_kv_layers", (VT.UINT32, 1), "at least two have their own"),
    ("target", "gemma4.rope.dimension_count_swa", (VT.UINT32, 32), "rotate 32 dimensions of heads of 16"),
    ("target", "gemma4.rope.dimension_count", (VT.UINT32, 31), "an even number"),
    ("target", "gemma4.attention.sliding_window_pattern", None, "needs its sliding-window pattern"),
    ("head", "gemma4-assistant.nextn_predict_layers", (VT.UINT32, 1), "all NextN blocks"),
    ("head", "gemma4-assistant.embedding_length_out", (VT.UINT32, 32), "equals its own width"),
    ("head", "gemma4-assistant.attention.head_count_kv", (VT.UINT32, 0), "no key/value heads"),
    ("head", "gemma4-assistant.attention.value_length_swa", (VT.UINT32, 8), "key and value lengths differ"),
])
def test_validation_refuses_what_llama_cpp_would_abort_on(pair, tmp_path, which, key, value, needle):
    src = pair[0] if which == "target" else pair[1]
    validate_gguf(src)
    bad = rebuild_gguf(src, tmp_path / "bad.gguf", set_kv={key: value})
    with pytest.raises(ModelFileError, match=needle):
        validate_gguf(bad)


def test_a_target_whose_shared_layers_read_their_own_kind_passes(tmp_path):
    t = write_target(tmp_path / "t.gguf", PairSpec(n_layer=5, swa_period=3))  # sliding, sliding, global, sliding, global
    ok = rebuild_gguf(t, tmp_path / "ok.gguf", set_kv={"gemma4.attention.shared_kv_layers": (VT.UINT32, 2)})
    validate_gguf(ok)  # layers 3 and 4 reuse layers 1 (sliding) and 2 (global)


def test_an_assistant_fits_its_target_and_not_another(pair, tmp_path):
    t, h = (validate_gguf(p) for p in pair)
    assert pair_problem(t, h) is None
    wide = validate_gguf(write_target(tmp_path / "wide.gguf", PairSpec(n_embd=128, n_head=4, head_dim=32)))
    assert "reads hidden states 64 wide and the target's are 128" in pair_problem(wide, h)
    assert "drafts for a gemma4 target" in pair_problem(h, h)


def test_the_library_says_what_an_assistant_is_and_pairs_it_with_its_target_only(pair, tmp_path):
    t, h = pair
    rows = dict(file_rows(inspect_gguf(h)))
    assert "Gemma 4 assistant" in rows["Draft head"] and "target 64 wide" in rows["Draft head"]
    assert rows["MTP heads"] == "none"  # its NextN blocks are not a trunk's heads
    assert "Draft head" not in dict(file_rows(inspect_gguf(t)))
    assert head_file(h) is not None and head_file(t) is None
    other = write_target(tmp_path / "other.gguf", PairSpec(n_embd=128, head_dim=32))
    (c,) = drafts_for(t, [(h, "head")])
    assert c.compatible and c.head_label == "Gemma 4 assistant" and "target 64 wide" in c.head and not c.translated
    (c,) = drafts_for(other, [(h, "head")])
    assert not c.usable and not c.translated and "does not fit" in c.reason  # a head never drafts translated
    assert check_pair(t, h).ok and check_pair(other, h).rule == "head"
