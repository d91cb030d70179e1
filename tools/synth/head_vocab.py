"""The tokenizer of the synthetic head pairs (tools/synth/heads.py): a tiny byte-level
BPE vocabulary (GPT-2 / SmolLM2 style, about 400 tokens) with a ChatML template and a
mask token, which a DFlash head's noise block is made of (llama.cpp reads its id from
``tokenizer.ggml.mask_token_id``).

The vocabulary is a copy of tests/data/gguf/tiny_gguf.py's (tools/ never imports
tests/): four control tokens (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``,
``<|mask|>``), the 256 byte tokens, and one token per prefix of a hundred common
English words with their merges, so that ordinary text is a few tokens a word.
"""

from __future__ import annotations

import gguf

CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_WORDS = (
    "the of and to in is that it for was on are as with his they at be this from have or by one had "
    "not but what all were when we there can an your which their said if do will each about how up out "
    "them then she many some so these would other into has more her two like him see time could no make"
).split()

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>")
EOS_ID = 2
MASK_ID = 3
CONTROL = 3  # llama_token_type CONTROL


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable unicode character map (byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def bpe_vocab() -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges): the specials, the bytes, then the words' prefixes."""
    tokens = list(SPECIALS)
    types = [CONTROL] * len(SPECIALS)
    b2u = _bytes_to_unicode()
    for b in range(256):
        tokens.append(b2u[b])
        types.append(1)
    merges: list[str] = []
    have = set(tokens)
    for w in _WORDS:
        text = "Ġ" + w
        cur = text[0]
        for ch in text[1:]:
            nxt = cur + ch
            if nxt not in have:
                merges.append(f"{cur} {ch}")
                tokens.append(nxt)
                types.append(1)
                have.add(nxt)
            cur = nxt
    return tokens, types, merges


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
