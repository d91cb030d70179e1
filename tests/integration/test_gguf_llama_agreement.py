"""validate_gguf against the real llama.cpp loader.

The claim: a file validate_gguf accepts is loaded by llama.cpp. Checked on a seeded
sample of mutated copies of tiny complete llama models (four variants: SentencePiece and
BPE tokenizers, tied and separate output, alignments 32/64/128). llama.cpp runs in a
subprocess (tests/data/gguf/llama_load_worker.py), many files per process, with the
file it dies on recorded as "crashed" and the batch resumed after it.

Also: the real model files pass; the tables validate_gguf relies on (architecture names,
ggml block sizes, tokenizer and pre-tokenizer names) match the installed llama.cpp; and
files llama.cpp rejects or crashes on are rejected by validate_gguf.
"""

from __future__ import annotations

import ctypes
import random
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as VT

from specdesk.errors import ModelFileError
from specdesk.library import gguf as gguf_pkg
from specdesk.library.gguf import read_gguf, validate_gguf
from specdesk.library.gguf.rules import CHECKED_RECURRENT_ARCHITECTURES, HYBRID_ARCHITECTURES, RECURRENT_ARCHITECTURES
from specdesk.rules.rollback import SNAPSHOT_ARCHITECTURES

llama_cpp = pytest.importorskip("llama_cpp")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "gguf"))
from llama_load_worker import CRASHED, LOADED, load_many  # noqa: E402
from synth.mutations import apply_mutations, header_fields, random_ops  # noqa: E402
from synth.tiny_llama import TinySpec, rebuild_gguf, write_tiny_llama  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "models"
REAL = ["SmolLM2-135M-Instruct.Q4_1.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"]
LIB = Path(llama_cpp.__file__).resolve().parent / "lib"

SEED = 20240611
N_MUTANTS = 1600  # about a fifth pass validation
N_REJECTED_SAMPLE = 300

VARIANTS = [
    TinySpec(tokenizer="spm"),
    TinySpec(tokenizer="bpe"),
    TinySpec(tokenizer="spm", output=True, alignment=64, n_head_kv=4),
    TinySpec(tokenizer="bpe", output=True, alignment=128, n_head_kv=1, seed=1),
]


def report(capsys, *lines: str) -> None:
    with capsys.disabled():
        print("\n" + "\n".join(lines))


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("tiny")
    return [write_tiny_llama(tmp / f"variant{i}.gguf", spec) for i, spec in enumerate(VARIANTS)]


def test_unmutated_tiny_models_load(variants):
    for path in variants:
        validate_gguf(path)
    status = load_many(variants)
    assert set(status.values()) == {LOADED}, status


def test_validated_mutants_load_in_llama_cpp(variants, tmp_path, capsys):
    rng = random.Random(SEED)
    bases = []
    for path in variants:
        data = path.read_bytes()
        bases.append((data, header_fields(data, read_gguf(path))))
    passed: dict[str, list] = {}
    rejected: dict[str, str] = {}
    for i in range(N_MUTANTS):
        data, fields = bases[i % len(bases)]
        ops = random_ops(rng, data, fields)
        path = tmp_path / f"mutant{i:05d}.gguf"
        path.write_bytes(apply_mutations(data, ops))
        try:
            validate_gguf(path)
        except ModelFileError as e:
            rejected[str(path)] = str(e)
            continue
        passed[str(path)] = ops
    assert len(passed) >= 200, f"only {len(passed)} mutants passed validation: the sample is too small"

    status = load_many(list(passed))
    refused = {p: status[p] for p in passed if status[p] != LOADED}
    report(capsys, f"gguf agreement: {len(passed)} mutated files passed validation, {len(refused)} rejected by llama.cpp")
    assert not refused, "\n".join(f"{p}: llama.cpp {s}; mutations {passed[p]}" for p, s in refused.items())

    # For information: how strict validate_gguf is compared to llama.cpp
    sample = random.Random(SEED).sample(sorted(rejected), min(N_REJECTED_SAMPLE, len(rejected)))
    counts = Counter(load_many(sample).values())
    report(capsys, f"gguf agreement: of {len(sample)} files validate_gguf rejected, llama.cpp loaded "
                   f"{counts[LOADED]}, refused {counts['rejected']}, crashed on {counts[CRASHED]}")


