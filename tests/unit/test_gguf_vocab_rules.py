"""The vocabulary rules' building blocks, against transcriptions of llama.cpp's own code.

The end-to-end cases (each rule refused by the CLI, and shown to abort, hang or be
refused by the real llama.cpp) are in tests/integration/test_hostile_gguf.py; here the
parts that decide them are checked on many inputs: the charsmap walk against a literal
port of llama.cpp's normalize_prefix, real sentencepiece charsmaps, the UTF-8 decoding,
RWKV's unescaping, the special-token resolution and the raw token scans.
"""

from __future__ import annotations

import random
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hostile_gguf import sentencepiece_charsmap, xcda_blob, xcda_leaf  # noqa: E402

from specdesk.library.gguf import StringArray  # noqa: E402
from specdesk.library.gguf.vocab import TokenScan, resolve_specials  # noqa: E402
from specdesk.library.gguf.vocab import llama_token_text  # noqa: E402
from specdesk.library.gguf.vocab_rules import (  # noqa: E402
    Vocab,
    _beyond_unicode_ids,
    _rwkv_single_bytes,
    first_bad_codepoint,
    rwkv_unescape,
    xcda_problem,
)

# --------------------------------------------------------------------------------------
# The charsmap walk
# --------------------------------------------------------------------------------------


class Thrown(Exception):
    pass


def llama_cpp_walk(blob: bytes) -> str | None:
    """llama.cpp's charsmap handling, transcribed: the load-time checks (2063, 2070),
    then normalize_prefix (1140-1235) from every state the walk can reach, for every
    next input byte 1..255. Returns the exception llama.cpp would throw, or None."""
    if len(blob) < 4:
        return "too small"
    xcda_blob_size = struct.unpack_from("<I", blob)[0]
    if xcda_blob_size + 4 >= len(blob):
        return "load"
    n = xcda_blob_size // 4
    xcda = struct.unpack_from(f"<{n}I", blob, 4)
    repl = blob[4 + xcda_blob_size :]
    if n == 0:
        return None

    def get_node(i: int) -> int:
        if i >= n:
            raise Thrown("Index out of array bounds in XCDA array!")
        return xcda[i]

    def get_base(i: int) -> int:
        node = get_node(i)
        return (node >> 10) << ((node & (1 << 9)) >> 6)

    try:
        start = get_base(0)
        todo, seen = [start], {start}
        while todo:
            node_index = todo.pop()
            for c in range(1, 256):
                i = node_index ^ c
                if get_node(i) & ((1 << 31) | 0xFF) != c:  # get_lcheck
                    continue
                is_leaf = (get_node(i) >> 8) & 1
                nxt = i ^ get_base(i)
                if is_leaf:
                    offset = get_node(nxt) & ((1 << 31) - 1)  # get_value
                    if offset >= len(repl):
                        raise Thrown("Index out of array bounds in precompiled charsmap!")
                    if b"\0" not in repl[offset:]:
                        raise Thrown("Unterminated string in precompiled charsmap!")
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
    except Thrown as e:
        return str(e)
    return None


def random_charsmap(rng: random.Random) -> bytes:
    """A small double array of plausible shape (chains of matches, leaves, value nodes)
    with a few faults: nodes pointing past the end, offsets past the replacements, a
    missing NUL, a cut array."""
    n_blocks = rng.randint(1, 4)
    size = 256 * n_blocks - rng.choice([0, 0, 0, 1, 17, 200])
    units: dict[int, int] = {}
    repl = bytearray(b"ab\0cde\0" if rng.random() < 0.9 else b"ab")
    root_block = rng.randrange(n_blocks) * 256
    units[0] = (root_block << 10)  # BASE(0): the root's state
    state = root_block
    for _ in range(rng.randint(1, 6)):
        c = rng.randint(1, 255)
        i = state ^ c
        target_block = rng.randrange(n_blocks + (1 if rng.random() < 0.1 else 0)) * 256
        is_leaf = rng.random() < 0.5
        if is_leaf:
            value_node = target_block + rng.randrange(256)
            units[i] = xcda_leaf(c, value_node)
            offset = rng.choice([0, 3, 3, len(repl), 1000]) if rng.random() < 0.3 else rng.choice([0, 3])
            units[value_node] = (1 << 31) | offset
            state = value_node
        else:
            nxt = target_block + rng.randrange(256)
            units[i] = ((i ^ nxt) << 10) | c
            state = nxt
    units = {k: v for k, v in units.items() if k < size}
    return xcda_blob(units, size, bytes(repl))


def test_charsmap_walk_agrees_with_llama_cpp_on_random_double_arrays():
    rng = random.Random(20261201)
    kinds = {True: 0, False: 0}
    for _ in range(400):
        blob = random_charsmap(rng)
        want = llama_cpp_walk(blob)
        got = xcda_problem(blob)
        assert (got is None) == (want is None), (want, got, blob[:64])
        kinds[want is None] += 1
    assert min(kinds.values()) >= 50, kinds  # both outcomes are well represented


