"""Gemma 4 targets (``gemma4``) and their assistants (``gemma4-assistant``), read from
the header without llama.cpp: what llama.cpp 0.3.36 asserts of each file and of a pair.

A broken rule here does not make llama.cpp refuse the file: it aborts the process (a
``GGML_ASSERT``), or crashes, or reads another layer's cache. So these are checked
before llama.cpp sees the files, each in one line. From the vendored sources:

* src/models/gemma4.cpp and gemma4-assistant.cpp (``load_arch_hparams``): the
  sliding-window pattern is required, and ``create_memory`` (src/llama-model.cpp)
  asserts that some layer slides (``GGML_ASSERT(hparams.is_swa_any())``).
* A target's layers past ``block_count - shared_kv_layers`` reuse the cache of the last
  sliding (for a sliding layer) or global layer before them (``reuse``); llama.cpp
  asserts there are at least two layers with a cache of their own and that those two are
  of the right kinds (``GGML_ASSERT(map_layer_ids.find(il_reuse) != ...)``).
* ggml's rope asserts that a layer's rotary dimensions are even and no more than its
  head (``GGML_ASSERT(n_dims <= ne0)``, ``n_dims % 2 == 0``): the global and the
  sliding layers have a size each.
* An assistant's layers are all NextN layers (``nextn_predict_layers`` = ``block_count``,
  as the converter writes; with none, its input projection is never created and the
  graph multiplies by nothing), and ``embedding_length_out`` carries the target's width
  (llama.cpp throws when it equals its own).
* The pair (``create_memory``'s ``share``, the graph's ``ggml_concat`` and
  ``ggml_mul_mat``, src/llama-kv-cache.cpp's ``get_k``): the target is a ``gemma4``
  (the assistant's memory *is* the target's sliding-window cache); the assistant reads
  hidden states as wide as the target's embedding; each sliding layer reads the
  target's second-to-last layer's cache, each global layer its last, so those must be a
  sliding and a global layer with the same head size and key/value heads; the two
  vocabularies have the same size (its tokens index the target's embedding table); and
  the window is the target's (it reads the target's sliding cache under its own mask).
"""

from __future__ import annotations

from dataclasses import dataclass

from .estimate import md_int
from .header import GGUFFile
from .text import label as _label

TARGET = "gemma4"
ASSISTANT = "gemma4-assistant"


def _key(arch: str, name: str) -> str:
    return f"{arch}.{name}"


def _int(g: GGUFFile, key: str, default: int) -> int:
    v = md_int(g, key)
    return default if v is None else v


def _per_layer(g: GGUFFile, key: str, n: int, default: int) -> list[int]:
    v = g.metadata.get(key)
    if isinstance(v, list) and len(v) == n and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return [int(x) for x in v]
    return [_int(g, key, default)] * n


@dataclass(frozen=True)
class Gemma4Shape:
    """What llama.cpp reads of a gemma4 or gemma4-assistant file's attention."""

    name: str
    arch: str
    n_embd: int
    n_embd_out: int  # embedding_length_out (the target's width, for an assistant); n_embd where absent
    n_layer: int  # block_count
    n_nextn: int
    sliding: tuple[bool, ...]  # one per layer
    head: int  # global layers' key length
    head_v: int
    head_swa: int
    head_v_swa: int
    rot: int
    rot_swa: int
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    n_swa: int
    n_vocab: int
    shared_kv: int

    def head_dim(self, il: int) -> int:
        return self.head_swa if self.sliding[il] else self.head

    def kind(self, il: int) -> str:
        return "sliding" if self.sliding[il] else "global"


