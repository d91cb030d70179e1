"""Exact rollback for contexts whose memory cannot simply drop its last positions:
recurrent and hybrid models (a recurrent state has no positions to drop) and
sliding-window (SWA) caches (which reuse the cells of positions that have slid out).

:class:`~.context.Context` keeps its one contract, ``rollback(n_past)``: forget every
position from ``n_past`` on. For these models it is applied lazily, just before the next
decode (so that several rollbacks between two decodes become one), by the cheapest way
that is exact, as llama.cpp's server and ``common/speculative.cpp`` do it (the vendored
llama.cpp of llama-cpp-python 0.3.36):

* **Snapshots** (``llama_context_params.n_rs_seq``, architectures in llama.cpp's
  ``llm_arch_supports_rs_rollback``): a decode of ``m`` tokens writes the recurrent state
  after each of its last ``min(m, 1 + n_rs_seq)`` tokens (src/models/delta-net-base.cpp:
  ``n_written = min(n_seq_tokens, K)``); ``llama_memory_seq_rm(mem, 0, p, -1)`` then picks
  the one ``r`` tokens back (src/llama-memory-recurrent.cpp), applied at the next decode.
  llama.cpp accepts any ``1 <= r <= n_rs_seq``, but only ``r <= m - 1`` of the *last*
  decode holds a state of this sequence: the rest are left from earlier decodes. So a
  snapshot is used only within the last decode's batch (the verify batch
  ``[pending, d1..dk]`` keeps its first token: ``r <= k``), and never twice.
* **Checkpoints** (``llama_state_seq_get_data_ext`` / ``set_data_ext`` with
  ``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``: the recurrent state, or the SWA window, not the
  full-attention cache, which can drop positions itself): a copy of that state at an
  agreed position, restored to roll back past it, with the tokens from there to the
  rollback point decoded again (the *replay*, merged into the next decode when it needs
  no checkpoint of its own). One is taken where a prefill ends (a draft model drafts from
  there a token at a time) and before a batch the snapshots cannot cover; the last
  :data:`CHECKPOINTS` are kept (the one before the last prefill too: a draft rewound by a
  token, a prompt asked again).
* **Re-prefill**: where neither reaches (a rollback far into the past), the memory is
  cleared and the sequence decoded again. Slow, but never wrong.

A sliding-window cache loses positions only when a rollback drops tokens that were
decoded one at a time (a batch finds its cells from the position before it): after every
rollback the window's first position (``llama_memory_seq_pos_min``) is checked, and a
window that lost one is rebuilt from a checkpoint or by a re-prefill. A context made with
``swa_full`` keeps every position and needs none of this.

What each way cost is counted in :class:`RollbackCosts` (``Context.rollback_costs``), so
that auto and the advisor can price it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

from ..errors import SpecDeskError

PARTIAL = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
CHECKPOINTS = 3  # kept per context, the oldest given up first


@dataclass
class RollbackCosts:
    """Raw counters: how a context's rollbacks were made, and what they cost."""

    kind: str = ""  # "recurrent" | "swa" (what needs the care)
    n_rs_seq: int = 0  # snapshots per sequence llama.cpp keeps (0: none)
    snapshot_bytes: int = 0  # memory the snapshots take beyond the state itself
    state_bytes: int = 0  # one checkpoint's size (the last taken)
    snapshots: int = 0  # rollbacks made by a snapshot
    checkpoints: int = 0  # checkpoints taken
    checkpoint_seconds: float = 0.0
    restores: int = 0  # rollbacks made by restoring a checkpoint
    restore_seconds: float = 0.0
    replayed: int = 0  # tokens decoded again after a restore (or a re-prefill)
    replay_seconds: float = 0.0  # of which on their own (not merged into the next decode)
    reprefills: int = 0  # rollbacks that no snapshot or checkpoint reached
    lost_windows: int = 0  # SWA windows found short after a rollback
    held_bytes: int = 0  # the checkpoints' buffers

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _Checkpoint:
    pos: int  # the state after this many tokens
    data: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    size: int = 0


