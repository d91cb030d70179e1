"""The vocabulary as llama.cpp builds it from GGUF metadata.

* :func:`llama_token_text`: the text llama.cpp keeps for a token (a C string, so it
  ends at the first NUL; an empty one becomes ``[EMPTY_<id>]``).
* :func:`find_duplicate_token`: the first two ids llama.cpp's ``token_to_id`` map
  would collide on (llama.cpp aborts, or in newer versions refuses, on such a file).
  Linear: every token is hashed once; only tokens with an equal hash are compared.
* :func:`vocab_info_from_gguf`: the :class:`~specdesk.rules.vocab.VocabInfo` llama.cpp
  would report for the file (type, BOS/EOS, add-BOS/EOS, texts), without loading it,
  so draft pairing can apply ``rules.vocab``'s rules to files.
* :func:`resolve_specials`: the special-token ids and add-BOS/EOS flags llama.cpp ends
  up with (its defaults for the tokenizer, overridden by in-range metadata).
* :class:`TokenScan`: vectorised scans of the raw token bytes, for rules about a few
  tokens of a large vocabulary.
* :func:`vocab_from_gguf`: the tokenizer as plain data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ...rules.vocab import VocabInfo
from ...errors import Cancelled
from .arrays import StringArray
from .header import GGUFFile
from .reader import load_array
from .rules import (
    BPE_PRE_ADD_BOS,
    BPE_PRE_NO_BOS,
    DEFAULT_ADD_BOS_EOS,
    DEFAULT_SPECIAL_IDS,
    SPECIAL_ROLE_KEYS,
    VOCAB_TYPES,
    K,
)
from .stream import Cancel

_CANCEL_EVERY = 1 << 16


def llama_token_text(raw: bytes, token_id: int) -> bytes:
    """The bytes llama.cpp uses as token ``token_id``'s text (``std::string`` made from
    ``gguf_get_arr_str``'s C string): cut at the first NUL; empty -> ``[EMPTY_<id>]``."""
    nul = raw.find(b"\0")
    if nul >= 0:
        raw = raw[:nul]
    return raw if raw else b"[EMPTY_%d]" % token_id


def iter_raw_tokens(tokens: StringArray | Sequence[str]) -> Iterator[bytes]:
    if isinstance(tokens, StringArray):
        return tokens.iter_raw()
    return (t.encode("utf-8", "surrogatepass") for t in tokens)


def iter_token_texts(tokens: StringArray | Sequence[str], cancel: Cancel | None = None) -> Iterator[bytes]:
    """llama_token_text of every token, in id order, checking ``cancel`` now and then."""
    for i, raw in enumerate(iter_raw_tokens(tokens)):
        if cancel is not None and i and not i % _CANCEL_EVERY and cancel():
            raise Cancelled("checking the vocabulary was cancelled")
        yield llama_token_text(raw, i)


def _text_hashes(tokens: StringArray | Sequence[str], cancel: Cancel | None) -> np.ndarray:
    """hash(llama_token_text(token i)) for every token, a chunk at a time."""
    n = len(tokens)
    out = np.empty(n, dtype=np.int64)
    if not isinstance(tokens, StringArray):
        out[:] = [hash(t) for t in iter_token_texts(tokens, cancel)]
        return out
    data, bounds = tokens.buffers()
    for lo in range(0, n, _CANCEL_EVERY):
        if lo and cancel is not None and cancel():
            raise Cancelled("checking the vocabulary was cancelled")
        hi = min(n, lo + _CANCEL_EVERY)
        raws = list(map(data.__getitem__, map(slice, (bounds[lo:hi] + 8).tolist(), bounds[lo + 1 : hi + 1].tolist())))
        if b"" in raws or b"\0" in b"".join(raws):  # rare: some token's text is not its bytes
            out[lo:hi] = [hash(r) if r and b"\0" not in r else hash(llama_token_text(r, i))
                          for i, r in enumerate(raws, lo)]
        else:
            out[lo:hi] = list(map(hash, raws))
    return out