def read_shape(g: GGUFFile) -> Gemma4Shape | str:
    """The shape of a gemma4 or gemma4-assistant file, or why llama.cpp cannot read it."""
    arch = g.architecture or ""
    md = g.metadata
    k = lambda name: _key(arch, name)  # noqa: E731
    n_layer = _int(g, k("block_count"), 0)
    n_embd = _int(g, k("embedding_length"), 0)
    pattern = md.get(k("attention.sliding_window_pattern"))
    if not isinstance(pattern, list) or not all(isinstance(x, (bool, int)) for x in pattern):
        return f"{arch} needs its sliding-window pattern ({k('attention.sliding_window_pattern')}, an array)"
    if len(pattern) > 512:
        return f"{k('attention.sliding_window_pattern')} has {len(pattern)} entries; llama.cpp takes at most 512"
    sliding = tuple(bool(pattern[i]) if i < len(pattern) else False for i in range(n_layer))
    for name in ("attention.sliding_window", "attention.layer_norm_rms_epsilon"):
        if k(name) not in md:
            return f"missing metadata key '{k(name)}' (required for {arch})"
    n_head = _per_layer(g, k("attention.head_count"), n_layer, 0)
    n_head0 = n_head[0] if n_head else 0
    head = _int(g, k("attention.key_length"), n_embd // n_head0 if n_head0 else 0)
    head_v = _int(g, k("attention.value_length"), n_embd // n_head0 if n_head0 else 0)
    head_swa = _int(g, k("attention.key_length_swa"), head)
    head_v_swa = _int(g, k("attention.value_length_swa"), head_v)
    rot = _int(g, k("rope.dimension_count"), head)
    n_vocab = len(md.get("tokenizer.ggml.tokens") or ())
    return Gemma4Shape(
        name=_label(g.path), arch=arch, n_embd=n_embd, n_embd_out=_int(g, k("embedding_length_out"), n_embd),
        n_layer=n_layer, n_nextn=_int(g, k("nextn_predict_layers"), 0), sliding=sliding,
        head=head, head_v=head_v, head_swa=head_swa, head_v_swa=head_v_swa,
        rot=rot, rot_swa=_int(g, k("rope.dimension_count_swa"), rot),
        n_head=tuple(n_head), n_head_kv=tuple(_per_layer(g, k("attention.head_count_kv"), n_layer, n_head0)),
        n_swa=_int(g, k("attention.sliding_window"), 0), n_vocab=n_vocab,
        shared_kv=_int(g, k("attention.shared_kv_layers"), 0))


def _common_problem(s: Gemma4Shape) -> str | None:
    if not any(s.sliding):
        return f"no layer of its {s.n_layer} slides ({s.arch}.attention.sliding_window_pattern); llama.cpp asserts one does"
    if s.n_swa < 1:
        return f"its sliding window ({s.arch}.attention.sliding_window) is 0"
    if s.head != s.head_v or s.head_swa != s.head_v_swa:
        return f"its key and value lengths differ ({s.head}/{s.head_v}, sliding {s.head_swa}/{s.head_v_swa}); {s.arch} needs them equal"
    kinds = [(kind, rot, head) for kind, rot, head, present in (
        ("global", s.rot, s.head, not all(s.sliding)), ("sliding", s.rot_swa, s.head_swa, any(s.sliding))) if present]
    for kind, rot, head in kinds:
        if rot % 2 or rot > head or rot < 1:
            return f"its {kind} layers rotate {rot} dimensions of heads of {head}; llama.cpp needs an even number, at most the head"
    for il in range(s.n_layer):
        if s.n_head[il] < 1 or s.n_head_kv[il] < 1:
            return f"layer {il} has no attention heads or no key/value heads"
    return None


def target_problem(g: GGUFFile) -> str | None:
    """Why llama.cpp would abort on this gemma4 file (None: it will not)."""
    s = read_shape(g)
    if isinstance(s, str):
        return s
    why = _common_problem(s)
    if why:
        return why
    kv_from = s.n_layer - s.shared_kv
    if kv_from < 2:
        return (f"{s.shared_kv} of its {s.n_layer} layers share another's cache ({s.arch}.attention.shared_kv_layers); "
                "llama.cpp asserts that at least two have their own")
    for il in range(kv_from, s.n_layer):
        src = kv_from - (2 if s.sliding[il] else 1)
        if s.sliding[src] != s.sliding[il]:
            return (f"layer {il} ({s.kind(il)}) would share the cache of layer {src}, which is {s.kind(src)}; "
                    "llama.cpp asserts they are of one kind")
    return None


def assistant_problem(g: GGUFFile) -> str | None:
    """Why llama.cpp would abort on this gemma4-assistant file (None: it will not)."""
    s = read_shape(g)
    if isinstance(s, str):
        return s
    why = _common_problem(s)
    if why:
        return why
    if s.n_nextn != s.n_layer:
        return (f"{s.arch}.nextn_predict_layers is {s.n_nextn} but it has {s.n_layer} blocks; an assistant's blocks are "
                "all NextN blocks")
    if s.n_embd_out == s.n_embd:
        return f"{s.arch}.embedding_length_out (the target's width) is missing or equals its own width ({s.n_embd})"
    return None


#: The per-file checks, by architecture (validate_gguf runs them).
CHECKS = {TARGET: target_problem, ASSISTANT: assistant_problem}


def is_assistant(g: GGUFFile) -> bool:
    return (g.architecture or "") == ASSISTANT


def pair_problem(target: GGUFFile, head: GGUFFile) -> str | None:
    """Why the assistant ``head`` cannot draft for ``target`` (both validated), in a few
    words; None when it fits."""
    if (target.architecture or "") != TARGET:
        return f"a Gemma 4 assistant drafts for a gemma4 target, and this is {target.architecture or 'unknown'}"
    t, h = read_shape(target), read_shape(head)
    if isinstance(t, str) or isinstance(h, str):
        return t if isinstance(t, str) else h  # (validation refuses these first)
    if t.n_embd_out != t.n_embd:
        return f"the target's hidden state is {t.n_embd_out} wide but its embedding {t.n_embd}"
    if h.n_embd_out != t.n_embd:
        return f"it reads hidden states {h.n_embd_out} wide and the target's are {t.n_embd}"
    if h.n_vocab != t.n_vocab:
        return f"its vocabulary has {h.n_vocab} tokens and the target's {t.n_vocab}"
    if t.n_layer < 2 or not t.sliding[t.n_layer - 2] or t.sliding[t.n_layer - 1]:
        kinds = ", ".join(t.kind(i) for i in range(max(0, t.n_layer - 2), t.n_layer))
        return (f"its layers read the cache of the target's last two layers, which must be a sliding then a global "
                f"one (they are: {kinds})")
    for il in range(h.n_layer):
        src = t.n_layer - (2 if h.sliding[il] else 1)
        if (h.head_dim(il), h.n_head_kv[il]) != (t.head_dim(src), t.n_head_kv[src]):
            return (f"its {h.kind(il)} layer {il} reads {h.n_head_kv[il]} key/value heads of {h.head_dim(il)}, and the "
                    f"target's layer {src} caches {t.n_head_kv[src]} of {t.head_dim(src)}")
        if h.n_head[il] % h.n_head_kv[il]:
            return f"its layer {il} has {h.n_head[il]} heads for {h.n_head_kv[il]} key/value heads"
    if h.n_swa != t.n_swa:
        return f"its sliding window is {h.n_swa} tokens and the target's {t.n_swa}"
    return None