@pytest.mark.parametrize("name", REAL)
def test_real_models_pass_validation(name):
    path = MODELS / name
    if not path.is_file():
        pytest.skip(f"{name} is not in models/")
    g = validate_gguf(path)
    assert g.architecture in ("llama", "qwen2")


def test_smallest_real_model_loads_in_llama_cpp():
    path = MODELS / REAL[0]
    if not path.is_file():
        pytest.skip(f"{path.name} is not in models/")
    validate_gguf(path)
    assert load_many([path]) == {str(path): LOADED}


# --------------------------------------------------------------------------------------
# The tables validate_gguf uses, against the installed llama.cpp
# --------------------------------------------------------------------------------------


def test_supported_architectures_are_known_to_libllama():
    """Every architecture name is a string in libllama (LLM_ARCH_NAMES)."""
    lib = next(LIB.glob("libllama.so*"), None) or next(LIB.glob("*llama*.dll"), None) or next(LIB.glob("libllama*.dylib"), None)
    if lib is None:
        pytest.skip("libllama not found")
    blob = lib.read_bytes()
    unknown = sorted(a for a in gguf_pkg.SUPPORTED_ARCHITECTURES if b"\0" + a.encode() + b"\0" not in blob
                     and a.encode() + b"\0" not in blob)
    assert not unknown, f"not in this llama.cpp build: {unknown}"


def _arch_classes(lib_path: Path) -> dict[str, tuple[bool, bool, bool]] | None:
    """llama.cpp's own answer per architecture name: (llm_arch_is_recurrent,
    llm_arch_is_hybrid, llm_arch_supports_rs_rollback), read from libllama's C++ symbols
    (Itanium names, exported on Linux and macOS); None where the build does not export them."""
    lib = ctypes.CDLL(str(lib_path))
    try:
        name = lib._Z13llm_arch_name8llm_arch  # const char * llm_arch_name(llm_arch)
        recurrent = lib._Z21llm_arch_is_recurrentRK8llm_arch  # bool (const llm_arch &)
        hybrid = lib._Z18llm_arch_is_hybridRK8llm_arch
        snapshots = lib._Z29llm_arch_supports_rs_rollbackRK8llm_arch
    except AttributeError:
        return None
    name.argtypes, name.restype = [ctypes.c_int], ctypes.c_char_p
    for f in (recurrent, hybrid, snapshots):
        f.argtypes, f.restype = [ctypes.POINTER(ctypes.c_int)], ctypes.c_bool
    out = {}
    for i in range(1000):  # the enum runs from 0 to LLM_ARCH_UNKNOWN, whose name is "(unknown)"
        arch = ctypes.c_int(i)
        text = (name(i) or b"").decode()
        if text == "(unknown)":
            break
        out[text] = tuple(bool(f(ctypes.byref(arch))) for f in (recurrent, hybrid, snapshots))
    return out


def test_architectures_that_cannot_roll_back_are_llama_cpps_own_lists():
    """A recurrent or hybrid target or draft cannot simply drop a draft's rejected
    positions: the engine rolls it back by snapshots (llama.cpp's
    llm_arch_supports_rs_rollback) or checkpoints, and validate_gguf refuses those whose
    files SpecDesk does not check. The names are exactly the ones llama.cpp classes so,
    in the build installed."""
    lib = next(LIB.glob("libllama.so*"), None) or next(LIB.glob("libllama*.dylib"), None)
    classes = _arch_classes(lib) if lib is not None else None
    if classes is None:
        pytest.skip("this libllama exports no llm_arch_is_recurrent / llm_arch_is_hybrid to ask")
    assert len(classes) > 50 and classes["llama"] == (False, False, False) and classes["mamba"] == (True, False, False)
    assert {a for a, (r, _, _) in classes.items() if r} == RECURRENT_ARCHITECTURES
    assert {a for a, (_, h, _) in classes.items() if h} == HYBRID_ARCHITECTURES
    # the ones whose recurrent state keeps snapshots (n_rs_seq; elsewhere llama.cpp clamps it to 0)
    assert {a for a, (_, _, s) in classes.items() if s} == SNAPSHOT_ARCHITECTURES
    assert CHECKED_RECURRENT_ARCHITECTURES <= HYBRID_ARCHITECTURES | RECURRENT_ARCHITECTURES


