"""GGUF reader/validator/inspector: real models parse, bad inputs give readable errors."""

from __future__ import annotations

import json
import os
import re
import struct
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from hypothesis import given, settings
from hypothesis import strategies as st
from gguf import GGUFValueType as VT

from specdesk.errors import ModelFileError
from specdesk.library.gguf import reader
from specdesk.library.gguf import (
    SUPPORTED_ARCHITECTURES,
    GGUFArray,
    GGUFFile,
    estimate_memory,
    inspect_gguf,
    load_array,
    read_gguf,
    validate_gguf,
    vocab_from_gguf,
)

from synth.tiny_llama import TinySpec, encode_gguf, rebuild_gguf, write_tiny_llama  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "models"
SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN_05 = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN_15 = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"

REAL = {
    SMOL: dict(arch="llama", layers=30, vocab=49152, embd=576, heads=9, heads_kv=3, ctx=8192,
               file_type="MOSTLY_Q4_1", vocab_type="gpt2", bos=1, eos=2),
    QWEN_05: dict(arch="qwen2", layers=24, vocab=151936, embd=896, heads=14, heads_kv=2, ctx=32768,
                  file_type="MOSTLY_Q4_K_M", vocab_type="gpt2", bos=151643, eos=151645),
    QWEN_15: dict(arch="qwen2", layers=28, vocab=151936, embd=1536, heads=12, heads_kv=2, ctx=32768,
                  file_type="MOSTLY_Q4_K_M", vocab_type="gpt2", bos=151643, eos=151645),
}

REPORT_KEYS = {
    "path", "file_size", "parts", "version", "architecture", "name", "parameters", "file_type", "tensor_types",
    "layers", "embedding_length", "head_count", "head_count_kv", "context_length", "vocab_type",
    "vocab_size", "has_chat_template", "chat_template_chars", "bos_token_id", "eos_token_id", "memory",
    "mtp_heads", "mtp_problem", "rollback", "head", "head_problem",
}
ARCH_KV = ("general.architecture", VT.STRING, "llama")
MEMORY_KEYS = {"weights_bytes", "repack_bytes", "kv_bytes", "state_bytes", "compute_bytes", "ram_bytes", "vram_bytes", "n_ctx", "n_gpu_layers"}


def real_model(name: str) -> Path:
    path = MODELS / name
    if not path.is_file():
        pytest.skip(f"{name} is not in models/ (run the model fetch first)")
    return path


def expect_error(path: Path, *fragments: str, fn=validate_gguf) -> str:
    """``fn(path)`` raises ModelFileError with a one-line message naming the file."""
    with pytest.raises(ModelFileError) as info:
        fn(path)
    msg = str(info.value)
    assert "\n" not in msg and "\r" not in msg, msg
    assert msg.startswith(f"{path.name}: "), msg
    for fragment in fragments:
        assert fragment in msg, f"{fragment!r} not in {msg!r}"
    return msg


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf", TinySpec(tokenizer="spm"))


@pytest.fixture(scope="module")
def tiny_bpe(tmp_path_factory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-bpe.gguf", TinySpec(tokenizer="bpe"))


@pytest.fixture(scope="module")
def smol_header() -> tuple[bytes, GGUFFile]:
    """The real SmolLM2 header (everything before the tensor data) and its parse."""
    path = real_model(SMOL)
    g = read_gguf(path)
    with open(path, "rb") as f:
        return f.read(g.data_offset), g


def sparse_copy(path: Path, head: bytes, size: int) -> Path:
    """A file of ``size`` bytes starting with ``head``, the rest a hole: a stand-in for a
    copy of a model truncated at ``size`` (validation never reads tensor data)."""
    with open(path, "wb") as f:
        f.write(head[:size])
        f.truncate(size)
    return path


# --------------------------------------------------------------------------------------
# Real models
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(REAL))
def test_real_model_validates(name):
    path = real_model(name)
    want = REAL[name]
    g = validate_gguf(path)
    assert g.architecture == want["arch"]
    assert g.version == 3
    assert g.get(f"{want['arch']}.block_count") == want["layers"]
    assert len(g.get("tokenizer.ggml.tokens")) == want["vocab"]
    assert "{%" in g.get("tokenizer.chat_template")
    assert g.file_size == path.stat().st_size
    assert g.data_offset % g.alignment == 0 and g.data_offset >= g.header_end
    assert g.tensor("token_embd.weight").shape == (want["embd"], want["vocab"])
    # tensor data is contiguous and inside the file
    ends = sorted((t.offset, t.offset + t.n_bytes) for t in g.tensors)
    assert ends[0][0] == g.data_offset and ends[-1][1] <= g.file_size
    assert all(a[1] <= b[0] for a, b in zip(ends, ends[1:]))


@pytest.mark.parametrize("name", list(REAL))
def test_inspect_real_model(name):
    path = real_model(name)
    want = REAL[name]
    report = inspect_gguf(path)
    assert set(report) == REPORT_KEYS
    assert set(report["memory"]) == MEMORY_KEYS
    json.dumps(report)  # JSON-serialisable
    assert report["architecture"] == want["arch"]
    assert report["layers"] == want["layers"]
    assert report["vocab_size"] == want["vocab"]
    assert report["embedding_length"] == want["embd"]
    assert report["head_count"] == want["heads"]
    assert report["head_count_kv"] == want["heads_kv"]
    assert report["context_length"] == want["ctx"]
    assert report["file_type"] == want["file_type"]
    assert report["vocab_type"] == want["vocab_type"]
    assert report["bos_token_id"] == want["bos"] and report["eos_token_id"] == want["eos"]
    assert report["has_chat_template"] is True and report["chat_template_chars"] > 100
    assert report["version"] == 3 and report["file_size"] == path.stat().st_size
    g = read_gguf(path, lazy_arrays=True)
    assert sum(report["tensor_types"].values()) == len(g.tensors)
    assert report["parameters"] == sum(t.n_elements for t in g.tensors)
    assert report["memory"]["n_ctx"] == 4096