def _cut(blob: bytes, n_bytes: int) -> bytes:
    size = struct.unpack_from("<I", blob)[0]
    return struct.pack("<I", size - n_bytes) + blob[4 : 4 + size - n_bytes] + blob[4 + size :]


def test_t5_charsmap_passes_as_in_llama_cpp_and_its_damage_is_found():
    """sentencepiece's nmt_nfkc (T5's charsmap): llama.cpp's walk and this one agree on
    the real table and on the table with its double array cut short."""
    blob = sentencepiece_charsmap("nmt_nfkc")
    assert llama_cpp_walk(blob) is None
    assert xcda_problem(blob) is None
    assert llama_cpp_walk(_cut(blob, 1024)) == "Index out of array bounds in XCDA array!"
    assert "outside its" in xcda_problem(_cut(blob, 1024))


@pytest.mark.parametrize("rule", ["nfkc", "nmt_nfkc_cf", "nfkc_cf"])
def test_other_sentencepiece_charsmaps_pass(rule):
    blob = sentencepiece_charsmap(rule)
    assert xcda_problem(blob) is None
    assert xcda_problem(_cut(blob, 4096)) is not None


def test_charsmap_problems_name_what_is_wrong():
    h = ord("h")
    assert "4-byte header" in xcda_problem(b"\1\0")
    assert "declares 5,000 bytes" in xcda_problem(struct.pack("<I", 5000) + bytes(8))
    assert "outside its 256 nodes" in xcda_problem(xcda_blob({h: xcda_leaf(h, 0x4000)}, 256, b"h\0"))
    assert "past its 2 bytes" in xcda_problem(xcda_blob({h: xcda_leaf(h, 256), 256: (1 << 31) | 9}, 512, b"h\0"))
    assert "NUL" in xcda_problem(xcda_blob({h: xcda_leaf(h, 256), 256: 1 << 31}, 512, b"h"))
    assert xcda_problem(xcda_blob({h: xcda_leaf(h, 256), 256: 1 << 31}, 512, b"h\0")) is None
    assert xcda_problem(xcda_blob({}, 0, b"\0")) is None  # an empty array: llama.cpp skips the walk


# --------------------------------------------------------------------------------------
# Text as llama.cpp decodes it
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, cpt", [
    (b"plain", None),
    ("\U0010ffff".encode(), None),  # the last code point
    (b"\xf4\x90\x80\x80", 0x110000),
    (b"ok \xf7\xbf\xbf\xbf", 0x1FFFFF),
    (b"\xf5\x80\x80\x80", 0x140000),
    (b"\xf4\x90\x80", None),  # cut short: llama.cpp reads U+FFFD bytes instead
    (b"\xf4\x90\x80\x41", None),  # not a continuation byte
    (b"\xf8\x88\x80\x80\x80", None),  # no 5-byte sequences: each byte is U+FFFD
    (b"\xc3\xa9\xf4\x90\x80\x80", 0x110000),
])
def test_first_bad_codepoint(text, cpt):
    assert first_bad_codepoint(text) == cpt


@pytest.mark.parametrize("escaped, raw", [
    (b"abc", b"abc"), (b"\\x41", b"A"), (b"\\n\\t\\r", b"\n\t\r"), (b"\\\\", b"\\"), (b"\\q", b"q"),
    (b"a\\x4", b"a"), (b"a\\", b"a"), (b"\\xff\\x00", b"\xff\x00"),
    (b"\\xFF", bytes([((ord("F") - 48) * 16 + ord("F") - 48) & 0xFF])),  # upper case is not hex to llama.cpp
])
def test_rwkv_unescape(escaped, raw):
    assert rwkv_unescape(escaped) == raw


def random_tokens(rng: random.Random, n: int, alphabet: bytes, max_len: int) -> list[bytes]:
    return [bytes(rng.choice(alphabet) for _ in range(rng.randint(0, max_len))) for _ in range(n)]


def test_vectorised_rwkv_unescape_agrees_with_the_transcription():
    rng = random.Random(7)
    alphabet = b"\\\\xxtnr0123456789abcdefAF g\xff\x00"
    toks = random_tokens(rng, 3000, alphabet, 7)
    scan = Vocab("rwkv", {}, StringArray.from_raw(toks)).scan
    for length in range(1, 8):
        ids, rows = scan.texts_of_length(length)
        got = _rwkv_single_bytes(rows).tolist()
        want = []
        for i in ids.tolist():
            raw = rwkv_unescape(llama_token_text(toks[i], i))
            want.append(raw[0] if len(raw) == 1 else -1)
        assert got == want, length


