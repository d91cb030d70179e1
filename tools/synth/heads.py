"""Synthetic EAGLE-3 and DFlash draft heads, each with the small target they read, as
GGUFs llama.cpp loads: ``write_eagle3_pair(dir)`` and ``write_dflash_pair(dir)`` write
``dir/target.gguf`` and ``dir/head.gguf``.

The target (llama) is a bigram table, as the MTP tests' models are: every attention
and feed-forward output is zero, so every layer's input at a position is the embedding
of its token and the next token is ``argmax(output . E[token])``, a successor in one
random cycle over the ordinary tokens ``margin`` logits above noise. Each embedding is
``[r(x); c]``: a random part of fixed length and one constant coordinate, rms 1 (the
constant lets a head's attention find positions whatever the tokens are).

The heads read what llama.cpp gives them (src/models/eagle3.cpp, dflash.cpp), and in
mode ``"agree"`` predict what the target will:

* EAGLE-3: at position P the decoder reads the token after P with the encoder's
  projection of the target's layer inputs at P. One attention head attends to its own
  position only (queries and keys are a fixed direction, rotated by RoPE, from the
  constant coordinate: the score peaks at offset 0), its value is the token's random
  part, and the target's own output matrix (shared through ``ctx_other``, as is the
  token embedding) turns it into the target's logits times ``head_scale``. The target
  features and the head's own state are kept out (``hidden_norm`` zero, ``norm_before_residual``).
* DFlash: a block ``[anchor, mask, ...]`` is decoded at once after the target's
  features were injected into its KV cache. Attention head ``j`` attends to the
  position ``j`` before its own (RoPE phases again), and its value (the random part of
  a token, zero for the mask and the injected features) goes to slot ``j`` of the
  hidden state; the head's own output matrix votes, from slot ``j``, for the token ``j``
  steps along the cycle. At block position ``i`` only head ``i`` sees the anchor: it
  predicts ``succ^i(anchor)``.

Mode ``"features"`` makes the heads predict from the target's features, to test that
they are the right positions': EAGLE-3's g-only head predicts two steps on from the
features at P (right for the first draft token only); DFlash's injected features carry
their tokens' random parts, three times louder than the anchor (right on text that
follows the cycle). ``"random"``: every matrix random (acceptance near 0).

``tools/make_head_model.py`` is the command line; the tests call these functions, and
the hostile-file tests their ``HeadSpec`` fields (a head naming layers the target
lacks, another width, a block size of 0, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np

from .head_vocab import MASK_ID, write_vocab

MODES = ("agree", "features", "random")


@dataclass(frozen=True)
class HeadSpec:
    mode: str = "agree"  # agree | features | random
    n_layer: int = 4  # the target's layers
    n_embd: int = 64  # the target's width (a DFlash head's is the same)
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx: int = 4096
    seed: int = 0
    margin: float = 10.0  # the successor's logit above the noise
    noise: float = 1.0
    head_scale: float = 1.0  # EAGLE-3 agree: the head's logits are the target's times this
    const: float = 4.0  # the constant coordinate of every embedding
    rope_base: float = 10000.0
    # the head's declarations (hostile files change them)
    layers: tuple[int, ...] | None = None  # the target layers the head reads (None: the kind's default)
    target_hidden: int | None = None  # EAGLE-3's target_hidden_size (None: the target's width)
    head_embd: int | None = None  # the head's width (None: the target's)
    block_size: int | None = 4  # DFlash's dflash.block_size (None: not written)
    selector_top_k: int | None = None  # DFlash2's selector_top_k key (None: not written)
    selector_tensors: bool = False  # DFlash2's selector tensors, without their other metadata
    head_vocab: int = 0  # tokens dropped from the end of the head's vocabulary (another vocabulary)
    dtype: str = "f16"


# -- the target --------------------------------------------------------------------------------------


def _embeddings(s: HeadSpec, n_vocab: int, rng: np.random.Generator) -> np.ndarray:
    """[r(x); c] for every token, rms 1 (so that a normed embedding's constant coordinate
    is c for every token a head attends to), r of length sqrt(e - c^2); the mask token's
    r is zero (a DFlash block's masks carry no value)."""
    e = s.n_embd
    r = rng.standard_normal((n_vocab, e - 1), dtype=np.float32)
    r /= np.linalg.norm(r, axis=1, keepdims=True)
    r *= np.float32(np.sqrt(e - s.const**2))
    r[MASK_ID] = 0.0
    emb = np.concatenate([r, np.full((n_vocab, 1), s.const, np.float32)], axis=1)
    emb[MASK_ID, -1] = np.float32(np.sqrt(e))  # still rms 1
    return emb


def _cycle(s: HeadSpec, n_vocab: int, control: list[int], rng: np.random.Generator) -> np.ndarray:
    """succ[x]: the token after x on one random cycle over the ordinary tokens (control tokens: themselves)."""
    succ = np.arange(n_vocab)
    order = rng.permutation(np.setdiff1d(np.arange(n_vocab), control))
    succ[order] = np.roll(order, -1)
    return succ


def _unit_r(emb: np.ndarray) -> np.ndarray:
    r = emb[:, :-1].copy()
    n = np.linalg.norm(r, axis=1, keepdims=True)
    return np.divide(r, n, out=np.zeros_like(r), where=n > 0)


def _output(s: HeadSpec, emb: np.ndarray, succ: np.ndarray, control: list[int], steps: int,
            rng: np.random.Generator) -> np.ndarray:
    """Logits ``out . [r; c]``: noise, plus ``margin`` for the token ``steps`` along the
    cycle from x; nothing on the constant coordinate; zero rows for control tokens."""
    n_vocab, e = emb.shape
    out = rng.standard_normal((n_vocab, e), dtype=np.float32) * np.float32(s.noise / e**0.5)
    out[:, -1] = 0.0
    ahead = np.arange(n_vocab)
    for _ in range(steps):
        ahead = succ[ahead]
    ordinary = np.setdiff1d(np.arange(n_vocab), control)
    r_len = float(np.sqrt(e - s.const**2))
    out[ahead[ordinary], :-1] += _unit_r(emb)[ordinary] * np.float32(s.margin / r_len)
    out[control] = 0.0
    return out


class _Writer:
    """A GGUFWriter with the common keys, and its tensors in the spec's type."""

    def __init__(self, path: Path, arch: str, name: str, s: HeadSpec) -> None:
        self.s, self.mat = s, np.float16 if s.dtype == "f16" else np.float32
        self.w = gguf.GGUFWriter(str(path), arch)
        self.arch = arch
        self.w.add_type("model")
        self.w.add_name(name)

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def t(self, name: str, a: np.ndarray, f32: bool = False) -> None:
        self.w.add_tensor(name, np.asarray(a, dtype=np.float32 if f32 or a.ndim == 1 else self.mat))

    def close(self, path: Path) -> Path:
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()
        return path


def write_target(path: Path, s: HeadSpec = HeadSpec()) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The bigram llama target; returns (embeddings, succ, control ids) for its heads."""
    rng = np.random.default_rng(s.seed)
    w = _Writer(path, "llama", "Tiny bigram target for draft heads", s)
    hd = s.n_embd // s.n_head
    w.w.add_block_count(s.n_layer)
    w.w.add_context_length(s.n_ctx)
    w.w.add_embedding_length(s.n_embd)
    w.w.add_feed_forward_length(s.n_ff)
    w.w.add_head_count(s.n_head)
    w.w.add_head_count_kv(s.n_head_kv)
    w.w.add_rope_freq_base(s.rope_base)
    w.w.add_layer_norm_rms_eps(1e-5)
    w.w.add_rope_dimension_count(hd)
    w.w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if s.dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    n_vocab, control = write_vocab(w.w)
    w.w.add_vocab_size(n_vocab)
    emb = _embeddings(s, n_vocab, rng)
    succ = _cycle(s, n_vocab, control, rng)
    w.t("token_embd.weight", emb)
    w.t("output_norm.weight", np.ones(s.n_embd, np.float32))
    w.t("output.weight", _output(s, emb, succ, control, 1, rng))
    kv = hd * s.n_head_kv
    for i in range(s.n_layer):
        p = f"blk.{i}."
        w.t(p + "attn_norm.weight", np.ones(s.n_embd, np.float32))
        w.t(p + "attn_q.weight", rng.standard_normal((s.n_embd, s.n_embd)) * 0.02)
        w.t(p + "attn_k.weight", rng.standard_normal((kv, s.n_embd)) * 0.02)
        w.t(p + "attn_v.weight", rng.standard_normal((kv, s.n_embd)) * 0.02)
        w.t(p + "attn_output.weight", np.zeros((s.n_embd, s.n_embd)))
        w.t(p + "ffn_norm.weight", np.ones(s.n_embd, np.float32))
        w.t(p + "ffn_gate.weight", rng.standard_normal((s.n_ff, s.n_embd)) * 0.02)
        w.t(p + "ffn_up.weight", rng.standard_normal((s.n_ff, s.n_embd)) * 0.02)
        w.t(p + "ffn_down.weight", np.zeros((s.n_embd, s.n_ff)))
    w.close(path)
    return emb, succ, control


# -- attention that finds a position: RoPE phases on a constant direction ----------------------------


def _phases(n_rot: int, base: float, offset: int, neox: bool, size: int) -> np.ndarray:
    """A head's query (``offset`` > 0) or key (0) direction over its first ``n_rot``
    dimensions: each rotated pair at angle -theta_i * offset, so that after RoPE the
    score peaks where the key is ``offset`` positions before the query."""
    v = np.zeros(size, np.float32)
    for i in range(n_rot // 2):
        theta = base ** (-2.0 * i / n_rot)
        a, b = (i, i + n_rot // 2) if neox else (2 * i, 2 * i + 1)
        v[a], v[b] = np.cos(-theta * offset), np.sin(-theta * offset)
    return v


# -- EAGLE-3 -----------------------------------------------------------------------------------------


N_ROT = 8  # the heads' rotated dimensions (the rest of a head carries values)


def write_eagle3_head(path: Path, s: HeadSpec, emb: np.ndarray, succ: np.ndarray, control: list[int]) -> Path:
    rng = np.random.default_rng(s.seed + 1)
    d = s.head_embd or s.n_embd  # the head's width
    e = s.n_embd
    layers = s.layers if s.layers is not None else (0, s.n_layer // 2, s.n_layer - 1)
    w = _Writer(path, "eagle3", f"Tiny EAGLE-3 head ({s.mode})", s)
    w.w.add_block_count(1)
    w.w.add_context_length(s.n_ctx)
    w.w.add_embedding_length(d)
    w.w.add_feed_forward_length(s.n_ff)
    w.w.add_head_count(1 if s.mode != "random" else 4)
    w.w.add_head_count_kv(1 if s.mode != "random" else 2)
    w.w.add_rope_freq_base(s.rope_base)
    w.w.add_layer_norm_rms_eps(1e-5)
    w.w.add_rope_dimension_count(N_ROT if s.mode != "random" else d // 4)
    w.w.add_array(w.key("target_layers"), list(layers))
    w.w.add_uint32(w.key("target_hidden_size"), s.target_hidden or e)
    w.w.add_bool(w.key("norm_before_residual"), s.mode != "random")
    n_vocab, _ = write_vocab(w.w, _vocab_tokens(s))
    n_inp = len(layers) * (s.target_hidden or e)
    ones = np.ones(d, np.float32)
    if s.mode == "random":
        hd = d // 4
        w.t("fc.weight", rng.standard_normal((d, n_inp)) / n_inp**0.5)
        w.t("output_norm.weight", ones)
        _eagle3_layer(w, d, ones, ones, rng.standard_normal((4 * hd, 2 * d)) * 0.1,
                      rng.standard_normal((2 * hd, 2 * d)) * 0.1, rng.standard_normal((2 * hd, 2 * d)) * 0.3,
                      rng.standard_normal((d, 4 * hd)) * 0.3, rng.standard_normal((d, s.n_ff)) * 0.3, rng, s)
        return w.close(path)
    r_len = float(np.sqrt(e - s.const**2))
    # Q and K: the constant coordinate of the token's normed embedding, in phase for offset 0
    q, k, v, wo = (np.zeros((d, 2 * d), np.float32), np.zeros((d, 2 * d), np.float32),
                   np.zeros((d, 2 * d), np.float32), np.zeros((d, d), np.float32))
    qk = 6.0 * (d / 64) ** 0.25  # the scores' scale whatever the width (llama.cpp divides by sqrt(head size))
    q[:, e - 1] = qk * _phases(N_ROT, s.rope_base, 0, False, d)
    k[:, e - 1] = qk * _phases(N_ROT, s.rope_base, 0, False, d)
    if s.mode == "agree":
        v[: e - 1, : e - 1] = np.eye(e - 1)  # the value: the token's random part
        wo[: e - 1, : e - 1] = np.eye(e - 1)
        fc = np.zeros((d, n_inp), np.float32)
        hidden_norm = np.zeros(d, np.float32)  # the target's features and the head's own state stay out
        out_norm = np.full(d, s.head_scale * r_len / d**0.5, np.float32)  # logits: the target's times head_scale
    else:  # features: two steps on from the features at P, through the residual
        fc = np.zeros((d, n_inp), np.float32)
        fc[: e - 1, : e - 1] = np.eye(e - 1)  # g = the random part of the first layer's input
        hidden_norm = ones
        out_norm = ones
        w.t("output.weight", _output(s, emb, succ, control, 2, rng) * np.float32(r_len / d**0.5))
    w.t("fc.weight", fc)
    w.t("output_norm.weight", out_norm)
    _eagle3_layer(w, d, ones, hidden_norm, q, k, v, wo, np.zeros((d, s.n_ff)), rng, s)
    return w.close(path)


def _eagle3_layer(w: _Writer, d: int, attn_norm, hidden_norm, q, k, v, wo, down, rng, s: HeadSpec) -> None:
    p = "blk.0."
    w.t(p + "attn_norm.weight", attn_norm)
    w.t(p + "attn_norm_2.weight", hidden_norm)
    w.t(p + "attn_q.weight", q, f32=True)
    w.t(p + "attn_k.weight", k, f32=True)
    w.t(p + "attn_v.weight", v)
    w.t(p + "attn_output.weight", wo)
    w.t(p + "ffn_norm.weight", np.ones(d, np.float32))
    w.t(p + "ffn_gate.weight", rng.standard_normal((s.n_ff, d)) * 0.1)
    w.t(p + "ffn_up.weight", rng.standard_normal((s.n_ff, d)) * 0.1)
    w.t(p + "ffn_down.weight", down)


def _vocab_tokens(s: HeadSpec) -> list[str] | None:
    if not s.head_vocab:
        return None
    from .head_vocab import bpe_vocab

    return bpe_vocab()[0][: -s.head_vocab]


# -- DFlash ------------------------------------------------------------------------------------------


FEATURE_GAIN = 3.0  # mode "features": the injected features' values against the anchor's


def write_dflash_head(path: Path, s: HeadSpec, emb: np.ndarray, succ: np.ndarray, control: list[int]) -> Path:
    rng = np.random.default_rng(s.seed + 2)
    e = s.n_embd
    d = s.head_embd or e
    layers = s.layers if s.layers is not None else (1, s.n_layer - 1)
    B = s.block_size if s.block_size is not None else 16
    slots = max(1, min(B, 16) - 1)  # attention heads: head j sees j positions back
    hd = max(64, e)  # the heads' size (key_length/value_length: the hidden width need not divide); values carry a token's r
    w = _Writer(path, "dflash", f"Tiny DFlash head ({s.mode})", s)
    w.w.add_block_count(1)
    w.w.add_context_length(s.n_ctx)
    w.w.add_embedding_length(d)
    w.w.add_feed_forward_length(s.n_ff)
    w.w.add_head_count(slots)
    w.w.add_head_count_kv(1)
    w.w.add_key_length(hd)
    w.w.add_value_length(hd)
    w.w.add_rope_freq_base(s.rope_base)
    w.w.add_layer_norm_rms_eps(1e-5)
    w.w.add_rope_dimension_count(N_ROT)
    # q and k are normed per head (rms 1 over hd, 4 pairs carry them): this scale makes the scores' peak 320 at any size
    w.w.add_float32(w.key("attention.scale"), 5.0 * 64 / hd if s.mode != "random" else 1.0 / hd**0.5)
    w.w.add_array(w.key("target_layers"), list(layers))
    if s.block_size is not None:
        w.w.add_uint32(w.key("block_size"), s.block_size)
    if s.selector_top_k is not None:
        w.w.add_uint32(w.key("selector_top_k"), s.selector_top_k)
    n_vocab, _ = write_vocab(w.w, _vocab_tokens(s))
    n_inp = len(layers) * d
    ones = np.ones(d, np.float32)
    wq, wk, wv, wo = (np.zeros((slots * hd, d), np.float32), np.zeros((hd, d), np.float32),
                      np.zeros((hd, d), np.float32), np.zeros((d, slots * hd), np.float32))
    fc, enc_norm = np.zeros((d, n_inp), np.float32), ones.copy()
    out = np.zeros((n_vocab, d), np.float32)
    if s.mode == "random":
        wq, wk, wv, wo = (rng.standard_normal(a.shape).astype(np.float32) * 0.3 for a in (wq, wk, wv, wo))
        fc = rng.standard_normal(fc.shape).astype(np.float32) / n_inp**0.5
        out = None  # the target's output matrix, through ctx_other
    else:
        wk[:, e - 1] = _phases(N_ROT, s.rope_base, 0, True, hd)
        fc[e - 1, e - 1] = 1.0  # the constant coordinate: the injected keys find their positions too
        if s.mode == "features":
            fc[: e - 1, : e - 1] = np.eye(e - 1)
            enc_norm[: e - 1] = FEATURE_GAIN
        wv[: e - 1, : e - 1] = np.eye(e - 1)
        width = (e - 1) // slots
        unit = _unit_r(emb)
        # the anchor's random part projected into a slot has about this length, and the
        # mask's constant coordinate is sqrt(e): a vote of ``alpha`` per unit gives ``margin``
        pr_len = float(np.sqrt((e - s.const**2) * width / (e - 1)))
        alpha = s.margin * float(np.sqrt((pr_len**2 + e) / d)) / pr_len
        ahead = np.arange(n_vocab)
        ordinary = np.setdiff1d(np.arange(n_vocab), control)
        for j in range(1, slots + 1):
            wq[(j - 1) * hd : j * hd, e - 1] = _phases(N_ROT, s.rope_base, j, True, hd)
            proj = np.linalg.qr(rng.standard_normal((e - 1, width)))[0].T  # slot j: a random projection
            wo[(j - 1) * width : j * width, (j - 1) * hd : (j - 1) * hd + e - 1] = proj
            ahead = succ[ahead]
            pr = unit[ordinary] @ proj.T
            pr /= np.linalg.norm(pr, axis=1, keepdims=True)
            out[ahead[ordinary], (j - 1) * width : j * width] += pr * np.float32(alpha)
        out += rng.standard_normal(out.shape).astype(np.float32) * np.float32(s.noise / d**0.5)
        out[:, e - 1] = 0.0
        out[control] = 0.0
    w.t("fc.weight", fc)
    w.t("enc.output_norm.weight", enc_norm)
    w.t("output_norm.weight", ones)
    if out is not None:
        w.t("output.weight", out)
    if s.selector_tensors:
        w.t("selector_predecessor.weight", rng.standard_normal((n_vocab, 8)) * 0.1)
        w.t("selector_successor.weight", rng.standard_normal((n_vocab, 8)) * 0.1)
        w.t("selector_hidden.weight", rng.standard_normal((8, d)) * 0.1)
    p = "blk.0."
    w.t(p + "attn_norm.weight", ones)
    w.t(p + "attn_q.weight", wq, f32=True)
    w.t(p + "attn_k.weight", wk, f32=True)
    w.t(p + "attn_v.weight", wv)
    w.t(p + "attn_output.weight", wo)
    w.t(p + "attn_q_norm.weight", np.ones(hd, np.float32))
    w.t(p + "attn_k_norm.weight", np.ones(hd, np.float32))
    w.t(p + "ffn_norm.weight", ones)
    w.t(p + "ffn_gate.weight", rng.standard_normal((s.n_ff, d)) * 0.1)
    w.t(p + "ffn_up.weight", rng.standard_normal((s.n_ff, d)) * 0.1)
    w.t(p + "ffn_down.weight", rng.standard_normal((d, s.n_ff)) * (0.3 if s.mode == "random" else 0.0))
    return w.close(path)


# -- pairs -------------------------------------------------------------------------------------------


def _pair(writer, dir: Path, spec: HeadSpec) -> tuple[Path, Path]:
    if spec.mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {spec.mode!r}")
    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    target, head = dir / "target.gguf", dir / "head.gguf"
    emb, succ, control = write_target(target, spec)
    writer(head, spec, emb, succ, control)
    return target, head


def write_eagle3_pair(dir: Path, random: bool = False, spec: HeadSpec | None = None, **changes) -> tuple[Path, Path]:
    """``dir/target.gguf`` and an EAGLE-3 ``dir/head.gguf`` that agrees with it (or is random)."""
    spec = replace(spec or HeadSpec(), **({"mode": "random"} if random else {}), **changes)
    return _pair(write_eagle3_head, dir, spec)


def write_dflash_pair(dir: Path, random: bool = False, spec: HeadSpec | None = None, **changes) -> tuple[Path, Path]:
    """``dir/target.gguf`` and a DFlash ``dir/head.gguf`` that agrees with it (or is random)."""
    spec = replace(spec or HeadSpec(), **({"mode": "random"} if random else {}), **changes)
    return _pair(write_dflash_head, dir, spec)
