"""The tiny byte-level BPE vocabulary the synthetic models share (:mod:`synth.tiny_vocab`:
405 tokens, SmolLM2/GPT-2 style) written into a GGUF, with a ChatML template."""

from __future__ import annotations

import gguf

from .tiny_vocab import CHATML_TEMPLATE, bpe_vocab

CONTROL = 3  # llama_token_type CONTROL

__all__ = ["CHATML_TEMPLATE", "CONTROL", "add_vocab", "bpe_vocab"]


def add_vocab(w: gguf.GGUFWriter, extra: int = 0) -> tuple[int, list[int]]:
    """Write the vocabulary (with ``extra`` added tokens at its end: another vocabulary)
    and its special tokens; return its size and the control tokens' ids."""
    tokens, types, merges = bpe_vocab()
    tokens += [f"<extra_{i}>" for i in range(extra)]
    types += [4] * extra  # USER_DEFINED
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML_TEMPLATE)
    return len(tokens), [i for i, t in enumerate(types) if t == CONTROL]