def test_ggml_type_sizes_match_libggml():
    lib_path = next(LIB.glob("libggml-base.so*"), None) or next(LIB.glob("*ggml-base*.dll"), None) or next(LIB.glob("libggml-base*.dylib"), None)
    if lib_path is None:
        pytest.skip("libggml-base not found")
    lib = ctypes.CDLL(str(lib_path))
    lib.ggml_type_size.restype = ctypes.c_size_t
    lib.ggml_type_size.argtypes = [ctypes.c_int]
    lib.ggml_blck_size.restype = ctypes.c_int64
    lib.ggml_blck_size.argtypes = [ctypes.c_int]
    for ggml_type, (name, block, size) in gguf_pkg.GGML_TYPES.items():
        assert (lib.ggml_blck_size(ggml_type), lib.ggml_type_size(ggml_type)) == (block, size), name


def test_tokenizer_names_are_accepted_by_llama_cpp(variants, tmp_path):
    """Each tokenizer.ggml.model and tokenizer.ggml.pre validate_gguf accepts is loaded
    (vocabulary only) by llama.cpp; an unknown one is not."""
    spm, bpe = variants[0], variants[1]
    paths = {}
    for pre in sorted(gguf_pkg.BPE_PRE_TOKENIZERS) + ["no-such-pre-tokenizer"]:
        paths[f"pre {pre}"] = rebuild_gguf(bpe, tmp_path / f"pre-{pre}.gguf", set_kv={"tokenizer.ggml.pre": (VT.STRING, pre)})
    for model in sorted(gguf_pkg.TOKENIZER_MODELS) + ["no-such-tokenizer"]:
        base = spm if model == "plamo2" else bpe  # plamo2 needs <0xNN> byte tokens
        paths[f"model {model}"] = rebuild_gguf(base, tmp_path / f"model-{model}.gguf",
                                               set_kv={"tokenizer.ggml.model": (VT.STRING, model)})
    status = load_many(list(paths.values()), vocab_only=True)
    wrong = {k: status[str(p)] for k, p in paths.items() if (status[str(p)] == LOADED) == ("no-such" in k)}
    assert not wrong, wrong


# --------------------------------------------------------------------------------------
# Files llama.cpp refuses or crashes on are rejected
# --------------------------------------------------------------------------------------


def _tokens(path: Path) -> list:
    return list(read_gguf(path).get("tokenizer.ggml.tokens"))


def _bad_files(spm: Path, tmp: Path) -> dict[str, Path]:
    tokens = _tokens(spm)
    dup = list(tokens)
    dup[300] = dup[299]
    short_byte = list(tokens)
    short_byte[3 + 0x41] = "<"
    cases = {
        "alignment 16 (ggml asserts aligned mmap pointers)": dict(set_kv={"general.alignment": (VT.UINT32, 16)}),
        "duplicate token (GGML_ASSERT in the vocabulary)": dict(set_kv={"tokenizer.ggml.tokens": (VT.ARRAY, (VT.STRING, dup))}),
        "short byte token (substr out of range)": dict(set_kv={"tokenizer.ggml.tokens": (VT.ARRAY, (VT.STRING, short_byte))}),
        "unknown rope scaling (GGML_ASSERT)": dict(set_kv={"llama.rope.scaling.type": (VT.STRING, "warp")}),
        "block count as int32": dict(set_kv={"llama.block_count": (VT.INT32, 2)}),
        "head count 5": dict(set_kv={"llama.attention.head_count": (VT.UINT32, 5)}),
        "rope dimension 8": dict(set_kv={"llama.rope.dimension_count": (VT.UINT32, 8)}),
        "unknown tokenizer": dict(set_kv={"tokenizer.ggml.model": (VT.STRING, "sentencepiece")}),
        "nested array": dict(set_kv={"x.nested": (VT.ARRAY, (VT.ARRAY, [(VT.UINT8, [1])]))}),
        "extra tensor": dict(extra_tensors=[("blk.0.extra.weight", (64,), int(Q.F32))]),
        "missing tensor": dict(tensor_map=lambda t: None if t.name == "blk.1.ffn_up.weight" else (t.name, t.shape, t.ggml_type)),
        "wrong shape": dict(tensor_map=lambda t: (t.name, (64, 16) if t.name == "blk.0.attn_k.weight" else t.shape, t.ggml_type)),
    }
    return {name: rebuild_gguf(spm, tmp / f"bad{i}.gguf", **kw) for i, (name, kw) in enumerate(cases.items())}


