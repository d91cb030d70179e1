"""A GGUF's multi-token-prediction (NextN) heads, read from its header without llama.cpp.

:func:`mtp_heads` says how many heads a model carries and whether llama.cpp can draft
with them (:func:`specdesk.rules.mtp.mtp_support`), from the metadata alone (what the
library and ``doctor`` show). :func:`check_mtp` also checks what the architecture's MTP
graph asserts before a context is made for the heads: the tensors every NextN block
needs (llama.cpp loads a file whose blocks lack them, taking it for a trunk whose heads
live elsewhere, then aborts in the graph: ``GGML_ASSERT(layer.nextn.eh_proj && ...)``),
the feed-forward the graph expects of each block (:func:`~specdesk.rules.mtp.mtp_block_problem`:
a glm4moe block that ``leading_dense_block_count`` makes dense aborts on
``ffn_gate_inp``) and the hyper-parameters it asserts
(:func:`~specdesk.rules.mtp.mtp_model_problem`).
"""

from __future__ import annotations

from ...errors import ModelFileError
from ...rules.mtp import NEXTN_TENSORS, NO_HEADS, MtpSupport, mtp_block_problem, mtp_model_problem, mtp_support, nextn_blocks
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
    _check_graph(g, arch, support.heads, n_layer_all, names)
    return support


def _check_graph(g: GGUFFile, arch: str, heads: int, n_layer_all: int, names) -> None:
    """What ``arch``'s MTP graph asserts of each NextN block and of the model."""
    lead = md_int(g, K.LLM.LEADING_DENSE_BLOCK_COUNT.format(arch=arch)) or 0
    for il in nextn_blocks(n_layer_all, heads):
        why = mtp_block_problem(arch, lambda suffix, il=il: f"blk.{il}.{suffix}" in names, il, lead)
        if why:
            raise ModelFileError(f"{_label(g.path)}: its MTP block {il} {why}, so its heads cannot draft")
    temperature = g.metadata.get(K.Attention.TEMPERATURE_SCALE.format(arch=arch))
    tokens = g.metadata.get(K.Tokenizer.LIST)
    why = mtp_model_problem(
        arch,
        md_int(g, K.Attention.KEY_LENGTH_MLA.format(arch=arch)) or 0,
        md_int(g, K.Attention.VALUE_LENGTH_MLA.format(arch=arch)) or 0,
        md_int(g, K.Attention.Q_LORA_RANK.format(arch=arch)) or 0,
        float(temperature) if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) else 0.0,
        n_layer_all - heads,
        md_int(g, K.LLM.VOCAB_SIZE.format(arch=arch)) or (len(tokens) if tokens is not None else 0),
    )
    if why:
        raise ModelFileError(f"{_label(g.path)}: {why}, so its heads cannot draft")
