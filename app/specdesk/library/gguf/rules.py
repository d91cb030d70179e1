"""llama.cpp's rules about GGUF metadata, as tables: the architectures, tokenizers and
key types its loader accepts, and its vocabulary defaults.

Taken from llama.cpp's src/llama-arch.cpp, llama-model.cpp and llama-vocab.cpp; the
agreement test (tests/integration/test_gguf_llama_agreement.py) checks the names
against the installed libllama.
"""

from __future__ import annotations

import gguf

from .spec import VT

#: Architectures llama.cpp can load as a main model. gguf-py's MODEL_ARCH_NAMES mirrors
#: llama.cpp's LLM_ARCH_NAMES; "clip" is only a vision projector ("CLIP cannot be used
#: as main model"). The agreement test checks every name against the installed libllama.
#: Files that are heads of another model rather than models of their own (library/gguf/heads.py):
#: EAGLE-3 and DFlash heads read a target's layer inputs, through its context (``ctx_other``),
#: with its embeddings and output; a Gemma 4 assistant's blocks are all NextN blocks run on the
#: target's states and KV cache. llama.cpp loads them as drafts only; the gguf package SpecDesk
#: pins does not name them yet.
EAGLE3_ARCH, DFLASH_ARCH = "eagle3", "dflash"
LAYER_INPUT_HEADS = frozenset({EAGLE3_ARCH, DFLASH_ARCH})
HEAD_ARCHITECTURES = LAYER_INPUT_HEADS | {"gemma4-assistant"}
SUPPORTED_ARCHITECTURES: frozenset[str] = (frozenset(gguf.MODEL_ARCH_NAMES.values()) - {"clip"}) | HEAD_ARCHITECTURES

#: Recurrent architectures (llama.cpp's llm_arch_is_recurrent): their state is not a
#: KV cache of positions, so llama_memory_seq_rm cannot drop the last few positions.
RECURRENT_ARCHITECTURES = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
#: Hybrid attention + recurrent architectures (llm_arch_is_hybrid): the same problem for
#: their recurrent layers.
HYBRID_ARCHITECTURES = frozenset({
    "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe",
    "qwen3next", "kimi-linear", "qwen35", "qwen35moe", "deepseek4", "bailingmoe3", "kimi-k3", "glm5-next",
    "qwen4exp", "minimax-01",
})
#: Recurrent and hybrid architectures whose files SpecDesk checks as llama.cpp needs them
#: (library.gguf.hybrid) and rolls back exactly (engine.rollback), so accepts.
CHECKED_RECURRENT_ARCHITECTURES = frozenset({"qwen35"})
#: Architectures SpecDesk refuses as a target or draft. In llama.cpp 0.3.36 every one can
#: roll back (snapshots, or checkpoints of its state: rules.rollback), but a malformed
#: file of one aborts llama.cpp where SpecDesk does not check its tensors first.
REFUSED_RECURRENT_ARCHITECTURES = (RECURRENT_ARCHITECTURES | HYBRID_ARCHITECTURES) - CHECKED_RECURRENT_ARCHITECTURES

#: tokenizer.ggml.model values llama.cpp knows ("unknown tokenizer" otherwise).
TOKENIZER_MODELS = frozenset({"no_vocab", "none", "llama", "bert", "gpt2", "t5", "rwkv", "plamo2"})

#: tokenizer.ggml.pre values llama.cpp accepts for "gpt2" (BPE) vocabularies; any other
#: value makes it throw "unknown pre-tokenizer type". Taken from llama-vocab.cpp; the
#: agreement test loads a BPE vocabulary with each of them in the installed llama.cpp.
BPE_PRE_TOKENIZERS = frozenset({
    "default", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
    "midm-2.0", "lfm2", "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon", "mpt",
    "starcoder", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
    "jina-v2-de", "a.x-4.0", "mellum", "jina-v1-en", "jina-v2-code", "roberta-bpe",
    "refact", "command-r", "qwen2", "deepseek-r1-qwen", "kormo", "stablelm2", "olmo",
    "dbrx", "smaug-bpe", "poro-chat", "glm4", "chatglm-bpe", "viking", "jais", "tekken",
    "smollm", "codeshell", "bloom", "gpt3-finnish", "exaone", "exaone4", "chameleon",
    "minerva-7b", "megrez", "gpt-4o", "llama4", "superbpe", "trillion", "granite-docling",
    "bailingmoe", "bailingmoe2", "llada-moe", "seed-coder", "hunyuan", "hunyuan-dense",
    "kimi-k2", "grok-2", "afmoe", "minimax-m2",
})