def test_validating_the_largest_model_reads_only_the_header():
    path = real_model(QWEN_15)
    start = time.perf_counter()
    validate_gguf(path)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.5, f"validate_gguf took {elapsed:.2f} s on a 1.1 GB file"


def test_vocab_from_real_model():
    g = read_gguf(real_model(SMOL))
    vocab = vocab_from_gguf(g)
    assert vocab["type"] == "gpt2"
    assert vocab["n_tokens"] == len(vocab["tokens"]) == 49152
    assert vocab["tokens"][0] == "<|endoftext|>"
    assert (vocab["bos"], vocab["eos"]) == (1, 2)
    assert vocab["add_bos"] is False and vocab["add_eos"] is None


def test_lazy_arrays_are_skipped_then_loadable():
    path = real_model(SMOL)
    full = read_gguf(path)
    lazy = read_gguf(path, lazy_arrays=True)
    tokens = lazy.get("tokenizer.ggml.tokens")
    assert isinstance(tokens, GGUFArray) and len(tokens) == 49152
    assert lazy.get("general.languages") == ["en"]  # short arrays are still read
    assert load_array(lazy, "tokenizer.ggml.tokens") == full.get("tokenizer.ggml.tokens")
    types = load_array(lazy, "tokenizer.ggml.token_type")
    assert isinstance(types, np.ndarray) and not types.flags.writeable  # long arrays stay compact
    assert np.array_equal(types, full.get("tokenizer.ggml.token_type"))
    assert vocab_from_gguf(lazy)["tokens"] == full.get("tokenizer.ggml.tokens")
    assert [t for t in lazy.tensors] == [t for t in full.tensors]


def test_estimate_memory_splits_by_offloaded_layers():
    g = read_gguf(real_model(SMOL))
    n_layer, embd = 30, g.tensor("token_embd.weight").n_bytes
    total = sum(t.n_bytes for t in g.tensors)
    cpu = estimate_memory(g, 4096)
    assert cpu["weights_bytes"] == total and cpu["vram_bytes"] == 0
    # KV = n_layer x n_ctx x (k + v) x 2 bytes; k = v = head_dim 64 x 3 kv heads
    assert cpu["kv_bytes"] == 30 * 4096 * (64 * 3 + 64 * 3) * 2
    assert cpu["ram_bytes"] == cpu["weights_bytes"] + cpu["kv_bytes"] + cpu["compute_bytes"]

    # the documented compute formula: logits 4 x n_vocab x n_out, activations
    # 4 x n_out x (n_head x n_ctx + 4 x n_embd + 2 x n_ff) with n_out = min(n_batch, n_ctx)
    logits = 4 * 49152 * 512
    activations = 4 * 512 * (9 * 4096 + 4 * 576 + 2 * 1536)
    assert cpu["compute_bytes"] == logits + activations

    ten = estimate_memory(g, 4096, n_gpu_layers=10)
    gpu_weights = sum(t.n_bytes for t in g.tensors if any(t.name.startswith(f"blk.{i}.") for i in range(20, 30)))
    assert ten["vram_bytes"] == gpu_weights + 10 * 4096 * 384 * 2 + activations  # the last 10 layers
    assert ten["ram_bytes"] + ten["vram_bytes"] == cpu["ram_bytes"]
    assert ten["n_gpu_layers"] == 10

    all_layers = estimate_memory(g, 4096, n_gpu_layers=n_layer)  # the output layer stays on the CPU
    every = estimate_memory(g, 4096, n_gpu_layers=99)  # the output layer too: tied, so a copy of token_embd
    assert every["n_gpu_layers"] == n_layer + 1
    assert every["ram_bytes"] == embd  # token_embd stays in RAM, everything else is on the GPU
    assert every["vram_bytes"] == total - embd + cpu["kv_bytes"] + cpu["compute_bytes"] + embd
    assert all_layers["ram_bytes"] == embd + g.tensor("output_norm.weight").n_bytes + logits
    assert estimate_memory(g, 8192)["kv_bytes"] == 2 * cpu["kv_bytes"]
    assert estimate_memory(g, 4096, cache_type_bytes=1.0)["kv_bytes"] == cpu["kv_bytes"] // 2
    series = [estimate_memory(g, 4096, n_gpu_layers=n)["vram_bytes"] for n in range(0, 32)]
    assert series == sorted(series)


def test_estimate_memory_for_tiny_model(tiny):
    g = read_gguf(tiny)
    m = estimate_memory(g, 256, n_gpu_layers=-1)
    assert m["n_gpu_layers"] == 3
    assert m["ram_bytes"] >= g.tensor("token_embd.weight").n_bytes
    assert m["kv_bytes"] == 2 * 256 * (16 * 2 + 16 * 2) * 2


def test_supported_architectures():
    assert {"llama", "qwen2", "qwen3", "gemma3", "phi3", "mistral3"} <= SUPPORTED_ARCHITECTURES
    assert "clip" not in SUPPORTED_ARCHITECTURES


def test_tiny_models_validate(tiny, tiny_bpe):
    for path in (tiny, tiny_bpe):
        g = validate_gguf(path)
        assert g.architecture == "llama" and len(g.tensors) == 20