def test_files_llama_cpp_refuses_are_rejected(variants, tmp_path, capsys):
    bad = _bad_files(variants[0], tmp_path)
    for path in bad.values():
        with pytest.raises(ModelFileError):
            validate_gguf(path)
    status = load_many(list(bad.values()))
    loaded = [name for name, path in bad.items() if status[str(path)] == LOADED]
    assert not loaded, f"llama.cpp loads these, so validate_gguf is stricter than needed: {loaded}"
    crashed = [name for name, path in bad.items() if status[str(path)] == CRASHED]
    report(capsys, f"gguf agreement: llama.cpp crashed on {len(crashed)} of {len(bad)} known-bad files: {crashed}")


# --------------------------------------------------------------------------------------
# Token texts as llama.cpp compares them (raw bytes, C strings)
# --------------------------------------------------------------------------------------


def _raw_tokens(path: Path) -> list[bytes]:
    return list(read_gguf(path, load=["tokenizer.ggml.tokens"]).get("tokenizer.ggml.tokens").iter_raw())


def test_tokens_llama_cpp_sees_as_equal_crash_it_and_are_refused(variants, tmp_path):
    """Issue 11, defect 2: \\xff, \\xfe, \\xfe passed validate_gguf (only the first U+FFFD
    text was compared by its bytes) and llama.cpp aborts on it (GGML_ASSERT
    id_to_token.size() == token_to_id.size(), SIGABRT). Every duplicate llama.cpp's
    token_to_id map would hit is now refused; tokens that only look alike load."""
    spm = variants[0]
    base = _raw_tokens(spm)

    def with_tokens(name: str, **edits: bytes) -> Path:
        tokens = list(base)
        for i, raw in edits.items():
            tokens[int(i[1:])] = raw
        return rebuild_gguf(spm, tmp_path / f"{name}.gguf", set_kv={"tokenizer.ggml.tokens": (VT.ARRAY, (VT.STRING, tokens))})

    crash = {
        "equal invalid utf-8": (with_tokens("ff-fe-fe", t300=b"\xff", t301=b"\xfe", t302=b"\xfe"),
                                "duplicate token b'\\xfe' (ids 301 and 302)"),
        "equal up to a NUL": (with_tokens("nul", t300=b"ab\0x", t301=b"ab\0y"), "duplicate token 'ab' (ids 300 and 301)"),
        "empty vs [EMPTY_300]": (with_tokens("empty", t300=b"", t301=b"[EMPTY_300]"),
                                 "duplicate token '[EMPTY_300]' (ids 300 and 301)"),
    }
    distinct = with_tokens("ff-fe", t300=b"\xff", t301=b"\xfe")
    short_byte = with_tokens("short-byte", t68=b"\xff")  # <0x41> typed BYTE, 1 raw byte
    status = load_many([p for p, _ in crash.values()] + [distinct, short_byte])
    for name, (path, fragment) in crash.items():
        assert status[str(path)] == CRASHED, f"{name}: llama.cpp {status[str(path)]}"
        with pytest.raises(ModelFileError, match=re.escape(fragment)):
            validate_gguf(path)
    assert status[str(distinct)] == LOADED
    validate_gguf(distinct)
    assert status[str(short_byte)] != LOADED
    with pytest.raises(ModelFileError, match=re.escape("byte token 68 b'\\xff' is not of the form <0xNN>")):
        validate_gguf(short_byte)


def test_memory_estimate_kv_matches_the_loaded_model():
    """One KV formula (rules.kv): the estimate from the header and the loaded model agree."""
    from specdesk.engine.model import Model
    from specdesk.library.gguf import estimate_memory

    path = MODELS / REAL[0]
    if not path.is_file():
        pytest.skip(f"{path.name} is not in models/")
    m = Model(path)
    try:
        per_token = m.kv_bytes_per_token()
    finally:
        m.close()
    assert per_token == 30 * 3 * (64 + 64) * 2  # SmolLM2: 30 layers, 3 KV heads of 64
    assert estimate_memory(validate_gguf(path), 4096)["kv_bytes"] == 4096 * per_token
