"""An estimate of the RAM and VRAM llama.cpp needs for a GGUF file, from its header."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from ...rules.kv import head_dims, kv_bytes_per_layer
from .arrays import GGUFArray, StringArray
from .header import GGUFFile, TensorInfo
from .hybrid import recurrent_layers, recurrent_shape
from .rules import HYBRID_ARCHITECTURES, RECURRENT_ARCHITECTURES, K
from ...rules.rollback import DEFAULT_SNAPSHOTS, rollback_plan
from .spec import LLAMA_MAX_LAYERS

_BLK_RE = re.compile(r"^blk\.([0-9]+)\.")


def layer_of(name: str) -> int | None:
    m = _BLK_RE.match(name)
    return int(m.group(1)) if m else None


# The matrix products' weights (attention and feed-forward, the output layer): the
# only tensors sent to CPU_REPACK by name, since llama.cpp takes an override's buffer
# without asking whether the op each tensor feeds can read that layout.
_MATMUL_RE = re.compile(r"^(?:blk\.[0-9]+\.(?:attn_(?:q|k|v|qkv|output)|ffn_(?:gate|up|down))|output)\.weight$")


def repackable(t: TensorInfo, types: Collection[str]) -> bool:
    """Whether llama.cpp keeps a repacked copy of ``t`` where its CPU repacks ``types``:
    a 2-D matrix-product weight of such a type, its rows a multiple of 8 (the
    interleaved 8x8 layouts); never token_embd (a row lookup)."""
    return (t.type_name in types and len(t.shape) == 2 and t.shape[1] % 8 == 0
            and _MATMUL_RE.match(t.name) is not None)


def repacked_tensors(g: GGUFFile, types: Collection[str], n_gpu_layers: int) -> list[str]:
    """The tensors to send to llama.cpp's CPU_REPACK buffer by name, where its extra
    buffers are off (``specdesk.engine.model.amx_compiled``): every :func:`repackable`
    one in a layer that surely stays on the CPU. With layers offloaded, only blocks
    below ``n_layer - n_gpu_layers`` and never the output layer, so that no override
    pulls an offloaded weight back to the CPU (llama.cpp versions count the output
    layer among the offloaded ones differently); a negative count offloads all."""
    if n_gpu_layers < 0 or not types:
        return []
    shape_layers = _Shape(g).n_layer
    out = []
    for t in g.tensors:
        if not repackable(t, types):
            continue
        layer = layer_of(t.name)
        on_cpu = layer < shape_layers - n_gpu_layers if layer is not None else n_gpu_layers == 0
        if on_cpu:
            out.append(t.name)
    return out


def layer_bytes(g: GGUFFile) -> tuple[int, dict[int, int]]:
    """The block count (the metadata's, else the blocks counted) and the weight bytes of
    each layer, the output layer (every tensor outside a block but the token
    embeddings) counted as layer ``n_layer``: what a placement plan shows per device."""
    n_layer = md_int(g, f"{g.architecture}.block_count") or len({layer_of(t.name) for t in g.tensors} - {None})
    per_layer: dict[int, int] = {}
    for t in g.tensors:
        li = layer_of(t.name)
        key = n_layer if li is None and not t.name.startswith("token_embd") else li
        if key is not None:
            per_layer[key] = per_layer.get(key, 0) + int(t.n_bytes)
    return n_layer, per_layer


def md_int(g: GGUFFile, key: str) -> int | None:
    v = g.metadata.get(key)
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    return None


def md_layers(g: GGUFFile, key: str, n_layer: int) -> list[int] | None:
    v = g.metadata.get(key)
    if isinstance(v, list) and len(v) == n_layer and all(isinstance(x, int) for x in v):
        return [int(x) for x in v]
    if isinstance(v, int) and not isinstance(v, bool):
        return [v] * n_layer
    return None


def estimate_memory(
    g: GGUFFile,
    n_ctx: int,
    n_gpu_layers: int = 0,
    cache_type_bytes: float = 2.0,
    n_batch: int = 512,
    repack_types: Iterable[str] = (),
) -> dict:
    """Estimate the memory llama.cpp needs for this model, split into RAM and VRAM.

    * Repacked weights: on CPUs where llama.cpp repacks some quantizations into an
      interleaved layout for faster matrix products (``repack_types``, e.g. Q4_0 and
      Q4_K with AVX2; see ``specdesk.engine.model.repack_types``), it keeps a second,
      repacked copy of every such matrix-product weight that stays on the CPU
      (:func:`repackable`; token_embd is not repacked). The mapped file stays resident
      too, so this is extra RAM.

    * Weights: the sum of the tensors' sizes. Like llama.cpp, the last ``n_gpu_layers``
      layers (``blk.i`` with ``i >= n_layer - n_gpu_layers``) go to the GPU; the output
      layer (output.weight, output_norm and other global tensors) goes too when
      ``n_gpu_layers > n_layer``; token_embd always stays in RAM. A model with tied
      embeddings (no output.weight) gets a second copy of token_embd on the GPU as its
      output layer when that is offloaded. A negative ``n_gpu_layers`` means all layers.
    * KV cache: ``specdesk.rules.kv``'s formula, the one the engine uses for loaded
      models: ``n_ctx x (key_length + value_length) x head_count_kv x cache_type_bytes``
      per layer (key_length defaults to embedding_length / head_count; value_length
      likewise); on the GPU for offloaded layers.
    * Compute buffers, an approximation of llama.cpp's worst-case graph: with
      ``n_out = min(n_batch, n_ctx)`` tokens in a batch, ``logits = 4 x n_vocab x n_out``
      (float32 logits of every batch token; in RAM unless the output layer is offloaded)
      plus the activations of one layer, ``4 x n_out x (n_head x n_ctx + 4 x n_embd +
      2 x n_ff)`` (attention scores over the context, residual/norm/attention outputs and
      the feed-forward intermediates; on the GPU when any layer is offloaded).

    * A hybrid model (qwen35): the KV cache of its attention layers only, and its
      recurrent state (``specdesk.rules.rollback``: per sequence, f32) with the snapshots
      a target keeps to roll back a verify batch (``x (1 + n_rs_seq)``, for the
      architectures llama.cpp keeps them for), in ``state_bytes``; on the GPU with any
      layer offloaded.

    Returns integers: weights_bytes, repack_bytes, kv_bytes, state_bytes, compute_bytes,
    ram_bytes, vram_bytes, n_ctx, n_gpu_layers.
    """
    shape = _Shape(g)
    ngl = shape.n_layer + 1 if n_gpu_layers < 0 else min(n_gpu_layers, shape.n_layer + 1)
    w_ram, w_vram, repack = _weights(g, shape.n_layer, ngl, set(repack_types))
    kv_ram, kv_vram = _kv(shape, ngl, n_ctx, cache_type_bytes, recurrent_layers(g) if shape.recurrent else None)
    c_ram, c_vram = _compute(g, shape, ngl, n_ctx, n_batch)
    state = _state(g) if shape.recurrent else 0
    s_ram, s_vram = (0, state) if ngl > 0 else (state, 0)
    return {
        "weights_bytes": int(w_ram + w_vram),
        "repack_bytes": int(repack),
        "kv_bytes": int(kv_ram + kv_vram),
        "state_bytes": int(state),
        "compute_bytes": int(c_ram + c_vram),
        "ram_bytes": int(w_ram + repack + kv_ram + c_ram + s_ram),
        "vram_bytes": int(w_vram + kv_vram + c_vram + s_vram),
        "n_ctx": int(n_ctx),
        "n_gpu_layers": int(ngl),
    }


def _state(g: GGUFFile) -> int:
    """A recurrent or hybrid target's state with its snapshots (rules.rollback's plan)."""
    shape = recurrent_shape(g)
    return rollback_plan(g.architecture or "", True, shape).state_bytes * (1 + DEFAULT_SNAPSHOTS) if shape else 0


class _Shape:
    """The hyper-parameters the estimate needs, read as llama.cpp reads them."""

    def __init__(self, g: GGUFFile) -> None:
        arch = g.architecture or ""
        self.key = lambda template: template.format(arch=arch)
        layer_ids = {i for i in (layer_of(t.name) for t in g.tensors) if i is not None}
        n_layer = md_int(g, self.key(K.LLM.BLOCK_COUNT)) or 0
        if not 0 < n_layer <= LLAMA_MAX_LAYERS:  # missing or implausible: count the layers
            n_layer = len(layer_ids)
        self.n_layer = n_layer
        self.n_embd = md_int(g, self.key(K.LLM.EMBEDDING_LENGTH)) or 0
        self.n_head = md_layers(g, self.key(K.Attention.HEAD_COUNT), n_layer) or [0] * n_layer
        self.n_head_kv = md_layers(g, self.key(K.Attention.HEAD_COUNT_KV), n_layer) or list(self.n_head)
        self.n_ff = md_layers(g, self.key(K.LLM.FEED_FORWARD_LENGTH), n_layer) or [0] * n_layer
        self.head0 = max(self.n_head) if self.n_head else 0
        self.head_k, self.head_v = head_dims(self.n_embd, self.head0, md_int(g, self.key(K.Attention.KEY_LENGTH)),
                                             md_int(g, self.key(K.Attention.VALUE_LENGTH)))
        self.recurrent = arch in RECURRENT_ARCHITECTURES or arch in HYBRID_ARCHITECTURES
        self.n_trunk = n_layer - (md_int(g, self.key(K.LLM.NEXTN_PREDICT_LAYERS)) or 0)


def _weights(g: GGUFFile, n_layer: int, ngl: int, types: set[str]) -> tuple[int, int, int]:
    """Weight bytes in RAM and in VRAM, and the repacked copies in RAM."""
    first_gpu_layer = n_layer - ngl
    output_on_gpu = ngl > n_layer
    w_ram = w_vram = repack = embd_bytes = 0
    for t in g.tensors:
        layer = layer_of(t.name)
        if layer is not None:
            on_gpu = ngl > 0 and layer >= first_gpu_layer
        elif t.name.startswith("token_embd"):
            on_gpu = False
            if t.name == "token_embd.weight":
                embd_bytes = t.n_bytes
        else:
            on_gpu = output_on_gpu
        if on_gpu:
            w_vram += t.n_bytes
        else:
            w_ram += t.n_bytes
            if repackable(t, types):
                repack += t.n_bytes
    if output_on_gpu and g.tensor("output.weight") is None:
        w_vram += embd_bytes  # tied embeddings: the output layer gets its own copy
    return w_ram, w_vram, repack


def _kv(shape: _Shape, ngl: int, n_ctx: int, cache_type_bytes: float,
        recurrent: list[bool] | None = None) -> tuple[float, float]:
    """KV cache bytes in RAM and in VRAM (rules.kv's formula per layer), of the attention
    layers of the trunk where ``recurrent`` says which are (a hybrid's)."""
    first_gpu_layer = shape.n_layer - ngl
    kv_ram = kv_vram = 0.0
    for il in range(shape.n_layer):
        if recurrent is not None and (il >= len(recurrent) or recurrent[il] or il >= shape.n_trunk):
            continue
        layer_bytes = kv_bytes_per_layer(n_ctx, shape.n_head_kv[il], shape.head_k, shape.head_v, cache_type_bytes)
        if ngl > 0 and il >= first_gpu_layer:
            kv_vram += layer_bytes
        else:
            kv_ram += layer_bytes
    return kv_ram, kv_vram


def _compute(g: GGUFFile, shape: _Shape, ngl: int, n_ctx: int, n_batch: int) -> tuple[int, int]:
    """Compute buffers in RAM and in VRAM: the logits and one layer's activations."""
    n_vocab = md_int(g, shape.key(K.LLM.VOCAB_SIZE))
    if n_vocab is None:
        tokens = g.metadata.get(K.Tokenizer.LIST)
        n_vocab = len(tokens) if isinstance(tokens, (list, StringArray, GGUFArray)) else 0
    n_out = max(0, min(n_batch, n_ctx))
    logits = 4 * n_vocab * n_out
    activations = 4 * n_out * (shape.head0 * n_ctx + 4 * shape.n_embd + 2 * (max(shape.n_ff) if shape.n_ff else 0))
    c_ram = c_vram = 0
    if ngl > shape.n_layer:
        c_vram += logits
    else:
        c_ram += logits
    if ngl > 0:
        c_vram += activations
    else:
        c_ram += activations
    return c_ram, c_vram
