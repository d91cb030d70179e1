"""Draft files that are heads of another model, from their GGUF headers alone. The last
section answers for every kind (what it is, which target it fits: :func:`head_problem`);
Gemma 4 assistants' own rules are in :mod:`.gemma4`. The rest is the heads that read a
target's layers (EAGLE-3, DFlash): what a head is and which target it fits (:func:`head_info`), its own file's
rules (:func:`check_head`), and the pair's (:func:`check_head_pair`), every one a
refusal in one line before llama.cpp sees the file.

The rules are the vendored llama.cpp's, where breaking one would abort the process
rather than fail a load: ``GGML_ASSERT(n_layer == 1)`` and equal head sizes in the
EAGLE-3 graph, ``GGML_ASSERT(model.d2t->type == GGML_TYPE_I64 && ne[0] == n_draft_vocab)``
in both graphs, ``GGML_ASSERT(lid <= n_layer)`` in ``llama_set_embeddings_layer_inp``
and "layer input tensor is null" on a target whose graph does not expose the layer, a
row lookup past the target's embeddings for a mask token of another vocabulary, and
matrix products of the target's shared embeddings or output (``ctx_other``) against a
head of another width. The rest (a missing tensor, a wrong shape) llama.cpp's loader
refuses by itself; some are checked here too, for a clearer line.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ModelFileError
from .estimate import md_int
from .gemma4 import ASSISTANT, TARGET, is_assistant, pair_problem
from .header import GGUFFile
from .rules import DFLASH_ARCH, EAGLE3_ARCH, LAYER_INPUT_HEADS, K
from .text import label as _label
from .text import show as _show

#: The head architectures' names in words, and with their article.
HEAD_NAMES: dict[str, str] = {EAGLE3_ARCH: "EAGLE-3", DFLASH_ARCH: "DFlash"}
_ARTICLES: dict[str, str] = {EAGLE3_ARCH: "an", DFLASH_ARCH: "a"}

#: Target architectures whose graph sets ``t_layer_inp`` for every layer (the vendored
#: src/models/*.cpp): the targets a head can read. Elsewhere llama.cpp aborts.
LAYER_INPUT_ARCHITECTURES = frozenset({
    "llama", "qwen3", "qwen3moe", "gemma4", "gpt-oss", "bailingmoe3", "deepseek4", "hunyuan-vl", "lfm2", "mimo2",
    "minimax-01", "minimax-m2", "nanbeige", "nemotron_h", "qwen35", "qwen35moe", "qwen3next", "qwen4exp",
})

#: A DFlash block: at least the anchor and one mask, at most this many positions.
MAX_BLOCK = 1024

GGML_TYPE_I64 = 27


@dataclass(frozen=True)
class HeadInfo:
    """What a head's header declares."""

    kind: str  # "eagle3" | "dflash"
    layers: tuple[int, ...]  # the target layers it reads
    n_embd: int  # its own width
    target_width: int  # the target width it expects
    n_vocab: int  # its vocabulary
    own_embeddings: bool  # it ships token_embd (else it uses the target's)
    own_output: bool  # it ships output (else it uses the target's)
    block_size: int = 0  # DFlash: the positions of a block (llama.cpp's default 16 when unset)
    selector_top_k: int = 0  # DFlash2's selector
    base_model: str = ""  # general.base_model.0.name, where the converter wrote it

    @property
    def label(self) -> str:
        return HEAD_NAMES[self.kind]

    @property
    def a_label(self) -> str:
        """"an EAGLE-3", "a DFlash"."""
        return f"{_ARTICLES[self.kind]} {self.label}"

    def describe(self) -> str:
        """What the file is and which target it belongs to, in a line."""
        layers = ", ".join(str(lid) for lid in self.layers)
        what = f"{self.label} draft head for a target {self.target_width} wide (reads its layers {layers})"
        if self.base_model:
            what += f", trained for {self.base_model}"
        if self.kind == DFLASH_ARCH:
            what += f"; drafts up to {self.block_size - 1} tokens a block"
        return what


