"""Tiny Qwen3.5-shaped GGUFs (llama.cpp's ``qwen35``: gated delta-net layers with their
convolution and recurrent state, and full-attention layers), optionally with one NextN
(MTP) block, that llama.cpp loads and runs with its real kernels.

The text they write follows :mod:`world`: the next token after ``... x_prev x`` is one of
``x``'s two successors, picked by a signal that the first delta-net layer computes from
the tokens *before* ``x``:

* its convolution passes the previous token's sign into the value (``v`` is hot on one
  of two channels, by ``sign[x_prev]``), and a constant into the query and the key;
* the delta rule with one key and ``beta = keep`` makes the state an exponential average
  of the values (``s <- (1 - keep) * decay * s + keep * v``), so the signal's sign is always
  ``sign[x_prev]`` (keep > 1/2) and its size depends on the signs before;
* its output projection writes ``n0 - n1`` (the RMS-normed state's two channels) on
  :data:`world.SIGNAL`.

So a recurrent state rolled back wrongly (a rejected draft token left in the convolution
window, or in the average) picks the other successor about half the time: a T=0
comparison with target alone sees it. The other layers (the remaining delta-net layers,
every full-attention layer, every feed-forward) run on random weights and write nothing
(their output projections are zero): they cost what their shape costs.

``heads="agree"``: the NextN block's ``eh_proj`` passes the token's embedding through and
copies the sign of the hidden state it is given (the target's, or its own one step back,
whose :data:`world.SIGN` axis holds ``sign[x_prev]``) onto :data:`world.SIGNAL`; its
attention and feed-forward write nothing. At T=0 it drafts exactly what the trunk will
say; at T>0 its signal has a fixed size where the trunk's varies, so q is close to p but
not equal. ``heads="random"``: the block's matrices are random (acceptance near 0).

``flip``: a model whose embedding gets that share of the signs wrong (a draft that
disagrees after those tokens). A target and its drafts share ``world``.

The tensor names and shapes are those of ``llama_model_qwen35::load_arch_tensors`` (the
vendored src/models/qwen35.cpp). Used by tools/make_hybrid_model.py and the tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np

from . import world as W
from .vocab import add_vocab

ARCH = "qwen35"


@dataclass(frozen=True)
class HybridSpec:
    heads: str = "none"  # "agree" | "random" | "none": one NextN block after the trunk, or none
    n_layer: int = 4  # trunk layers
    attn_every: int = 2  # every attn_every-th layer is full attention (qwen35.full_attention_interval)
    n_embd: int = 512  # at least 3 + the vocabulary (408)
    n_head: int = 2
    n_head_kv: int = 1
    head_dim: int = 32
    rope_dim: int = 16
    n_ff: int = 64
    d_state: int = 16  # the delta net's head size (keys and values); one key head, one value head
    n_ctx: int = 4096
    world: int = 0  # the text's rules (a target and its drafts share them)
    seed: int = 0  # the weights that carry no rule
    flip: float = 0.0  # the share of tokens whose sign this model gets wrong
    margin: float = 8.0  # the successors' logits
    tie: float = 1.0  # the signal's logits per unit
    keep: float = 0.75  # the delta rule's beta: the newest value's share of the state
    decay: float = 0.9  # the state's decay per token
    signal: float = 1.0  # the signal's typical size (the output projection's gain)
    dtype: str = "f32"  # "f32" | "f16": the matrices (norms and small vectors stay f32)
    nextn_key: int | None = None  # write this nextn_predict_layers instead of the true count (malformed files)


# the first delta-net layer's gains (see the module's docstring)
_G_QK = 0.5  # query and key: silu(2) on channel 0, nothing elsewhere
_G_V = 0.75  # value: silu(+-3) on channels 0 and 1, by the previous token's sign
_G_C = 0.5  # value channel 2: a constant silu(2), so the RMS norm sees a stable length
_G_Z = 0.5  # the output gate: silu(2) everywhere


def _silu(x: float) -> float:
    return x / (1.0 + math.exp(-x))


def trunk_signal_gain(spec: HybridSpec) -> float:
    """The output projection's gain that makes a signal of ``sign[x_prev]`` alone (the
    state after a run of equal signs, keep < 1) about ``spec.signal`` in size."""
    s = spec.d_state
    hot, cold, const = _silu(_G_V * W.SIGN_VALUE), _silu(-_G_V * W.SIGN_VALUE), _silu(_G_C * W.BIAS_VALUE)
    n0_minus_n1 = (hot - cold) * math.sqrt(s) / math.sqrt(hot**2 + cold**2 + const**2)
    return spec.signal / (n0_minus_n1 * _silu(_G_Z * W.BIAS_VALUE))


class _Writer:
    def __init__(self, path: Path, spec: HybridSpec) -> None:
        self.spec = spec
        self.mat = np.float16 if spec.dtype == "f16" else np.float32
        self.rng = np.random.default_rng([spec.seed, 1])
        self.w = gguf.GGUFWriter(str(path), ARCH)

    def rnd(self, *shape: int, scale: float = 0.02) -> np.ndarray:  # numpy (rows, cols) == ggml {cols, rows}
        return (self.rng.standard_normal(shape, dtype=np.float32) * scale).astype(self.mat)

    def zero(self, *shape: int) -> np.ndarray:
        return np.zeros(shape, dtype=self.mat)

    def add(self, name: str, a: np.ndarray) -> None:
        self.w.add_tensor(name, a)


def _metadata(w: gguf.GGUFWriter, spec: HybridSpec, n_nextn: int) -> None:
    w.add_type("model")
    w.add_name(f"Tiny Qwen3.5 hybrid test ({spec.heads} heads, flip {spec.flip})")
    w.add_block_count(spec.n_layer + n_nextn)
    if spec.nextn_key is not None or n_nextn:
        w.add_nextn_predict_layers(n_nextn if spec.nextn_key is None else spec.nextn_key)
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(spec.n_embd)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_key_length(spec.head_dim)
    w.add_value_length(spec.head_dim)
    w.add_rope_dimension_count(spec.rope_dim)
    q = spec.rope_dim // 2
    w.add_rope_dimension_sections([q - 2 * (q // 3), q // 3, q // 3, 0])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_ssm_conv_kernel(4)
    w.add_ssm_inner_size(spec.d_state)
    w.add_ssm_state_size(spec.d_state)
    w.add_ssm_time_step_rank(1)
    w.add_ssm_group_count(1)
    w.add_full_attention_interval(spec.attn_every)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if spec.dtype == "f16" else gguf.LlamaFileType.ALL_F32)


def _delta_net(x: _Writer, p: str, signal_gain: float) -> None:
    """A gated delta-net layer: the signal layer (``signal_gain`` > 0) or a silent one."""
    spec, e, s = x.spec, x.spec.n_embd, x.spec.d_state
    f32 = np.float32
    if signal_gain:
        qkv = np.zeros((3 * s, e), f32)
        qkv[0, W.BIAS] = qkv[s, W.BIAS] = _G_QK  # q = k = e_0 after the L2 norm
        qkv[2 * s, W.SIGN], qkv[2 * s + 1, W.SIGN] = _G_V, -_G_V
        qkv[2 * s + 2, W.BIAS] = _G_C
        conv = np.zeros((3 * s, 4), f32)  # taps: column 3 the current token, column 2 the one before
        conv[:, 3] = 1.0
        conv[2 * s: 2 * s + 2] = [0.0, 0.0, 1.0, 0.0]  # the value's sign channels read the previous token
        beta = np.zeros((1, e), f32)
        beta[0, W.BIAS] = math.log(spec.keep / (1 - spec.keep)) / W.BIAS_VALUE
        gate = np.zeros((s, e), f32)
        gate[:, W.BIAS] = _G_Z
        out = np.zeros((e, s), f32)
        out[W.SIGNAL, 0], out[W.SIGNAL, 1] = signal_gain, -signal_gain
        a = math.log(spec.decay) / math.log(2.0)  # g = softplus(0) * a = ln(decay)
        x.add(p + "attn_qkv.weight", qkv.astype(x.mat))
        x.add(p + "attn_gate.weight", gate.astype(x.mat))
        x.add(p + "ssm_conv1d.weight", conv)
        x.add(p + "ssm_dt.bias", np.zeros(1, f32))
        x.add(p + "ssm_a", np.full(1, a, f32))
        x.add(p + "ssm_beta.weight", beta.astype(x.mat))
        x.add(p + "ssm_alpha.weight", np.zeros((1, e), x.mat))
        x.add(p + "ssm_norm.weight", np.ones(s, f32))
        x.add(p + "ssm_out.weight", out.astype(x.mat))
        return
    x.add(p + "attn_qkv.weight", x.rnd(3 * s, e, scale=0.2))
    x.add(p + "attn_gate.weight", x.rnd(s, e, scale=0.2))
    x.add(p + "ssm_conv1d.weight", x.rng.standard_normal((3 * s, 4), dtype=f32) * 0.5)
    x.add(p + "ssm_dt.bias", np.zeros(1, f32))
    x.add(p + "ssm_a", np.full(1, -0.5, f32))
    x.add(p + "ssm_beta.weight", x.rnd(1, e))
    x.add(p + "ssm_alpha.weight", x.rnd(1, e))
    x.add(p + "ssm_norm.weight", np.ones(s, f32))
    x.add(p + "ssm_out.weight", x.zero(e, s))


def _attention(x: _Writer, p: str, outputs) -> None:
    """A full-attention block's tensors (query and gate together, as qwen35 has them)."""
    spec, e, hd = x.spec, x.spec.n_embd, x.spec.head_dim
    x.add(p + "attn_q.weight", x.rnd(2 * spec.n_head * hd, e))
    x.add(p + "attn_k.weight", x.rnd(spec.n_head_kv * hd, e))
    x.add(p + "attn_v.weight", x.rnd(spec.n_head_kv * hd, e))
    x.add(p + "attn_output.weight", outputs(e, spec.n_head * hd))
    x.add(p + "attn_q_norm.weight", np.ones(hd, np.float32))
    x.add(p + "attn_k_norm.weight", np.ones(hd, np.float32))


