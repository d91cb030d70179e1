"""Tiny GLM-4.5-shaped GGUFs (llama.cpp's ``glm4moe``) that carry one NextN/MTP block, for the
mtp tests and tools/make_mtp_model.py.

The trunk is a bigram table: every attention and feed-forward output is zero, so the
hidden state at a position is the embedding of its token and the next token is
``argmax(output . norm(E[token]))``. The output matrix is noise (logits of std
``noise``) plus, for each token, its successor in one random cycle over the ordinary
tokens ``margin`` logits above the rest: the greedy text walks that cycle without
repeating itself for a vocabulary's length, and at T=1 the successor has most of the
probability but not all. Control tokens (end of text among them) have zero rows, so
nothing ends an answer early. Every matrix is still multiplied, so a step costs what
the shape costs.

``heads="agree"``: the MTP block's attention and feed-forward outputs are zero too and
``eh_proj`` passes the embedding half through (``[I | 0]``), so the head computes the
trunk's own function of the token it is given: it predicts what the target will, and
acceptance is near 1. ``heads="random"``: the block's matrices are random, so its
guesses have nothing to do with the trunk's (acceptance near 0).

The tensor names and shapes are those llama.cpp's loader asks for
(``llama_model_glm4_moe::load_arch_tensors`` in the vendored src/models/glm4-moe.cpp):
layers ``0 .. n_layer-1`` are the trunk (the first ``n_dense`` dense, the rest MoE),
layer ``n_layer`` the NextN block (MoE, as its graph asserts ``ffn_gate_inp``; dense
only in the malformed file an ``n_dense`` past the trunk makes), and
``glm4moe.block_count`` counts both. The vocabulary is the tiny byte-level BPE one of
tiny_vocab.py (about 400 tokens), or a real one dumped by
/work/shared/gpu/make_synthetic.py (``tokenizer=`` a .json.gz) for tools/make_mtp_model.py.

Also here: :func:`without_tensor` and :func:`with_kv` for the malformed files the
refusal tests need.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np

from .tiny_vocab import CHATML_TEMPLATE, bpe_vocab

ARCH = "glm4moe"


@dataclass(frozen=True)
class MtpSpec:
    heads: str = "agree"  # "agree" | "random" | "none" (no NextN block: a plain glm4moe)
    n_layer: int = 2  # trunk layers
    n_dense: int = 1  # leading dense trunk layers (GLM-4.5: 1; the rest MoE)
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128  # dense feed-forward
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_exp: int = 32  # each expert's (and the shared expert's) feed-forward
    n_ctx: int = 4096
    seed: int = 0
    dtype: str = "f16"  # "f16" | "f32": the matrices' type (norms are f32)
    tokenizer: str | None = None  # a make_synthetic.py tokenizer dump (.json.gz); None: the tiny BPE one
    nextn_key: int | None = None  # write this nextn_predict_layers instead of the true count (malformed files)
    margin: float = 10.0  # how many logits the successor stands above the noise (10: p about 0.95 at T=1)
    noise: float = 1.0  # the std of the other logits
    head_scale: float = 1.0  # the heads' output norm weight: their logits are the trunk's times this (q = p at T/scale)


def _vocab(w: gguf.GGUFWriter, spec: MtpSpec) -> tuple[int, list[int]]:
    """Write the tokenizer; return the vocabulary size and the ids of control tokens."""
    if spec.tokenizer is None:
        tokens, types, merges = bpe_vocab()
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("smollm")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_pad_token_id(2)
        w.add_add_bos_token(False)
        w.add_chat_template(CHATML_TEMPLATE)
    else:
        t = json.load(gzip.open(spec.tokenizer, "rt", encoding="utf-8"))
        tokens, types = t["tokenizer.ggml.tokens"], t["tokenizer.ggml.token_type"]
        w.add_tokenizer_model(t["tokenizer.ggml.model"])
        w.add_tokenizer_pre(t["tokenizer.ggml.pre"])
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(t["tokenizer.ggml.merges"])
        w.add_eos_token_id(t["tokenizer.ggml.eos_token_id"])
        if "tokenizer.ggml.padding_token_id" in t:
            w.add_pad_token_id(t["tokenizer.ggml.padding_token_id"])
        if "tokenizer.ggml.bos_token_id" in t:
            w.add_bos_token_id(t["tokenizer.ggml.bos_token_id"])
        w.add_add_bos_token(bool(t.get("tokenizer.ggml.add_bos_token", False)))
        if "tokenizer.chat_template" in t:
            w.add_chat_template(t["tokenizer.chat_template"])
    control = [i for i, ty in enumerate(types) if ty in (3, 4)]  # CONTROL, USER_DEFINED
    return len(tokens), control


def write_mtp_model(path: str | Path, spec: MtpSpec = MtpSpec()) -> Path:
    """Write a glm4moe GGUF with a bigram trunk and (unless heads="none") one NextN block."""
    path = Path(path)
    if spec.heads not in ("agree", "random", "none"):
        raise ValueError(f"heads must be agree, random or none, not {spec.heads!r}")
    n_nextn = 0 if spec.heads == "none" else 1
    e, hd = spec.n_embd, spec.n_embd // spec.n_head
    kv = hd * spec.n_head_kv
    mat = np.float16 if spec.dtype == "f16" else np.float32
    rng = np.random.default_rng(spec.seed)
    w = gguf.GGUFWriter(str(path), ARCH)
    w.add_type("model")
    w.add_name(f"Tiny GLM-4.5 MTP test ({spec.heads} heads)")
    w.add_block_count(spec.n_layer + n_nextn)
    if spec.nextn_key is not None or n_nextn:
        w.add_nextn_predict_layers(n_nextn if spec.nextn_key is None else spec.nextn_key)
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(e)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(spec.n_expert)
    w.add_expert_used_count(spec.n_expert_used)
    w.add_expert_shared_count(1)
    w.add_expert_feed_forward_length(spec.n_ff_exp)
    w.add_leading_dense_block_count(spec.n_dense)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if spec.dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    n_vocab, control = _vocab(w, spec)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    def rnd(*shape: int, scale: float = 0.02) -> np.ndarray:  # numpy shape (rows, cols) == ggml {cols, rows}
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(mat)

    def zero(*shape: int) -> np.ndarray:
        return np.zeros(shape, dtype=mat)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    emb = rng.standard_normal((n_vocab, e), dtype=np.float32)
    out = rng.standard_normal((n_vocab, e), dtype=np.float32) * (spec.noise / e ** 0.5)
    ordinary = np.setdiff1d(np.arange(n_vocab), control)
    cycle = rng.permutation(ordinary)
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    # norm(E[t]) is E[t] scaled to length sqrt(e): the successor's logit is margin
    out[np.roll(cycle, -1)] += unit[cycle] * (spec.margin / e ** 0.5)
    out[control] = 0.0
    w.add_tensor("token_embd.weight", emb.astype(mat))
    w.add_tensor("output_norm.weight", ones(e))
    w.add_tensor("output.weight", out.astype(mat))

    def layer(i: int, moe: bool, outputs) -> None:
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(e))
        w.add_tensor(p + "attn_q.weight", rnd(spec.n_head * hd, e))
        w.add_tensor(p + "attn_k.weight", rnd(kv, e))
        w.add_tensor(p + "attn_v.weight", rnd(kv, e))
        w.add_tensor(p + "attn_q.bias", np.zeros(spec.n_head * hd, np.float32))
        w.add_tensor(p + "attn_k.bias", np.zeros(kv, np.float32))
        w.add_tensor(p + "attn_v.bias", np.zeros(kv, np.float32))
        w.add_tensor(p + "attn_output.weight", outputs(e, spec.n_head * hd))
        w.add_tensor(p + "post_attention_norm.weight", ones(e))
        if not moe:
            w.add_tensor(p + "ffn_gate.weight", rnd(spec.n_ff, e))
            w.add_tensor(p + "ffn_up.weight", rnd(spec.n_ff, e))
            w.add_tensor(p + "ffn_down.weight", outputs(e, spec.n_ff))
            return
        ne, f = spec.n_expert, spec.n_ff_exp
        w.add_tensor(p + "ffn_gate_inp.weight", rnd(ne, e, scale=1.0).astype(np.float32))
        w.add_tensor(p + "exp_probs_b.bias", np.zeros(ne, np.float32))
        w.add_tensor(p + "ffn_gate_exps.weight", rnd(ne, f, e))
        w.add_tensor(p + "ffn_up_exps.weight", rnd(ne, f, e))
        w.add_tensor(p + "ffn_down_exps.weight", outputs(ne, e, f))
        w.add_tensor(p + "ffn_gate_shexp.weight", rnd(f, e))
        w.add_tensor(p + "ffn_up_shexp.weight", rnd(f, e))
        w.add_tensor(p + "ffn_down_shexp.weight", outputs(e, f))

    for i in range(spec.n_layer):
        layer(i, i >= spec.n_dense, zero)
    if n_nextn:
        i = spec.n_layer
        agree = spec.heads == "agree"
        # MoE unless leading_dense_block_count covers it (a malformed file: its MTP graph asserts MoE)
        layer(i, i >= spec.n_dense, zero if agree else (lambda *s: rnd(*s, scale=0.5)))
        p = f"blk.{i}.nextn."
        if agree:  # [I | 0]: the normed embedding passes, the target's hidden state does not
            eh = np.zeros((e, 2 * e), dtype=mat)
            eh[:, :e] = np.eye(e, dtype=mat)
        else:
            eh = rnd(e, 2 * e, scale=1.0 / (2 * e) ** 0.5)
        w.add_tensor(p + "eh_proj.weight", eh)
        w.add_tensor(p + "enorm.weight", ones(e))
        w.add_tensor(p + "hnorm.weight", ones(e))
        w.add_tensor(p + "shared_head_norm.weight", ones(e) * np.float32(spec.head_scale))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def agreeing(path: str | Path, **kw) -> Path:
    return write_mtp_model(path, replace(MtpSpec(), heads="agree", **kw))


def random_heads(path: str | Path, **kw) -> Path:
    return write_mtp_model(path, replace(MtpSpec(), heads="random", **kw))


def no_heads(path: str | Path, **kw) -> Path:
    return write_mtp_model(path, replace(MtpSpec(), heads="none", **kw))


# -- Step 3.5 (llama.cpp's step35): several chained heads --------------------------------------


def write_step35_model(path: str | Path, heads: int = 2, agree: bool = True, spec: MtpSpec = MtpSpec()) -> Path:
    """A Step-3.5-shaped GGUF (``llama_model_step35``, src/models/step35.cpp) with a
    bigram trunk and ``heads`` chained NextN blocks (draft token i by head i), every
    layer dense: the trunk and every head as in :func:`write_mtp_model` (agreeing:
    each head computes the trunk's function of the token it is given). Step 3.5
    alternates sliding-window and full attention, and llama.cpp asserts that some
    layer slides, so the trunk's odd layers do."""
    path = Path(path)
    e, hd = spec.n_embd, spec.n_embd // spec.n_head
    kv = hd * spec.n_head_kv
    n_all = spec.n_layer + heads
    mat = np.float16
    rng = np.random.default_rng(spec.seed)
    w = gguf.GGUFWriter(str(path), "step35")
    w.add_type("model")
    w.add_name(f"Tiny Step 3.5 MTP test ({heads} {'agreeing' if agree else 'random'} heads)")
    w.add_block_count(n_all)
    w.add_nextn_predict_layers(heads)
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(e)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_feed_forward_length(spec.n_ff_exp)
    w.add_sliding_window(128)
    w.add_sliding_window_pattern([i % 2 == 1 and i < spec.n_layer for i in range(n_all)])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    n_vocab, control = _vocab(w, spec)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    def rnd(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(mat)

    def zero(*shape: int) -> np.ndarray:
        return np.zeros(shape, dtype=mat)

    ones = lambda n: np.ones(n, dtype=np.float32)  # noqa: E731
    emb = rng.standard_normal((n_vocab, e), dtype=np.float32)
    out = rng.standard_normal((n_vocab, e), dtype=np.float32) * (spec.noise / e ** 0.5)
    cycle = rng.permutation(np.setdiff1d(np.arange(n_vocab), control))
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    out[np.roll(cycle, -1)] += unit[cycle] * (spec.margin / e ** 0.5)
    out[control] = 0.0
    w.add_tensor("token_embd.weight", emb.astype(mat))
    w.add_tensor("output_norm.weight", ones(e))
    w.add_tensor("output.weight", out.astype(mat))
    for i in range(n_all):
        p = f"blk.{i}."
        outputs = zero if (i < spec.n_layer or agree) else (lambda *s: rnd(*s, scale=0.5))
        w.add_tensor(p + "attn_norm.weight", ones(e))
        w.add_tensor(p + "attn_q.weight", rnd(spec.n_head * hd, e))
        w.add_tensor(p + "attn_k.weight", rnd(kv, e))
        w.add_tensor(p + "attn_v.weight", rnd(kv, e))
        w.add_tensor(p + "attn_output.weight", outputs(e, spec.n_head * hd))
        w.add_tensor(p + "ffn_norm.weight", ones(e))
        w.add_tensor(p + "ffn_gate.weight", rnd(spec.n_ff, e))
        w.add_tensor(p + "ffn_up.weight", rnd(spec.n_ff, e))
        w.add_tensor(p + "ffn_down.weight", outputs(e, spec.n_ff))
        if i >= spec.n_layer:
            if agree:
                eh = np.zeros((e, 2 * e), dtype=mat)
                eh[:, :e] = np.eye(e, dtype=mat)
            else:
                eh = rnd(e, 2 * e, scale=1.0 / (2 * e) ** 0.5)
            w.add_tensor(p + "nextn.eh_proj.weight", eh)
            w.add_tensor(p + "nextn.enorm.weight", ones(e))
            w.add_tensor(p + "nextn.hnorm.weight", ones(e))
            w.add_tensor(p + "nextn.shared_head_norm.weight", ones(e))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
