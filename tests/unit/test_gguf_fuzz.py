"""Fuzzing validate_gguf: it returns a GGUFFile or raises ModelFileError, nothing else.

Inputs are mutated copies of
  * the real headers of SmolLM2-135M and Qwen2.5-Coder-0.5B (the header bytes, with the
    tensor data region replaced by a sparse hole of the right size, so an unmutated
    candidate is a valid file and mutations reach the semantic checks), and
  * a tiny complete llama model written with GGUFWriter (SentencePiece and BPE
    tokenizers), small enough that mutated copies can still pass validation.

Mutations: byte flips and overwrites, inserted and deleted bytes, truncation, and
overwritten fields found by walking the valid header -- u64 string/array lengths, header
counts, tensor dimensions and offsets (set to interesting values or nudged), u32 value
types and ggml types, scalar values and string bytes.

Any exception other than ModelFileError is a crash and fails the test; so does an error
message that is not one line starting with the file name. inspect_gguf (which reads
lazily and skips the semantic checks) and vocab_from_gguf are held to the same property
(inspect_gguf on every tiny-model case, on the valid real-header cases). Hypothesis runs derandomized
(reproducible in CI) without an example database; the case counts are summed and
reported by the last test, which asserts at least 10,000 cases ran.

Every validate_gguf call is also measured (issue 11, defect 3), with bounds that are
structural, not timed: its peak memory (tracemalloc, on a sample of the cases) is at
most ``MEM_PER_BYTE`` times the file's size plus ``MEM_SLACK``; it opens the file at
most once; and it reads each
byte it touches at most ``REREAD`` times (plus the read-ahead window), which a quadratic
reader cannot meet. The validation times are recorded and the worst is printed.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdesk.errors import ModelFileError
from specdesk.library.gguf import GGUFFile, inspect_gguf, reader, validate_gguf, vocab_from_gguf

from io_count import CountingOpen  # noqa: E402
from synth.mutations import INTERESTING_U32, INTERESTING_U64, Fields, apply_mutations, header_fields  # noqa: E402
from synth.tiny_llama import TinySpec, write_tiny_llama  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "models"
SMOL = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

# Examples per test. The real headers are large (1.8 MB and 5.9 MB, 100 k and 300 k
# strings), so most cases there cost a full parse; the tiny model is ~1 ms a case.
N_TINY_SPM = 4550
N_TINY_BPE = 4550
N_SMOL = 800
N_QWEN = 250
N_TOTAL_MIN = 10_000

CASES: dict[str, int] = {}
TIMES: dict[str, float] = {}
OUTCOMES: dict[str, dict[str, int]] = {}

# The bounds on one validate_gguf call (see the module docstring).
MEM_PER_BYTE = 16  # reader.py documents peak <= 16 x header bytes + 1 MiB
MEM_SLACK = 1 << 20
REREAD = 3
#: Peak memory is measured on every n-th case (the tiny models' cases are cheap).
TRACE_EVERY = {"tiny-spm": 2, "tiny-bpe": 2, "smollm2": 10, "qwen0.5b": 10}
READ_SLACK = 2 << 20  # read-ahead windows run up to 1 MiB past what is needed


@dataclass
class Worst:
    """The worst validate_gguf call seen per measure: (value, file size, ops)."""

    seconds: tuple = (0.0, 0, None)
    peak: tuple = (0, 0, None)
    peak_ratio: tuple = (0.0, 0, None)
    reread: tuple = (0.0, 0, None)
    traced: int = 0  # cases whose peak memory was measured


WORST: dict[str, Worst] = {}
COUNTER = CountingOpen()


def fuzz_settings(n: int):
    return settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )


@dataclass
class Base:
    """A valid file to mutate: its header bytes (``head``), the size of the data region
    after it (``tail``: written as a sparse hole for real models, real bytes for the
    tiny ones) and the field map of the header."""

    name: str
    head: bytes
    tail: int
    tail_bytes: bytes
    fields: Fields
    g: GGUFFile


def _tiny_base(tmp: Path, tokenizer: str) -> Base:
    path = write_tiny_llama(tmp / f"tiny-{tokenizer}.gguf", TinySpec(tokenizer=tokenizer))
    data = path.read_bytes()
    g = validate_gguf(path)
    return Base(f"tiny-{tokenizer}", data[: g.data_offset], 0, data[g.data_offset :], header_fields(data, g), g)


def _real_base(path: Path) -> Base:
    if not path.is_file():
        pytest.skip(f"{path.name} is not in models/")
    g = validate_gguf(path)
    with open(path, "rb") as f:
        head = f.read(g.data_offset)
    return Base(path.name, head, g.file_size - g.data_offset, b"", header_fields(head, g, max_array_strings=64), g)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gguf-fuzz")


@pytest.fixture(scope="module")
def bases(workdir) -> dict[str, Base]:
    return {}


def get_base(bases: dict[str, Base], workdir: Path, key: str) -> Base:
    if key not in bases:
        bases[key] = {
            "spm": lambda: _tiny_base(workdir, "spm"),
            "bpe": lambda: _tiny_base(workdir, "bpe"),
            "smol": lambda: _real_base(SMOL),
            "qwen": lambda: _real_base(QWEN),
        }[key]()
    return bases[key]


# --------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------


def mutation_ops(base: Base) -> st.SearchStrategy[list[tuple]]:
    f = base.fields
    n = len(base.head)
    anywhere = st.integers(0, n + 64)
    u64_fields = sorted(set(f.u64_len + f.counts + f.dims + f.tensor_offset))
    u32_fields = sorted(set(f.u32_type + f.n_dims + f.ggml_type + [4]))  # 4: the version
    u64_values = st.one_of(st.sampled_from(INTERESTING_U64), st.integers(0, 2**64 - 1))
    u32_values = st.one_of(st.sampled_from(INTERESTING_U32), st.integers(0, 2**32 - 1))
    ops = [
        st.tuples(st.just("flip"), anywhere, st.integers(1, 255)),
        st.tuples(st.just("u64"), st.sampled_from(u64_fields), u64_values),
        st.tuples(st.just("u64add"), st.sampled_from(u64_fields), st.integers(-70, 70)),
        st.tuples(st.just("u32"), st.sampled_from(u32_fields), u32_values),
        st.tuples(st.just("insert"), anywhere, st.binary(min_size=1, max_size=16)),
        st.tuples(st.just("delete"), anywhere, st.integers(1, 64)),
        st.tuples(st.just("truncate"), st.integers(0, n)),
        st.sampled_from(f.str_data).flatmap(
            lambda pl: st.tuples(st.just("set"), st.integers(pl[0], pl[0] + max(pl[1], 1) - 1), st.integers(0, 255))
        ),
    ]
    if f.scalar:
        ops.append(st.sampled_from(f.scalar).flatmap(
            lambda ps: st.tuples(st.just("raw"), st.just(ps[0]), st.binary(min_size=ps[1], max_size=ps[1]))
        ))
    return st.lists(st.one_of(ops), min_size=1, max_size=4)


def tail_sizes(base: Base) -> st.SearchStrategy[int]:
    """The data region's size: usually complete, sometimes cut short (truncated file)."""
    full = base.tail + len(base.tail_bytes)
    return st.one_of(st.just(full), st.just(full), st.just(full), st.integers(0, full))


