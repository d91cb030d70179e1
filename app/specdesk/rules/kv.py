"""The KV cache's size: llama.cpp's formula, on plain numbers.

One K and one V row per layer and context position, ``n_head_kv x head size``
elements each, at ``cache_type_bytes`` per element (2 for f16, about 1 for q8_0).
Pure (no llama_cpp): used by :class:`~specdesk.engine.model.Model` for a loaded model
and by the library's memory estimate for a GGUF file that is not loaded.
"""

from __future__ import annotations

from collections.abc import Iterable


def head_dims(n_embd: int, n_head: int, key_length: int | None = None, value_length: int | None = None) -> tuple[int, int]:
    """(K, V) size per head: the GGUF's ``attention.key_length``/``value_length`` when
    set (even to 0, as llama.cpp reads them), else ``n_embd / n_head`` (llama.cpp's
    default); 0 without heads. The one copy of this rule: the engine, the memory
    estimate and validation use it."""
    default = n_embd // n_head if n_head > 0 else 0
    return (default if key_length is None else key_length, default if value_length is None else value_length)


def kv_bytes_per_layer(n_ctx: int, n_head_kv: int, head_k: int, head_v: int, cache_type_bytes: float = 2.0) -> float:
    """One layer's KV cache for ``n_ctx`` positions."""
    return n_ctx * (head_k + head_v) * max(0, n_head_kv) * cache_type_bytes


def kv_bytes_per_token(n_head_kv: Iterable[int], head_k: int, head_v: int, cache_type_bytes: float = 2.0) -> float:
    """KV cache bytes per context position over all layers (``n_head_kv`` per layer)."""
    return sum(kv_bytes_per_layer(1, h, head_k, head_v, cache_type_bytes) for h in n_head_kv)