class Rollback:
    """The rollback of one :class:`~.context.Context` whose memory needs care (see the
    module's docstring). The context calls :meth:`truncate` for ``rollback``,
    :meth:`before` and :meth:`after` around each decode, and :meth:`rest` when a prefill
    has ended."""

    def __init__(self, ctx, *, recurrent: bool, n_rs_seq: int, n_swa: int, rs_bytes: int = 0) -> None:
        self.ctx = ctx
        self.recurrent = recurrent
        self.n_rs_seq = n_rs_seq
        self.n_swa = n_swa  # 0 unless an SWA cache may lose positions
        self.phys = 0  # tokens in llama.cpp's memory (may exceed len(history) until the next sync)
        self._last: tuple[int, int] | None = None  # (first position, tokens) of the last decode
        self._checkpoints = [_Checkpoint(-1) for _ in range(CHECKPOINTS)]  # the least recent first
        self.costs = RollbackCosts(kind="recurrent" if recurrent else "swa", n_rs_seq=n_rs_seq,
                                   snapshot_bytes=rs_bytes * n_rs_seq // (1 + n_rs_seq) if n_rs_seq else 0)
        #: a replay is merged into the next decode (False: on its own, as llama.cpp's server does)
        self.merge = True

    # -- the context's hooks -------------------------------------------------------------

    def truncate(self, n_past: int) -> None:
        """``rollback(n_past)``: the history is cut now, llama.cpp's memory at the next decode."""
        del self.ctx.history[n_past:]
        for ck in self._checkpoints:
            if ck.pos > n_past:
                ck.pos = -1

    def before(self, m: int) -> int:
        """Before a decode of ``m`` tokens: make llama.cpp's memory hold the history, take
        a checkpoint where this batch needs one; return how many of the history's last
        tokens are to be decoded again with the batch (a replay merged into it)."""
        needs_checkpoint = self.recurrent and m >= 2 and m - 1 > self.n_rs_seq
        lead = self.sync(merge=self.merge and not needs_checkpoint, room=self.ctx.n_batch - m)
        if needs_checkpoint:
            self._keep()
        return lead

    def after(self, p0: int, m: int) -> None:
        self.phys = p0 + m
        self._last = (p0, m)

    def rest(self) -> None:
        """A prefill has ended: keep a checkpoint here unless one is (drafts start here)."""
        if self.phys == len(self.ctx.history) and self.phys > 0:
            self._keep()

    def reset(self) -> None:
        self.phys = 0
        self._last = None
        for ck in self._checkpoints:
            ck.pos = -1

    # -- the rollback itself ---------------------------------------------------------------

    def sync(self, merge: bool = False, room: int = 0) -> int:
        """Make llama.cpp's memory hold exactly the history, but for the tokens returned
        (at most ``room``, and only with ``merge``): the caller decodes those again."""
        n = len(self.ctx.history)
        if self.phys == n:
            return 0
        if self.phys < n:  # an error left the memory behind: decode what is missing
            return self._replay(self.phys, merge, room)
        try:
            if self.recurrent and self._snapshot(n):
                return 0
            if not self.recurrent and self._drop(n):
                return 0
            ck = max((c for c in self._checkpoints if 0 < c.pos <= n), key=lambda c: c.pos, default=None)
            if ck is not None and self._restore(ck):
                return self._replay(ck.pos, merge, room)
            self.costs.reprefills += 1
            llama_cpp.llama_memory_clear(self.ctx._mem, True)
            self.phys, self._last = 0, None
            return self._replay(0, merge, room)
        except BaseException:
            self.reset()  # unknown: the next sync decodes everything again
            llama_cpp.llama_memory_clear(self.ctx._mem, True)
            raise

    def _snapshot(self, n: int) -> bool:
        r = self.phys - n
        last = self._last
        if last is None or last[0] + last[1] != self.phys or r > min(last[1] - 1, self.n_rs_seq):
            return False
        if not llama_cpp.llama_memory_seq_rm(self.ctx._mem, 0, n, -1):
            return False
        self.phys, self._last = n, None  # one rollback per decode: the pending one is used up
        self.costs.snapshots += 1
        return True

    def _drop(self, n: int) -> bool:
        """An SWA cache: drop the positions, then check that the window is whole."""
        if not llama_cpp.llama_memory_seq_rm(self.ctx._mem, 0, n, -1):
            raise SpecDeskError(f"llama.cpp could not roll back to position {n}")
        self.phys, self._last = n, None
        first = llama_cpp.llama_memory_seq_pos_min(self.ctx._mem, 0)
        if n == 0 or 0 <= first <= max(0, n - self.n_swa):
            return True
        self.costs.lost_windows += 1
        return False

    def _restore(self, ck: _Checkpoint) -> bool:
        t0 = time.perf_counter()
        ctx = self.ctx
        got = llama_cpp.llama_state_seq_set_data_ext(ctx._ctx, ck.data.ctypes.data_as(llama_cpp.ctypes.POINTER(llama_cpp.ctypes.c_uint8)),
                                                     ck.size, 0, PARTIAL)
        ok = got == ck.size and llama_cpp.llama_memory_seq_rm(ctx._mem, 0, ck.pos, -1)
        self.costs.restore_seconds += time.perf_counter() - t0
        if not ok:
            return False
        self.costs.restores += 1
        self.phys, self._last = ck.pos, None
        return True

    def _replay(self, start: int, merge: bool, room: int) -> int:
        """Decode ``history[start:]`` again: returned for the caller's batch when it fits
        (``merge``), else decoded here without logits."""
        ctx = self.ctx
        n = len(ctx.history)
        self.costs.replayed += n - start
        if merge and n - start <= room:
            return n - start
        t0 = time.perf_counter()
        tokens = ctx.history[start:]
        del ctx.history[start:]
        self.phys = start
        try:
            for i in range(0, len(tokens), ctx.n_batch):
                chunk = tokens[i: i + ctx.n_batch]
                ctx._decode_at(chunk, False, False, record=False)
                self.after(start + i, len(chunk))
        finally:
            if len(ctx.history) < n:  # cut short: keep the history the caller believes
                ctx.history.extend(tokens[len(ctx.history) - start:])
        self.costs.replay_seconds += time.perf_counter() - t0
        return 0

    def _keep(self) -> None:
        """A checkpoint here, unless one is: in the place of the least recent (an empty one first)."""
        cks = self._checkpoints
        if any(c.pos == self.phys for c in cks):
            return
        ck = next((c for c in cks if c.pos < 0), cks[0])
        cks.remove(ck)
        cks.append(ck)
        self._save(ck)

    def _save(self, ck: _Checkpoint) -> None:
        t0 = time.perf_counter()
        cp = self.ctx._ctx
        size = llama_cpp.llama_state_seq_get_size_ext(cp, 0, PARTIAL)
        if size > ck.data.size:
            self.costs.held_bytes += size - ck.data.size
            ck.data = np.empty(size, np.uint8)
        got = llama_cpp.llama_state_seq_get_data_ext(cp, ck.data.ctypes.data_as(llama_cpp.ctypes.POINTER(llama_cpp.ctypes.c_uint8)),
                                                     size, 0, PARTIAL)
        ck.size = size
        ck.pos = self.phys if got == size and size > 0 else -1
        self.costs.checkpoints += 1
        self.costs.state_bytes = size
        self.costs.checkpoint_seconds += time.perf_counter() - t0
