"""The GGUF reader and validator are linear, memory-bounded, cancellable and memoised.

Issue 11, defect 3: the duplicate-token check re-read tokens 0..i for every token whose
decoded text repeated (262,144 crafted tokens: hours, measured 17 s for 4,000), and long
arrays became Python lists (~8x the file's bytes). The bounds here are structural --
bytes read, files opened, bytes allocated -- never seconds; the times are printed.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as VT

from specdesk.rules import kv
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
from specdesk.library.gguf import records
from specdesk.library.gguf import stream as gguf_stream
from specdesk.library.gguf.arrays import StringArray
from specdesk.library.gguf.spec import MAX_KV, MAX_NESTED_ARRAYS, MAX_STRINGS, MAX_TENSORS
from specdesk.library.gguf.stream import Reader

from io_count import CountingOpen  # noqa: E402
from synth.mutations import apply_mutations, header_fields, random_ops  # noqa: E402
from synth.tiny_llama import (  # noqa: E402
    TinySpec,
    encode_gguf,
    look_alike_tokens,
    rebuild_gguf,
    write_big_vocab_llama,
    write_tiny_llama,
)

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


def test_memory_estimate_uses_the_rules_kv_formula(tmp_path):
    tiny = write_tiny_llama(tmp_path / "tiny.gguf", TinySpec(n_head_kv=1))
    g = validate_gguf(tiny)
    k, v = kv.head_dims(64, 4)
    assert estimate_memory(g, 256)["kv_bytes"] == 256 * kv.kv_bytes_per_token([1, 1], k, v)


def test_the_gguf_package_and_the_rules_do_not_import_llama_cpp():
    code = ("import sys\n"
            "import specdesk.engine, specdesk.rules.kv, specdesk.rules.vocab, specdesk.library.gguf\n"
            "import specdesk.library.pairing\n"
            "assert 'llama_cpp' not in sys.modules, sorted(m for m in sys.modules if 'llama' in m)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# --------------------------------------------------------------------------------------
# The record caps
# --------------------------------------------------------------------------------------
#
# Each metadata entry or tensor info costs a few microseconds of Python however small
# it is, so a header of tiny records is the slowest to validate per byte. MAX_KV and
# MAX_TENSORS cap the counts before any record is read, MAX_NESTED_ARRAYS caps arrays
# held in arrays (which cost as much as a record). The bounds below are structural --
# records decoded, bytes read, memory -- never seconds; tools/gguf_fuzz_report.py
# --caps-only measures the time at the caps.

F32 = int(Q.F32)
ARCH_KV = ("general.architecture", VT.STRING, "llama")


class _RecordCount:
    """Wraps reader's fast-path decoders: records they decode, and records they leave to
    the checked reads (a call that decodes nothing is followed by one checked record)."""

    def __init__(self, monkeypatch) -> None:
        self.fast = 0
        self.checked = 0
        self.calls = 0
        for name in ("decode_kvs", "decode_tensor_infos"):
            monkeypatch.setattr(reader, name, self._wrap(getattr(records, name)))

    def _wrap(self, fn):
        def counted(r, i, *args):
            self.calls += 1
            j = fn(r, i, *args)
            self.fast += j - i
            self.checked += j == i
            return j

        return counted


def _no_records(monkeypatch) -> None:
    """Fail if any record is read (fast path or checked reads)."""

    def boom(*args, **kwargs):
        raise AssertionError("a record was read")

    monkeypatch.setattr(reader, "decode_kvs", boom)
    monkeypatch.setattr(reader, "decode_tensor_infos", boom)
    monkeypatch.setattr(Reader, "raw_string", boom)


def _complete_model_with(tmp_path: Path, name: str, n_kv: int, n_tensors: int) -> Path:
    """A tiny complete llama model (it validates) with ``n_kv`` metadata entries and
    ``n_tensors`` tensors in all: the extra entries hold 2-string arrays (the costliest
    small record), the extra tensors are 4-dimensional and named blk.0.* (each goes
    through the layer check). An expert count makes the validator skip llama's exact
    tensor set. Tensor data is a sparse hole."""
    base = write_tiny_llama(tmp_path / f"{name}.base.gguf", TinySpec())
    g = read_gguf(base, lazy_arrays=True)
    experts = {"llama.expert_count": (VT.UINT32, 2), "llama.expert_used_count": (VT.UINT32, 1)}
    extra_kv = {f"x.{i:05x}": (VT.ARRAY, (VT.STRING, ["a", "b"])) for i in range(n_kv - len(g.metadata) - len(experts))}
    extra_t = [(f"blk.0.x{i:05x}", (8, 1, 1, 1), F32) for i in range(n_tensors - len(g.tensors))]
    return rebuild_gguf(base, tmp_path / f"{name}.gguf", sparse=True, set_kv={**experts, **extra_kv},
                        extra_tensors=extra_t)


@pytest.fixture(scope="module")
def at_both_caps(tmp_path_factory) -> Path:
    return _complete_model_with(tmp_path_factory.mktemp("caps"), "at-caps", MAX_KV, MAX_TENSORS)


def test_the_caps_are_far_above_real_models():
    """The largest real GGUFs have a few thousand tensors (DeepSeek-V3 ~1,800, old
    split-expert Mixtrals under 1,000) and at most a few hundred metadata keys; the
    models in models/ have ~300 tensors and ~30 keys. llama.cpp reads no nested arrays."""
    assert MAX_TENSORS >= 8 * 4_000
    assert MAX_KV >= 16 * 1_000
    for path in sorted((Path(__file__).resolve().parents[2] / "models").glob("*.gguf")):
        g = read_gguf(path, lazy_arrays=True)
        assert len(g.tensors) <= MAX_TENSORS // 16 and len(g.metadata) <= MAX_KV // 16, path.name


def test_a_header_over_the_tensor_cap_is_refused_before_its_records_are_read(tmp_path, monkeypatch):
    n = MAX_TENSORS + 1
    data = encode_gguf([ARCH_KV], [(f"t{i:05x}", (8, 1, 1, 1), F32, 32 * i) for i in range(n)])
    path = tmp_path / "many-tensors.gguf"
    path.write_bytes(data)
    assert len(data) > 3 << 19  # well past the first read-ahead window (1 MiB)
    counting = CountingOpen()
    monkeypatch.setattr(reader, "open", counting, raising=False)
    _no_records(monkeypatch)
    with pytest.raises(ModelFileError) as e:
        validate_gguf(path)
    assert str(e.value) == (f"many-tensors.gguf: the header declares {n:,} tensors; SpecDesk reads at most "
                            f"{MAX_TENSORS:,} (real models have a few thousand)")
    assert "\n" not in str(e.value)
    assert counting.opened == 1 and counting.bytes_read <= 64 + (1 << 20) < len(data)


def test_a_header_over_the_metadata_cap_is_refused_before_its_records_are_read(tmp_path, monkeypatch):
    n = MAX_KV + 1
    long_value = "v" * 120
    data = encode_gguf([ARCH_KV] + [(f"x.{i:05x}", VT.STRING, long_value) for i in range(n - 1)])
    path = tmp_path / "many-keys.gguf"
    path.write_bytes(data)
    assert len(data) > 3 << 19
    counting = CountingOpen()
    monkeypatch.setattr(reader, "open", counting, raising=False)
    _no_records(monkeypatch)
    with pytest.raises(ModelFileError) as e:
        validate_gguf(path)
    assert str(e.value) == (f"many-keys.gguf: the header declares {n:,} metadata entries; SpecDesk reads at most "
                            f"{MAX_KV:,} (real models have a few hundred)")
    assert counting.opened == 1 and counting.bytes_read <= 64 + (1 << 20) < len(data)


def test_the_caps_are_checked_whatever_the_file_size(tmp_path, monkeypatch):
    """A count just over the cap is refused with the cap's message even when the file
    is far too small for that many records (no size arithmetic runs first)."""
    _no_records(monkeypatch)
    for field, n, what in [("n_tensors", MAX_TENSORS + 1, "tensors"), ("n_kv", MAX_KV + 1, "metadata entries")]:
        path = tmp_path / f"{field}.gguf"
        path.write_bytes(encode_gguf([ARCH_KV], **{field: n}))
        with pytest.raises(ModelFileError, match=f"declares {n:,} {what}; SpecDesk reads at most"):
            read_gguf(path)


def test_a_model_at_both_caps_validates_touching_each_record_once(at_both_caps, monkeypatch, capsys):
    """MAX_KV entries and MAX_TENSORS tensors together: the model is valid, every record
    is decoded once (all but a handful by the fast path), each header byte is read about
    once from a single open, and the memory stays within the documented bound."""
    header = read_gguf(at_both_caps, lazy_arrays=True).data_offset
    counting = CountingOpen(budget=header + (4 << 20))
    monkeypatch.setattr(reader, "open", counting, raising=False)
    count = _RecordCount(monkeypatch)
    start = time.perf_counter()
    g = validate_gguf(at_both_caps)
    elapsed = time.perf_counter() - start
    assert len(g.metadata) == MAX_KV and len(g.tensors) == MAX_TENSORS
    assert count.fast + count.checked == MAX_KV + MAX_TENSORS
    # the checked reads took only the two arrays validate_gguf loads in full and the
    # records that crossed the end of a read-ahead window (one per MiB at most)
    assert count.checked <= 2 + 2 * (header // (1 << 20) + 1)
    assert count.calls <= 2 * ((MAX_KV + MAX_TENSORS) // gguf_stream.CANCEL_EVERY + count.checked + 2)
    assert counting.opened == 1 and counting.bytes_read <= header + (2 << 20)
    clear_memo()
    assert _peak(validate_gguf, at_both_caps) <= 16 * header + (1 << 20)
    with capsys.disabled():
        print(f"\nvalidate_gguf at both caps ({MAX_KV:,} entries, {MAX_TENSORS:,} tensors, header "
              f"{header / 2**20:.1f} MiB): {elapsed:.2f} s, {count.checked} records took the checked reads")


def _nested(key: str, n_inner: int) -> tuple:
    return (key, VT.ARRAY, (VT.ARRAY, [(VT.UINT8, [1])] * n_inner))


def test_nested_arrays_over_the_cap_are_refused_before_they_are_read(tmp_path, monkeypatch):
    """Arrays of arrays (llama.cpp reads none) count together over the whole header;
    the array that would pass MAX_NESTED_ARRAYS is refused before its elements are read."""
    first = MAX_NESTED_ARRAYS // 2
    path = tmp_path / "nested.gguf"
    path.write_bytes(encode_gguf([ARCH_KV, _nested("a", first), _nested("b", MAX_NESTED_ARRAYS - first + 1)]))
    calls = []
    real_array = Reader.array
    monkeypatch.setattr(Reader, "array", lambda self, *a, **k: calls.append(1) or real_array(self, *a, **k))
    with pytest.raises(ModelFileError) as e:
        read_gguf(path)
    msg = str(e.value)
    assert msg.startswith(f"nested.gguf: metadata key 'b' holds {MAX_NESTED_ARRAYS - first + 1:,} arrays (at byte ")
    assert msg.endswith(f"which makes {MAX_NESTED_ARRAYS + 1:,} arrays nested in other arrays; SpecDesk reads "
                        f"at most {MAX_NESTED_ARRAYS:,} (llama.cpp reads none)")
    assert len(calls) == 1 + first + 1  # key a and its inner arrays, then key b itself only


def test_nested_arrays_at_the_cap_are_read(tmp_path):
    path = tmp_path / "nested.gguf"
    first = MAX_NESTED_ARRAYS // 2
    path.write_bytes(encode_gguf([ARCH_KV, _nested("a", first), _nested("b", MAX_NESTED_ARRAYS - first),
                                  ("c", VT.ARRAY, (VT.ARRAY, []))]))
    g = read_gguf(path)
    assert len(g.get("a")) + len(g.get("b")) == MAX_NESTED_ARRAYS and g.get("c") == []
    with pytest.raises(ModelFileError, match="is an array of arrays, which llama.cpp cannot read"):
        validate_gguf(path)  # refused, but for what llama.cpp does, not for the count


# --------------------------------------------------------------------------------------
# The fast path reads exactly what the checked reads read
# --------------------------------------------------------------------------------------


def _plain_value(v):
    """A metadata value in a form that compares exactly: types kept (True is not 1),
    NaN equal to NaN, compact arrays by their bytes."""
    if isinstance(v, list):
        return ["list", [_plain_value(x) for x in v]]
    if isinstance(v, np.ndarray):
        return ["numpy", v.dtype.str, v.tobytes(), v.flags.writeable]
    if isinstance(v, StringArray):
        return ["strings", list(v.iter_raw()), v.offset]
    if isinstance(v, float) and v != v:
        return ["nan"]
    return [type(v).__name__, v]


def _outcome(path: Path, **kwargs) -> tuple:
    try:
        g = read_gguf(path, **kwargs)
    except ModelFileError as e:
        return ("error", str(e))
    return ("ok", {k: _plain_value(v) for k, v in g.metadata.items()}, list(g.metadata), g.value_types,
            g.kv_offsets, g.arrays, g.tensors, g.alignment, g.data_offset, g.header_end)


def _every_kind_of_record() -> bytes:
    """Metadata of every value type and array shape the fast path handles or declines,
    and tensor infos of every dimension count."""
    kvs: list = [ARCH_KV, ("general.alignment", VT.UINT32, 64)]
    scalars = {VT.UINT8: 7, VT.INT8: -7, VT.UINT16: 700, VT.INT16: -700, VT.UINT32: 7 << 20, VT.INT32: -(7 << 20),
               VT.FLOAT32: 0.1, VT.BOOL: True, VT.UINT64: 7 << 40, VT.INT64: -(7 << 40), VT.FLOAT64: 0.1}
    for t, v in scalars.items():
        kvs.append((f"s.{t.name}", t, v))
        for n in (0, 1, 16, 17, 1024, 1025):
            kvs.append((f"a.{t.name}.{n}", VT.ARRAY, (t, [v] * n)))
    for n in (0, 1, 3, 1024, 1025):
        kvs.append((f"a.str.{n}", VT.ARRAY, (VT.STRING, [f"s{i}" for i in range(n)])))
    kvs += [("str", VT.STRING, "h\u00e9llo"), ("bad.utf8", VT.STRING, b"\xff\xfe"), ("k\u00e9y", VT.STRING, ""),
            ("nested", VT.ARRAY, (VT.ARRAY, [(VT.UINT8, [1, 2]), (VT.STRING, ["x"])])),
            ("nested.empty", VT.ARRAY, (VT.ARRAY, [])), ("long." + "k" * 400, VT.UINT8, 1),
            ("nan", VT.FLOAT32, float("nan")), ("tokenizer.ggml.tokens", VT.ARRAY, (VT.STRING, ["a", "b"]))]
    tensors, off = [], 0
    for i, dims in enumerate([(32,), (32, 2), (32, 1, 3), (32, 1, 1, 2), (64,)] * 6):
        tensors.append((f"t{i}" + "n" * (i % 7) * 9, dims, F32, off))
        off += -(-4 * int(np.prod(dims)) // 64) * 64
    return encode_gguf(kvs, tensors, alignment=64, data=bytes(off))


def test_the_fast_path_reads_what_the_checked_reads_read(tmp_path, monkeypatch):
    """The same result -- values, types, offsets, tensors, or the same message -- from
    the fast path with the usual window, from the fast path with tiny windows (so that
    records keep crossing a window's end), and from the checked reads alone, on files
    with every kind of record and on a few hundred mutations of them and of the tiny
    models."""
    rng = random.Random(11)
    bases = [_every_kind_of_record()]
    for tok in ("spm", "bpe"):
        bases.append(write_tiny_llama(tmp_path / f"tiny-{tok}.gguf", TinySpec(tokenizer=tok)).read_bytes())
    path = tmp_path / "case.gguf"
    cases = []
    for data in bases:
        path.write_bytes(data)
        fields = header_fields(data, read_gguf(path, lazy_arrays=True))
        cases.append(data)
        cases += [apply_mutations(data, random_ops(rng, data, fields)) for _ in range(100)]

    def fast_off(r, i, *args):
        return i

    modes = {"fast": {}, "fast, 64-byte windows": {"_CHUNK": 64}, "checked only": {"off": True}}
    variants = [dict(), dict(lazy_arrays=True), dict(lazy_arrays=True, load=("tokenizer.ggml.tokens", "a.str.3")),
                dict(max_array_len=16)]
    seen_errors = set()
    for k, data in enumerate(cases):
        path.write_bytes(data)
        for kwargs in variants:
            outcomes = {}
            for mode, how in modes.items():
                with monkeypatch.context() as m:
                    if "_CHUNK" in how:
                        m.setattr(gguf_stream, "_CHUNK", how["_CHUNK"])
                    if how.get("off"):
                        m.setattr(reader, "decode_kvs", fast_off)
                        m.setattr(reader, "decode_tensor_infos", fast_off)
                    outcomes[mode] = _outcome(path, **kwargs)
            first = outcomes["fast"]
            for mode, got in outcomes.items():
                assert got == first, f"case {k} {kwargs}: {mode} differs from fast"
            if first[0] == "error":
                seen_errors.add(first[1].split(":", 1)[1][:30])
    assert len(seen_errors) >= 20  # the mutations reached many different checks


# --------------------------------------------------------------------------------------
# The string cap
# --------------------------------------------------------------------------------------
#
# Each string element of an array costs a loop step (more when it is decoded into a
# list or hashed as a token), and a header of 100 MiB holds 11 million one-byte strings:
# MAX_STRINGS caps their total over the header, checked against each array's declared
# length before its strings are read. tools/gguf_fuzz_report.py --caps-only measures the
# time at the cap.

STRING = int(VT.STRING)


def _string_array_entry(key: str, n: int, text: bytes = b"a") -> bytes:
    """One metadata entry, encoded: ``key`` -> an array of ``n`` copies of ``text``."""
    raw = key.encode()
    item = len(text).to_bytes(8, "little") + text
    return (len(raw).to_bytes(8, "little") + raw + int(VT.ARRAY).to_bytes(4, "little")
            + STRING.to_bytes(4, "little") + n.to_bytes(8, "little") + item * n)


def _with_entries(src: Path, dst: Path, entries: dict[str, bytes]) -> Path:
    """Copy the GGUF ``src`` with the encoded metadata ``entries`` replacing the keys of
    the same name or added after the last one (faster than rebuild_gguf for millions of
    strings). Tensor offsets are relative to the data section, so they stay; the data
    section moves to the next aligned offset."""
    g = read_gguf(src, lazy_arrays=True)
    data = src.read_bytes()
    starts = sorted(g.kv_offsets.values()) + [g.tensors[0].info_offset if g.tensors else g.header_end]
    ends = dict(zip(starts, starts[1:]))
    head = bytearray(data[:starts[0]])
    kept = 0
    for key, start in g.kv_offsets.items():
        if key not in entries:
            head += data[start : ends[start]]
            kept += 1
    for entry in entries.values():
        head += entry
    head += data[starts[-1] : g.header_end]
    head[16:24] = (kept + len(entries)).to_bytes(8, "little")
    head += bytes(-len(head) % g.alignment if g.tensors else 0)
    with open(dst, "wb") as f:
        f.write(head)
        f.write(data[g.data_offset :])
    return dst


def _strings_in(path: Path) -> int:
    g = read_gguf(path, lazy_arrays=True)
    return sum(len(v) for k, v in g.metadata.items() if g.value_types[k] == (VT.ARRAY, VT.STRING))  # type: ignore[arg-type]


def _no_walk(monkeypatch, allowed: tuple[int, ...] = ()) -> list[int]:
    """Record the length of every string array walked; fail on one not in ``allowed``."""
    walked: list[int] = []
    real = Reader.walk_strings

    def walk(self, n, *args):
        walked.append(n)
        assert n in allowed, f"an array of {n:,} strings was walked"
        return real(self, n, *args)

    monkeypatch.setattr(Reader, "walk_strings", walk)
    return walked


def _cap_message(name: str, key: str, n: int, at: int, total: int) -> str:
    return (f"{name}: metadata key '{key}' is an array of {n:,} strings (at byte {at:,}), which makes {total:,} "
            f"strings in the header's arrays; SpecDesk reads at most {MAX_STRINGS:,} (real models have about half a million at most)")


def test_the_string_cap_is_far_above_real_models(crafted):
    """Real vocabularies: up to 262,144 tokens (Gemma 3), and tokens plus merges about
    half a million at most (BLOOM 250k + 250k, Llama 3 128k + 280k); the cap is twice
    that. The models in models/ and the 262,144-token crafted model are far below it."""
    assert MAX_STRINGS >= 2 * 500_000
    assert _strings_in(crafted) <= MAX_STRINGS // 3
    for path in sorted((Path(__file__).resolve().parents[2] / "models").glob("*.gguf")):
        assert _strings_in(path) <= MAX_STRINGS // 3, path.name


def test_a_string_array_over_the_cap_is_refused_before_its_strings_are_read(tmp_path, monkeypatch):
    n = MAX_STRINGS + 1
    entry = _string_array_entry("x.strings", n)
    data = encode_gguf([ARCH_KV]) + entry
    data = data[:16] + (2).to_bytes(8, "little") + data[24:]
    path = tmp_path / "many-strings.gguf"
    path.write_bytes(data)
    at = len(data) - len(entry) + 8 + len("x.strings") + 4 + 4  # the array's length field
    assert len(data) > 8 << 20  # 8 times what the three reads may read in all
    counting = CountingOpen()
    monkeypatch.setattr(reader, "open", counting, raising=False)
    _no_walk(monkeypatch)
    for read in (validate_gguf, read_gguf, lambda p: read_gguf(p, lazy_arrays=True)):
        with pytest.raises(ModelFileError) as e:
            read(path)
        assert str(e.value) == _cap_message("many-strings.gguf", "x.strings", n, at, n)
    assert counting.opened == 3 and counting.bytes_read <= 3 * (64 + (1 << 20)) < len(data)


def _entries_file(path: Path, entries: list[bytes]) -> list[int]:
    """Write a GGUF of ``ARCH_KV`` and the encoded ``entries``; return where each
    entry's array length field is (for the messages)."""
    head = encode_gguf([ARCH_KV], n_kv=1 + len(entries))
    out, ats = [head], []
    pos = len(head)
    for entry in entries:
        key_len = int.from_bytes(entry[:8], "little")
        ats.append(pos + 8 + key_len + 4 + 4)
        out.append(entry)
        pos += len(entry)
    path.write_bytes(b"".join(out))
    return ats


def test_the_string_count_is_summed_across_arrays(tmp_path, monkeypatch):
    """Arrays nested in arrays and short arrays (decoded by the fast path), long arrays
    (walked by the checked reads) and arrays read in full all count: a header with
    exactly MAX_STRINGS strings is read; in one more string, the array that brings it,
    long or short, is refused before its strings are read, and nothing after it is."""
    nested = encode_gguf([("z.nested", VT.ARRAY, (VT.ARRAY, [(VT.STRING, ["n"] * 700), (VT.STRING, ["m"] * 300)]))])
    nested = nested[24:]  # the entry alone
    long_n = MAX_STRINGS // 2
    rest = MAX_STRINGS - 700 - 300 - 1000 - long_n
    after = encode_gguf([("z.after", VT.ARRAY, (VT.UINT8, [1] * (4 << 20)))])[24:]  # not strings
    common = [nested, _string_array_entry("z.short", 1000), _string_array_entry("z.long", long_n)]

    at_cap = tmp_path / "at-cap.gguf"
    _entries_file(at_cap, common + [_string_array_entry("z.last", rest), after])
    for kwargs in ({}, {"lazy_arrays": True}, {"lazy_arrays": True, "load": ("z.short", "z.last")}):
        g = read_gguf(at_cap, **kwargs)
        assert sum(len(g.get(k)) for k in ("z.short", "z.long", "z.last")) + 1000 == MAX_STRINGS
    assert _strings_in(at_cap) + 1000 == MAX_STRINGS  # (_strings_in does not look into nested arrays)

    counting = CountingOpen()
    monkeypatch.setattr(reader, "open", counting, raising=False)
    over_long = tmp_path / "over-long.gguf"
    ats = _entries_file(over_long, common + [_string_array_entry("z.last", rest + 1), after])
    over_short = tmp_path / "over-short.gguf"
    ats_short = _entries_file(over_short, common + [_string_array_entry("z.last", rest), _string_array_entry("z.tail", 10),
                                                    after])
    cases = [(over_long, "z.last", rest + 1, ats[3], MAX_STRINGS + 1, (700, 300, long_n)),
             (over_short, "z.tail", 10, ats_short[4], MAX_STRINGS + 10, (700, 300, long_n, rest))]
    for path, key, n, at, total, walks in cases:
        for kwargs in ({}, {"lazy_arrays": True}):
            with monkeypatch.context() as m:
                walked = _no_walk(m, allowed=walks)
                counting.reset()
                with pytest.raises(ModelFileError) as e:
                    read_gguf(path, **kwargs)
                assert str(e.value) == _cap_message(path.name, key, n, at, total)
                assert sorted(walked) == sorted(walks)
                if kwargs:  # each byte up to the refused array once, then one read-ahead window at most
                    assert counting.bytes_read <= at + (1 << 20) + 4096 < path.stat().st_size - (2 << 20)


def test_a_model_at_the_string_cap_validates(tmp_path, monkeypatch, capsys):
    """A complete tiny model whose arrays hold MAX_STRINGS strings in all (one long
    array tops them up) is valid, read in one pass from one open."""
    tiny = write_tiny_llama(tmp_path / "tiny.gguf", TinySpec(tokenizer="bpe"))
    n = MAX_STRINGS - _strings_in(tiny)
    path = _with_entries(tiny, tmp_path / "at-string-cap.gguf", {"x.strings": _string_array_entry("x.strings", n)})
    assert _strings_in(path) == MAX_STRINGS
    header = read_gguf(path, lazy_arrays=True).data_offset
    counting = CountingOpen(budget=header + (2 << 20))
    monkeypatch.setattr(reader, "open", counting, raising=False)
    start = time.perf_counter()
    g = validate_gguf(path)
    elapsed = time.perf_counter() - start
    assert len(g.get("x.strings")) == n and counting.opened == 1
    over = _with_entries(tiny, tmp_path / "over-string-cap.gguf", {"x.strings": _string_array_entry("x.strings", n + 1)})
    with pytest.raises(ModelFileError, match=f"which makes {MAX_STRINGS + 1:,} strings in the header's arrays; "):
        validate_gguf(over)
    with capsys.disabled():
        print(f"\nvalidate_gguf at the string cap ({MAX_STRINGS:,} strings, header {header / 2**20:.1f} MiB): "
              f"{elapsed:.2f} s")


def test_a_real_model_shaped_vocabulary_is_within_the_string_cap(crafted, tmp_path):
    """262,144 tokens (Gemma 3's count) and 500,000 merges (more than the largest real
    BPE vocabularies) in one complete model: it validates."""
    path = _with_entries(crafted, tmp_path / "big-vocab.gguf",
                         {"tokenizer.ggml.merges": _string_array_entry("tokenizer.ggml.merges", 500_000, b"a b")})
    assert _strings_in(path) >= N_CRAFTED + 500_000
    g = validate_gguf(path)
    assert len(g.get("tokenizer.ggml.tokens")) == N_CRAFTED
    assert len(g.get("tokenizer.ggml.merges")) == 500_000
