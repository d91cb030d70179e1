"""The llama.cpp engine: logits rows, rollback, prefix reuse, vocab checks."""

import numpy as np
import pytest

from specdesk.engine.context import Context
from specdesk.engine.model import Model
from specdesk.rules.vocab import check_compatible
from specdesk.errors import ContextOverflowError


@pytest.fixture(scope="module")
def smol(smol_path):
    m = Model(smol_path)
    yield m
    m.close()


def test_prefill_returns_only_the_last_row(smol):
    ctx = Context(smol, n_ctx=256, threads=2)
    toks = smol.tokenize("The quick brown fox jumps over the lazy")
    row = ctx.prefill(toks)
    assert row.shape == (smol.n_vocab,)
    assert ctx.n_past == len(toks) and ctx.history == toks
    assert ctx.last_prefill_evaluated == len(toks)
    ctx.close()


def test_batched_rows_match_their_positions(smol):
    """Row i of a batch predicts the token after batch[:i+1] (same as stepping)."""
    ctx = Context(smol, n_ctx=256, threads=2)
    toks = smol.tokenize("Once upon a time, in a land far away,")
    base = len(toks) - 3
    ctx.prefill(toks[:base], logits=False)
    rows = ctx.eval(toks[base:], all_rows=True)
    assert rows.shape == (3, smol.n_vocab)
    ctx.rollback(base)
    for i, t in enumerate(toks[base:]):
        single = ctx.eval([t], all_rows=False)[-1]
        assert np.argmax(single) == np.argmax(rows[i])
        assert np.allclose(single, rows[i], atol=0.5)
    ctx.close()


def test_rollback_then_reevaluate_gives_the_same_logits(smol):
    ctx = Context(smol, n_ctx=256, threads=2)
    toks = smol.tokenize("def add(a, b):\n    return")
    a = ctx.prefill(toks)
    ctx.eval(smol.tokenize(" a + b + c", add_special=False))
    ctx.rollback(len(toks) - 1)
    assert ctx.history == toks[:-1]
    b = ctx.eval([toks[-1]], all_rows=False)[-1]
    assert np.argmax(a) == np.argmax(b)
    ctx.close()


def test_prefix_reuse_evaluates_only_new_tokens(smol):
    ctx = Context(smol, n_ctx=256, threads=2)
    t1 = smol.tokenize("User: hello there\nAssistant:")
    ctx.prefill(t1)
    t2 = t1 + smol.tokenize(" hi!\nUser: how are you?\nAssistant:", add_special=False)
    before = ctx.evaluated
    ctx.prefill(t2)
    assert ctx.last_prefill_evaluated == len(t2) - len(t1)
    assert ctx.evaluated - before == len(t2) - len(t1)
    # an identical prompt re-evaluates only its last token (to produce logits)
    ctx.prefill(t2)
    assert ctx.last_prefill_evaluated == 1
    ctx.close()


def test_context_overflow_is_an_error_not_a_crash(smol):
    ctx = Context(smol, n_ctx=32, threads=2)
    n = ctx.n_ctx  # llama.cpp may round the size up
    with pytest.raises(ContextOverflowError):
        ctx.prefill(list(range(100, 100 + n + 8)))
    ctx.prefill(list(range(100, 100 + n - 2)))
    with pytest.raises(ContextOverflowError):
        ctx.eval(list(range(5)))
    assert ctx.n_past == n - 2
    ctx.close()


def test_vocab_compatibility_rules(smol_path, smol_draft_path, qwen_draft_path):
    a = Model(smol_path, vocab_only=True)
    b = Model(smol_draft_path, vocab_only=True)
    q = Model(qwen_draft_path, vocab_only=True)
    ok = check_compatible(a.vocab_info(), b.vocab_info())
    assert ok and ok.n_common == 49152
    bad = check_compatible(q.vocab_info(), a.vocab_info())
    assert not bad and bad.rule == "special tokens"
    assert "BOS" in bad.reason
    for m in (a, b, q):
        m.close()


def test_token_text_rule_names_token_and_both_texts(smol_path):
    import dataclasses

    a = Model(smol_path, vocab_only=True).vocab_info()
    b = dataclasses.replace(a, text=lambda i: "X" if i == 139 else a.text(i))
    res = check_compatible(a, b)
    assert res.rule == "token text" and res.token_id == 139
    assert "token 139" in res.reason and repr(a.text(139)) in res.reason and "'X'" in res.reason


