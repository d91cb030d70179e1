"""llama.cpp's rules for drafting with a model's own multi-token-prediction (NextN) heads.

A GGUF carries MTP heads when ``{arch}.nextn_predict_layers`` is above 0: the last
that many of its ``{arch}.block_count`` blocks are NextN blocks (``blk.N.nextn.*``),
not part of the trunk. llama.cpp runs them in a second context of the same model
(``LLAMA_CONTEXT_TYPE_MTP``) whose graph exists only for some architectures, each of
which asserts what it supports; an assert there aborts the process, so these rules
are checked before a context is made. Taken from the vendored llama.cpp of
llama-cpp-python 0.3.36: ``src/models/*.cpp`` (``graph_mtp``), ``src/llama-model.cpp``
(``create_memory``) and ``common/speculative.cpp`` (``common_speculative_impl_draft_mtp``).

Pure: what the library reads from a file and the engine from a loaded model go through
:func:`mtp_support`.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Architectures with an MTP graph whose memory can drop the rejected end of a draft,
#: and how many NextN blocks the graph takes: 1 where it asserts
#: ``n_layer_nextn == 1``, None where a chain of heads is allowed (one head per draft
#: step, ``llama_set_nextn_layer_offset``).
MTP_ARCHITECTURES: dict[str, int | None] = {
    "glm4moe": 1,  # GLM-4.5 / 4.5-Air / 4.6 (src/models/glm4-moe.cpp)
    "deepseek2": 1,  # DeepSeek V3 / R1, Kimi K2 (src/models/deepseek2.cpp)
    "deepseek32": 1,  # DeepSeek V3.2 (src/models/deepseek32.cpp)
    "glm-dsa": 1,
    "cohere2moe": 1,
    "step35": None,  # Step 3.5: chained heads (src/models/step35.cpp)
    "mimo2": None,
    "hy_v3": None,
    # Qwen3.5 / 3.6 dense: one head (src/models/qwen35.cpp graph_mtp asserts it) in a plain KV
    # context (llama-model.cpp create_memory: mtp_on_hybrid_qwen), on a hybrid trunk that
    # rolls back by snapshots (rules.rollback, engine.rollback)
    "qwen35": 1,
}

#: Architectures with an MTP graph whose trunk has recurrent (linear-attention) layers
#: that SpecDesk does not accept as a trunk yet: llama.cpp can roll them back (snapshots
#: or checkpoints), but SpecDesk does not check their files (library.gguf.rules'
#: CHECKED_RECURRENT_ARCHITECTURES holds the ones it does: qwen35, above).
MTP_RECURRENT_ARCHITECTURES = frozenset({
    "qwen35moe", "qwen3next", "bailingmoe3", "nemotron_h_moe", "deepseek4", "glm5-next",
})

#: Architectures whose MTP heads ship as a separate assistant model sharing the
#: target's KV cache (``ctx_other``), not as blocks of the target's own file.
MTP_SEPARATE_ARCHITECTURES = frozenset({"gemma4"})

# Why a model's heads cannot draft (MtpSupport.problem): short codes, worded by session.text.
NO_HEADS = "no heads"  # nextn_predict_layers is 0 or absent
UNSUPPORTED = "unsupported architecture"  # llama.cpp has no MTP graph for it
RECURRENT = "recurrent trunk"  # a recurrent trunk SpecDesk does not accept yet
TOO_MANY = "too many heads"  # more NextN blocks than the architecture's graph takes
NO_TRUNK = "no trunk"  # every block is a NextN block

#: The tensors every NextN block must carry, and their shapes as multiples of the
#: embedding width (llama.cpp asserts them in the MTP graph: an abort, not an error).
NEXTN_TENSORS: dict[str, tuple[int, ...]] = {
    "nextn.eh_proj.weight": (2, 1),
    "nextn.enorm.weight": (1,),
    "nextn.hnorm.weight": (1,),
}


@dataclass(frozen=True)
class MtpSupport:
    """What a model's MTP heads allow: how many it carries, and why they cannot
    draft (None when they can)."""

    arch: str
    heads: int
    problem: str | None = None

    @property
    def usable(self) -> bool:
        return self.heads > 0 and self.problem is None

    @property
    def chained(self) -> bool:
        """Several heads, one per draft step (Step 3.5's chain)."""
        return self.usable and self.heads > 1


def nextn_blocks(n_layer_all: int, heads: int) -> range:
    """The block indices of the NextN blocks: the last ``heads`` of ``block_count``."""
    return range(max(0, n_layer_all - heads), n_layer_all)


def mtp_support(arch: str, heads: int, n_layer_all: int) -> MtpSupport:
    """Whether llama.cpp can draft with the ``heads`` NextN blocks of an ``arch`` model
    of ``n_layer_all`` blocks (the trunk's and the heads')."""
    if heads <= 0:
        return MtpSupport(arch, 0, NO_HEADS)
    if heads >= n_layer_all:
        return MtpSupport(arch, heads, NO_TRUNK)
    if arch in MTP_RECURRENT_ARCHITECTURES:
        return MtpSupport(arch, heads, RECURRENT)
    if arch not in MTP_ARCHITECTURES:
        return MtpSupport(arch, heads, UNSUPPORTED)
    limit = MTP_ARCHITECTURES[arch]
    if limit is not None and heads > limit:
        return MtpSupport(arch, heads, TOO_MANY)
    return MtpSupport(arch, heads)


# -- what each MTP graph asserts of a NextN block, beyond its NextN tensors ------------------
#
# llama.cpp's loader (``load_arch_tensors``) makes some of a NextN block's tensors optional,
# or creates them only under a hyper-parameter, while the MTP graph (``graph_mtp``, built
# when the heads' context is made) asserts them or multiplies by them: a file that lacks
# one loads, then aborts the process. A tensor the loader requires is its own error (a
# load that fails in one line), not a rule here.

#: How an architecture's MTP graph picks a NextN block's feed-forward network.
MOE_LEAD = "moe-lead"  # MoE exactly where the block index >= leading_dense_block_count; the graph asserts MoE
EITHER = "either"  # MoE where the block has ffn_gate_inp, else dense; the loader requires neither branch
DENSE = "dense"  # the graph asserts ffn_gate, ffn_up, ffn_down, which the loader takes as optional
LOADED = "loaded"  # the loader requires what the graph uses


@dataclass(frozen=True)
class MtpGraph:
    ffn: str
    #: the graph asserts a fused attn_qkv (mimo2), though the loader also takes q, k and v apart
    fused_qkv: bool = False
    #: deepseek2's graph asserts MLA (key_length_mla, value_length_mla), a q LoRA rank
    #: (which llama.cpp reads only for models it does not take for "lite") and no attention
    #: temperature scaling
    mla: bool = False


#: Per architecture of :data:`MTP_ARCHITECTURES` (src/models/<arch>.cpp).
MTP_GRAPHS: dict[str, MtpGraph] = {
    "glm4moe": MtpGraph(MOE_LEAD),  # GGML_ASSERT(layer.ffn_gate_inp && "MTP block missing ffn_gate_inp")
    "deepseek2": MtpGraph(MOE_LEAD, mla=True),  # "GLM4 MTP block expected to use MoE FFN"
    "deepseek32": MtpGraph(MOE_LEAD),
    "glm-dsa": MtpGraph(MOE_LEAD),
    "cohere2moe": MtpGraph(LOADED),  # every NextN block is loaded as MoE
    "step35": MtpGraph(EITHER),
    "mimo2": MtpGraph(DENSE, fused_qkv=True),
    "hy_v3": MtpGraph(EITHER),
    "qwen35": MtpGraph(DENSE),  # its NextN block's ffn_gate/down/up are created required (src/models/qwen35.cpp)
}

#: A block's feed-forward tensors (names after ``blk.N.``).
DENSE_FFN = ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")
ROUTER = "ffn_gate_inp.weight"
#: the experts: down, and gate+up fused or apart (``create_tensor_gate_up_exps``)
EXPERTS_DOWN = "ffn_down_exps.weight"
EXPERTS_GATE_UP = (("ffn_gate_up_exps.weight",), ("ffn_gate_exps.weight", "ffn_up_exps.weight"))
SHARED_EXPERT = ("ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight")
FUSED_QKV = "attn_qkv.weight"

#: The trunk layer counts deepseek2 takes for a "lite" model, which has no q LoRA rank
#: (48 only with a vocabulary of 128,256).
DEEPSEEK2_LITE = (26, 27)
DEEPSEEK2_LITE_48_VOCAB = 128256


def _missing(has, names) -> list[str]:
    return [n for n in names if not has(n)]


def mtp_block_problem(arch: str, has, il: int, leading_dense: int) -> str | None:
    """What NextN block ``il`` of an ``arch`` model lacks for its MTP graph (a phrase to
    follow "MTP block N"), or None. ``has(name)``: whether ``blk.{il}.{name}`` is in the
    file; ``leading_dense``: ``leading_dense_block_count`` (0 when absent)."""
    graph = MTP_GRAPHS.get(arch)
    if graph is None:
        return None
    if graph.fused_qkv and not has(FUSED_QKV):
        return f"has no {FUSED_QKV} (its q, k and v apart): the {arch} MTP graph asserts a fused one"
    if graph.ffn == MOE_LEAD and il < leading_dense:
        return (f"is dense (leading_dense_block_count {leading_dense} covers it): the {arch} MTP graph asserts a "
                "mixture-of-experts block")
    if graph.ffn == DENSE:
        missing = _missing(has, DENSE_FFN)
        if missing:
            return f"has no {', '.join(missing)}: the {arch} MTP graph asserts a dense feed-forward"
    if graph.ffn == EITHER:
        return _either_problem(arch, has)
    return None


def _either_problem(arch: str, has) -> str | None:
    if not has(ROUTER):
        missing = _missing(has, DENSE_FFN)
        if missing:
            return (f"has neither a router ({ROUTER}) nor the whole of a dense feed-forward (no "
                    f"{', '.join(missing)}): the {arch} MTP graph would multiply by a missing tensor")
        return None
    missing = _missing(has, [EXPERTS_DOWN]) + ([] if any(all(has(n) for n in alt) for alt in EXPERTS_GATE_UP)
                                               else list(EXPERTS_GATE_UP[1]))
    if missing:
        return f"has a router but no {', '.join(missing)}: the {arch} MTP graph would multiply by a missing tensor"
    shared = _missing(has, SHARED_EXPERT)
    if shared and len(shared) < len(SHARED_EXPERT):
        return f"has part of a shared expert (no {', '.join(shared)}): the {arch} MTP graph would mix shapes"
    return None


def mtp_model_problem(arch: str, mla_k: int, mla_v: int, q_lora: int, temperature: float, n_trunk: int,
                      n_vocab: int) -> str | None:
    """What an ``arch`` model's hyper-parameters lack for its MTP graph (a phrase), or
    None: deepseek2's MLA asserts. ``n_trunk``: the trunk's blocks (block_count less the
    NextN ones)."""
    graph = MTP_GRAPHS.get(arch)
    if graph is None or not graph.mla:
        return None
    if mla_k <= 0 or mla_v <= 0:
        return "has no multi-head latent attention (key_length_mla, value_length_mla): its MTP graph asserts it"
    lite = n_trunk in DEEPSEEK2_LITE or (n_trunk == 48 and n_vocab == DEEPSEEK2_LITE_48_VOCAB)
    if lite or q_lora <= 0:
        why = f"llama.cpp takes a {n_trunk}-block trunk for a lite model, which has none" if lite else "it has none"
        return f"has no q LoRA rank ({why}): its MTP graph asserts one"
    if temperature != 0.0:
        return "scales its attention by temperature (attention.temperature_scale): its MTP graph does not"
    return None
