"""A GGUF's multi-token-prediction (NextN) heads, read from its header without llama.cpp.

:func:`mtp_heads` says how many heads a model carries and whether llama.cpp can draft
with them (:func:`specdesk.rules.mtp.mtp_support`), from the metadata alone (what the
library and ``doctor`` show). :func:`check_mtp` also checks the tensors every NextN
block needs before a context is made for them: llama.cpp loads a file whose blocks
lack them (it takes such a file for a trunk whose heads live elsewhere) and then
aborts the process in the MTP graph (``GGML_ASSERT(layer.nextn.eh_proj && ...)``).
"""

from __future__ import annotations

from ...errors import ModelFileError
from ...rules.mtp import NEXTN_TENSORS, NO_HEADS, MtpSupport, mtp_support, nextn_blocks
from .estimate import md_int
from .gemma4 import is_assistant
from .header import GGUFFile
from .rules import K
from .text import label as _label
from .text import show as _show


def mtp_heads(g: GGUFFile) -> MtpSupport:
    """The NextN heads ``{arch}.nextn_predict_layers`` declares, and whether they can draft."""
    arch = g.architecture or ""
    if is_assistant(g):  # its NextN blocks draft for another model (session/gemma4.py), not for a trunk of its own
        return MtpSupport(arch, 0, NO_HEADS)
    heads = md_int(g, K.LLM.NEXTN_PREDICT_LAYERS.format(arch=arch)) or 0
    n_layer_all = md_int(g, K.LLM.BLOCK_COUNT.format(arch=arch)) or 0
    return mtp_support(arch, heads, n_layer_all)


def check_mtp(g: GGUFFile) -> MtpSupport:
    """:func:`mtp_heads`, after checking that every NextN block of a model whose heads
    can draft carries the tensors its MTP graph asserts, with their shapes (raises
    ModelFileError in one line)."""
    support = mtp_heads(g)
    if not support.usable:
        return support
    arch = g.architecture or ""
    n_embd = md_int(g, K.LLM.EMBEDDING_LENGTH.format(arch=arch)) or 0
    n_layer_all = md_int(g, K.LLM.BLOCK_COUNT.format(arch=arch)) or 0
    names = {t.name: t for t in g.tensors}
    for il in nextn_blocks(n_layer_all, support.heads):
        for suffix, mult in NEXTN_TENSORS.items():
            name = f"blk.{il}.{suffix}"
            t = names.get(name)
            want = tuple(m * n_embd for m in mult)
            if t is None:
                raise ModelFileError(
                    f"{_label(g.path)}: declares {support.heads} MTP head(s) ({arch}.nextn_predict_layers) but has no "
                    f"tensor '{name}': its heads cannot draft (a trunk whose heads ship in another file?)")
            if tuple(t.shape) != want:
                raise ModelFileError(
                    f"{_label(g.path)}: MTP tensor '{_show(name)}' has shape {list(t.shape)}; {arch} needs {list(want)}")
    return support