def test_size_difference_up_to_128_is_allowed():
    from specdesk.rules.vocab import VocabInfo

    t = VocabInfo(2, 152064, 1, 2, False, False, text=str)
    d = VocabInfo(2, 151936, 1, 2, False, False, text=str)
    res = check_compatible(t, d)
    assert res and res.n_common == 151936
    far = VocabInfo(2, 151935 - 128, 1, 2, False, False, text=str)
    res = check_compatible(t, far)
    assert not res and res.rule == "vocab size"


def test_stop_between_the_chunks_of_a_long_prompt(smol):
    """Stop reaches the prompt phase: a prompt longer than a batch stops between
    chunks, keeps what it read, and a later prefill resumes from there."""
    from specdesk.errors import Cancelled

    ctx = Context(smol, n_ctx=512, threads=2, n_batch=32)
    toks = smol.tokenize("The quick brown fox jumps over the lazy dog. " * 12)
    assert len(toks) > 64
    calls = []

    def cancel() -> bool:
        calls.append(1)
        return len(calls) > 2  # after two chunks

    with pytest.raises(Cancelled):
        ctx.prefill(toks, cancel=cancel)
    assert ctx.n_past == 64 and ctx.history == toks[:64]
    ctx.prefill(toks)
    assert ctx.last_prefill_evaluated == len(toks) - 64 and ctx.history == toks
    ctx.close()


_BATCH_PROBE = """
import sys
from specdesk.engine.context import Context
from pathlib import Path
from specdesk.engine.model import Model
from specdesk.session.core import weights_to_repack
m = Model(sys.argv[1], repack=weights_to_repack(Path(sys.argv[1]), 0))
ctx = Context(m, n_ctx=512, threads=2)
row = ctx.prefill(m.tokenize("def fibonacci(n):\\n    '''Return the n-th Fibonacci number.'''\\n" * 4))
print(" ".join(sorted({b.device for b in m.buffers if b.kind == "model"})))
print(int(row.argmax()))
"""


def test_a_batch_of_many_tokens_decodes_on_any_build(qwen_draft_path):
    """A prompt is a batch of many tokens. On a llama.cpp built with AMX code (a
    Sapphire Rapids or later CPU), 0.3.36's AMX matrix product loads a tile
    configuration half made of stack garbage, and on a 2-core Xeon VM every prompt
    killed the process (SIGSEGV) before the loader turned llama.cpp's extra buffers off
    there. In a subprocess, so that a crash fails this test rather than the run. Where
    the build has no AMX code, the repacked copy of Q4_K weights (a faster layout on
    AVX2) must stay: the fix must not cost other machines their repacking; on an AMX
    build the session names those weights for it (61 ms a Qwen 1.5B step against 79)."""
    import subprocess
    import sys

    from specdesk.engine.model import amx_compiled, system_info

    p = subprocess.run([sys.executable, "-c", _BATCH_PROBE, str(qwen_draft_path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"the prompt's batch killed the process ({p.returncode}): {p.stderr[-2000:]}"
    devices = p.stdout.split("\n")[0].split()
    if amx_compiled():
        assert "AMX" not in devices, devices
    if "REPACK = 1" in system_info() and "AVX2 = 1" in system_info():
        # there by llama.cpp's own choice, or (AMX builds) by name, as the session loads
        assert "CPU_REPACK" in devices, devices


def test_the_repacked_copy_the_estimate_counts_is_the_one_llama_cpp_makes(qwen_target_path):
    """The memory estimate's repacked bytes and the CPU_REPACK buffer llama.cpp
    allocates for a model loaded as the session loads it: equal, where llama.cpp picks
    the weights itself and where (an AMX build) the loader names them."""
    from pathlib import Path

    from specdesk.engine.model import Model, repack_types
    from specdesk.library.gguf import estimate_memory, validate_gguf
    from specdesk.session.core import weights_to_repack

    path = Path(qwen_target_path)
    m = Model(path, repack=weights_to_repack(path, 0))
    try:
        made = sum(b.bytes for b in m.buffers if b.kind == "model" and b.device == "CPU_REPACK")
    finally:
        m.close()
    counted = estimate_memory(validate_gguf(path), n_ctx=1024, repack_types=repack_types())["repack_bytes"]
    # llama.cpp rounds a buffer's size as it prints it (MiB with two decimals)
    assert abs(made - counted) <= 2**20 * 0.01, (made, counted)
    if "Q4_K" in repack_types():
        assert made > 300 * 2**20  # the 1.5B's Q4_K matrices: about 600 MiB