# --------------------------------------------------------------------------------------
# Unusable paths
# --------------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    expect_error(tmp_path / "model.gguf", "model.gguf: no such file")
    expect_error(tmp_path / "model.gguf", "no such file", fn=inspect_gguf)


def test_missing_parent_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    expect_error(tmp_path / "file" / "model.gguf", "no such file")


def test_nul_in_path():
    with pytest.raises(ModelFileError, match="invalid file name"):
        validate_gguf("model\0.gguf")


def test_directory(tmp_path):
    d = tmp_path / "model.gguf"
    d.mkdir()
    assert expect_error(d) == "model.gguf: is a directory, not a file"


def test_unreadable_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(100))
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as root: chmod 000 does not stop reading")
        assert expect_error(path) == "model.gguf: permission denied"
    finally:
        path.chmod(0o644)


def test_unreadable_file_simulated(tmp_path, monkeypatch):
    """The same as above where root ignores permissions: open() raises PermissionError."""
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(100))

    def deny(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(reader, "open", deny, raising=False)
    assert expect_error(path) == "model.gguf: permission denied"


def test_not_a_regular_file(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    expect_error(fifo, "is not a regular file")


def test_empty_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"")
    assert expect_error(path) == "model.gguf: file is empty (0 bytes)"


# --------------------------------------------------------------------------------------
# Not a GGUF
# --------------------------------------------------------------------------------------


def test_zip_renamed_to_gguf(tmp_path):
    path = tmp_path / "model.gguf"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("weights.bin", b"\0" * 100)
    msg = expect_error(path, "not a GGUF file", "magic b'PK\\x03\\x04", "zip archive")
    assert msg.startswith("model.gguf: not a GGUF file (magic b'PK\\x03\\x04")


@pytest.mark.parametrize(
    "content, hint",
    [
        (b"<!DOCTYPE html>\n<html><body>404 Not Found</body></html>\n", "HTML page"),
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\n", "Git LFS pointer"),
        (b"just some notes\nabout a model\n", "text file"),
        (b'{"error": "rate limited"}', "JSON"),
        (b"\x80\x02}q\x00(X\x05\x00\x00\x00", "pickle"),
        (b"tjgg\x03\x00\x00\x00" + bytes(64), "old GGJT model"),
        (bytes(range(200, 256)) * 3, "magic b'\\xc8\\xc9"),
        (b"GG", "truncated: the file has only 2 bytes"),
        (b"GGML", "not a GGUF file"),
    ],
)
def test_not_gguf(tmp_path, content, hint):
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    expect_error(path, hint)


@pytest.mark.parametrize(
    "version, fragment",
    [(1, "version 1 is no longer supported"), (0, "unsupported GGUF version 0"), (4, "unsupported GGUF version 4"),
     (0x03000000, "big-endian")],
)
def test_bad_versions(tmp_path, version, fragment):
    path = tmp_path / "model.gguf"
    path.write_bytes(encode_gguf([("general.architecture", VT.STRING, "llama")], version=version))
    expect_error(path, fragment, fn=read_gguf)


def test_version_2_is_read(tmp_path):
    path = tmp_path / "v2.gguf"
    path.write_bytes(encode_gguf([("general.architecture", VT.STRING, "llama")], version=2))
    assert read_gguf(path).version == 2


# --------------------------------------------------------------------------------------
# Truncated copies of a real model
# --------------------------------------------------------------------------------------


def test_truncated_in_header(tmp_path, smol_header):
    head, g = smol_header
    for size in (3, 4, 7, 12, 20, 23):
        msg = expect_error(sparse_copy(tmp_path / "model.gguf", head, size), fn=read_gguf)
        assert "truncated" in msg


def test_truncated_in_metadata(tmp_path, smol_header):
    head, g = smol_header
    tokens_at = g.kv_offsets["tokenizer.ggml.tokens"]
    for size in (24, 40, 100, 1000, tokens_at + 30, tokens_at + 100_000, g.kv_offsets["tokenizer.chat_template"] + 50):
        expect_error(sparse_copy(tmp_path / "model.gguf", head, size), "truncated", fn=read_gguf)


def test_truncated_in_tensor_infos(tmp_path, smol_header):
    head, g = smol_header
    first_info = g.tensors[0].info_offset
    for size in (first_info + 5, first_info + 40, (first_info + g.header_end) // 2, g.header_end - 1):
        expect_error(sparse_copy(tmp_path / "model.gguf", head, size), "truncated", fn=read_gguf)


def test_truncated_in_padding_before_data(tmp_path):
    path = tmp_path / "model.gguf"
    full = encode_gguf([ARCH_KV], [("a", (8,), int(Q.F32), 0)], data=bytes(32))
    path.write_bytes(full)
    g = read_gguf(path)
    assert g.header_end < g.data_offset
    path.write_bytes(full[: g.data_offset - 1])
    expect_error(path, f"truncated: the tensor data section starts at byte {g.data_offset:,}", fn=read_gguf)


def test_truncated_in_tensor_data(tmp_path, smol_header):
    head, g = smol_header
    for size in (g.data_offset, g.data_offset + 1000, g.data_offset + g.file_size // 2, g.file_size - 1):
        path = sparse_copy(tmp_path / "model.gguf", head, size)
        first_cut = next(t for t in g.tensors if t.offset + t.n_bytes > size)
        msg = expect_error(path, fn=read_gguf)
        if first_cut.offset >= size:
            assert msg == (f"model.gguf: truncated: tensor '{first_cut.name}' data starts at byte "
                           f"{first_cut.offset:,} but the file has {size:,} bytes")
        else:
            assert msg == (f"model.gguf: truncated: tensor '{first_cut.name}' data ends at byte "
                           f"{first_cut.offset + first_cut.n_bytes:,} but the file has {size:,} bytes")


def test_complete_sparse_copy_is_valid(tmp_path, smol_header):
    """The sparse stand-in itself is fine when it has the full size (sanity check)."""
    head, g = smol_header
    validate_gguf(sparse_copy(tmp_path / "model.gguf", head, g.file_size))


# --------------------------------------------------------------------------------------
# Unsupported architecture
# --------------------------------------------------------------------------------------


def test_unsupported_architecture_written_by_gguf_writer(tmp_path):
    path = write_tiny_llama(tmp_path / "model.gguf", TinySpec(arch="foo"))
    assert read_gguf(path).architecture == "foo"  # structurally fine
    assert expect_error(path) == "model.gguf: architecture 'foo' is not supported by this llama.cpp build"


def test_unsupported_architecture_patched_in_real_header(tmp_path, smol_header):
    head, g = smol_header
    at = g.kv_offsets["general.architecture"]
    assert head[at + 8 : at + 8 + 20] == b"general.architecture"
    value_at = at + 8 + 20 + 4 + 8
    assert head[value_at : value_at + 5] == b"llama"
    patched = head[:value_at] + b"llamx" + head[value_at + 5 :]
    path = sparse_copy(tmp_path / "model.gguf", patched, g.file_size)
    assert expect_error(path) == "model.gguf: architecture 'llamx' is not supported by this llama.cpp build"


# --------------------------------------------------------------------------------------
# Structural problems (hand-encoded files)
# --------------------------------------------------------------------------------------

ARCH = ARCH_KV
F32 = int(Q.F32)


def _structural_cases():
    big = 2**64 - 1
    return {
        "duplicate key": (dict(kvs=[ARCH, ("a", VT.UINT32, 1), ("a", VT.UINT32, 2)]), "duplicate metadata key 'a'"),
        "unknown value type": (dict(kvs=[ARCH, ("a", 13, b"\0")]), "metadata key 'a' has unknown value type 13"),
        "empty key": (dict(kvs=[("", VT.UINT32, 1)]), "empty key"),
        "NUL in key": (dict(kvs=[(b"gen\0eral", VT.UINT32, 1)]), "contains a NUL byte"),
        "key with newline": (dict(kvs=[ARCH, ("a\nb", VT.UINT32, 1), ("a\nb", VT.UINT32, 1)]), "duplicate metadata key 'a\\nb'"),
        "unknown array type": (dict(kvs=[("arr", VT.ARRAY, (13, [b"x"]))]), "unknown value type 13"),
        "deep arrays": (dict(kvs=[("arr", VT.ARRAY, (VT.ARRAY, [(VT.ARRAY, [(VT.ARRAY, [(VT.ARRAY, [])])])]))]),
                        "nests arrays deeper than"),
        "n_kv huge": (dict(kvs=[ARCH], n_kv=big), "metadata entries; SpecDesk reads at most 16,384"),
        "n_kv too many for the file": (dict(kvs=[ARCH], n_kv=1000), "header claims 1,000 metadata entries"),
        "n_tensors huge": (dict(kvs=[ARCH], n_tensors=10**7), "declares 10,000,000 tensors; SpecDesk reads at most 32,768"),
        "alignment not a power of two": (dict(kvs=[("general.alignment", VT.UINT32, 48)]), "general.alignment is 48, which is not a power of two"),
        "alignment zero": (dict(kvs=[("general.alignment", VT.UINT32, 0)]), "not a power of two"),
        "alignment wrong type": (dict(kvs=[("general.alignment", VT.UINT64, 32)]), "general.alignment must be a uint32, not uint64"),
        "no dims": (dict(tensors=[("t", (), F32, 0)]), "tensor 't' has 0 dimensions"),
        "five dims": (dict(tensors=[("t", (1, 1, 1, 1, 1), F32, 0)]), "has 5 dimensions; ggml supports 1 to 4"),
        "zero dim": (dict(tensors=[("t", (4, 0), F32, 0)]), "tensor 't' has an invalid dimension 0"),
        "element overflow": (dict(tensors=[("t", (2**32, 2**32), F32, 0)]), "too many elements"),
        "removed ggml type": (dict(tensors=[("t", (32,), 4, 0)]), "tensor 't' has unknown ggml type 4"),
        "unknown ggml type": (dict(tensors=[("t", (32,), 1000, 0)]), "unknown ggml type 1000"),
        "row not a block multiple": (dict(tensors=[("t", (48, 2), int(Q.Q4_0), 0)]), "not a multiple of the block size 32"),
        "misaligned offset": (dict(tensors=[("t", (8,), F32, 16)], data=bytes(64)), "offset 16 is not a multiple of the alignment 32"),
        "overlap": (dict(tensors=[("a", (16,), F32, 0), ("b", (16,), F32, 32)], data=bytes(128)), "tensors 'a' and 'b' overlap"),
        "data outside the file": (dict(tensors=[("a", (16,), F32, 0)], data=bytes(32)), "truncated: tensor 'a' data ends at byte"),
        "offset far outside": (dict(tensors=[("a", (16,), F32, 2**40)], data=bytes(64)), "data starts at byte"),
        "long tensor name": (dict(tensors=[("x" * 64, (4,), F32, 0)], data=bytes(16)), "is 64 bytes; ggml allows at most 63"),
        "duplicate tensor": (dict(tensors=[("t", (8,), F32, 0), ("t", (8,), F32, 32)], data=bytes(64)), "duplicate tensor name 't'"),
        "empty tensor name": (dict(tensors=[("", (8,), F32, 0)], data=bytes(32)), "tensor #0 has an empty name"),
    }


@pytest.mark.parametrize("case", list(_structural_cases()))
def test_structural_problem(tmp_path, case):
    kwargs, fragment = _structural_cases()[case]
    path = tmp_path / "model.gguf"
    path.write_bytes(encode_gguf(kwargs.pop("kvs", [ARCH]), kwargs.pop("tensors", []), **kwargs))
    expect_error(path, fragment, fn=read_gguf)


def _length_field_file(which: str) -> bytes:
    good = encode_gguf([ARCH, ("name", VT.STRING, "abc"), ("list", VT.ARRAY, (VT.UINT32, [1, 2, 3]))])
    if which == "string":
        at = good.index(b"abc") - 8
    else:
        at = good.index(struct.pack("<IQ", VT.UINT32, 3)) + 4
    return good[:at] + struct.pack("<Q", 2**63 + 5) + good[at + 8 :]


@pytest.mark.parametrize("which", ["string", "array"])
def test_lengths_beyond_the_file(tmp_path, which):
    path = tmp_path / "model.gguf"
    path.write_bytes(_length_field_file(which))
    msg = expect_error(path, "corrupt or truncated", fn=read_gguf) if which == "string" else expect_error(path, fn=read_gguf)
    assert "left in the file" in msg or "limit" in msg


def test_max_array_len(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(encode_gguf([ARCH, ("list", VT.ARRAY, (VT.UINT8, list(range(100))))]))
    assert read_gguf(path).get("list") == list(range(100))
    expect_error(path, "array of 100 elements", "the limit is 10", fn=lambda p: read_gguf(p, max_array_len=10))


def test_metadata_values_are_python_values(tmp_path):
    path = tmp_path / "model.gguf"
    kvs = [
        ARCH, ("u8", VT.UINT8, 255), ("i8", VT.INT8, -1), ("u16", VT.UINT16, 65535), ("i16", VT.INT16, -2),
        ("u32", VT.UINT32, 2**32 - 1), ("i32", VT.INT32, -3), ("f32", VT.FLOAT32, 0.5), ("b", VT.BOOL, True),
        ("u64", VT.UINT64, 2**64 - 1), ("i64", VT.INT64, -(2**63)), ("f64", VT.FLOAT64, 1e300),
        ("s", VT.STRING, b"caf\xc3\xa9 \xff"), ("bools", VT.ARRAY, (VT.BOOL, [True, False])),
        ("nested", VT.ARRAY, (VT.ARRAY, [(VT.UINT8, [1, 2]), (VT.STRING, ["x"])])),
    ]
    path.write_bytes(encode_gguf(kvs))
    g = read_gguf(path)
    assert g.metadata == {
        "general.architecture": "llama", "u8": 255, "i8": -1, "u16": 65535, "i16": -2, "u32": 2**32 - 1, "i32": -3,
        "f32": 0.5, "b": True, "u64": 2**64 - 1, "i64": -(2**63), "f64": 1e300, "s": "café \ufffd",
        "bools": [True, False], "nested": [[1, 2], ["x"]],
    }
    assert g.value_types["nested"] == (VT.ARRAY, VT.ARRAY)
    assert g.tensors == [] and g.data_offset == g.header_end == g.file_size


# --------------------------------------------------------------------------------------
# Semantic problems (validate_gguf only)
# --------------------------------------------------------------------------------------


def _retype(t, dims=None, ggml_type=None):
    return (t.name, dims or t.shape, t.ggml_type if ggml_type is None else ggml_type)


SEMANTIC_CASES = {
    "no architecture": (dict(set_kv={"general.architecture": None}), "missing metadata key 'general.architecture'"),
    "architecture not a string": (dict(set_kv={"general.architecture": (VT.UINT32, 7)}),
                                  "metadata key 'general.architecture' is uint32; llama.cpp needs a string"),
    "clip is not a model": (dict(set_kv={"general.architecture": (VT.STRING, "clip")}), "architecture 'clip' is not supported"),
    "no block count": (dict(set_kv={"llama.block_count": None}), "missing metadata key 'llama.block_count'"),
    "block count int32": (dict(set_kv={"llama.block_count": (VT.INT32, 2)}),
                          "metadata key 'llama.block_count' is int32; llama.cpp needs a uint32"),
    "too many layers": (dict(set_kv={"llama.block_count": (VT.UINT32, 3)}), "there are no tensors for layer 2"),
    "too few layers": (dict(set_kv={"llama.block_count": (VT.UINT32, 1)}), "'blk.1.attn_norm.weight' does not belong"),
    "no embedding length": (dict(set_kv={"llama.embedding_length": None}), "missing metadata key 'llama.embedding_length'"),
    "no head count": (dict(set_kv={"llama.attention.head_count": None}), "missing metadata key 'llama.attention.head_count'"),
    "heads do not divide embedding": (dict(set_kv={"llama.attention.head_count": (VT.UINT32, 5)}),
                                      "head_count (5) does not divide the embedding length (64)"),
    "kv heads do not divide heads": (dict(set_kv={"llama.attention.head_count_kv": (VT.UINT32, 3)}),
                                     "head_count_kv (3) does not divide"),
    "per-layer array of wrong length": (dict(set_kv={"llama.feed_forward_length": (VT.ARRAY, (VT.UINT32, [128]))}),
                                        "has 1 values but the model has 2 layers"),
    "rms eps missing": (dict(set_kv={"llama.attention.layer_norm_rms_epsilon": None}), "layer_norm_rms_epsilon"),
    "rms eps as f64": (dict(set_kv={"llama.attention.layer_norm_rms_epsilon": (VT.FLOAT64, 1e-5)}), "needs a float32"),
    "rope dims differ from head size": (dict(set_kv={"llama.rope.dimension_count": (VT.UINT32, 8)}), "invalid n_rot"),
    "unknown rope scaling": (dict(set_kv={"llama.rope.scaling.type": (VT.STRING, "warp")}), "unknown rope scaling type 'warp'"),
    "nested array": (dict(set_kv={"x.nested": (VT.ARRAY, (VT.ARRAY, [(VT.UINT8, [1])]))}), "array of arrays"),
    "split part": (dict(set_kv={"split.count": (VT.UINT16, 3)}), "split into 3 files"),
    "no tokenizer": (dict(set_kv={"tokenizer.ggml.model": None}), "missing metadata key 'tokenizer.ggml.model'"),
    "unknown tokenizer": (dict(set_kv={"tokenizer.ggml.model": (VT.STRING, "sentencepiece")}), "unknown tokenizer model"),
    "no tokens": (dict(set_kv={"tokenizer.ggml.tokens": None}), "missing metadata key 'tokenizer.ggml.tokens'"),
    "tokens not strings": (dict(set_kv={"tokenizer.ggml.tokens": (VT.ARRAY, (VT.UINT32, [1, 2]))}), "needs an array of strings"),
    "scores too short": (dict(set_kv={"tokenizer.ggml.scores": (VT.ARRAY, (VT.FLOAT32, [0.0] * 10))}),
                         "tokenizer.ggml.scores has 10 entries but there are 353 tokens"),
    "token types wrong type": (dict(set_kv={"tokenizer.ggml.token_type": (VT.ARRAY, (VT.UINT8, [1] * 353))}),
                               "needs an array of int32"),
    "bos outside vocabulary": (dict(set_kv={"tokenizer.ggml.bos_token_id": (VT.UINT32, 353)}),
                               "tokenizer.ggml.bos_token_id is 353 but the vocabulary has 353 tokens"),
    "eos as int32": (dict(set_kv={"tokenizer.ggml.eos_token_id": (VT.INT32, 2)}), "needs a uint32"),
    "vocab size disagrees": (dict(set_kv={"llama.vocab_size": (VT.UINT32, 400)}), "vocab_size is 400 but"),
    "alignment 16": (dict(set_kv={"general.alignment": (VT.UINT32, 16)}), "not a multiple of 32"),
    "extra tensor": (dict(extra_tensors=[("blk.0.extra.weight", (64,), F32)]), "unexpected tensor 'blk.0.extra.weight'"),
    "extra layer": (dict(extra_tensors=[("blk.2.attn_norm.weight", (64,), F32)]), "'blk.2.attn_norm.weight' does not belong"),
    "odd layer number": (dict(extra_tensors=[("blk.01.attn_norm.weight", (64,), F32)]), "'blk.01.attn_norm.weight' does not belong"),
    "missing tensor": (dict(tensor_map=lambda t: None if t.name == "blk.1.ffn_up.weight" else _retype(t)),
                       "missing tensor 'blk.1.ffn_up.weight'"),
    "wrong shape": (dict(tensor_map=lambda t: _retype(t, dims=(64, 16)) if t.name == "blk.0.attn_k.weight" else _retype(t)),
                    "tensor 'blk.0.attn_k.weight' has shape [64, 16]; llama needs [64, 32]"),
    "integer weights": (dict(tensor_map=lambda t: _retype(t, ggml_type=int(Q.I32)) if t.name == "output_norm.weight" else _retype(t)),
                        "has type I32"),
    "no token embedding": (dict(tensor_map=lambda t: None if t.name == "token_embd.weight" else _retype(t)),
                           "missing tensor 'token_embd.weight'"),
    "embedding of the wrong width": (dict(tensor_map=lambda t: _retype(t, dims=(32, 353)) if t.name == "token_embd.weight" else _retype(t)),
                                     "token_embd.weight has rows of 32 but the embedding length is 64"),
}


@pytest.mark.parametrize("case", list(SEMANTIC_CASES))
def test_semantic_problem(tmp_path, tiny, case):
    kwargs, fragment = SEMANTIC_CASES[case]
    path = rebuild_gguf(tiny, tmp_path / "model.gguf", **kwargs)
    expect_error(path, fragment)


def test_duplicate_tokens(tmp_path, tiny):
    tokens = read_gguf(tiny).get("tokenizer.ggml.tokens")
    tokens = list(tokens)
    tokens[300] = tokens[299]
    path = rebuild_gguf(tiny, tmp_path / "model.gguf", set_kv={"tokenizer.ggml.tokens": (VT.ARRAY, (VT.STRING, tokens))})
    expect_error(path, f"duplicate token '{tokens[299]}' (ids 299 and 300)")


def test_tokens_equal_up_to_a_nul_are_duplicates(tmp_path, tiny):
    """llama.cpp reads token texts as C strings."""
    tokens = list(read_gguf(tiny).get("tokenizer.ggml.tokens"))
    tokens[300] = tokens[299] + "\0tail"
    path = rebuild_gguf(tiny, tmp_path / "model.gguf", set_kv={"tokenizer.ggml.tokens": (VT.ARRAY, (VT.STRING, tokens))})
    expect_error(path, "duplicate token")


def test_distinct_invalid_utf8_tokens_are_not_duplicates(tmp_path, tiny):
    """Two tokens that only look alike after U+FFFD replacement are different bytes."""
    tokens: list = list(read_gguf(tiny).get("tokenizer.ggml.tokens"))
    tokens[300] = b"\xff"
    tokens[301] = b"\xfe"
    path = rebuild_gguf(tiny, tmp_path / "model.gguf", set_kv={"tokenizer.ggml.tokens": (VT.ARRAY, (VT.STRING, tokens))})
    g = validate_gguf(path)
    assert g.get("tokenizer.ggml.tokens")[300] == g.get("tokenizer.ggml.tokens")[301] == "\ufffd"


def test_short_byte_token(tmp_path, tiny):
    tokens = list(read_gguf(tiny).get("tokenizer.ggml.tokens"))
    tokens[3 + 0x41] = "<"  # was <0x41>, still typed BYTE
    path = rebuild_gguf(tiny, tmp_path / "model.gguf", set_kv={"tokenizer.ggml.tokens": (VT.ARRAY, (VT.STRING, tokens))})
    expect_error(path, f"byte token {3 + 0x41} '<' is not of the form <0xNN>")


def test_unknown_pre_tokenizer(tmp_path, tiny_bpe):
    path = rebuild_gguf(tiny_bpe, tmp_path / "model.gguf", set_kv={"tokenizer.ggml.pre": (VT.STRING, "mystery")})
    expect_error(path, "unknown pre-tokenizer 'mystery'")


def test_bpe_without_merges(tmp_path, tiny_bpe):
    path = rebuild_gguf(tiny_bpe, tmp_path / "model.gguf", set_kv={"tokenizer.ggml.merges": None})
    expect_error(path, "missing metadata key 'tokenizer.ggml.merges'")


def test_tensor_data_out_of_order(tmp_path):
    """Structurally fine (no overlap) but not the layout llama.cpp requires."""
    path = tmp_path / "model.gguf"
    path.write_bytes(encode_gguf([ARCH], [("a", (8,), F32, 32), ("b", (8,), F32, 0)], data=bytes(64)))
    read_gguf(path)
    expect_error(path, "tensor 'a' data is at offset 32 of the data section; llama.cpp requires 0")


def test_messages_escape_file_content(tmp_path):
    """Strings from the file cannot break the one-line message."""
    path = tmp_path / "model.gguf"
    path.write_bytes(encode_gguf([("general.architecture", VT.STRING, "evil\narch\r\x1b[31m" + "x" * 500)]))
    msg = expect_error(path, "architecture 'evil\\narch\\r\\x1b[31m")
    assert len(msg) < 200


def test_file_name_with_newline(tmp_path):
    path = tmp_path / "bad\nname.gguf"
    path.write_bytes(b"")
    with pytest.raises(ModelFileError) as info:
        validate_gguf(path)
    assert str(info.value) == "bad\\nname.gguf: file is empty (0 bytes)"


def test_memory_estimate_counts_the_cpu_repacked_copy(tmp_path):
    """llama.cpp keeps a repacked copy of Q4_0/Q4_K matrices (not token_embd) on CPUs
    that repack; offloaded layers are not repacked."""
    from specdesk.library.defaults import default_models

    path = default_models(["target"])[0].path
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `specdesk models fetch-default` first")
    g = validate_gguf(path)
    plain = estimate_memory(g, n_ctx=1024)
    rep = estimate_memory(g, n_ctx=1024, repack_types={"Q4_K"})
    want = sum(t.n_bytes for t in g.tensors if t.type_name == "Q4_K" and len(t.shape) == 2 and not t.name.startswith("token_embd"))
    assert plain["repack_bytes"] == 0 and rep["repack_bytes"] == want > 0
    assert rep["ram_bytes"] == plain["ram_bytes"] + want
    offloaded = estimate_memory(g, n_ctx=1024, n_gpu_layers=-1, repack_types={"Q4_K"})
    assert offloaded["repack_bytes"] == 0


def test_the_weights_named_for_repacking_stay_on_the_cpu_and_are_matrix_weights():
    """Where llama.cpp's extra buffers are off (an AMX build) the loader names the
    weights for CPU_REPACK itself, and llama.cpp takes a named buffer without asking:
    a name that is not a matrix product's weight of a repacked type would break the
    model, and one in an offloaded layer would pull it back to the CPU."""
    from specdesk.library.defaults import default_models
    from specdesk.library.gguf.estimate import layer_of, repacked_tensors

    path = default_models(["target"])[0].path
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `specdesk models fetch-default` first")
    g = validate_gguf(path)
    types = {t.name: t.type_name for t in g.tensors}
    n_layer = max(layer_of(t.name) or 0 for t in g.tensors) + 1
    names = repacked_tensors(g, {"Q4_K"}, 0)
    assert names and {types[n] for n in names} == {"Q4_K"}
    assert not any(n.startswith("token_embd") or not n.endswith(".weight") for n in names)
    # every Q4_K matrix the model has, and the bytes the memory estimate counts
    assert set(names) == {t.name for t in g.tensors if t.type_name == "Q4_K" and len(t.shape) == 2
                          and not t.name.startswith("token_embd")}
    size = {t.name: t.n_bytes for t in g.tensors}
    assert sum(size[n] for n in names) == estimate_memory(g, n_ctx=1024, repack_types={"Q4_K"})["repack_bytes"]
    # four layers offloaded: none of them, nor the output layer, is named
    some = repacked_tensors(g, {"Q4_K"}, 4)
    assert some and all(layer_of(n) is not None and layer_of(n) < n_layer - 4 for n in some)
    assert set(some) < set(names)
    assert repacked_tensors(g, {"Q4_K"}, -1) == [] and repacked_tensors(g, (), 0) == []
    assert repacked_tensors(g, {"Q6_K"}, 0) and all(types[n] == "Q6_K" for n in repacked_tensors(g, {"Q6_K"}, 0))


# --------------------------------------------------------------------------------------
# Issue 11: duplicate tokens as llama.cpp sees them, recurrent architectures
# --------------------------------------------------------------------------------------


def _with_tokens(tiny: Path, dst: Path, **edits: bytes) -> Path:
    tokens = list(read_gguf(tiny, load=["tokenizer.ggml.tokens"]).get("tokenizer.ggml.tokens").iter_raw())
    for i, raw in edits.items():
        tokens[int(i[1:])] = raw
    return rebuild_gguf(tiny, dst, set_kv={"tokenizer.ggml.tokens": (VT.ARRAY, (VT.STRING, tokens))})


def test_equal_invalid_utf8_tokens_are_duplicates(tmp_path, tiny):
    """Issue 11, defect 2: \\xff, \\xfe, \\xfe used to pass (only the first U+FFFD text
    was compared by its bytes); llama.cpp aborts on it. The agreement test shows the abort."""
    path = _with_tokens(tiny, tmp_path / "model.gguf", t300=b"\xff", t301=b"\xfe", t302=b"\xfe")
    assert expect_error(path) == "model.gguf: duplicate token b'\\xfe' (ids 301 and 302) in tokenizer.ggml.tokens"


def test_empty_token_and_its_placeholder_are_duplicates(tmp_path, tiny):
    """llama.cpp names an empty token "[EMPTY_<id>]", which another token can already be."""
    path = _with_tokens(tiny, tmp_path / "model.gguf", t300=b"", t301=b"[EMPTY_300]")
    expect_error(path, "duplicate token '[EMPTY_300]' (ids 300 and 301)")


def test_the_first_duplicate_in_id_order_is_named(tmp_path, tiny):
    path = _with_tokens(tiny, tmp_path / "model.gguf", t310=b"\xc0\xc1", t330=b"x\0y", t320=b"x", t340=b"\xc0\xc1")
    expect_error(path, "duplicate token 'x' (ids 320 and 330)")


def test_byte_token_length_counts_raw_bytes(tmp_path, tiny):
    """A BYTE token of one invalid byte is 1 byte to llama.cpp (U+FFFD is 3 when encoded)."""
    path = _with_tokens(tiny, tmp_path / "model.gguf", t68=b"\xff")
    expect_error(path, "byte token 68 b'\\xff' is not of the form <0xNN>")


def _as_arch(tiny: Path, dst: Path, arch: str) -> Path:
    g = read_gguf(tiny)
    set_kv: dict = {"general.architecture": (VT.STRING, arch)}
    for key, value in g.metadata.items():
        if key.startswith("llama."):
            set_kv[key] = None
            set_kv[arch + key[len("llama"):]] = (g.value_types[key][0], value)
    return rebuild_gguf(tiny, dst, set_kv=set_kv)


@pytest.mark.parametrize("arch, kind", [("mamba", "recurrent"), ("rwkv6", "recurrent"),
                                        ("jamba", "a hybrid"), ("qwen3next", "a hybrid")])
def test_unchecked_recurrent_architectures_are_refused(tmp_path, tiny, arch, kind):
    """Issue 11, defect 8, then issue 48: a recurrent or hybrid target rolls back exactly
    (engine.rollback), but SpecDesk accepts only the architectures whose files it checks
    as llama.cpp needs them (a malformed one aborts llama.cpp); the others are refused in
    one line, and inspection still works."""
    path = _as_arch(tiny, tmp_path / "model.gguf", arch)
    assert expect_error(path) == (
        f"model.gguf: architecture '{arch}' is {kind}{'' if kind == 'recurrent' else ' of attention and recurrent layers'}; "
        "SpecDesk speculates on such models only where it checks their tensors before llama.cpp loads them (qwen35), "
        "as a malformed one aborts llama.cpp"
    )
    assert validate_gguf(path, allow_recurrent=True).architecture == arch  # otherwise a sound file
    assert inspect_gguf(path)["architecture"] == arch


@settings(max_examples=200, deadline=None)
@given(st.sets(st.tuples(st.integers(0, 40), st.sampled_from(["attn_q", "attn_k", "ffn_up", "ffn_down"]))),
       st.booleans())
def test_the_repack_patterns_match_exactly_the_weights_named(chosen, with_output):
    """The loader hands llama.cpp one regex per tensor kind (it compiles each pattern
    again for every tensor); those must match the names asked for and no other: a
    stray match would send a weight llama.cpp cannot repack to CPU_REPACK."""
    from specdesk.engine.model import name_patterns

    names = [f"blk.{i}.{kind}.weight" for i, kind in sorted(chosen)] + (["output.weight"] * with_output)
    universe = [f"blk.{i}.{k}.{w}" for i in range(45) for k in ("attn_q", "attn_k", "ffn_up", "ffn_down", "attn_q_norm")
                for w in ("weight", "bias")] + ["output.weight", "output_norm.weight", "token_embd.weight"]
    patterns = name_patterns(names)
    assert len(patterns) <= 5
    assert [n for n in universe if any(re.search(p, n) for p in patterns)] == [n for n in universe if n in names]