ROPE_SCALING_TYPES = frozenset({"none", "linear", "yarn", "longrope"})

# llama_token_type values
TOKEN_TYPE_BYTE = 6

# Architectures whose layers need no attention heads (recurrent or non-transformer).
NO_HEADS_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "wavtokenizer-dec"})
# Architectures whose token_embd is not {embedding_length, n_vocab}.
EMBD_SHAPE_EXEMPT = frozenset({"wavtokenizer-dec"})
# llama.cpp checks rope.dimension_count == head size for these ("invalid n_rot").
NROT_MUST_MATCH = frozenset({"llama", "deci", "falcon"})
# Architectures for which validate_gguf knows the exact tensor set llama.cpp creates.
EXACT_LAYOUT_ARCHS = frozenset({"llama", "qwen2"})
#: Architectures whose loader takes a file that declares NextN (MTP) blocks but has no
#: ``blk.0.attn_norm.weight`` for one of MTP heads alone (``mtp_only`` in
#: src/models/<arch>.cpp's load_arch_tensors): every trunk tensor becomes optional, so a
#: trunk that lacks one loads and then multiplies by a missing tensor (an abort).
MTP_ONLY_PROBE_ARCHS = frozenset({
    "glm4moe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa", "glm5-next", "cohere2moe", "step35", "mimo2",
    "hy_v3", "bailingmoe3", "nemotron_h", "nemotron_h_moe", "qwen35", "qwen35moe", "qwen3next",
})
#: Architectures whose graph asserts (GGML_ASSERT, an abort when a context is made) that
#: the key and value heads are as long, and with True that the rotary dimensions are
#: the whole head too (src/models/glm4-moe.cpp, cohere2moe.cpp, hy-v3.cpp).
HEAD_SIZES_ASSERTED = {"glm4moe": False, "cohere2moe": True, "hy_v3": True}
#: Architectures whose loader asserts experts (GGML_ASSERT(n_expert > 0) in glm4-moe.cpp).
EXPERTS_ASSERTED = frozenset({"glm4moe"})

# --------------------------------------------------------------------------------------
# Key types
# --------------------------------------------------------------------------------------

# Expected metadata types of the keys llama.cpp reads. llama.cpp's getters require the
# exact GGUF type (a uint32 key stored as int32 is "key ... has wrong type"), and some
# (tokenizer arrays read through gguf_get_arr_*) abort the process on a wrong type.
# Specs: "u16", "u32", "f32", "bool", "str", "layers" (uint32 or an int32/uint32 array
# with one value per layer), "ints" (int32/uint32 array), "arr_str", "arr_f32",
# "arr_i32", "arr_bytes" (array of any non-string type).
K = gguf.Keys
GENERAL_KEY_TYPES: dict[str, str] = {
    K.General.ARCHITECTURE: "str",
    K.General.NAME: "str",
    K.General.FILE_TYPE: "u32",
    K.General.ALIGNMENT: "u32",
    "split.count": "u16",
    K.Tokenizer.MODEL: "str",
    K.Tokenizer.PRE: "str",
    K.Tokenizer.TOKEN_TYPE_COUNT: "u32",
    K.Tokenizer.ADD_PREFIX: "bool",
    K.Tokenizer.REMOVE_EXTRA_WS: "bool",
    K.Tokenizer.LIST: "arr_str",
    K.Tokenizer.SCORES: "arr_f32",
    K.Tokenizer.TOKEN_TYPE: "arr_i32",
    K.Tokenizer.MERGES: "arr_str",
    K.Tokenizer.ADD_BOS: "bool",
    K.Tokenizer.ADD_EOS: "bool",
    K.Tokenizer.ADD_SEP: "bool",
    K.Tokenizer.PRECOMPILED_CHARSMAP: "arr_u8",
    K.Tokenizer.CHAT_TEMPLATE: "str",
    # read by llama_vocab::impl::load with get_key (bool) and as an int32 array
    "tokenizer.ggml.normalizer.lowercase": "bool",
    "tokenizer.ggml.normalizer.strip_accents": "bool",
    "tokenizer.ggml.suppress_tokens": "arr_i32",
}
SPECIAL_TOKEN_KEYS = (
    K.Tokenizer.BOS_ID, K.Tokenizer.EOS_ID, K.Tokenizer.EOT_ID, K.Tokenizer.EOM_ID,
    K.Tokenizer.UNK_ID, K.Tokenizer.SEP_ID, K.Tokenizer.PAD_ID, K.Tokenizer.MASK_ID,
    K.Tokenizer.FIM_PRE_ID, K.Tokenizer.FIM_SUF_ID, K.Tokenizer.FIM_MID_ID,
    K.Tokenizer.FIM_PAD_ID, K.Tokenizer.FIM_REP_ID, K.Tokenizer.FIM_SEP_ID,
    K.Tokenizer.PREFIX_ID, K.Tokenizer.SUFFIX_ID, K.Tokenizer.MIDDLE_ID,
)
for _key in SPECIAL_TOKEN_KEYS:
    GENERAL_KEY_TYPES[_key] = "u32"