# --------------------------------------------------------------------------------------
# The property
# --------------------------------------------------------------------------------------


def check_error(e: ModelFileError, path: Path, ops: list[tuple]) -> None:
    msg = str(e)
    assert "\n" not in msg and "\r" not in msg, f"multi-line message: {msg!r} (ops {ops})"
    assert msg.startswith(f"{path.name}: "), f"message does not name the file: {msg!r}"


def check_inspect(path: Path, ops: list[tuple]) -> None:
    """inspect_gguf (lazy read, no semantic checks) also returns or raises ModelFileError."""
    try:
        report = inspect_gguf(path)
    except ModelFileError as e:
        check_error(e, path, ops)
        return
    json.dumps(report)


def check_case(name: str, base: Base, path: Path, ops: list[tuple], tail: int, inspect: bool) -> None:
    head = apply_mutations(base.head, ops)
    with open(path, "wb") as out:
        out.write(head)
        out.write(base.tail_bytes[:tail])
        out.truncate(len(head) + tail)  # the rest of the data region: a sparse hole
    CASES[name] = CASES.get(name, 0) + 1
    outcome = OUTCOMES.setdefault(name, {"valid": 0, "rejected": 0})
    if inspect:
        check_inspect(path, ops)
    try:
        g = measured_validate(name, path, ops, trace=CASES[name] % TRACE_EVERY[name] == 1)
    except ModelFileError as e:
        check_error(e, path, ops)
        outcome["rejected"] += 1
        return
    # (any other exception propagates: a crash)
    assert isinstance(g, GGUFFile)
    assert g.file_size == path.stat().st_size
    assert all(g.data_offset <= t.offset and t.offset + t.n_bytes <= g.file_size for t in g.tensors)
    vocab = vocab_from_gguf(g)
    assert vocab["n_tokens"] == len(vocab["tokens"])
    if not inspect:
        check_inspect(path, ops)
    outcome["valid"] += 1


