"""A tiny synthetic Gemma 4 target and a Gemma 4 assistant for it (llama.cpp's ``gemma4``
and ``gemma4-assistant``), as GGUFs llama.cpp 0.3.36 (llama-cpp-python's) really loads.

:func:`write_pair` writes ``DIR/target.gguf`` and ``DIR/head.gguf``.

The target (``llama_model_gemma4``, src/models/gemma4.cpp) carries only what its loader
requires: sliding-window and global attention layers (the last global, the one before
it sliding, as the assistant's shared cache needs), different head sizes for the two
(``key_length`` and ``key_length_swa``), one ``rope_freqs`` for the global layers, no
per-layer embeddings (``embedding_length_per_layer_input`` = 0), no experts, no logit
soft-capping. Its trunk is a bigram table: the feed-forward outputs are zero, and so are
the attention outputs unless ``attention`` > 0, so the hidden state at a position is the
embedding of its token and the next token is ``argmax(output . norm(E[token]))``. The
embeddings live in the first half of the width (the rest is zero) and so does the
output matrix: for each token, its successor in one random cycle over the ordinary tokens
stands ``margin`` logits above noise of std ``noise``; control tokens have zero rows.
With ``attention`` > 0 each layer's attention output, normalised, is added with that
weight: the next token then depends on what the layer attends to (the KV cache, the
sliding window), which the window tests need.

The assistant (``llama_model_gemma4_assistant``, src/models/gemma4-assistant.cpp) is
``embedding_length`` = half the target's width, ``embedding_length_out`` = the target's
width, one sliding and one global layer (it has no K/V of its own: its layers read the
target's last sliding and last global layer's cache), ``nextn_predict_layers`` =
``block_count`` as the converter writes it. Its graph embeds the token with the
*target's* embedding table, concatenates the target's hidden state and projects
(``nextn.pre_projection``). Agreeing (``random=False``): that projection keeps the
embedding's first half and drops the hidden state, every attention and feed-forward
output is zero, and its own embedding table (its output matrix) is the target's output
matrix's first half, its output norm scaled so its logits equal the target's times
``head_scale``: it predicts what the bigram trunk will. Random: every matrix random.

Every matrix is still multiplied, so a step costs what the shape costs. The vocabulary is
the tiny byte-level BPE one of vocab.py.

Also :func:`write_target` and :func:`write_head` alone, with a :class:`PairSpec` each, for
the files the refusal tests need (a head of another width, another window, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np

from .vocab import add_vocab as write_vocab

TARGET_ARCH = "gemma4"
HEAD_ARCH = "gemma4-assistant"


@dataclass(frozen=True)
class PairSpec:
    """The shapes of a synthetic pair (the target's, and the assistant's ``head_*``)."""

    n_embd: int = 64  # the target's width (even: the embeddings use its first half)
    n_layer: int = 2  # target layers: every `swa_period`-th and the last global, the rest sliding
    swa_period: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 32  # global layers' key/value length
    head_dim_swa: int = 16  # sliding layers'
    n_ff: int = 128
    n_swa: int = 16  # the sliding window
    n_ctx: int = 4096
    head_embd: int = 0  # the assistant's width (0: half the target's)
    head_layers: tuple[bool, ...] = (True, False)  # the assistant's layers: sliding (True) or global
    head_n_head: int = 4
    head_n_head_kv: int = 0  # 0: the target's
    head_dim_a: int = 0  # the assistant's key lengths (0: the target's)
    head_dim_swa_a: int = 0
    head_n_ff: int = 64
    head_n_swa: int = 0  # 0: the target's window
    head_out: int = 0  # the assistant's embedding_length_out (0: the target's width)
    head_vocab_extra: int = 0  # write the assistant's vocabulary with this many more tokens
    attention: float = 0.0  # the weight of the target's attention output (0: a pure bigram trunk)
    margin: float = 10.0  # the successor's logit above the rest (10: p about 0.95 at T=1)
    noise: float = 1.0
    head_scale: float = 1.0  # the agreeing assistant's logits are the target's times this
    seed: int = 0
    f32: bool = False  # f32 matrices (default f16)

    @property
    def a_embd(self) -> int:
        return self.head_embd or self.n_embd // 2

    def swa_layers(self) -> list[bool]:
        n, k = self.n_layer, self.swa_period
        return [i < n - 1 and (i % k) != k - 1 for i in range(n)]


def _common(w: gguf.GGUFWriter, s: PairSpec, n_layer: int) -> None:
    w.add_type("model")
    w.add_block_count(n_layer)
    w.add_context_length(s.n_ctx)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1_000_000.0)
    w.add_rope_freq_base_swa(10_000.0)
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if s.f32 else gguf.LlamaFileType.MOSTLY_F16)


class _Tensors:
    """Seeded tensors in numpy's (rows, cols) order, which is ggml's {cols, rows}."""

    def __init__(self, w: gguf.GGUFWriter, s: PairSpec, salt: int) -> None:
        self.w, self.mat = w, (np.float32 if s.f32 else np.float16)
        self.rng = np.random.default_rng([s.seed, salt])

    def rnd(self, *shape: int, scale: float = 0.02) -> np.ndarray:
        return (self.rng.standard_normal(shape, dtype=np.float32) * scale).astype(self.mat)

    def zero(self, *shape: int) -> np.ndarray:
        return np.zeros(shape, dtype=self.mat)

    def add(self, name: str, a: np.ndarray) -> None:
        self.w.add_tensor(name, a if a.ndim > 1 else a.astype(np.float32))


def _bigram(s: PairSpec, n_vocab: int, control: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The target's embeddings and output matrix (n_vocab x n_embd each, the second half zero)."""
    rng = np.random.default_rng([s.seed, 1])
    half = s.n_embd // 2
    emb = np.zeros((n_vocab, s.n_embd), dtype=np.float32)
    emb[:, :half] = rng.standard_normal((n_vocab, half), dtype=np.float32)
    unit = emb[:, :half] / np.linalg.norm(emb[:, :half], axis=1, keepdims=True)
    # the final norm scales a token's hidden state to length sqrt(n_embd): logits are out . unit * sqrt(n_embd)
    scale = 1.0 / np.sqrt(s.n_embd)
    out = np.zeros((n_vocab, s.n_embd), dtype=np.float32)
    out[:, :half] = rng.standard_normal((n_vocab, half), dtype=np.float32) * (s.noise / np.sqrt(half)) * scale
    cycle = rng.permutation(np.setdiff1d(np.arange(n_vocab), control))
    out[np.roll(cycle, -1), :half] += unit[cycle] * (s.margin * scale)
    out[control] = 0.0
    return emb, out


