"""Vocabulary compatibility between a target and a draft, with llama.cpp's rules.

Mirrors ``common_speculative_are_compatible`` (llama.cpp common/speculative.cpp):
1. the vocab type is the same;
2. BOS/EOS ids and add-BOS/add-EOS behaviour are the same;
3. the sizes differ by at most 128 (SPEC_VOCAB_MAX_SIZE_DIFFERENCE);
4. the token text is identical from id 5 (SPEC_VOCAB_CHECK_START_TOKEN_ID) up to
   the smaller size.

Pure (no llama_cpp): a VocabInfo can come from a loaded model (``Model.vocab_info``,
which the session checks) or from GGUF metadata (``library.gguf.vocab_info_from_gguf``,
which draft pairing checks), and both go through these same rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

MAX_SIZE_DIFFERENCE = 128
CHECK_START_TOKEN_ID = 5

VOCAB_TYPE_NAMES = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLAMO2"}


@dataclass(frozen=True)
class VocabHeader:
    """What llama.cpp's rules compare before any token text."""

    vocab_type: int
    n_tokens: int
    bos: int
    eos: int
    add_bos: bool
    add_eos: bool


@dataclass(frozen=True)
class VocabInfo(VocabHeader):
    """A whole vocabulary: the header, and each token's text."""

    text: Callable[[int], str]


@dataclass(frozen=True)
class Compatibility:
    ok: bool
    rule: str = ""  # "vocab type", "special tokens", "vocab size", "token text"
    reason: str = ""
    n_common: int = 0
    token_id: int | None = None

    def __bool__(self) -> bool:
        return self.ok


def _type_name(t: int) -> str:
    return VOCAB_TYPE_NAMES.get(t, str(t))


def check_header(target: VocabHeader, draft: VocabHeader) -> Compatibility | None:
    """The rules that need no token text (type, special tokens, size), in llama.cpp's
    order; None when they all pass."""
    if target.vocab_type != draft.vocab_type:
        return Compatibility(
            False,
            "vocab type",
            f"vocab types differ: target {_type_name(target.vocab_type)}, draft {_type_name(draft.vocab_type)}",
        )
    for what, a, b in (
        ("add-BOS", target.add_bos, draft.add_bos),
        ("add-EOS", target.add_eos, draft.add_eos),
        ("BOS token id", target.bos, draft.bos),
        ("EOS token id", target.eos, draft.eos),
    ):
        if a != b:
            return Compatibility(False, "special tokens", f"special tokens differ: {what} is {a} in the target, {b} in the draft")
    diff = abs(target.n_tokens - draft.n_tokens)
    if diff > MAX_SIZE_DIFFERENCE:
        return Compatibility(
            False,
            "vocab size",
            f"vocab sizes differ by {diff} (target {target.n_tokens}, draft {draft.n_tokens}; at most {MAX_SIZE_DIFFERENCE} allowed)",
        )
    return None


def check_compatible(target: VocabInfo, draft: VocabInfo) -> Compatibility:
    bad = check_header(target, draft)
    if bad is not None:
        return bad
    n_common = min(target.n_tokens, draft.n_tokens)
    for i in range(CHECK_START_TOKEN_ID, n_common):
        a, b = target.text(i), draft.text(i)
        if a != b:
            return Compatibility(
                False,
                "token text",
                f"token {i} text differs: target {a!r}, draft {b!r}",
                n_common,
                i,
            )
    return Compatibility(True, n_common=n_common)