def measured_validate(name: str, path: Path, ops: list[tuple], trace: bool) -> GGUFFile:
    """validate_gguf(path), with the bounds asserted: opens and bytes read always; with
    ``trace``, the peak memory too (tracemalloc slows allocation-heavy code up to 10x,
    so it samples the cases, and only untraced calls are timed)."""
    COUNTER.reset()
    if trace:
        tracemalloc.start()
    start = time.perf_counter()
    try:
        return validate_gguf(path)
    finally:
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] if trace else 0
        tracemalloc.stop()
        size = path.stat().st_size
        ratio = peak / (MEM_PER_BYTE * size + MEM_SLACK)  # the share of the bound used
        w = WORST.setdefault(name, Worst())
        if not trace and seconds > w.seconds[0]:
            w.seconds = (seconds, size, ops)
        if peak > w.peak[0]:
            w.peak = (peak, size, ops)
        if ratio > w.peak_ratio[0]:
            w.peak_ratio = (ratio, size, ops)
        if COUNTER.reread > w.reread[0]:
            w.reread = (COUNTER.reread, size, ops)
        w.traced += trace
        assert peak <= MEM_PER_BYTE * size + MEM_SLACK, f"peak {peak:,} bytes for a file of {size:,} (ops {ops})"
        assert COUNTER.opened <= 1, f"opened the file {COUNTER.opened} times (ops {ops})"
        assert COUNTER.bytes_read <= REREAD * COUNTER.extent + READ_SLACK, (
            f"read {COUNTER.bytes_read:,} bytes of the first {COUNTER.extent:,} (ops {ops})")


def run_fuzz(name: str, key: str, n: int, bases: dict, workdir: Path, inspect_all: bool, monkeypatch) -> None:
    base = get_base(bases, workdir, key)
    path = workdir / f"candidate-{name}.gguf"
    monkeypatch.setattr(reader, "open", COUNTER, raising=False)

    @fuzz_settings(n)
    @given(ops=mutation_ops(base), tail=tail_sizes(base))
    def prop(ops, tail):
        check_case(name, base, path, ops, tail, inspect_all)

    start = time.perf_counter()
    prop()
    TIMES[name] = time.perf_counter() - start


def test_fuzz_tiny_llama_spm(bases, workdir, monkeypatch):
    run_fuzz("tiny-spm", "spm", N_TINY_SPM, bases, workdir, True, monkeypatch)


def test_fuzz_tiny_llama_bpe(bases, workdir, monkeypatch):
    run_fuzz("tiny-bpe", "bpe", N_TINY_BPE, bases, workdir, True, monkeypatch)


def test_fuzz_smollm2_header(bases, workdir, monkeypatch):
    run_fuzz("smollm2", "smol", N_SMOL, bases, workdir, False, monkeypatch)


def test_fuzz_qwen_header(bases, workdir, monkeypatch):
    run_fuzz("qwen0.5b", "qwen", N_QWEN, bases, workdir, False, monkeypatch)


def test_fuzz_case_count(capsys):
    """Report the cases run; at least 10,000 when every fuzz test above ran."""
    names = ("tiny-spm", "tiny-bpe", "smollm2", "qwen0.5b")
    total = sum(CASES.values())
    lines = [f"gguf fuzz: {total:,} cases in {sum(TIMES.values()):.1f} s, no crashes"]
    for name in names:
        if name in CASES:
            o = OUTCOMES[name]
            w = WORST[name]
            lines.append(f"  {name}: {CASES[name]:,} cases ({o['valid']:,} valid, {o['rejected']:,} rejected) "
                         f"in {TIMES.get(name, 0.0):.1f} s; worst validation {w.seconds[0] * 1000:.1f} ms, "
                         f"worst peak {w.peak[0] / 2**20:.2f} MiB (file {w.peak[1] / 2**20:.1f} MiB; {w.traced:,} traced), "
                         f"at most {w.peak_ratio[0]:.0%} of the memory bound, worst re-read {w.reread[0]:.2f}x")
    if WORST:
        slowest = max(WORST.items(), key=lambda kv: kv[1].seconds[0])
        lines.append(f"  slowest validation: {slowest[1].seconds[0] * 1000:.1f} ms ({slowest[0]}, "
                     f"{slowest[1].seconds[1]:,} bytes, ops {slowest[1].seconds[2]})")
    with capsys.disabled():  # shown in the normal (captured, -q) run
        print("\n" + "\n".join(lines))
    if any(name not in CASES for name in names):
        pytest.skip("not every fuzz test ran (deselected or skipped): " + lines[0])
    assert total >= N_TOTAL_MIN, lines[0]