def write_target(path: Path, s: PairSpec = PairSpec()) -> Path:
    """A gemma4 GGUF whose trunk is a bigram table (plus attention, with ``s.attention``)."""
    path = Path(path)
    w = gguf.GGUFWriter(str(path), TARGET_ARCH)
    w.add_name("Tiny Gemma 4 target (synthetic)")
    _common(w, s, s.n_layer)
    e = s.n_embd
    w.add_embedding_length(e)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_key_length_swa(s.head_dim_swa)
    w.add_value_length_swa(s.head_dim_swa)
    w.add_rope_dimension_count(s.head_dim)
    w.add_rope_dimension_count_swa(s.head_dim_swa)
    w.add_sliding_window(s.n_swa)
    swa = s.swa_layers()
    w.add_sliding_window_pattern(swa)
    w.add_embedding_length_per_layer_input(0)
    n_vocab, control = write_vocab(w)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    t = _Tensors(w, s, 2)
    emb, out = _bigram(s, n_vocab, control)
    t.add("token_embd.weight", emb.astype(t.mat))
    t.add("output_norm.weight", np.ones(e))
    t.add("output.weight", out.astype(t.mat))
    t.add("rope_freqs.weight", np.ones(s.head_dim // 2))
    for i, sliding in enumerate(swa):
        hd = s.head_dim_swa if sliding else s.head_dim
        q, kv = s.n_head * hd, s.n_head_kv * hd
        p = f"blk.{i}."
        t.add(p + "attn_norm.weight", np.ones(e))
        t.add(p + "attn_q.weight", t.rnd(q, e, scale=1.0))
        t.add(p + "attn_k.weight", t.rnd(kv, e, scale=1.0))
        t.add(p + "attn_v.weight", t.rnd(kv, e, scale=1.0))
        t.add(p + "attn_output.weight", t.rnd(e, q, scale=1.0) if s.attention else t.zero(e, q))
        t.add(p + "attn_q_norm.weight", np.ones(hd))
        t.add(p + "attn_k_norm.weight", np.ones(hd))
        t.add(p + "post_attention_norm.weight", np.full(e, s.attention or 1.0))
        t.add(p + "layer_output_scale.weight", np.ones(1))
        t.add(p + "ffn_norm.weight", np.ones(e))
        t.add(p + "ffn_gate.weight", t.rnd(s.n_ff, e))
        t.add(p + "ffn_up.weight", t.rnd(s.n_ff, e))
        t.add(p + "ffn_down.weight", t.zero(e, s.n_ff))
        t.add(p + "post_ffw_norm.weight", np.ones(e))
    _close(w)
    return path


def write_head(path: Path, s: PairSpec = PairSpec(), random: bool = False) -> Path:
    """A gemma4-assistant GGUF for the target :func:`write_target` writes with ``s``:
    agreeing with its bigram trunk, or (``random``) with random matrices."""
    path = Path(path)
    w = gguf.GGUFWriter(str(path), HEAD_ARCH)
    w.add_name(f"Tiny Gemma 4 assistant (synthetic, {'random' if random else 'agreeing'})")
    n_layer = len(s.head_layers)
    _common(w, s, n_layer)
    a, e = s.a_embd, s.head_out or s.n_embd
    hd, hd_swa = s.head_dim_a or s.head_dim, s.head_dim_swa_a or s.head_dim_swa
    w.add_embedding_length(a)
    w.add_embedding_length_out(e)
    w.add_nextn_predict_layers(n_layer)
    w.add_feed_forward_length(s.head_n_ff)
    w.add_head_count(s.head_n_head)
    w.add_head_count_kv(s.head_n_head_kv or s.n_head_kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_key_length_swa(hd_swa)
    w.add_value_length_swa(hd_swa)
    w.add_rope_dimension_count(hd)
    w.add_rope_dimension_count_swa(hd_swa)
    w.add_sliding_window(s.head_n_swa or s.n_swa)
    w.add_sliding_window_pattern(list(s.head_layers))
    n_tok, control = write_vocab(w, s.head_vocab_extra)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    t = _Tensors(w, s, 3)
    _, out = _bigram(s, n_tok - s.head_vocab_extra, control)
    out = np.vstack([out, np.zeros((s.head_vocab_extra, s.n_embd), dtype=np.float32)])
    half = s.n_embd // 2
    if random:
        t.add("token_embd.weight", t.rnd(n_tok, a, scale=1.0))
        t.add("output_norm.weight", np.ones(a))
        t.add("nextn.pre_projection.weight", t.rnd(a, 2 * e, scale=1.0 / np.sqrt(2 * e)))
    else:
        emb = np.zeros((n_tok, a), dtype=np.float32)
        emb[:, : min(a, half)] = out[:, : min(a, half)]
        t.add("token_embd.weight", emb.astype(t.mat))
        # its hidden state is the embedding's first half, normed to length sqrt(a); the target's to sqrt(e)
        t.add("output_norm.weight", np.full(a, np.sqrt(e / a) * s.head_scale))
        pre = np.zeros((a, 2 * e), dtype=np.float32)
        pre[np.arange(min(a, half)), np.arange(min(a, half))] = 1.0  # [I 0 | 0]: the embedding passes, h does not
        t.add("nextn.pre_projection.weight", pre.astype(t.mat))
    t.add("nextn.post_projection.weight", t.rnd(e, a, scale=1.0 / np.sqrt(a)))
    t.add("rope_freqs.weight", np.ones(hd // 2))
    for i, sliding in enumerate(s.head_layers):
        q = s.head_n_head * (hd_swa if sliding else hd)
        p = f"blk.{i}."
        t.add(p + "attn_norm.weight", np.ones(a))
        t.add(p + "attn_q.weight", t.rnd(q, a, scale=1.0))
        t.add(p + "attn_output.weight", t.rnd(a, q, scale=1.0) if random else t.zero(a, q))
        t.add(p + "attn_q_norm.weight", np.ones(q // s.head_n_head))
        t.add(p + "post_attention_norm.weight", np.ones(a))
        t.add(p + "layer_output_scale.weight", np.ones(1))
        t.add(p + "ffn_norm.weight", np.ones(a))
        t.add(p + "ffn_gate.weight", t.rnd(s.head_n_ff, a))
        t.add(p + "ffn_up.weight", t.rnd(s.head_n_ff, a))
        t.add(p + "ffn_down.weight", t.rnd(a, s.head_n_ff, scale=0.5) if random else t.zero(a, s.head_n_ff))
        t.add(p + "post_ffw_norm.weight", np.ones(a))
    _close(w)
    return path


def _close(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_pair(dir: Path, random: bool = False, spec: PairSpec | None = None, **changes) -> tuple[Path, Path]:
    """Write ``dir/target.gguf`` and ``dir/head.gguf`` (an assistant that agrees with the
    target, or ``random``); ``spec`` or keyword ``changes`` of :class:`PairSpec` shape them."""
    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    s = replace(spec or PairSpec(), **changes)
    return write_target(dir / "target.gguf", s), write_head(dir / "head.gguf", s, random=random)
