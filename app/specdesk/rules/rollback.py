"""llama.cpp's rules for rolling back a model whose memory is not a plain KV cache, and
what each way costs, on plain values (the engine does it: specdesk.engine.rollback).

Taken from the vendored llama.cpp of llama-cpp-python 0.3.36:

* ``llm_arch_supports_rs_rollback`` (src/llama-arch.cpp): the architectures whose
  recurrent state keeps ``n_rs_seq`` snapshots per sequence (elsewhere llama.cpp clamps
  ``n_rs_seq`` to 0, src/llama-context.cpp). The memory of the recurrent state grows by
  ``1 + n_rs_seq`` (src/llama-memory-recurrent.cpp: ``n_rows = mem_size * (1 + n_rs_seq)``).
* Every other recurrent or hybrid memory saves and restores one sequence's state
  (``state_write`` / ``state_read`` in every llama-memory-*.cpp and llama-kv-cache-*.cpp),
  so it rolls back by checkpoints: a copy of the partial state, restored, and the tokens
  after it decoded again.
* A recurrent layer of the gated delta-net / Mamba kind holds a convolution state of
  ``(d_conv - 1) * (d_inner + 2 * n_group * d_state)`` floats and a recurrent state of
  ``d_state * d_inner`` floats (src/llama-hparams.cpp ``n_embd_r`` / ``n_embd_s``), in f32.

Pure: the library prices a file that is not loaded with it, the session a loaded one.
"""

from __future__ import annotations

from dataclasses import dataclass

#: llama.cpp's llm_arch_supports_rs_rollback (the agreement test asks libllama).
SNAPSHOT_ARCHITECTURES = frozenset({
    "kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h", "nemotron_h_moe",
    "lfm2", "lfm2moe", "bailingmoe3",
})

#: The snapshots a target keeps by default: a verify batch of up to this many drafts
#: rolls back by one (a longer one takes a checkpoint); llama.cpp's default draft length.
DEFAULT_SNAPSHOTS = 16

SNAPSHOTS = "snapshots"  # the way a model rolls back (RollbackPlan.way)
CHECKPOINTS = "checkpoints"
KV = "kv"  # a plain KV cache drops positions


@dataclass(frozen=True)
class RecurrentShape:
    """What a recurrent layer's state is made of (the GGUF's ``{arch}.ssm.*`` keys)."""

    layers: int  # recurrent layers
    d_conv: int
    d_inner: int
    d_state: int
    n_group: int

    @property
    def state_bytes(self) -> int:
        """One sequence's recurrent state, every recurrent layer, f32."""
        conv = max(0, self.d_conv - 1) * (self.d_inner + 2 * self.n_group * self.d_state)
        return 4 * self.layers * (conv + self.d_state * self.d_inner)


@dataclass(frozen=True)
class RollbackPlan:
    """How a model rolls back as a target or a draft, and what that costs."""

    arch: str
    way: str  # SNAPSHOTS | CHECKPOINTS | KV
    state_bytes: int = 0  # the recurrent state of one sequence (0 for a KV cache)
    n_rs_seq: int = 0  # snapshots kept (SNAPSHOTS only)

    @property
    def snapshot_bytes(self) -> int:
        """Memory the snapshots add to the state, per sequence."""
        return self.state_bytes * self.n_rs_seq

    @property
    def checkpoint_bytes(self) -> int:
        """One checkpoint's copy (the recurrent state; SWA windows are priced elsewhere)."""
        return self.state_bytes if self.way != KV else 0


def rollback_plan(arch: str, recurrent: bool, shape: RecurrentShape | None, n_rs_seq: int = DEFAULT_SNAPSHOTS,
                  role: str = "target") -> RollbackPlan:
    """The plan for ``arch``: snapshots for a target of an architecture that has them
    (a draft decodes a token at a time, which snapshots cannot undo: checkpoints), else
    checkpoints for a recurrent or hybrid model, else the KV cache's own rollback."""
    if not recurrent:
        return RollbackPlan(arch, KV)
    state = shape.state_bytes if shape is not None else 0
    if role == "target" and arch in SNAPSHOT_ARCHITECTURES and n_rs_seq > 0:
        return RollbackPlan(arch, SNAPSHOTS, state, n_rs_seq)
    return RollbackPlan(arch, CHECKPOINTS, state)