def find_duplicate_token(tokens: StringArray | Sequence[str], cancel: Cancel | None = None) -> tuple[int, int, bytes] | None:
    """(earlier id, id, text) of the first token whose llama.cpp text an earlier token
    already has -- the insert into ``token_to_id`` that fails -- or None.

    O(n log n) in numpy and O(n) in Python: one hash per token (Python's keyed SipHash,
    so a file cannot be made to collide on purpose), a sort, and a comparison of the
    texts of only those tokens whose hash equals another's.
    """
    n = len(tokens)
    if n < 2:
        return None
    hashes = _text_hashes(tokens, cancel)
    sorted_h = np.sort(hashes)
    same = sorted_h[1:] == sorted_h[:-1]
    if not same.any():
        return None
    candidates = np.flatnonzero(np.isin(hashes, sorted_h[1:][same]))  # ids, ascending
    del hashes, sorted_h, same
    first: dict[bytes, int] = {}
    raw_at = tokens.raw if isinstance(tokens, StringArray) else (lambda i: tokens[i].encode("utf-8", "surrogatepass"))
    for i in candidates.tolist():
        text = llama_token_text(raw_at(i), i)
        j = first.setdefault(text, i)
        if j != i:
            return j, i, text
    return None


def _sorted_unique(ids: np.ndarray) -> np.ndarray:
    return ids[np.r_[True, ids[1:] != ids[:-1]]] if len(ids) else ids


