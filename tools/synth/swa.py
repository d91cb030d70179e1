"""Tiny Gemma-3-shaped GGUFs (llama.cpp's ``gemma3``) whose first layer attends over a
sliding window, for tests of rollbacks near the window's edge.

The text follows :mod:`world`: the next token after ``x`` is ``up[x]`` or ``down[x]`` by
the sign of the *mean sign of the tokens in the window* (the last ``window`` positions,
``x`` included; an odd window never ties). The sliding layer's query is zero, so it
attends evenly to every position its mask lets through, and its value carries each
token's sign and a constant; its output norm keeps the signal's size tied to the mean. A
window that lost a position (a cell its cache reused, then needed again after a
rollback) averages the wrong tokens: the logits move, and sometimes the token.

The other layers attend to everything and write nothing (zero output projections, as do
the feed-forwards). Gemma 3 scales the embedding by sqrt(n_embd) before the first layer,
so the rows are written that much shorter. Tensor names and shapes are those of
``llama_model_gemma3::load_arch_tensors`` (the vendored src/models/gemma3.cpp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np

from . import world as W
from .vocab import add_vocab

ARCH = "gemma3"


@dataclass(frozen=True)
class SwaSpec:
    n_layer: int = 2  # layer 0 slides, the rest attend to everything
    window: int = 7  # llama.cpp's n_swa: the positions a sliding layer sees, its own included
    n_embd: int = 512
    n_head: int = 2
    n_head_kv: int = 1
    head_dim: int = 32
    n_ff: int = 64
    n_ctx: int = 4096
    world: int = 0
    seed: int = 0
    flip: float = 0.0
    margin: float = 8.0
    tie: float = 1.0
    signal: float = 1.0  # the signal's size for a window of equal signs


def write_swa_model(path: str | Path, spec: SwaSpec = SwaSpec()) -> Path:
    path = Path(path)
    if spec.window < 2 or spec.n_layer < 2:
        raise ValueError("the SWA model needs a window of 2 or more and at least two layers")
    e, hd = spec.n_embd, spec.head_dim
    rng = np.random.default_rng([spec.seed, 2])
    w = gguf.GGUFWriter(str(path), ARCH)
    w.add_type("model")
    w.add_name(f"Tiny Gemma 3 sliding-window test (window {spec.window}, flip {spec.flip})")
    w.add_block_count(spec.n_layer)
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(e)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(spec.window)
    w.add_sliding_window_pattern([i == 0 for i in range(spec.n_layer)])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    n_vocab, control = add_vocab(w)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    world = W.make_world(n_vocab, control, spec.world)
    emb = W.embedding(world, e, W.model_signs(world, spec.flip, spec.seed)) / math.sqrt(e)
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output_norm.weight", np.ones(e, np.float32))
    w.add_tensor("output.weight", W.lm_head(world, e, spec.margin, spec.tie))

    def rnd(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * 0.02

    ones = np.ones(e, np.float32)
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        q, kv = spec.n_head * hd, spec.n_head_kv * hd
        wo = np.zeros((e, q), np.float32)
        post = ones
        wv = rnd(kv, e)
        if i == 0:  # even attention over the window: the mean sign on SIGNAL, a constant on BIAS
            wv = np.zeros((kv, e), np.float32)
            wv[0, W.SIGN] = 1.0 / W.SIGN_VALUE
            wv[1, W.BIAS] = 1.0 / W.BIAS_VALUE
            wo[W.SIGNAL, 0], wo[W.BIAS, 1] = 1.0, 1.0
            # the norm scales [mean, 1] to length sqrt(e); only SIGNAL is kept: sqrt(e)*mean/sqrt(1+mean^2)
            post = np.zeros(e, np.float32)
            post[W.SIGNAL] = spec.signal * math.sqrt(2.0 / e)
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", np.zeros((q, e), np.float32) if i == 0 else rnd(q, e))
        w.add_tensor(p + "attn_k.weight", rnd(kv, e))
        w.add_tensor(p + "attn_v.weight", wv)
        w.add_tensor(p + "attn_output.weight", wo)
        w.add_tensor(p + "attn_q_norm.weight", np.ones(hd, np.float32))
        w.add_tensor(p + "attn_k_norm.weight", np.ones(hd, np.float32))
        w.add_tensor(p + "post_attention_norm.weight", post)
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", rnd(spec.n_ff, e))
        w.add_tensor(p + "ffn_up.weight", rnd(spec.n_ff, e))
        w.add_tensor(p + "ffn_down.weight", np.zeros((e, spec.n_ff), np.float32))
        w.add_tensor(p + "post_ffw_norm.weight", ones)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def swa(path: str | Path, **kw) -> Path:
    """``write_swa_model`` with ``SwaSpec`` fields as keywords."""
    return write_swa_model(path, replace(SwaSpec(), **kw))