#: The special tokens that decide what a prompt gets (BOS, EOS, UNK, SEP) and where an
#: answer ends (EOS, EOT, EOM): an id of one past the vocabulary is refused, since
#: llama.cpp would quietly use another token (or none). Padding, mask and FIM ids it
#: ignores the same way, but SpecDesk never uses them, so a file with one is accepted.
USED_SPECIAL_TOKEN_KEYS = (
    K.Tokenizer.BOS_ID, K.Tokenizer.EOS_ID, K.Tokenizer.EOT_ID, K.Tokenizer.EOM_ID,
    K.Tokenizer.UNK_ID, K.Tokenizer.SEP_ID,
)

ARCH_KEY_TYPES: dict[str, str] = {
    K.LLM.CONTEXT_LENGTH: "u32",
    K.LLM.EMBEDDING_LENGTH: "u32",
    K.LLM.BLOCK_COUNT: "u32",
    K.LLM.VOCAB_SIZE: "u32",
    K.LLM.FEED_FORWARD_LENGTH: "layers",
    K.LLM.EXPERT_COUNT: "u32",
    K.LLM.EXPERT_USED_COUNT: "u32",
    K.LLM.EXPERT_SHARED_COUNT: "u32",
    K.LLM.EXPERT_GROUP_COUNT: "u32",
    K.LLM.EXPERT_GROUP_USED_COUNT: "u32",
    K.LLM.EXPERT_FEED_FORWARD_LENGTH: "u32",
    K.LLM.EXPERT_WEIGHTS_SCALE: "f32",
    K.LLM.EXPERT_WEIGHTS_NORM: "bool",
    K.LLM.EXPERT_GATING_FUNC: "u32",
    K.LLM.POOLING_TYPE: "u32",
    K.LLM.LOGIT_SCALE: "f32",
    K.LLM.DECODER_START_TOKEN_ID: "u32",
    K.LLM.ATTN_LOGIT_SOFTCAPPING: "f32",
    K.LLM.FINAL_LOGIT_SOFTCAPPING: "f32",
    K.LLM.RESIDUAL_SCALE: "f32",
    K.LLM.EMBEDDING_SCALE: "f32",
    K.LLM.USE_PARALLEL_RESIDUAL: "bool",
    K.LLM.LEADING_DENSE_BLOCK_COUNT: "u32",
    K.LLM.NEXTN_PREDICT_LAYERS: "u32",
    K.LLM.FULL_ATTENTION_INTERVAL: "u32",
    K.Attention.HEAD_COUNT: "layers",
    K.Attention.HEAD_COUNT_KV: "layers",
    K.Attention.KEY_LENGTH: "u32",
    K.Attention.VALUE_LENGTH: "u32",
    K.Attention.LAYERNORM_EPS: "f32",
    K.Attention.LAYERNORM_RMS_EPS: "f32",
    K.Attention.CAUSAL: "bool",
    K.Attention.SLIDING_WINDOW: "u32",
    K.Attention.CLAMP_KQV: "f32",
    K.Attention.MAX_ALIBI_BIAS: "f32",
    K.Attention.Q_LORA_RANK: "u32",
    K.Attention.KV_LORA_RANK: "u32",
    K.Attention.SCALE: "f32",
    K.Rope.DIMENSION_COUNT: "u32",
    K.Rope.DIMENSION_SECTIONS: "ints",
    K.Rope.FREQ_BASE: "f32",
    K.Rope.FREQ_BASE_SWA: "f32",
    K.Rope.SCALING_TYPE: "str",
    K.Rope.SCALING_FACTOR: "f32",
    "{arch}.rope.scale_linear": "f32",
    K.Rope.SCALING_ATTN_FACTOR: "f32",
    K.Rope.SCALING_ORIG_CTX_LEN: "u32",
    K.Rope.SCALING_FINETUNED: "bool",
    K.Rope.SCALING_YARN_LOG_MUL: "f32",
    # the sliding-window models' (Gemma 4) and their assistants'
    K.Attention.KEY_LENGTH_SWA: "u32",
    K.Attention.VALUE_LENGTH_SWA: "u32",
    K.Attention.SHARED_KV_LAYERS: "u32",
    K.Rope.DIMENSION_COUNT_SWA: "u32",
    K.LLM.EMBEDDING_LENGTH_OUT: "u32",
    K.LLM.EMBD_LENGTH_PER_LAYER_INP: "u32",
}

