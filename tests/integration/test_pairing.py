"""Pairing drafts with targets: cached fingerprints agree with the exact check."""

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGUFValueType as VT

from specdesk.library import pairing
from specdesk.library.gguf import read_gguf


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDESK_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def smol_one_token_changed(smol_path, tmp_path_factory):
    """SmolLM2 with the text of one token (the first plain-ASCII one from id 139 on)
    replaced by another text of the same length."""
    from specdesk.engine.model import Model

    m = Model(smol_path, vocab_only=True)
    texts = {m.token_text(i) for i in range(m.n_vocab)}
    tid = 139
    while True:
        t = m.token_text(tid)
        cand = t[::-1]
        if t.isascii() and t.isalpha() and len(t) >= 3 and cand != t and cand not in texts:
            break
        tid += 1
    m.close()
    old, new = t.encode(), cand.encode()
    g = read_gguf(smol_path, lazy_arrays=True)
    start = g.kv_offsets["tokenizer.ggml.tokens"]
    data = bytearray(open(smol_path, "rb").read(g.data_offset))
    needle = struct.pack("<Q", len(old)) + old
    at = data.index(needle, start)
    out = tmp_path_factory.mktemp("pair") / "smol-token-139.gguf"
    shutil.copyfile(smol_path, out)
    with open(out, "r+b") as f:
        f.seek(at + 8)
        f.write(new)
    return out, old.decode(), new.decode(), tid


def test_fingerprints_agree_with_the_exact_check(smol_path, smol_draft_path, qwen_target_path, qwen_draft_path, smol_one_token_changed):
    changed, old, new, tid = smol_one_token_changed
    pairs = [
        (smol_path, smol_draft_path),
        (qwen_target_path, qwen_draft_path),
        (qwen_target_path, smol_path),
        (smol_path, qwen_draft_path),
        (smol_path, changed),
    ]
    for t, d in pairs:
        exact = pairing.check_pair(t, d)
        cached = pairing.check_pair_cached(t, d)
        assert (cached.ok, cached.rule, cached.reason) == (exact.ok, exact.rule, exact.reason), (t, d)
    res = pairing.check_pair_cached(smol_path, changed)
    assert res.rule == "token text" and res.token_id == tid
    assert repr(old) in res.reason and repr(new) in res.reason


def test_fingerprints_are_cached(smol_path, monkeypatch):
    first = pairing.fingerprint(smol_path)

    def boom(*a, **k):
        raise AssertionError("the vocabulary was read again")

    monkeypatch.setattr(pairing, "vocab_of", boom)
    assert pairing.fingerprint(smol_path) == first


def test_drafts_for_lists_compatible_first_smallest_first(smol_path, smol_draft_path, qwen_draft_path, smol_one_token_changed, tmp_path):
    changed, _, _, tid = smol_one_token_changed
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("not a model")
    res = pairing.drafts_for(
        smol_path,
        [(qwen_draft_path, "qwen draft"), (changed, "smol changed"), (smol_draft_path, "smol q4_0"), (smol_path, "itself"), (bogus, "notes")],
    )
    names = [c.name for c in res]
    assert names[0] == "smol q4_0" and res[0].compatible
    assert "itself" not in names  # the target does not draft for itself
    bad = {c.name: c for c in res if not c.compatible}
    assert set(bad) == {"qwen draft", "smol changed", "notes"}
    assert "special tokens" in bad["qwen draft"].reason
    assert f"token {tid} " in bad["smol changed"].reason
    assert "not a GGUF" in bad["notes"].reason
    # none of them can draft translated: each is as large as the target or larger, or unreadable
    assert not any(c.usable for c in bad.values())
    assert "not be smaller than the target" in bad["qwen draft"].reason


def test_a_smaller_model_with_another_vocabulary_is_listed_as_a_translated_draft(
        qwen_target_path, qwen_draft_path, smol_path, tmp_path):
    """An empty draft list was the common complaint: any smaller model can draft
    (translated), listed after the same-vocabulary drafts, with its estimated cost."""
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("not a model")
    res = pairing.drafts_for(qwen_target_path, [(smol_path, "smol"), (bogus, "notes"), (qwen_draft_path, "qwen 0.5b")])
    assert [(c.name, c.kind) for c in res] == [
        ("qwen 0.5b", "same vocabulary"), ("smol", "translated"), ("notes", "unusable")]
    smol = res[1]
    assert smol.usable and not smol.compatible and "another vocabulary" in smol.reason
    assert smol.cost_ratio == pytest.approx(smol_path.stat().st_size / qwen_target_path.stat().st_size)
    assert 0 < smol.cost_ratio < res[0].cost_ratio < 1
    d = smol.to_dict()
    assert d["kind"] == "translated" and d["translated"] and not d["compatible"]


