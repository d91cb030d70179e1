#!/usr/bin/env python3
"""How long and how much memory GGUF validation takes, on mutated files and a crafted one.

    .venv/bin/python tools/gguf_fuzz_report.py [--cases 2000] [--seed 1] [--real] [--caps-only] [--runs 5]

Runs ``--cases`` seeded mutations (tools/synth/mutations.py's ``random_ops``: flipped
bytes, overwritten length/type/dimension/offset fields, inserted and deleted bytes,
truncation) of tiny complete llama models (SentencePiece and BPE), and with ``--real``
of the SmolLM2 and Qwen2.5 0.5B headers in models/ too (their tensor data a sparse
hole). For each case it measures one ``validate_gguf`` call: wall time, peak memory
(tracemalloc) and bytes read per byte touched. Then it validates a crafted model with
262,144 distinct tokens that all decode to the same text (the input that made the old
duplicate check quadratic) and prints its validation time.

It also builds the worst cases of the record caps (``MAX_KV`` metadata entries,
``MAX_TENSORS`` tensor infos, and both at once, in complete tiny models that pass
validation) and prints the median time and the peak memory of validating each, so the
claim "under a second at both caps" can be re-measured; ``--caps-only`` prints just those.
The same for the string cap (``MAX_STRINGS`` string elements over all arrays): one long
array at the cap (a vocabulary of that many tokens, which the validator also loads and
hashes), the cap spread over thousands of short arrays (each decoded into a list), and
the cap in arrays nested in arrays (read by the checked reads; refused afterwards, as
llama.cpp reads no nested arrays).

Timings are noisy on a busy machine; the memory and read figures are not.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from io_count import CountingOpen  # tools/io_count.py and tools/synth/: this script's folder is on sys.path
from synth.mutations import apply_mutations, header_fields, random_ops
from synth.tiny_llama import TinySpec, look_alike_tokens, write_big_vocab_llama, write_tiny_llama

from specdesk.errors import ModelFileError
from specdesk.library.gguf import clear_memo, read_gguf, reader, validate_gguf

ROOT = Path(__file__).resolve().parents[1]

REAL = ["SmolLM2-135M-Instruct.Q4_1.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"]


def mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def bases(tmp: Path, real: bool) -> list[tuple[str, bytes, int]]:
    """(name, header bytes, size of the data region after them) of each file to mutate."""
    out = []
    for tok in ("spm", "bpe"):
        p = write_tiny_llama(tmp / f"tiny-{tok}.gguf", TinySpec(tokenizer=tok))
        out.append((f"tiny-{tok}", p.read_bytes(), 0))
    if real:
        for name in REAL:
            p = ROOT / "models" / name
            if not p.is_file():
                print(f"(skipping {name}: not in models/)")
                continue
            g = read_gguf(p, lazy_arrays=True)
            with open(p, "rb") as f:
                out.append((name, f.read(g.data_offset), g.file_size - g.data_offset))
    return out


def peak_of_validation(path: Path) -> int:
    """Peak bytes allocated while ``validate_gguf(path)`` runs, whether it accepts the
    file or not (tracemalloc slows allocation-heavy code, so it is never timed)."""
    tracemalloc.start()
    try:
        validate_gguf(path)
    except ModelFileError:
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


class Measured:
    def __init__(self) -> None:
        self.counter = CountingOpen()
        self.worst_time = (0.0, "")
        self.worst_peak = (0, 0, "")
        self.worst_ratio = (0.0, 0, "")
        self.worst_reread = (0.0, "")

    def validate(self, path: Path, what: str) -> bool:
        """Validate twice (a fresh file is never memoised): timed, then traced by
        tracemalloc (which slows allocation-heavy code up to 10x) for the peak memory."""
        self.counter.reset()
        t0 = time.perf_counter()
        try:
            validate_gguf(path)
            ok = True
        except ModelFileError:
            ok = False
        dt = time.perf_counter() - t0
        reread = self.counter.reread
        peak = peak_of_validation(path)
        size = path.stat().st_size
        self.worst_time = max(self.worst_time, (dt, what))
        self.worst_peak = max(self.worst_peak, (peak, size, what))
        self.worst_ratio = max(self.worst_ratio, (peak / (16 * size + (1 << 20)), size, what))
        self.worst_reread = max(self.worst_reread, (reread, what))
        return ok


def print_structure_heavy() -> None:
    """Headers made of many small records (the costliest per byte for a Python parser).
    100,000 records is over the caps (MAX_KV, MAX_TENSORS): these show the refusal; the
    cap worst cases below show the most that is read."""
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFValueType as VT
    from synth.tiny_llama import encode_gguf

    arch = ("general.architecture", VT.STRING, "llama")
    n = 100_000
    cases = {
        f"{n:,} one-byte metadata entries": encode_gguf([arch] + [(f"{i:x}", VT.UINT8, 1) for i in range(n)]),
        f"{n:,} tensor infos": encode_gguf([arch], [(f"t{i:x}", (8,), int(Q.F32), 32 * i) for i in range(n)],
                                           data=bytes(32 * n)),
    }
    with tempfile.TemporaryDirectory(prefix="gguf-heavy-") as tmp_s:
        for what, data in cases.items():
            p = Path(tmp_s) / "heavy.gguf"
            p.write_bytes(data)
            t0 = time.perf_counter()
            outcome = "valid"
            try:
                validate_gguf(p)
            except ModelFileError as e:
                outcome = str(e).split(": ", 1)[1]  # not a model, or over a cap
            dt = time.perf_counter() - t0
            print(f"{what} (header {mib(len(data) - (32 * n if 'tensor' in what else 0))}): {dt:.2f} s [{outcome[:90]}]")


def cap_worst_cases(tmp: Path) -> dict[str, Path]:
    """Complete tiny models (they pass validate_gguf) filled up to the record caps with
    the costliest records: metadata entries holding 2-string arrays, and 4-dimensional
    tensor infos named blk.0.* (each goes through the layer check). The expert count
    makes the validator skip llama's exact tensor set, so the extra tensors are allowed.
    The tensor data is a sparse hole."""
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFValueType as VT
    from synth.tiny_llama import rebuild_gguf

    from specdesk.library.gguf.spec import MAX_KV, MAX_TENSORS

    base = write_tiny_llama(tmp / "cap-base.gguf", TinySpec())
    g = read_gguf(base, lazy_arrays=True)
    experts = {"llama.expert_count": (VT.UINT32, 2), "llama.expert_used_count": (VT.UINT32, 1)}
    n_kv = MAX_KV - len(g.metadata) - len(experts)
    n_t = MAX_TENSORS - len(g.tensors)
    kvs = {f"x.{i:05x}": (VT.ARRAY, (VT.STRING, ["a", "b"])) for i in range(n_kv)}
    tensors = [(f"blk.0.x{i:05x}", (8, 1, 1, 1), int(Q.F32)) for i in range(n_t)]
    out = {}
    for what, extra_kv, extra_t in [
        (f"{MAX_KV:,} metadata entries (the cap)", kvs, []),
        (f"{MAX_TENSORS:,} tensor infos (the cap)", {}, tensors),
        (f"both caps: {MAX_KV:,} entries + {MAX_TENSORS:,} tensors", kvs, tensors),
    ]:
        path = tmp / f"cap-{len(out)}.gguf"
        rebuild_gguf(base, path, sparse=True, set_kv={**experts, **extra_kv}, extra_tensors=extra_t)
        out[what] = path
    return out


def string_cap_worst_cases(tmp: Path) -> dict[str, tuple[Path, str | None]]:
    """Headers holding ``MAX_STRINGS`` array strings in all (the string cap), each with
    the message validate_gguf ends with (None: the model is valid). Strings of two
    bytes: each decoded one is a new object (one-byte ones are shared)."""
    from gguf import GGUFValueType as VT
    from synth.tiny_llama import encode_gguf, rebuild_gguf

    from specdesk.library.gguf.spec import MAX_STRINGS

    out: dict[str, tuple[Path, str | None]] = {}
    base = write_tiny_llama(tmp / "strings-base.gguf", TinySpec(tokenizer="bpe"))
    g = read_gguf(base, lazy_arrays=True)
    in_base = {k: len(v) for k, v in g.metadata.items() if g.value_types[k] == (VT.ARRAY, VT.STRING)}  # type: ignore[arg-type]
    n_tok = MAX_STRINGS - (sum(in_base.values()) - in_base["tokenizer.ggml.tokens"])
    tokens = [b"%x" % i for i in range(n_tok)]  # distinct, no NUL
    out[f"one array at the string cap: {n_tok:,} tokens (+ {MAX_STRINGS - n_tok:,} other strings)"] = (
        write_big_vocab_llama(tmp / "strings-vocab.gguf", tokens, base=base), None)
    per = 1024  # the longest array that becomes a list
    n_arr, rest = divmod(MAX_STRINGS - sum(in_base.values()), per)
    spread = {f"x.{i:05x}": (VT.ARRAY, (VT.STRING, ["ab"] * per)) for i in range(n_arr)}
    spread["x.rest"] = (VT.ARRAY, (VT.STRING, ["ab"] * rest))
    out[f"the string cap spread: {n_arr:,} arrays of {per:,} strings"] = (
        rebuild_gguf(base, tmp / "strings-spread.gguf", sparse=True, set_kv=spread), None)
    nested = [(VT.STRING, ["ab"] * per)] * (MAX_STRINGS // per)
    data = encode_gguf([("general.architecture", VT.STRING, "llama"), ("x.nested", VT.ARRAY, (VT.ARRAY, nested))])
    path = tmp / "strings-nested.gguf"
    path.write_bytes(data)
    out[f"the string cap in nested arrays: {len(nested):,} arrays of {per:,} strings in one"] = (path, "array of arrays")
    return out


def _time_and_peak(path: Path, runs: int) -> tuple[list[float], list[float], int, str | None]:
    """validate_gguf ``runs`` times (wall and CPU seconds), then once under tracemalloc
    (peak bytes); and the error it ends with, if any."""
    times, cpu = [], []
    error = None
    for _ in range(runs):
        clear_memo()
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            validate_gguf(path)
        except ModelFileError as e:
            error = str(e).split(": ", 1)[1]
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    clear_memo()
    peak = peak_of_validation(path)
    clear_memo()
    return times, cpu, peak, error


def print_cap_worst_cases(runs: int = 5) -> None:
    """Validation time (median of ``runs``, and the slowest; wall clock and this
    process's CPU time, which other load on the machine disturbs less) and peak memory
    at the caps."""
    import statistics

    with tempfile.TemporaryDirectory(prefix="gguf-caps-") as tmp_s:
        tmp = Path(tmp_s)
        cases = {what: (path, None) for what, path in cap_worst_cases(tmp).items()}
        cases.update(string_cap_worst_cases(tmp))
        for what, (path, expected) in cases.items():
            header = read_gguf(path, lazy_arrays=True).data_offset
            times, cpu, peak, error = _time_and_peak(path, runs)
            if (error is None) != (expected is None) or (error and expected not in error):
                raise AssertionError(f"{what}: expected {expected or 'a valid model'}, got {error or 'a valid model'}")
            outcome = "validated" if error is None else f"refused after reading ({error[:60]}...)"
            print(f"{what} (header {mib(header)}): {outcome} in {statistics.median(times):.2f} s "
                  f"(median of {runs}, slowest {max(times):.2f} s; CPU {statistics.median(cpu):.2f} s), "
                  f"peak {mib(peak)} ({peak / header:.1f}x the header)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--real", action="store_true", help="also mutate the real model headers in models/")
    ap.add_argument("--caps-only", action="store_true", help="only the record-cap worst cases")
    ap.add_argument("--runs", type=int, default=5, help="timed validations per cap worst case")
    a = ap.parse_args()
    if a.caps_only:
        print_cap_worst_cases(a.runs)
        return 0
    m = Measured()
    reader.open = m.counter  # count opens and reads in the GGUF reader
    rng = random.Random(a.seed)
    with tempfile.TemporaryDirectory(prefix="gguf-fuzz-") as tmp_s:
        tmp = Path(tmp_s)
        files = bases(tmp, a.real)
        fields = []
        for _name, head, tail in files:
            p = tmp / "field-map.gguf"
            with open(p, "wb") as f:
                f.write(head)
                f.truncate(len(head) + tail)
            fields.append(header_fields(head, read_gguf(p, lazy_arrays=True)))
        valid = 0
        t0 = time.perf_counter()
        path = tmp / "case.gguf"
        for i in range(a.cases):
            k = i % len(files)
            name, head, tail = files[k]
            ops = random_ops(rng, head, fields[k])
            data = apply_mutations(head, ops)
            with open(path, "wb") as f:
                f.write(data)
                f.truncate(len(data) + tail)
            valid += m.validate(path, f"{name} case {i} {ops}")
        total = time.perf_counter() - t0

        crafted = write_big_vocab_llama(tmp / "look-alike-262k.gguf", look_alike_tokens(262_144))
        header = read_gguf(crafted, lazy_arrays=True).data_offset
        clear_memo()
        c0 = time.perf_counter()
        validate_gguf(crafted)
        crafted_s = time.perf_counter() - c0
        clear_memo()
        m.counter.reset()
        crafted_peak = peak_of_validation(crafted)
        crafted_reread = m.counter.reread

    print_structure_heavy()
    print_cap_worst_cases(a.runs)
    print(f"cases: {a.cases:,} ({valid:,} valid, {a.cases - valid:,} rejected) in {total:.1f} s, "
          f"files: {', '.join(n for n, _, _ in files)}")
    print(f"worst validation time: {m.worst_time[0] * 1000:.1f} ms  [{m.worst_time[1][:160]}]")
    print(f"worst peak memory: {mib(m.worst_peak[0])} for a file of {mib(m.worst_peak[1])}  [{m.worst_peak[2][:120]}]")
    print(f"largest share of the memory bound (16 x file size + 1 MiB): {m.worst_ratio[0]:.0%}")
    print(f"worst bytes read per byte touched: {m.worst_reread[0]:.2f}  (bound: 3 + the 1 MiB read-ahead)")
    print(f"crafted 262,144-token vocabulary (header {mib(header)}): validated in {crafted_s:.2f} s, "
          f"peak {mib(crafted_peak)}, read {crafted_reread:.2f} bytes per byte touched")
    return 0


if __name__ == "__main__":
    sys.exit(main())
