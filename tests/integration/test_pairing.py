"""Pairing drafts with targets: cached fingerprints agree with the exact check."""

import shutil
import struct

import pytest

from specdesk.library import pairing
from specdesk.library.gguf_file import read_gguf


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
        raise AssertionError("the vocabulary was loaded again")

    monkeypatch.setattr(pairing, "Model", boom)
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