def test_vectorised_codepoint_scan_agrees_with_the_decoder():
    rng = random.Random(11)
    alphabet = bytes([0x41, 0x00, 0x80, 0x80, 0x8F, 0x90, 0x90, 0xBF, 0xBF, 0xC3, 0xE2, 0xF0, 0xF4, 0xF4, 0xF5, 0xF7, 0xF8])
    toks = random_tokens(rng, 5000, alphabet, 8)
    v = Vocab("gpt2", {}, StringArray.from_raw(toks))
    want = [i for i, t in enumerate(toks) if first_bad_codepoint(llama_token_text(t, i)) is not None]
    assert 50 < len(want) < 4900  # both kinds are well represented
    assert _beyond_unicode_ids(v).tolist() == want


# --------------------------------------------------------------------------------------
# Special tokens as llama.cpp resolves them
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("model, pre, n, md, ids, add", [
    ("llama", None, 32000, {}, dict(bos=1, eos=2, unk=0, sep=-1), (True, False)),
    ("llama", None, 1, {}, dict(bos=-1, eos=-1, unk=0), (True, False)),  # defaults past the end are disabled
    ("bert", None, 30522, {}, dict(bos=101, eos=-1, unk=100, sep=102, pad=0), (True, False)),
    ("bert", None, 59, {"tokenizer.ggml.seperator_token_id": 3}, dict(bos=-1, unk=-1, sep=3, pad=0), (True, False)),
    ("gpt2", "smollm", 49152, {"tokenizer.ggml.add_bos_token": False}, dict(bos=11, eos=11, unk=-1), (False, False)),
    ("gpt2", "glm4", 151552, {}, dict(bos=-1, eos=11), (False, False)),
    ("gpt2", "llama-bpe", 128256, {"tokenizer.ggml.bos_token_id": 128000}, dict(bos=128000), (True, False)),
    ("gpt2", "qwen2", 151936, {"tokenizer.ggml.bos_token_id": 151936}, dict(bos=11), (False, False)),  # ignored
    ("t5", None, 32100, {"tokenizer.ggml.add_bos_token": True}, dict(bos=-1, eos=1, unk=2, pad=0), (True, True)),
    ("rwkv", None, 65536, {}, dict(bos=-1, eos=-1, unk=-1), (False, False)),
])
def test_resolve_specials(model, pre, n, md, ids, add):
    sp = resolve_specials(model, pre, n, md)
    assert {k: sp.ids[k] for k in ids} == ids
    assert (sp.add_bos, sp.add_eos) == add


# --------------------------------------------------------------------------------------
# Raw token scans
# --------------------------------------------------------------------------------------


def test_token_scans_read_token_texts_not_length_fields():
    tokens = [b"x" * 0xF4, b"a\xf4b", b"ab\0zzzzzzzz", b"<0x0A>", b"", b"long text", b"cd"]
    scan = TokenScan(StringArray.from_raw(tokens))
    # 0xF4 is the first byte of token 0's length field: only token 1 has it in its text
    assert scan.ids_containing(lambda a: a == 0xF4).tolist() == [1]
    assert scan.ids_containing(lambda a: a == 0).tolist() == [2]
    assert scan.ids_containing(lambda a: a == 0x7E).tolist() == []
    ids, rows = scan.texts_of_length(2)
    assert ids.tolist() == [2, 6] and [bytes(r) for r in rows] == [b"ab", b"cd"]  # the NUL cuts token 2
    ids, rows = scan.texts_of_length(9)
    assert ids.tolist() == [4, 5] and [bytes(r) for r in rows] == [b"[EMPTY_4]", b"long text"]
    assert scan.has_text(b"<0x0A>") and scan.has_text(b"ab") and not scan.has_text(b"ab\0zzzzzzzz")


def test_unused_special_ids_out_of_range_are_accepted_as_llama_cpp_does(tmp_path):
    """A padding, mask or FIM id past the vocabulary is ignored by llama.cpp (2629) and
    never used by SpecDesk: the file is accepted; an unknown-token id is refused."""
    from gguf import GGUFValueType as VT
    from synth.tiny_llama import TinySpec, rebuild_gguf, write_tiny_llama

    from specdesk.errors import ModelFileError
    from specdesk.library.gguf import validate_gguf

    base = write_tiny_llama(tmp_path / "tiny.gguf", TinySpec(tokenizer="spm"))
    n = 353
    for key in ("padding_token_id", "mask_token_id", "fim_pad_token_id", "middle_token_id"):
        validate_gguf(rebuild_gguf(base, tmp_path / f"{key}.gguf", set_kv={f"tokenizer.ggml.{key}": (VT.UINT32, n)}))
    with pytest.raises(ModelFileError, match=f"tokenizer.ggml.unknown_token_id is {n} but the vocabulary has {n} tokens"):
        validate_gguf(rebuild_gguf(base, tmp_path / "unk.gguf", set_kv={"tokenizer.ggml.unknown_token_id": (VT.UINT32, n)}))
