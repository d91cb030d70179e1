"""The GGUF reader and validator are linear, memory-bounded, cancellable and memoised.

Issue 11, defect 3: the duplicate-token check re-read tokens 0..i for every token whose
decoded text repeated (262,144 crafted tokens: hours, measured 17 s for 4,000), and long
arrays became Python lists (~8x the file's bytes). The bounds here are structural --
bytes read, files opened, bytes allocated -- never seconds; the times are printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFValueType as VT

from specdesk.engine import kv
from specdesk.errors import Cancelled, ModelFileError
from specdesk.library.gguf import (
    GGUFArray,
    clear_memo,
    estimate_memory,
    find_duplicate_token,
    read_gguf,
    reader,
    validate_gguf,
)
from specdesk.library.gguf.arrays import StringArray

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "gguf"))
from io_count import CountingOpen  # noqa: E402
from tiny_gguf import TinySpec, look_alike_tokens, rebuild_gguf, write_big_vocab_llama, write_tiny_llama  # noqa: E402

N_CRAFTED = 262_144
HOUR = 3600


def _age(path: Path, seconds: float = HOUR) -> Path:
    """Date the file back, as a model file that has been on disk a while is (the memo
    does not trust files modified within the last few seconds)."""
    t = time.time() - seconds
    os.utime(path, (t, t))
    return path


@pytest.fixture(scope="module")
def crafted(tmp_path_factory) -> Path:
    """A complete tiny BPE model with 262,144 distinct tokens that all decode to the same
    text; its tensor data is a sparse hole."""
    tmp = tmp_path_factory.mktemp("crafted")
    return write_big_vocab_llama(tmp / "look-alike-262k.gguf", look_alike_tokens(N_CRAFTED))


@pytest.fixture(autouse=True)
def _fresh_memo():
    clear_memo()
    yield
    clear_memo()


# --------------------------------------------------------------------------------------
# Linear time
# --------------------------------------------------------------------------------------


def test_look_alike_vocabulary_is_validated_in_one_pass(crafted, monkeypatch, capsys):
    """262,144 tokens that decode alike but differ as bytes are valid, and checking them
    reads each header byte a bounded number of times from a bounded number of opens (the
    old check opened the file again and re-read tokens 0..i for every one of them)."""
    header = read_gguf(crafted, lazy_arrays=True).data_offset
    counting = CountingOpen(budget=3 * header + (4 << 20))
    monkeypatch.setattr(reader, "open", counting, raising=False)
    start = time.perf_counter()
    g = validate_gguf(crafted)
    elapsed = time.perf_counter() - start
    assert len(g.get("tokenizer.ggml.tokens")) == N_CRAFTED
    assert counting.opened == 1
    with capsys.disabled():
        print(f"\nvalidate_gguf on {N_CRAFTED:,} look-alike tokens (header {header / 2**20:.1f} MiB): "
              f"{elapsed:.2f} s, {counting.bytes_read / header:.2f} bytes read per header byte")


def test_duplicate_check_compares_only_colliding_hashes():
    """find_duplicate_token in id order, on raw bytes as llama.cpp compares them."""
    toks = StringArray.from_raw(look_alike_tokens(5000))
    assert find_duplicate_token(toks) is None
    raw = look_alike_tokens(5000)
    raw[4000] = raw[17]
    raw[4500] = raw[3]  # a later duplicate of an earlier token: the first in id order wins
    raw[100] = b"ab\0c"
    raw[200] = b"ab\0d"
    assert find_duplicate_token(StringArray.from_raw(raw)) == (100, 200, b"ab")
    raw[200] = b"\x80\x80\x80\x80"
    assert find_duplicate_token(StringArray.from_raw(raw)) == (17, 4000, raw[17])
    assert find_duplicate_token(StringArray.from_raw([b"", b"[EMPTY_0]"])) == (0, 1, b"[EMPTY_0]")
    assert find_duplicate_token(["a", "b", "a"]) == (0, 2, b"a")


# --------------------------------------------------------------------------------------
# Bounded memory
# --------------------------------------------------------------------------------------


def _peak(fn, *args, **kwargs) -> int:
    tracemalloc.start()
    try:
        fn(*args, **kwargs)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_long_arrays_are_not_python_lists(tmp_path):
    """A 2,000,000-element uint8 array and 500,000 floats: the validator allocates far
    less than the file (it used to build lists: 8.3x the file's bytes)."""
    tiny = write_tiny_llama(tmp_path / "tiny.gguf", TinySpec())
    path = rebuild_gguf(tiny, tmp_path / "arrays.gguf", set_kv={
        "x.bytes": (VT.ARRAY, (VT.UINT8, [7] * 2_000_000)),
        "x.floats": (VT.ARRAY, (VT.FLOAT32, [0.5] * 500_000)),
    })
    size = path.stat().st_size
    assert _peak(validate_gguf, path) <= size // 2 + (1 << 20)
    g = read_gguf(path)
    arr = g.get("x.bytes")
    assert isinstance(arr, np.ndarray) and arr.nbytes == 2_000_000 and not arr.flags.writeable
    assert _peak(read_gguf, path) <= 2 * size + (1 << 20)
    assert isinstance(validate_gguf(path).get("x.floats"), GGUFArray)


def test_validating_the_crafted_vocabulary_stays_within_the_bound(crafted):
    """The documented bound: peak <= 16 x header bytes + 1 MiB (here about 3.5x)."""
    header = read_gguf(crafted, lazy_arrays=True).data_offset
    assert _peak(validate_gguf, crafted) <= 16 * header + (1 << 20)


# --------------------------------------------------------------------------------------
# Cancellation
# --------------------------------------------------------------------------------------


def test_validation_can_be_cancelled(crafted):
    calls = []

    def cancel() -> bool:
        calls.append(1)
        return len(calls) >= 2

    with pytest.raises(Cancelled, match="cancelled"):
        validate_gguf(crafted, cancel=cancel)
    assert len(calls) == 2
    validate_gguf(_age(crafted), cancel=lambda: False)  # a cancelled run is not remembered


# --------------------------------------------------------------------------------------
# The memo
# --------------------------------------------------------------------------------------


def test_validating_an_unchanged_file_again_is_free(tmp_path, monkeypatch):
    path = _age(write_tiny_llama(tmp_path / "tiny.gguf", TinySpec()))
    counting = CountingOpen()
    monkeypatch.setattr(reader, "open", counting, raising=False)
    g = validate_gguf(path)
    assert counting.opened == 1
    assert validate_gguf(path) is g and validate_gguf(tmp_path / "." / "tiny.gguf") is g
    assert counting.opened == 1
    _age(path, HOUR / 2)  # a new version of the file (another mtime)
    assert validate_gguf(path) is not g and counting.opened == 2


def test_errors_are_remembered_too(tmp_path, monkeypatch):
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGUF" + bytes(100))
    _age(path)
    counting = CountingOpen()
    monkeypatch.setattr(reader, "open", counting, raising=False)
    with pytest.raises(ModelFileError) as first:
        validate_gguf(path)
    with pytest.raises(ModelFileError) as again:
        validate_gguf(path)
    assert str(first.value) == str(again.value) and counting.opened == 1


def test_a_file_written_just_now_is_not_memoised(tmp_path, monkeypatch):
    """Coarse file-system clocks: two versions written within one tick keep the same
    (size, mtime, inode), so a fresh file is always read (git's "racy clean")."""
    tiny = write_tiny_llama(tmp_path / "tiny.gguf", TinySpec())
    counting = CountingOpen()
    monkeypatch.setattr(reader, "open", counting, raising=False)
    validate_gguf(tiny)
    data = tiny.read_bytes()
    st = os.stat(tiny)
    bad = bytearray(data)
    bad[4] = 9  # version 9, same size
    tiny.write_bytes(bytes(bad))
    os.utime(tiny, ns=(st.st_atime_ns, st.st_mtime_ns))  # the same mtime, as within one tick
    with pytest.raises(ModelFileError, match="unsupported GGUF version 9"):
        validate_gguf(tiny)
    assert counting.opened == 2


# --------------------------------------------------------------------------------------
# One KV formula
# --------------------------------------------------------------------------------------


def test_one_kv_formula():
    assert kv.head_dims(576, 9) == (64, 64)
    assert kv.head_dims(4096, 32, 128, 96) == (128, 96)
    assert kv.head_dims(64, 0) == (0, 0)
    assert kv.kv_bytes_per_layer(4096, 3, 64, 64) == 4096 * 3 * 128 * 2
    assert kv.kv_bytes_per_token([3] * 30, 64, 64, 1.0) == 30 * 3 * 128


def test_memory_estimate_uses_the_engine_kv_formula(tmp_path):
    tiny = write_tiny_llama(tmp_path / "tiny.gguf", TinySpec(n_head_kv=1))
    g = validate_gguf(tiny)
    k, v = kv.head_dims(64, 4)
    assert estimate_memory(g, 256)["kv_bytes"] == 256 * kv.kv_bytes_per_token([1, 1], k, v)


def test_the_gguf_package_and_engine_kv_do_not_import_llama_cpp():
    code = ("import sys\n"
            "import specdesk.engine, specdesk.engine.kv, specdesk.engine.vocab, specdesk.library.gguf\n"
            "import specdesk.library.pairing\n"
            "assert 'llama_cpp' not in sys.modules, sorted(m for m in sys.modules if 'llama' in m)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