def head_kind(g: GGUFFile) -> str | None:
    """"eagle3" or "dflash" for a head's file, None for any other model."""
    arch = g.architecture or ""
    return arch if arch in LAYER_INPUT_HEADS and arch in HEAD_NAMES else None


def _ints(g: GGUFFile, key: str) -> list[int] | None:
    v = g.metadata.get(key)
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return [int(x) for x in v]
    return None


def head_info(g: GGUFFile) -> HeadInfo:
    """What a head's (validated) header declares, after :func:`check_head`'s rules
    (ModelFileError in one line)."""
    kind = head_kind(g)
    if kind is None:
        raise ModelFileError(f"{_label(g.path)}: architecture '{_show(g.architecture or '')}' is not a draft head")
    return check_head(g)


def _fail(g: GGUFFile, problem: str) -> ModelFileError:
    return ModelFileError(f"{_label(g.path)}: {problem}")


def check_head(g: GGUFFile) -> HeadInfo:
    """A head's own rules (see the module's docstring); its :class:`HeadInfo`."""
    kind = head_kind(g)
    assert kind is not None
    arch, name = kind, HEAD_NAMES[kind]
    names = {t.name: t for t in g.tensors}
    n_embd = md_int(g, K.LLM.EMBEDDING_LENGTH.format(arch=arch)) or 0
    layers = _ints(g, f"{arch}.target_layers")
    if not layers:
        raise _fail(g, f"this {name} head names no target layers ({arch}.target_layers, a list of layer numbers)")
    if any(lid < 0 for lid in layers):
        raise _fail(g, f"{arch}.target_layers names a negative layer ({min(layers)})")
    _check_head_sizes(g, arch)
    n_vocab = len(g.metadata.get(K.Tokenizer.LIST) or ())
    own_output = "output.weight" in names
    _check_d2t(g, names, own_output)
    fc = names.get("fc.weight")
    if fc is None:
        raise _fail(g, f"this {name} head has no tensor 'fc.weight' (its projection of the target's features)")
    base = g.metadata.get("general.base_model.0.name")
    common = dict(layers=tuple(layers), n_embd=n_embd, n_vocab=n_vocab, own_embeddings="token_embd.weight" in names,
                  own_output=own_output, base_model=base if isinstance(base, str) else "")
    if kind == EAGLE3_ARCH:
        return _check_eagle3(g, fc, common)
    return _check_dflash(g, names, fc, common)


def _check_head_sizes(g: GGUFFile, arch: str) -> None:
    """Equal key and value head sizes (both graphs assert it)."""
    key_len = md_int(g, K.Attention.KEY_LENGTH.format(arch=arch))
    val_len = md_int(g, K.Attention.VALUE_LENGTH.format(arch=arch))
    if key_len is not None and val_len is not None and key_len != val_len:
        raise _fail(g, f"its attention key length ({key_len}) and value length ({val_len}) differ, which llama.cpp's "
                       f"{HEAD_NAMES[arch]} graph asserts they do not (an abort)")


def _check_d2t(g: GGUFFile, names: dict, own_output: bool) -> None:
    """A reduced draft vocabulary's map (``d2t``): int64, one entry per row of the head's own output."""
    d2t = names.get("d2t")
    if d2t is None:
        return
    if d2t.ggml_type != GGML_TYPE_I64 or len(d2t.shape) != 1:
        raise _fail(g, f"tensor 'd2t' is {d2t.type_name} {list(d2t.shape)}; llama.cpp asserts a 1-D I64 map (an abort)")
    out = names.get("output.weight")
    if not own_output or len(out.shape) < 2 or out.shape[1] != d2t.shape[0]:
        raise _fail(g, f"tensor 'd2t' maps {d2t.shape[0]} draft tokens but its output matrix has "
                       f"{out.shape[1] if own_output and len(out.shape) > 1 else 'none of its own'}; llama.cpp asserts "
                       "they match (an abort)")


