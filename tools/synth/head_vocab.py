"""The tokenizer of the synthetic head pairs (tools/synth/heads.py): the tiny byte-level
BPE vocabulary the synthetic models share (:mod:`synth.tiny_vocab`) with a mask token
after its three control tokens, which a DFlash head's noise block is made of (llama.cpp
reads its id from ``tokenizer.ggml.mask_token_id``), and its ChatML template.
"""

from __future__ import annotations

import gguf

from .tiny_vocab import CHATML_TEMPLATE
from .tiny_vocab import bpe_vocab as tiny_bpe_vocab

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>")
EOS_ID = 2
MASK_ID = 3
CONTROL = 3  # llama_token_type CONTROL


def bpe_vocab() -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges): the specials with the mask, the bytes, then the words' prefixes."""
    tokens, types, merges = tiny_bpe_vocab()
    return tokens[:MASK_ID] + ["<|mask|>"] + tokens[MASK_ID:], types[:MASK_ID] + [CONTROL] + types[MASK_ID:], merges


def write_vocab(w: gguf.GGUFWriter, tokens: list[str] | None = None) -> tuple[int, list[int]]:
    """Write the tokenizer (``tokens``: another token list, for a file whose vocabulary
    must differ); return the vocabulary size and the ids of the control tokens."""
    toks, types, merges = bpe_vocab()
    if tokens is not None:
        toks, types = tokens, (types + [1] * len(tokens))[: len(tokens)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(EOS_ID)
    w.add_pad_token_id(EOS_ID)
    w.add_uint32(gguf.Keys.Tokenizer.MASK_ID, MASK_ID)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML_TEMPLATE)
    return len(toks), [i for i, t in enumerate(types) if t == CONTROL]