def _block(x: _Writer, i: int, recurrent: bool, signal_gain: float) -> None:
    spec, e, p = x.spec, x.spec.n_embd, f"blk.{i}."
    x.add(p + "attn_norm.weight", np.ones(e, np.float32))
    x.add(p + "post_attention_norm.weight", np.ones(e, np.float32))
    if recurrent:
        _delta_net(x, p, signal_gain)
    else:
        _attention(x, p, x.zero)
    x.add(p + "ffn_gate.weight", x.rnd(spec.n_ff, e))
    x.add(p + "ffn_up.weight", x.rnd(spec.n_ff, e))
    x.add(p + "ffn_down.weight", x.zero(e, spec.n_ff))


def _nextn(x: _Writer, i: int, agree: bool) -> None:
    """The NextN block (layer ``i``, after the trunk): a full-attention Qwen3.5 block and
    the projection that mixes the token's embedding with the hidden state it is given."""
    spec, e, p = x.spec, x.spec.n_embd, f"blk.{i}."
    outputs = x.zero if agree else (lambda *s: x.rnd(*s, scale=0.5))
    x.add(p + "attn_norm.weight", np.ones(e, np.float32))
    x.add(p + "post_attention_norm.weight", np.ones(e, np.float32))
    _attention(x, p, outputs)
    x.add(p + "ffn_gate.weight", x.rnd(spec.n_ff, e))
    x.add(p + "ffn_up.weight", x.rnd(spec.n_ff, e))
    x.add(p + "ffn_down.weight", outputs(e, spec.n_ff))
    if agree:  # [I | copy SIGN -> SIGNAL]: the embedding passes, the state's sign becomes the signal
        eh = np.zeros((e, 2 * e), np.float32)
        eh[:, :e] = np.eye(e, dtype=np.float32)
        eh[W.SIGNAL, e + W.SIGN] = spec.signal / W.SIGN_VALUE
    else:
        eh = x.rng.standard_normal((e, 2 * e), dtype=np.float32) / math.sqrt(2 * e)
    x.add(p + "nextn.eh_proj.weight", eh.astype(x.mat))
    x.add(p + "nextn.enorm.weight", np.ones(e, np.float32))
    x.add(p + "nextn.hnorm.weight", np.ones(e, np.float32))
    x.add(p + "nextn.shared_head_norm.weight", np.ones(e, np.float32))


