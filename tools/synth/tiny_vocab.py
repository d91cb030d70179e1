"""The tiny vocabularies of the synthetic GGUFs (tools/synth/): a SentencePiece-style one
and a byte-level BPE one (SmolLM2/GPT-2 style, about 400 tokens, with merges), and a
ChatML template.

Both are made of three control tokens, the 256 byte tokens and one token per common
English word (BPE: per prefix of each, with its merges), so that ordinary text
tokenizes into a few tokens a word. The tiny llama models of tiny_llama.py and the MTP
models of mtp.py use them; tests import them from here (tests/conftest.py puts tools/
on ``sys.path``).
"""

from __future__ import annotations

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


def spm_vocab() -> tuple[list[str], list[float], list[int]]:
    """A small SentencePiece-style vocabulary: <unk> <s> </s>, 256 byte tokens, words."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [2, 3, 3]  # UNKNOWN, CONTROL, CONTROL
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(6)  # BYTE
    for w in _WORDS:
        tokens.append("\u2581" + w)
        types.append(1)
    for c in "abcdefghijklmnopqrstuvwxyz":
        tokens.append(c)
        types.append(1)
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(tokens) - 259)]
    return tokens, scores, types


def bpe_vocab() -> tuple[list[str], list[int], list[str]]:
    """A small byte-level BPE vocabulary (SmolLM2/GPT-2 style) with merges."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = list(specials)
    types = [3, 3, 3]
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


