"""A tiny byte-level BPE vocabulary (GPT-2 / SmolLM2 style, about 400 tokens) and a
ChatML template, for the synthetic GGUFs the writers of tools/synth/ make.

A copy of the vocabulary of tests/data/gguf/tiny_gguf.py (tools/ never imports tests/):
three control tokens (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``), the 256
byte tokens, and one token per prefix of a hundred common English words with their
merges, so that ordinary text tokenizes into a few tokens a word.
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
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [3, 3, 3]  # CONTROL
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


def write_vocab(w: gguf.GGUFWriter, extra: int = 0) -> tuple[int, list[int]]:
    """Write the vocabulary (with ``extra`` added tokens at its end: another vocabulary)
    and the chat template; return (n_vocab, the control tokens' ids)."""
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
    return len(tokens), [i for i, t in enumerate(types) if t == 3]