# --------------------------------------------------------------------------------------
# The vocabulary from GGUF metadata is the one llama.cpp builds
# --------------------------------------------------------------------------------------

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "gguf"))
from llama_load_worker import CRASHED, load_many  # noqa: E402
from synth.tiny_llama import TinySpec, rebuild_gguf, write_tiny_llama  # noqa: E402


def _loaded_vocab(path):
    from specdesk.engine.model import Model

    m = Model(path, vocab_only=True)
    vi = m.vocab_info()
    texts = [vi.text(i) for i in range(vi.n_tokens)]
    m.close()
    return vi, texts


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tiny-vocab")
    return [write_tiny_llama(tmp / f"tiny-{t}.gguf", TinySpec(tokenizer=t)) for t in ("spm", "bpe")]


def test_vocab_from_metadata_matches_the_loaded_vocab(smol_path, qwen_draft_path, qwen_target_path, tiny_models):
    """vocab_info_from_gguf (no llama.cpp) reports what llama.cpp's own vocabulary does:
    type, size, BOS/EOS, add-BOS/EOS and every token text."""
    for path in [smol_path, qwen_draft_path, qwen_target_path, *tiny_models]:
        meta = pairing.vocab_of(path)
        loaded, texts = _loaded_vocab(path)
        fields = ("vocab_type", "n_tokens", "bos", "eos", "add_bos", "add_eos")
        assert [getattr(meta, f) for f in fields] == [getattr(loaded, f) for f in fields], path.name
        assert [meta.text(i) for i in range(meta.n_tokens)] == texts, path.name


def test_real_pairs_from_metadata(smol_path, qwen_draft_path, qwen_target_path):
    """Qwen 0.5B drafts for Qwen 1.5B; SmolLM2 and Qwen are refused for the same reason
    llama.cpp's loaded vocabularies give."""
    from specdesk.engine.model import Model
    from specdesk.rules.vocab import check_compatible

    ok = pairing.check_pair(qwen_target_path, qwen_draft_path)
    assert ok and ok.n_common == 151936
    bad = pairing.check_pair(smol_path, qwen_draft_path)
    s, q = Model(smol_path, vocab_only=True), Model(qwen_draft_path, vocab_only=True)
    loaded = check_compatible(s.vocab_info(), q.vocab_info())
    s.close()
    q.close()
    assert not bad and (bad.rule, bad.reason) == (loaded.rule, loaded.reason) == ("special tokens", loaded.reason)
    assert "BOS" in bad.reason


def test_pairing_never_imports_llama_cpp(smol_path, qwen_draft_path, tmp_path):
    """The library layer reads files only: pairing a folder does not load llama_cpp."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from specdesk.library import pairing\n"
        f"res = pairing.drafts_for(Path({str(smol_path)!r}), [(Path({str(qwen_draft_path)!r}), 'q')])\n"
        "assert not res[0].compatible, res\n"
        "assert 'llama_cpp' not in sys.modules, 'llama_cpp was imported'\n"
    )
    env = dict(os.environ, SPECDESK_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_hostile_file_in_the_library_does_not_crash_pairing(smol_path, tiny_models, tmp_path):
    """Issue 11, defect 2: two tokens with the same invalid UTF-8 bytes make llama.cpp
    abort (GGML_ASSERT in its vocabulary loader). Such a file in a scanned folder used to
    crash the app at every start, because pairing loaded each vocabulary through
    llama.cpp. Now validation refuses it and pairing never loads a model: the file is
    listed as unusable, with the reason, and the process lives."""
    spm = tiny_models[0]
    tokens: list = list(read_gguf(spm, load=["tokenizer.ggml.tokens"]).get("tokenizer.ggml.tokens").iter_raw())
    tokens[300], tokens[301], tokens[302] = b"\xff", b"\xfe", b"\xfe"
    hostile = rebuild_gguf(spm, tmp_path / "hostile.gguf",
                           set_kv={"tokenizer.ggml.tokens": (VT.ARRAY, (VT.STRING, tokens))})
    assert load_many([hostile], vocab_only=True) == {str(hostile): CRASHED}  # llama.cpp itself aborts
    code = (
        "from pathlib import Path\n"
        "from specdesk.library import pairing\n"
        f"res = pairing.drafts_for(Path({str(spm)!r}), [(Path({str(hostile)!r}), 'hostile')])\n"
        "print(res[0].rule, '|', res[0].reason)\n"
    )
    env = dict(os.environ, SPECDESK_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.strip() == "unreadable | hostile.gguf: duplicate token b'\\xfe' (ids 301 and 302) in tokenizer.ggml.tokens"