def _check_eagle3(g: GGUFFile, fc, common: dict) -> HeadInfo:
    n_layer = md_int(g, K.LLM.BLOCK_COUNT.format(arch=EAGLE3_ARCH)) or 0
    if n_layer != 1:
        raise _fail(g, f"an EAGLE-3 head has one decoder layer; this one declares {n_layer} (llama.cpp asserts it: an abort)")
    if len(common["layers"]) != 3:
        raise _fail(g, f"an EAGLE-3 head reads 3 target layers; eagle3.target_layers names {len(common['layers'])}")
    width = md_int(g, "eagle3.target_hidden_size")
    if not width or width <= 0:
        raise _fail(g, "this EAGLE-3 head does not say how wide its target is (eagle3.target_hidden_size)")
    if len(fc.shape) != 2 or fc.shape[0] != 3 * width:
        raise _fail(g, f"tensor 'fc.weight' has shape {list(fc.shape)}; 3 layers of a target {width} wide need "
                       f"[{3 * width}, {common['n_embd']}]")
    return HeadInfo(EAGLE3_ARCH, target_width=width, **common)


def _check_dflash(g: GGUFFile, names: dict, fc, common: dict) -> HeadInfo:
    if md_int(g, K.LLM.EXPERT_COUNT.format(arch=DFLASH_ARCH)) or "markov_w1.weight" in names \
            or g.metadata.get("dflash.hyper_connection_count") is not None:
        raise _fail(g, "this is a DSpark / DeepSeek-V4 variant of DFlash, which SpecDesk does not run")
    block = g.metadata.get("dflash.block_size", 16)
    if not isinstance(block, int) or isinstance(block, bool) or not 2 <= block <= MAX_BLOCK:
        raise _fail(g, f"dflash.block_size is {_show(str(block))}; a DFlash block holds its anchor and 1 to "
                       f"{MAX_BLOCK - 1} draft positions")
    n_embd = common["n_embd"]
    n_ids = len(common["layers"])
    if len(fc.shape) != 2 or tuple(fc.shape) != (n_ids * n_embd, n_embd):
        raise _fail(g, f"tensor 'fc.weight' has shape {list(fc.shape)}; {n_ids} target layers of its width need "
                       f"[{n_ids * n_embd}, {n_embd}]")
    top_k = g.metadata.get("dflash.selector_top_k", 0)
    top_k = top_k if isinstance(top_k, int) and not isinstance(top_k, bool) else -1
    has_selector = "selector_hidden.weight" in names
    if top_k > 0 and not has_selector:
        raise _fail(g, f"dflash.selector_top_k is {top_k} but the file has no selector tensors (selector_hidden, ...): "
                       "a DFlash2 head without its selector")
    if has_selector:
        needed = ("selector_rank", "selector_top_k", "conv_kernel_size", "conv_group_size")
        missing = [k for k in needed if not (isinstance(v := g.metadata.get(f"dflash.{k}"), int) and v > 0)]
        if missing or "dflash.block_size" not in g.metadata:
            raise _fail(g, f"this DFlash2 head has selector tensors but no dflash.{(missing or ['block_size'])[0]}")
        if n_embd < top_k * (top_k + 1) or n_embd % g.metadata["dflash.conv_group_size"]:
            raise _fail(g, f"this DFlash2 head is {n_embd} wide, too narrow for its selector (top-k {top_k}) or not a "
                           "multiple of its convolution groups")
    mask = g.metadata.get(K.Tokenizer.MASK_ID)
    if not isinstance(mask, int) or isinstance(mask, bool) or not 0 <= mask < common["n_vocab"]:
        raise _fail(g, "this DFlash head names no mask token in its vocabulary (tokenizer.ggml.mask_token_id), "
                       "which its blocks are made of")
    return HeadInfo(DFLASH_ARCH, target_width=n_embd, block_size=int(block), selector_top_k=max(0, top_k), **common)