# Architecture-specific keys llama.cpp requires (get_key without "required = false").
ARCH_REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "llama": (K.Attention.LAYERNORM_RMS_EPS,),
    "qwen2": (K.Attention.LAYERNORM_RMS_EPS,),
    "qwen35": (K.Attention.LAYERNORM_RMS_EPS,),
    # src/models/gemma4.cpp, gemma4-assistant.cpp (their sliding-window pattern: library/gguf/gemma4.py)
    "gemma4": (K.Attention.LAYERNORM_RMS_EPS, K.Attention.SLIDING_WINDOW, K.Attention.KEY_LENGTH_SWA,
               K.Attention.VALUE_LENGTH_SWA, K.LLM.EMBD_LENGTH_PER_LAYER_INP),
    "gemma4-assistant": (K.Attention.LAYERNORM_RMS_EPS, K.Attention.SLIDING_WINDOW, K.Attention.KEY_LENGTH_SWA,
                         K.Attention.VALUE_LENGTH_SWA, K.LLM.EMBEDDING_LENGTH_OUT),
}

INT_ARRAY_TYPES = (VT.INT32, VT.UINT32)

# --------------------------------------------------------------------------------------
# Vocabulary defaults (llama_vocab::impl::load)
# --------------------------------------------------------------------------------------

#: tokenizer.ggml.model -> llama_vocab_type (NONE, SPM, BPE, WPM, UGM, RWKV, PLAMO2).
VOCAB_TYPES = {"no_vocab": 0, "none": 0, "llama": 1, "gpt2": 2, "bert": 3, "t5": 4, "rwkv": 5, "plamo2": 6}
#: The special-token roles the tokenizers use, and the metadata key that sets each.
SPECIAL_ROLE_KEYS = {"bos": K.Tokenizer.BOS_ID, "eos": K.Tokenizer.EOS_ID, "unk": K.Tokenizer.UNK_ID,
                     "sep": K.Tokenizer.SEP_ID, "pad": K.Tokenizer.PAD_ID}
#: tokenizer.ggml.model -> llama.cpp's default id for each role; -1 is LLAMA_TOKEN_NULL.
DEFAULT_SPECIAL_IDS = {
    "no_vocab": dict(bos=-1, eos=-1, unk=-1, sep=-1, pad=-1),
    "none": dict(bos=-1, eos=-1, unk=-1, sep=-1, pad=-1),
    "llama": dict(bos=1, eos=2, unk=0, sep=-1, pad=-1),
    "bert": dict(bos=101, eos=-1, unk=100, sep=102, pad=0),
    "gpt2": dict(bos=11, eos=11, unk=-1, sep=-1, pad=-1),
    "t5": dict(bos=-1, eos=1, unk=2, sep=-1, pad=0),
    "rwkv": dict(bos=-1, eos=-1, unk=-1, sep=-1, pad=-1),
    "plamo2": dict(bos=1, eos=2, unk=0, sep=-1, pad=3),
}
#: tokenizer.ggml.model -> default (add BOS, add EOS); plamo2 and BPE keep llama.cpp's false.
DEFAULT_ADD_BOS_EOS = {"llama": (True, False), "bert": (True, False), "t5": (False, True), "rwkv": (False, False)}
#: BPE pre-tokenizers for which llama.cpp adds a BOS by default.
BPE_PRE_ADD_BOS = frozenset({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                             "lfm2", "jina-v5-nano", "tekken", "chameleon"})
#: BPE pre-tokenizers for which llama.cpp has no BOS by default.
BPE_PRE_NO_BOS = frozenset({"glm4", "glm5", "chatglm-bpe"})