class TokenScan:
    """Vectorised scans of a StringArray's raw bytes, for rules about a few tokens of a
    large vocabulary: which tokens contain a byte, which texts have a length. Linear in
    numpy; only tokens a NUL byte cuts (and empty ones) are looked at one by one."""

    def __init__(self, tokens: StringArray) -> None:
        self.tokens = tokens
        data, bounds = tokens.buffers()
        self.bytes = np.frombuffer(data, dtype=np.uint8)
        self.starts = bounds[:-1] + 8  # where each token's text starts
        self.ends = bounds[1:]
        self.lengths = self.ends - self.starts  # of the raw bytes

    @cached_property
    def in_text(self) -> np.ndarray:
        """A mask over the bytes: True for token text, False for the u64 length fields."""
        mask = np.ones(len(self.bytes), dtype=bool)
        mask[(self.starts[:, None] - 8 + np.arange(8)).ravel()] = False
        return mask

    def ids_containing(self, byte_test: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """The ids (ascending, unique) of the tokens whose raw bytes include one for
        which ``byte_test`` (a vectorised predicate over uint8) is true."""
        return _sorted_unique(self.token_of(np.flatnonzero(byte_test(self.bytes) & self.in_text)))

    def token_of(self, positions: np.ndarray) -> np.ndarray:
        """The token each text byte position belongs to."""
        return np.searchsorted(self.starts, positions, side="right") - 1

    @cached_property
    def irregular(self) -> np.ndarray:
        """Tokens whose llama.cpp text is not their raw bytes: cut by a NUL byte, or empty."""
        return _sorted_unique(np.sort(np.r_[self.ids_containing(lambda a: a == 0), np.flatnonzero(self.lengths == 0)]))

    def texts_of_length(self, length: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, rows): every token whose llama.cpp text is ``length`` (>= 1) bytes, its
        text a row of a uint8 matrix, in id order."""
        whole = self.lengths == length
        whole[self.irregular] = False
        ids = np.flatnonzero(whole)
        rows = self.bytes[self.starts[ids, None] + np.arange(length)] if len(ids) else np.empty((0, length), np.uint8)
        extra = [(i, t) for i in self.irregular.tolist() if len(t := llama_token_text(self.tokens.raw(i), i)) == length]
        if extra:
            all_ids = np.r_[ids, [i for i, _ in extra]]
            order = np.argsort(all_ids, kind="stable")
            extra_rows = np.frombuffer(b"".join(t for _, t in extra), dtype=np.uint8).reshape(-1, length)
            ids, rows = all_ids[order], np.vstack([rows, extra_rows])[order]
        return ids, rows

    def has_text(self, text: bytes) -> bool:
        """Whether some token's llama.cpp text is ``text``."""
        _, rows = self.texts_of_length(len(text))
        return bool((rows == np.frombuffer(text, dtype=np.uint8)).all(axis=1).any())


def _as_int(md: Mapping[str, object], key: str) -> int | None:
    v = md.get(key)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _as_bool(md: Mapping[str, object], key: str) -> bool | None:
    v = md.get(key)
    return bool(v) if isinstance(v, bool) else None


@dataclass(frozen=True)
class Specials:
    """The special tokens llama.cpp's vocabulary ends up with (-1: none), and whether
    tokenizing with add_special adds a BOS / EOS."""

    ids: dict[str, int]  # role ("bos", "eos", "unk", "sep", "pad") -> id
    defaults: dict[str, int]  # role -> llama.cpp's default for this tokenizer, before the range check
    add_bos: bool
    add_eos: bool


def resolve_specials(model: str, pre: object, n_tokens: int, md: Mapping[str, object]) -> Specials:
    """As llama_vocab::impl::load: the tokenizer's default ids (a BPE pre-tokenizer can
    drop the BOS), a default outside the vocabulary disabled, a metadata id replacing
    it when inside the vocabulary (ignored otherwise); add-BOS/EOS from the tokenizer's
    (and BPE pre-tokenizer's) default, then from the metadata."""
    defaults = dict(DEFAULT_SPECIAL_IDS.get(model, DEFAULT_SPECIAL_IDS["none"]))
    add_bos, add_eos = DEFAULT_ADD_BOS_EOS.get(model, (False, False))
    if model == "gpt2":
        if pre in BPE_PRE_NO_BOS:
            defaults["bos"] = -1
        if pre in BPE_PRE_ADD_BOS:
            add_bos = True
    ids = {}
    for role, default in defaults.items():
        tid = default if default < n_tokens else -1
        new = _as_int(md, SPECIAL_ROLE_KEYS[role])
        ids[role] = new if new is not None and 0 <= new < n_tokens else tid
    meta_bos, meta_eos = _as_bool(md, K.Tokenizer.ADD_BOS), _as_bool(md, K.Tokenizer.ADD_EOS)
    return Specials(ids, defaults, add_bos if meta_bos is None else meta_bos, add_eos if meta_eos is None else meta_eos)


def vocab_info_from_gguf(g: GGUFFile, cancel: Cancel | None = None) -> VocabInfo:
    """What llama.cpp's vocabulary of this (validated) file reports: the type from
    tokenizer.ggml.model, BOS/EOS and add-BOS/EOS from the metadata over llama.cpp's
    defaults for the tokenizer (and BPE pre-tokenizer), the token texts as llama.cpp
    keeps them (decoded for display, invalid UTF-8 replaced, as ``Model.vocab_info``)."""
    T = K.Tokenizer
    model = g.metadata.get(T.MODEL)
    model = model if isinstance(model, str) else "none"
    vocab_type = VOCAB_TYPES.get(model, 0)
    if vocab_type == 0:
        arch = g.architecture or ""
        n = _as_int(g.metadata, f"{arch}.vocab_size") or 0
        return VocabInfo(0, n, -1, -1, False, False, text=lambda i: "")
    tokens = load_array(g, T.LIST, cancel)
    if not isinstance(tokens, (StringArray, list)):
        tokens = []
    n = len(tokens)
    sp = resolve_specials(model, g.metadata.get(T.PRE), n, g.metadata)

    if isinstance(tokens, StringArray):
        arr = tokens

        def text(i: int) -> str:
            return llama_token_text(arr.raw(i), i).decode("utf-8", "replace")
    else:
        lst = tokens

        def text(i: int) -> str:
            return llama_token_text(lst[i].encode("utf-8", "surrogatepass"), i).decode("utf-8", "replace")

    return VocabInfo(vocab_type, n, sp.ids["bos"], sp.ids["eos"], sp.add_bos, sp.add_eos, text=text)


def vocab_from_gguf(g: GGUFFile) -> dict:
    """The tokenizer described by the metadata (lazy arrays are read from the file)."""
    T = K.Tokenizer
    tokens = load_array(g, T.LIST)
    token_list = list(tokens) if isinstance(tokens, (list, StringArray)) else []
    model = g.metadata.get(T.MODEL)
    return {
        "type": model if isinstance(model, str) else None,
        "n_tokens": len(token_list),
        "tokens": token_list,
        "bos": _as_int(g.metadata, T.BOS_ID),
        "eos": _as_int(g.metadata, T.EOS_ID),
        "add_bos": _as_bool(g.metadata, T.ADD_BOS),
        "add_eos": _as_bool(g.metadata, T.ADD_EOS),
    }