def write_hybrid_model(path: str | Path, spec: HybridSpec = HybridSpec()) -> Path:
    """Write a ``qwen35`` GGUF with a delta-net trunk and (unless heads="none") one NextN block."""
    path = Path(path)
    if spec.heads not in ("agree", "random", "none"):
        raise ValueError(f"heads must be agree, random or none, not {spec.heads!r}")
    if spec.attn_every < 2 or spec.n_layer < 1:
        raise ValueError("a qwen35 trunk needs a layer and a full-attention interval of at least 2")
    n_nextn = 0 if spec.heads == "none" else 1
    x = _Writer(path, spec)
    _metadata(x.w, spec, n_nextn)
    n_vocab, control = add_vocab(x.w)
    x.w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    world = W.make_world(n_vocab, control, spec.world)
    x.add("token_embd.weight", W.embedding(world, spec.n_embd, W.model_signs(world, spec.flip, spec.seed)).astype(x.mat))
    x.add("output_norm.weight", np.ones(spec.n_embd, np.float32))
    x.add("output.weight", W.lm_head(world, spec.n_embd, spec.margin, spec.tie).astype(x.mat))
    gain = trunk_signal_gain(spec)
    for i in range(spec.n_layer):
        recurrent = (i + 1) % spec.attn_every != 0
        _block(x, i, recurrent, gain if i == 0 else 0.0)
    if n_nextn:
        _nextn(x, spec.n_layer, spec.heads == "agree")
    x.w.write_header_to_file()
    x.w.write_kv_data_to_file()
    x.w.write_tensors_to_file()
    x.w.close()
    return path


def hybrid(path: str | Path, **kw) -> Path:
    """``write_hybrid_model`` with ``HybridSpec`` fields as keywords."""
    return write_hybrid_model(path, replace(HybridSpec(), **kw))
