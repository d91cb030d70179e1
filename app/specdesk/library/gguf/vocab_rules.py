"""The vocabulary rules llama.cpp assumes, checked before llama.cpp sees the file.

llama.cpp's vocabulary loader and tokenizers (``src/llama-vocab.cpp`` of the llama.cpp
that llama-cpp-python 0.3.36 vendors) trust the file: a rule broken there is a
``GGML_ASSERT`` or an uncaught C++ exception inside ``llama_tokenize`` or
``llama_token_to_piece`` (the process aborts: exit 134), an endless loop, or an
exception during the load (llama.cpp refuses the file with "failed to load model" and
no reason). SpecDesk always tokenizes with ``add_special=True`` (prompts) or ``False``
(translated drafts), and with ``parse_special`` true. Each rule below is one function
of :data:`RULES`; :func:`first_problem` gives the first broken one as one line.

Every row was seen with this project's llama.cpp (``tests/data/gguf/llama_vocab_probe.py``
loads, tokenizes and detokenizes with nothing guarding it) and is refused first; the
test names are cases of ``tests/integration/test_hostile_gguf.py``. Lines are
``llama-vocab.cpp`` unless named.

======================  =============================================  ======================  ===================================
rule                    llama.cpp (what breaks)                        SpecDesk check          test case
======================  =============================================  ======================  ===================================
a vocabulary at all     1949: "none"/"no_vocab" builds no tokenizer;   validate.check_vocab    no vocabulary (tokenizer.ggml.model
                        3422 GGML_ASSERT(tokenizer) in tokenize        :func:`no_vocabulary`   none)
unique token texts      2544 GGML_ASSERT(id_to_token.size() ==         :func:`unique_texts`    duplicate token
                        token_to_id.size()) at load
special ids in range    2619/2629: an id past the vocabulary is only   :func:`special_ids_     unknown token id out of range,
                        warned about; the default (or none) is used    in_range`               end-of-turn token id out of range,
                        (BOS, EOS, EOT, EOM, UNK, SEP: what a prompt                           bos id out of range; a padding id
                        gets, where an answer ends; not pad/mask/FIM,                          out of range is accepted
                        which SpecDesk never uses)                                             (test_gguf_vocab_rules)
byte tokens <0xNN>      3198/3203 token_to_byte text.substr(3, 2)      :func:`byte_token_      byte token shorter than <0x (BPE)
                        throws at load (piece cache, 3059): SPM, UGM,  texts`
                        BPE
no bert byte tokens     3207 GGML_ABORT in token_to_byte (WPM), at     :func:`byte_token_      bert vocabulary with a byte token
                        load through the piece cache (3059)            texts`
BOS/EOS a prompt gets   GGML_ASSERT(id != LLAMA_TOKEN_NULL) when       :func:`added_specials`  BPE add_bos without a BOS token
                        add_bos/add_eos: SPM 3443/3480, BPE 588/597,                           (glm4 pre-tokenizer), t5 add_bos
                        UGM 3554/3579                                                          without a BOS token
bert CLS and SEP        3527 GGML_ASSERT(special_bos_id), 3547         :func:`added_specials`  bert vocabulary without a CLS
                        GGML_ASSERT(special_sep_id): every                                     token, bert vocabulary without a
                        add_special tokenize, whatever add_bos says                            SEP token
unknown (bert, t5)      token_unk() (-1) goes into the prompt (WPM     :func:`unknown_token`   bert vocabulary without an unknown
                        828, UGM 996/1042), then 3691 cache.at(-1)                             token, t5 vocabulary of two tokens:
                        throws in token_to_piece; UGM: 3916                                    no unknown token
                        print_info .at(linefeed) throws at load
SPM byte fallback       193 resegment -> 4014 byte_to_token            :func:`spm_byte_        spm vocabulary without byte tokens
                        token_to_id.at() throws inside llama_tokenize  fallback`               (tiny, and SmolLM2 read as
                        on the first character no piece covers                                 SentencePiece), ... without the
                                                                                               byte token <0x7F>, spm byte tokens
                                                                                               in lower case
RWKV byte tokens        1358 a longest match with no token on its      :func:`rwkv_bytes`      rwkv vocabulary without the byte
                        path sets position = 0: an endless loop that                           'h', rwkv vocabulary without the
                        grows the output (1 GB in 10 s); 1337 an                               byte 0x01
                        unmatched byte pushes token_unk() (-1)
PLaMo-2 byte tokens     1419 throws at load where bytes_[b] == 0,      :func:`plamo2_bytes`    plamo2 byte token at id 0
                        which is also how a byte token at id 0 reads
code points             unicode.cpp 1114 unicode_cpt_to_utf8 throws    :func:`codepoints`      BPE token beyond U+10FFFF
<= U+10FFFF             above U+10FFFF, at load: BPE pieces
                        (llama_decode_text 3403), PLaMo-2 (1408)
UGM charsmap            2052/2056 int8/uint8 (validate's key types),   :func:`charsmap`        t5 charsmap of uint32, ... whose
                        2063 >= 4 bytes, 2070 blob inside (load);                              blob runs past its end, ... with a
                        1156 XCDA index, 1224 replacement offset,                              node outside its array, ... with a
                        1233 unterminated replacement: thrown inside                           block cut short, ...
                        llama_tokenize for the input that walks there                          (sentencepiece's nmt_nfkc) with its
                                                                                               node array cut short, ... with a
                                                                                               replacement past its end, ... with
                                                                                               an unterminated replacement
Phi-3 tokens            3090 token_to_id.at("</s>", "<unk>", "<s>",    :func:`phi3_tokens`     a Phi-3 name without the tokens
                        "<|endoftext|>") when general.name says phi-3                          llama.cpp marks for it
                        (load)
======================  =============================================  ======================  ===================================

The charsmap walk, the UTF-8 decoding, RWKV's unescaping and the special-token
resolution are also checked on many inputs against transcriptions of llama.cpp's code in
``tests/unit/test_gguf_vocab_rules.py``.

Checked elsewhere in the validator, from the same loader: the tokenizer model and
BPE pre-tokenizer names (2151, 2428; ``rules.TOKENIZER_MODELS``, ``BPE_PRE_TOKENIZERS``),
the token list, scores and types with their types and lengths (2463-2503), merges for
BPE (2003/2010), and every key's type (``rules.GENERAL_KEY_TYPES``: get_key throws on a
wrong type, e.g. tokenizer.ggml.normalizer.lowercase, tokenizer.ggml.suppress_tokens
2671; cases "normalizer.lowercase as a string", "suppress_tokens as floats"). Not
reachable from a file SpecDesk accepts, so not checked: find_bpe_rank's GGML_ASSERTs
on spaces (4183; every accepted pre-tokenizer byte-encodes spaces), token_to_piece's
int32 size abort (3672; strings are capped at 64 MiB), the RWKV newline assert (2577;
its tokenizer never returns nothing), the TEST/gemma4/hybriddna tokenizers (unknown
names here), and the print_info ``.at()`` of special ids (3907-3926; ids are range
checked by the loader itself).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ...errors import Cancelled
from .arrays import StringArray, is_array
from .rules import SPECIAL_ROLE_KEYS, TOKEN_TYPE_BYTE, USED_SPECIAL_TOKEN_KEYS, K
from .stream import Cancel
from .text import n as _n
from .text import show as _show
from .text import show_bytes
from .vocab import Specials, TokenScan, find_duplicate_token, llama_token_text, resolve_specials

T = K.Tokenizer
TOKEN_TYPE_NORMAL = 1
ROLE_NAMES = {"bos": "beginning-of-sequence", "eos": "end-of-sequence", "sep": "separator", "unk": "unknown"}


@dataclass
class Vocab:
    """What the rules read: the tokenizer model, the metadata, the tokens (raw) and
    their types, and ``cancel`` for the long scans."""

    model: str
    md: Mapping[str, object]
    tokens: StringArray
    cancel: Cancel | None = None

    @property
    def n(self) -> int:
        return len(self.tokens)

    @cached_property
    def types(self) -> np.ndarray | None:
        types = self.md.get(T.TOKEN_TYPE)
        return None if types is None else np.asarray(types)

    @cached_property
    def specials(self) -> Specials:
        return resolve_specials(self.model, self.md.get(T.PRE), self.n, self.md)

    def is_type(self, token_type: int) -> np.ndarray:
        """A mask over the ids: tokens of this type (all are normal without a type array)."""
        if self.types is None:
            return np.full(self.n, token_type == TOKEN_TYPE_NORMAL)
        return self.types == token_type

    def ids_of_type(self, token_type: int) -> np.ndarray:
        return np.flatnonzero(self.is_type(token_type))

    @cached_property
    def scan(self) -> TokenScan:
        return TokenScan(self.tokens)

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel():
            raise Cancelled("checking the vocabulary was cancelled")


Rule = Callable[[Vocab], "str | None"]


def no_vocabulary(model: str) -> str:
    return (f"has no vocabulary (tokenizer.ggml.model is '{_show(model)}'), so llama.cpp cannot tokenize a "
            "prompt for it")


def unique_texts(v: Vocab) -> str | None:
    """Token texts unique as llama.cpp's token_to_id map compares them (C strings: cut
    at the first NUL, an empty one named [EMPTY_<id>]; raw bytes, invalid UTF-8 too)."""
    dup = find_duplicate_token(v.tokens, v.cancel)
    if dup is None:
        return None
    first, i, text = dup
    return f"duplicate token {show_bytes(text)} (ids {first} and {i}) in tokenizer.ggml.tokens"


def special_ids_in_range(v: Vocab) -> str | None:
    """The special-token ids that decide a prompt and the end of an answer name tokens
    (llama.cpp would quietly use another token, or none, in their place)."""
    for key in USED_SPECIAL_TOKEN_KEYS:
        tid = v.md.get(key)
        if isinstance(tid, int) and tid >= v.n:
            return f"{key} is {tid} but the vocabulary has {_n(v.n)} tokens"
    return None


def byte_token_texts(v: Vocab) -> str | None:
    """Byte tokens are read as <0xNN> (text[3:5]) by SPM, UGM and BPE; WPM has none."""
    byte_ids = v.ids_of_type(TOKEN_TYPE_BYTE)
    if not len(byte_ids):
        return None
    if v.model == "bert":
        return f"token {int(byte_ids[0])} is a byte token, which a bert vocabulary cannot have"
    if v.model in ("llama", "t5", "gpt2"):
        short = np.zeros(v.n, dtype=bool)
        for length in (1, 2):
            short[v.scan.texts_of_length(length)[0]] = True
        bad = byte_ids[short[byte_ids]]
        if len(bad):
            i = int(bad[0])
            return f"byte token {i} {show_bytes(llama_token_text(v.tokens.raw(i), i))} is not of the form <0xNN>"
    return None


def _missing(v: Vocab, role: str, why: str) -> str | None:
    if v.specials.ids[role] >= 0:
        return None
    default = v.specials.defaults[role]
    state = (f"the default id {default} is past its {_n(v.n)} tokens" if default >= 0
             else f"a {v.model} vocabulary{' with this pre-tokenizer' if v.model == 'gpt2' else ''} has no default")
    article = "an" if role == "unk" else "a"
    return (f"a {v.model} vocabulary needs {article} {ROLE_NAMES[role]} token {why}, but has none: "
            f"{SPECIAL_ROLE_KEYS[role]} is not set and {state}")


def added_specials(v: Vocab) -> str | None:
    """The special tokens llama_tokenize(add_special=True) adds exist."""
    sp = v.specials
    if v.model == "bert":
        return _missing(v, "bos", "(llama.cpp starts every prompt with it)") or _missing(
            v, "sep", "(llama.cpp ends every prompt with it)")
    if v.model in ("llama", "gpt2", "t5"):
        for role, add, key in (("bos", sp.add_bos, T.ADD_BOS), ("eos", sp.add_eos, T.ADD_EOS)):
            if add:
                why = f"({key} is true)" if isinstance(v.md.get(key), bool) else f"(a {v.model} vocabulary adds one by default)"
                problem = _missing(v, role, why)
                if problem:
                    return problem
    return None


def unknown_token(v: Vocab) -> str | None:
    """WPM and UGM put the unknown token where no piece matches."""
    if v.model in ("bert", "t5"):
        return _missing(v, "unk", "(for text no piece covers)")
    return None


def _byte_problem(v: Vocab, have: set[int], what: str) -> str | None:
    for b in range(256):
        if b not in have:
            return f"the {v.model} vocabulary has no token for byte 0x{b:02X} ({what})"
    return None


_HEX_UPPER = np.full(256, -1, dtype=np.int64)
_HEX_UPPER[np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)] = np.arange(16)
_HEX_ANY = _HEX_UPPER.copy()
_HEX_ANY[np.frombuffer(b"abcdef", dtype=np.uint8)] = np.arange(10, 16)


def _byte_token_values(rows: np.ndarray, hex_digits: np.ndarray) -> np.ndarray:
    """For 6-byte texts: the NN of each <0xNN> (-1 where the text is not one)."""
    hi, lo = hex_digits[rows[:, 3]], hex_digits[rows[:, 4]]
    shape = (rows[:, 0] == ord("<")) & (rows[:, 1] == ord("0")) & (rows[:, 2] == ord("x")) & (rows[:, 5] == ord(">"))
    return np.where(shape & (hi >= 0) & (lo >= 0), hi * 16 + lo, -1)


def spm_byte_fallback(v: Vocab) -> str | None:
    """SentencePiece spells text no piece covers byte by byte: <0xNN> (upper-case hex),
    else the byte itself as a one-byte token, else llama.cpp throws inside llama_tokenize."""
    if v.model != "llama":
        return None
    _, single = v.scan.texts_of_length(1)
    _, six = v.scan.texts_of_length(6)
    have = set(single[:, 0].tolist()) | set(_byte_token_values(six, _HEX_UPPER).tolist())
    return _byte_problem(v, have, "neither <0xNN> nor the byte itself; llama.cpp aborts on the first character "
                                  "its pieces do not cover")


def rwkv_unescape(text: bytes) -> bytes:
    """llama_unescape_rwkv_token: \\t \\n \\r \\xNN (lower-case hex digits, any byte
    taken as one) and \\<c>; an unfinished escape yields nothing."""
    out = bytearray()
    escaping, hex_left, acc = False, 0, 0
    for c in text:
        if hex_left:
            acc = ((acc << 4) + ((c - 97 + 10) if c >= 97 else (c - 48))) & 0xFF
            hex_left -= 1
            if not hex_left:
                out.append(acc)
                acc = 0
        elif escaping:
            if c == 0x78:  # x
                hex_left = 2
            else:
                out.append({0x74: 9, 0x6E: 10, 0x72: 13}.get(c, c))
            escaping = False
        elif c == 0x5C:
            escaping = True
        else:
            out.append(c)
    return bytes(out)


def _rwkv_single_bytes(rows: np.ndarray) -> np.ndarray:
    """rwkv_unescape over the rows of a matrix, vectorised: the byte of each row that
    unescapes to exactly one byte, -1 for the others."""
    k = len(rows)
    escaping, hex_left = np.zeros(k, dtype=bool), np.zeros(k, dtype=np.int64)
    acc, count, first = np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64), np.full(k, -1, dtype=np.int64)

    def emit(where: np.ndarray, byte: np.ndarray) -> None:
        nonlocal first
        first = np.where(where & (count == 0), byte, first)
        count[where] += 1

    for c in rows.T.astype(np.int64):
        in_hex, in_escape = hex_left > 0, (hex_left == 0) & escaping
        plain = ~in_hex & ~in_escape
        acc = np.where(in_hex, ((acc << 4) + np.where(c >= 97, c - 87, c - 48)) & 0xFF, acc)
        hex_left = np.where(in_hex, hex_left - 1, hex_left)
        emit(in_hex & (hex_left == 0), acc)
        acc = np.where(in_hex & (hex_left == 0), 0, acc)
        starts_hex = in_escape & (c == ord("x"))
        hex_left = np.where(starts_hex, 2, hex_left)
        emit(in_escape & ~starts_hex, np.select([c == ord("t"), c == ord("n"), c == ord("r")], [9, 10, 13], c))
        escaping = np.where(in_escape, False, escaping | (plain & (c == 0x5C)))
        emit(plain & (c != 0x5C), c)
    return np.where(count == 1, first, -1)


def rwkv_bytes(v: Vocab) -> str | None:
    """The RWKV tokenizer's longest match needs a one-byte token at every byte. A text
    that unescapes to one byte is one unit (a byte, \\c or \\xNN: at most 4 bytes)
    and at most an unfinished escape (3 bytes)."""
    if v.model != "rwkv":
        return None
    have: set[int] = set()
    for length in range(1, 8):
        have |= set(_rwkv_single_bytes(v.scan.texts_of_length(length)[1]).tolist())
    return _byte_problem(v, have, "llama.cpp's rwkv tokenizer loops forever, or puts no token, where one is missing")


def plamo2_bytes(v: Vocab) -> str | None:
    """The PLaMo-2 tokenizer maps every byte to a byte token <0xNN> (either case; the
    last in id order wins), and takes id 0 for a byte without one."""
    if v.model != "plamo2":
        return None
    ids, six = v.scan.texts_of_length(6)
    values = _byte_token_values(six, _HEX_ANY)
    keep = (values >= 0) & v.is_type(TOKEN_TYPE_BYTE)[ids]
    table = np.full(256, -1, dtype=np.int64)
    np.maximum.at(table, values[keep], ids[keep])
    for b in range(256):
        if table[b] < 0:
            return f"the plamo2 vocabulary has no byte token <0x{b:02X}>"
        if table[b] == 0:
            return f"the plamo2 byte token <0x{b:02X}> at id 0 reads as missing in llama.cpp (id 0 marks an unset byte)"
    return None


def first_bad_codepoint(text: bytes) -> int | None:
    """unicode_cpts_from_utf8 as llama.cpp decodes: the first code point it reads that
    is above U+10FFFF (unicode_cpt_to_utf8 then throws), or None."""
    i, n = 0, len(text)
    while i < n:
        b = text[i]
        if b < 0x80 or not b & 0x40:
            i += 1
        elif not b & 0x20:
            i += 2 if i + 1 < n and text[i + 1] & 0xC0 == 0x80 else 1
        elif not b & 0x10:
            i += 3 if i + 2 < n and all(text[i + k] & 0xC0 == 0x80 for k in (1, 2)) else 1
        elif not b & 0x08:
            if i + 3 < n and all(text[i + k] & 0xC0 == 0x80 for k in (1, 2, 3)):
                cpt = ((b & 7) << 18) | ((text[i + 1] & 0x3F) << 12) | ((text[i + 2] & 0x3F) << 6) | (text[i + 3] & 0x3F)
                if cpt > 0x10FFFF:
                    return cpt
                i += 4
            else:
                i += 1
        else:
            i += 1
    return None


def _beyond_unicode_ids(v: Vocab) -> np.ndarray:
    """Tokens with a 4-byte sequence above U+10FFFF, as llama.cpp decodes them. F4..F7 are
    never continuation bytes, so the decoder always reads one as a lead byte: it is such
    a sequence when three continuation bytes follow inside the text and it is F5..F7,
    or F4 followed by 90..BF. NUL-cut tokens are decoded one by one."""
    sc = v.scan
    arr = sc.bytes
    lead = np.flatnonzero((arr >= 0xF4) & (arr <= 0xF7) & sc.in_text)
    ids = sc.token_of(lead)
    inside = lead + 3 < sc.ends[ids]
    lead, ids = lead[inside], ids[inside]
    bad = (arr[lead] > 0xF4) | (arr[lead + 1] >= 0x90)
    for k in (1, 2, 3):
        bad &= (arr[lead + k] & 0xC0) == 0x80
    found = ids[bad & ~np.isin(ids, sc.irregular)]
    extra = [i for i in sc.irregular.tolist() if first_bad_codepoint(llama_token_text(v.tokens.raw(i), i)) is not None]
    return np.sort(np.r_[found, extra]).astype(np.int64)


def codepoints(v: Vocab) -> str | None:
    """BPE pieces (normal tokens) and PLaMo-2 pieces (all but bytes) are decoded to code
    points at load; one above U+10FFFF makes llama.cpp throw."""
    if v.model == "gpt2":
        allowed = v.is_type(TOKEN_TYPE_NORMAL)
    elif v.model == "plamo2":
        allowed = ~v.is_type(TOKEN_TYPE_BYTE)
    else:
        return None
    ids = _beyond_unicode_ids(v)
    ids = ids[allowed[ids]]
    if not len(ids):
        return None
    i = int(ids[0])
    text = llama_token_text(v.tokens.raw(i), i)
    return (f"token {i} {show_bytes(text)} has a UTF-8 sequence for U+{first_bad_codepoint(text):X}, beyond "
            "U+10FFFF, which llama.cpp cannot decode")


# -- the UGM precompiled charsmap ----------------------------------------------------------

def _outside(state: int, size: int) -> int | None:
    """The first index ``state ^ c`` (c = 1..255, what normalize_prefix reads from
    ``state``) outside an array of ``size`` nodes, or None."""
    reads = state ^ np.arange(1, 256, dtype=np.int64)
    out = reads[reads >= size]
    return int(out.min()) if len(out) else None


def xcda_problem(blob: bytes, cancel: Cancel | None = None) -> str | None:
    """Walk sentencepiece's XOR-compressed double array as llama.cpp's normalize_prefix
    does, from the root over every input byte 1..255 from every node it can reach: each
    node it reads must be inside the array, and each match's replacement must start
    inside the replacements and end with a NUL there.

    Node ``i`` matches input byte ``c`` from state ``s`` when ``i == s ^ c`` and its
    LCHECK is ``c``, so each node has one parent state, ``i ^ LCHECK(i)``: the walk is a
    breadth-first search over those edges, linear in the array per level."""
    if len(blob) < 4:
        return "is shorter than its 4-byte header"
    blob_size = int.from_bytes(blob[:4], "little")
    if blob_size + 4 >= len(blob):
        return f"declares {_n(blob_size)} bytes of tables but has {_n(len(blob) - 4)} bytes after its header"
    units = np.frombuffer(blob, dtype="<u4", count=blob_size // 4, offset=4).astype(np.int64)
    repl = np.frombuffer(blob, dtype=np.uint8, offset=4 + blob_size)
    nuls = np.flatnonzero(repl == 0)
    size = len(units)
    if size == 0:
        return None  # llama.cpp skips the walk
    index = np.arange(size, dtype=np.int64)
    lcheck = units & 0x800000FF
    matchable = (lcheck >= 1) & (lcheck <= 255)
    parent = np.where(matchable, index ^ lcheck, 0)  # < span: i ^ c stays in i's 256-block
    child = index ^ ((units >> 10) << ((units & (1 << 9)) >> 6))  # index ^ BASE
    leaf = ((units >> 8) & 1) == 1
    span = (size | 0xFF) + 1  # a state whose reads are all inside is below this
    seen = np.zeros(span, dtype=bool)
    frontier = child[:1]  # the root's BASE (0 ^ BASE(0))
    while len(frontier):
        if cancel is not None and cancel():
            raise Cancelled("checking the vocabulary was cancelled")
        for state in frontier[(frontier | 0xFF) >= size].tolist():
            bad = _outside(state, size)
            if bad is not None:
                return f"has a node at index {_n(bad)}, outside its {_n(size)} nodes"
        in_frontier = np.zeros(span, dtype=bool)
        in_frontier[frontier] = True
        seen |= in_frontier
        hit = np.flatnonzero(matchable & in_frontier[parent])
        values = child[hit[leaf[hit]]]
        if (values >= size).any():
            return f"has a value node at index {_n(int(values[values >= size][0]))}, outside its {_n(size)} nodes"
        offsets = units[values] & 0x7FFFFFFF
        if (offsets >= len(repl)).any():
            off = int(offsets[offsets >= len(repl)][0])
            return f"has a replacement at offset {_n(off)}, past its {_n(len(repl))} bytes of replacements"
        unterminated = np.searchsorted(nuls, offsets) >= len(nuls)
        if unterminated.any():
            return f"has a replacement at offset {_n(int(offsets[unterminated][0]))} that does not end with a NUL byte"
        nxt = child[hit]
        far = nxt[nxt >= span]
        if len(far):  # reads from there are all outside
            return f"has a node at index {_n(_outside(int(far[0]), size) or int(far[0]))}, outside its {_n(size)} nodes"
        is_new = np.zeros(span, dtype=bool)
        is_new[nxt] = True
        frontier = np.flatnonzero(is_new & ~seen)
    return None


def charsmap_bytes(value: object) -> bytes:
    """The charsmap array (int8 or uint8 elements) as the bytes llama.cpp copies."""
    return (np.asarray(value, dtype=np.int64) & 0xFF).astype(np.uint8).tobytes()


def charsmap(v: Vocab) -> str | None:
    """UGM normalizes input through the charsmap; a damaged one throws (at load, or
    inside llama_tokenize for the input that reaches the damage)."""
    value = v.md.get(T.PRECOMPILED_CHARSMAP)
    if v.model != "t5" or value is None or not is_array(value):
        return None
    problem = xcda_problem(charsmap_bytes(value), v.cancel)
    return None if problem is None else f"{T.PRECOMPILED_CHARSMAP} {problem}"


PHI3_TOKENS = (b"</s>", b"<unk>", b"<s>", b"<|endoftext|>")


def phi3_tokens(v: Vocab) -> str | None:
    """For a model named phi-3/phi3 (general.name, ASCII lower case) llama.cpp sets the
    attributes of four tokens it looks up with .at(), unless a jina/nomic rule comes first."""
    name = v.md.get(K.General.NAME)
    pre = v.md.get(T.PRE)
    arch = v.md.get(K.General.ARCHITECTURE)
    if not isinstance(name, str):
        return None
    if isinstance(pre, str) and any(s in pre for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")):
        return None
    if isinstance(arch, str) and any(s in arch for s in ("nomic-bert-moe", "jina-bert-v3")):
        return None
    lower = name.encode("utf-8", "surrogatepass").lower()
    if b"phi-3" not in lower and b"phi3" not in lower:
        return None
    for t in PHI3_TOKENS:
        if not v.scan.has_text(t):
            return (f"the model is named '{_show(name)}', for which llama.cpp marks the token "
                    f"'{t.decode()}', but the vocabulary has no such token")
    return None


#: The rules, in the order they are checked.
RULES: tuple[Rule, ...] = (
    unique_texts,
    special_ids_in_range,
    byte_token_texts,
    added_specials,
    unknown_token,
    spm_byte_fallback,
    rwkv_bytes,
    plamo2_bytes,
    codepoints,
    charsmap,
    phi3_tokens,
)


def first_problem(v: Vocab) -> str | None:
    """The first rule ``v`` breaks, as one line (without the file name), or None."""
    for rule in RULES:
        v.check_cancel()
        problem = rule(v)
        if problem is not None:
            return problem
    return None
