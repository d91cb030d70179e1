"""The vocabulary as llama.cpp builds it from GGUF metadata.

* :func:`llama_token_text`: the text llama.cpp keeps for a token (a C string, so it
  ends at the first NUL; an empty one becomes ``[EMPTY_<id>]``).
* :func:`find_duplicate_token`: the first two ids llama.cpp's ``token_to_id`` map
  would collide on (llama.cpp aborts, or in newer versions refuses, on such a file).
  Linear: every token is hashed once; only tokens with an equal hash are compared.
* :func:`vocab_info_from_gguf`: the :class:`~specdesk.rules.vocab.VocabInfo` llama.cpp
  would report for the file (type, BOS/EOS, add-BOS/EOS, texts), without loading it,
  so draft pairing can apply ``rules.vocab``'s rules to files.
* :func:`vocab_from_gguf`: the tokenizer as plain data.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

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
    DEFAULT_BOS_EOS,
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


def _as_int(g: GGUFFile, key: str) -> int | None:
    v = g.metadata.get(key)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _as_bool(g: GGUFFile, key: str) -> bool | None:
    v = g.metadata.get(key)
    return bool(v) if isinstance(v, bool) else None


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
        n = _as_int(g, f"{arch}.vocab_size") or 0
        return VocabInfo(0, n, -1, -1, False, False, text=lambda i: "")
    tokens = load_array(g, T.LIST, cancel)
    if not isinstance(tokens, (StringArray, list)):
        tokens = []
    n = len(tokens)
    pre = g.metadata.get(T.PRE)
    bos, eos = DEFAULT_BOS_EOS.get(model, (-1, -1))
    add_bos, add_eos = DEFAULT_ADD_BOS_EOS.get(model, (False, False))
    if model == "gpt2":
        if pre in BPE_PRE_ADD_BOS:
            add_bos = True
        if pre in BPE_PRE_NO_BOS:
            bos = -1
    # a default outside the vocabulary is disabled; a metadata id outside it is ignored
    bos = bos if bos < n else -1
    eos = eos if eos < n else -1
    new_bos, new_eos = _as_int(g, T.BOS_ID), _as_int(g, T.EOS_ID)
    if new_bos is not None and new_bos < n:
        bos = new_bos
    if new_eos is not None and new_eos < n:
        eos = new_eos
    if _as_bool(g, T.ADD_BOS) is not None:
        add_bos = bool(_as_bool(g, T.ADD_BOS))
    if _as_bool(g, T.ADD_EOS) is not None:
        add_eos = bool(_as_bool(g, T.ADD_EOS))

    if isinstance(tokens, StringArray):
        arr = tokens

        def text(i: int) -> str:
            return llama_token_text(arr.raw(i), i).decode("utf-8", "replace")
    else:
        lst = tokens

        def text(i: int) -> str:
            return llama_token_text(lst[i].encode("utf-8", "surrogatepass"), i).decode("utf-8", "replace")

    return VocabInfo(vocab_type, n, bos, eos, add_bos, add_eos, text=text)


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
        "bos": _as_int(g, T.BOS_ID),
        "eos": _as_int(g, T.EOS_ID),
        "add_bos": _as_bool(g, T.ADD_BOS),
        "add_eos": _as_bool(g, T.ADD_EOS),
    }