def check_head_pair(head: GGUFFile, target: GGUFFile, info: HeadInfo | None = None) -> HeadInfo:
    """The pair's rules: the target exposes the layers the head reads, and is as wide and
    of the vocabulary size the head expects (ModelFileError in one line)."""
    info = info or check_head(head)
    tname, hname = _label(target.path), _label(head.path)
    arch = target.architecture or ""
    if head_kind(target) is not None:
        raise ModelFileError(f"{tname} is a draft head itself, not a target for {hname}")
    if arch not in LAYER_INPUT_ARCHITECTURES:
        raise ModelFileError(f"{hname} reads its target's layers, and llama.cpp gives no layer inputs of a {_show(arch)} "
                             f"model ({tname}); it does for {', '.join(sorted(LAYER_INPUT_ARCHITECTURES))}")
    n_layer = (md_int(target, K.LLM.BLOCK_COUNT.format(arch=arch)) or 0) - (
        md_int(target, K.LLM.NEXTN_PREDICT_LAYERS.format(arch=arch)) or 0)
    missing = [lid for lid in info.layers if lid >= n_layer]
    if missing:
        raise ModelFileError(f"{hname} reads layer {missing[0]} of its target, and {tname} has {n_layer} layers "
                             f"(0 to {n_layer - 1}): not the target it was trained for")
    width = md_int(target, K.LLM.EMBEDDING_LENGTH.format(arch=arch)) or 0
    if width != info.target_width:
        raise ModelFileError(f"{hname} expects a target {info.target_width} wide, and {tname} is {width} wide: not the "
                             "target it was trained for")
    shares = [w for w, own in (("token embeddings", info.own_embeddings), ("output matrix", info.own_output)) if not own]
    if shares and info.n_embd != width:
        raise ModelFileError(f"{hname} is {info.n_embd} wide and uses its target's {' and '.join(shares)}, which are "
                             f"{width} wide")
    n_vocab = len(target.metadata.get(K.Tokenizer.LIST) or ())
    if n_vocab != info.n_vocab:
        raise ModelFileError(f"{hname} has a vocabulary of {info.n_vocab} tokens and {tname} one of {n_vocab}: a head "
                             "drafts in its target's vocabulary")
    return info


# -- every kind of head file, one way in (the pairing, the summary, the session) -------------

#: Each kind of head file, by the draft file's architecture: (what it is, with its article;
#: its label in a list of drafts).
HEAD_FILES: dict[str, tuple[str, str]] = {
    EAGLE3_ARCH: ("an EAGLE-3 head", "EAGLE-3 head"),
    DFLASH_ARCH: ("a DFlash head", "DFlash head"),
    ASSISTANT: ("a Gemma 4 assistant", "Gemma 4 assistant"),
}


def head_what(g: GGUFFile) -> str | None:
    """What the (validated) file is where it is a head of another model ("an EAGLE-3
    head"), None for a model of its own."""
    kind = HEAD_FILES.get(g.architecture or "")
    return kind[0] if kind else None


def head_summary(g: GGUFFile) -> str:
    """What the head file ``g`` is and which target it drafts for, in a line, from its
    file alone (ModelFileError where its own rules are broken)."""
    if is_assistant(g):
        arch = g.architecture or ""
        return (f"Gemma 4 assistant for a {TARGET} target {md_int(g, K.LLM.EMBEDDING_LENGTH_OUT.format(arch=arch))} "
                f"wide (sliding window {md_int(g, K.Attention.SLIDING_WINDOW.format(arch=arch))}), sharing its cache")
    return check_head(g).describe()


def head_problem(target: GGUFFile, head: GGUFFile) -> str | None:
    """Why the head file ``head`` cannot draft for ``target`` (both validated), in one line
    naming both; None where it fits, or where ``head`` is a model of its own."""
    what = head_what(head)
    if what is None:
        return None
    if head_what(target) is not None:
        return (f"{_label(target.path)} is {head_what(target)}, a head of another model: load it as the draft "
                "of the target it belongs to")
    if is_assistant(head):
        why = pair_problem(target, head)
        return None if why is None else f"{_label(head.path)} ({what}) does not fit {_label(target.path)}: {why}"
    try:
        check_head_pair(head, target)
    except ModelFileError as e:
        return str(e)
    return None
