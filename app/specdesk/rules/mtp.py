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
