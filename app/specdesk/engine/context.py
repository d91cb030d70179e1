"""One llama.cpp context: decode batches, return only the logits rows asked for (a
copy, or a function of them read where llama.cpp wrote them, with nothing copied),
roll back to any position, and reuse the longest common prefix across calls.

A context has a single rollback coordinate, ``n_past`` (as llama.cpp's
speculative-simple), and keeps the token history that coordinate refers to.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import time
from typing import Callable, Iterator, Sequence, TypeVar

import llama_cpp
import numpy as np

from ..errors import Cancelled, ContextOverflowError, SpecDeskError
from ..speculative.backend import common_prefix_length
from ..speculative.shapes import ShapeTimer
from .backend import deferred_interrupt
from .model import Buffer, Model, capture_buffers, default_threads
from .rollback import Rollback, RollbackCosts
from .rpc import check_alive, gone

log = logging.getLogger(__name__)

T = TypeVar("T")


class Context:
    def __init__(
        self,
        model: Model,
        *,
        n_ctx: int = 4096,
        threads: int | None = None,
        n_batch: int = 512,
        n_rs_seq: int = 0,
        swa_full: bool = False,
    ) -> None:
        """``n_rs_seq``: recurrent-state snapshots to keep (the longest batch whose end is
        rolled back in one step: a verify batch of k drafts needs k), for architectures
        llama.cpp has them for (elsewhere 0); ``swa_full``: a sliding-window cache of all
        n_ctx positions (a draft rolls back tokens it decoded one at a time, which a window
        of its usual size loses). See :mod:`.rollback`."""
        if n_ctx <= 0:
            raise SpecDeskError(f"context size must be positive, got {n_ctx}")
        self.model = model
        self._rpc = tuple(getattr(model, "rpc_endpoints", ()))
        if self._rpc:
            check_alive(self._rpc)
        self.threads = threads or default_threads()
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = min(n_batch, n_ctx)
        params.n_ubatch = min(n_batch, n_ctx)
        params.n_seq_max = 1
        params.n_threads = self.threads
        params.n_threads_batch = self.threads
        params.no_perf = True
        params.n_rs_seq = max(0, int(n_rs_seq))
        params.swa_full = bool(swa_full)
        with deferred_interrupt() as interrupted, capture_buffers() as buffers:  # Ctrl+C meanwhile: after the call
            ctx = llama_cpp.llama_init_from_model(model.ptr, params)
            if interrupted[0] and ctx:
                llama_cpp.llama_free(ctx)
        self.buffers: list[Buffer] = buffers
        if not ctx:
            raise SpecDeskError(f"{model.path.name}: llama.cpp could not create a context of {n_ctx} tokens (out of memory?)")
        self._ctx = ctx
        self._mem = llama_cpp.llama_get_memory(ctx)
        self._n_ctx = llama_cpp.llama_n_ctx(ctx)
        self._n_batch = llama_cpp.llama_n_batch(ctx)
        self._n_vocab = model.n_vocab
        self._batch = llama_cpp.llama_batch_init(self._n_batch, 0, 1)
        b = self._batch
        n = self._n_batch
        self._tok = np.ctypeslib.as_array(b.token, shape=(n,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(n,))
        self._nseq = np.ctypeslib.as_array(b.n_seq_id, shape=(n,))
        self._out = np.ctypeslib.as_array(ctypes.cast(b.logits, ctypes.POINTER(ctypes.c_int8)), shape=(n,))
        self._positions = np.arange(self._n_ctx, dtype=np.int32)
        # a one-token batch (every target-alone step, every drafted token) is written
        # through the ctypes pointers: four NumPy slice assignments cost more than the
        # rest of the call, most of all in the cold caches a CPU step leaves
        self._ptok, self._ppos, self._plogits = b.token, b.pos, b.logits
        self._view1: np.ndarray | None = None  # the first row of _view_all
        self._view_all: np.ndarray | None = None  # a read-only view of llama.cpp's logits rows
        self._view_addr = 0
        self._view_rows = 0
        for i in range(n):
            b.seq_id[i][0] = 0
        self._nseq[:] = 1
        self.history: list[int] = []
        # Seconds in llama_decode (``launch``: on a GPU only the host's part, building
        # the graph and launching its kernels) and in the llama_synchronize after it
        # (``wait``: the device's work still running; about 0 on a CPU). A decode on a
        # GPU returns before the device is done, and the wait would otherwise happen in
        # the first read of the logits and be counted as Python.
        self.launch_seconds = 0.0
        self.wait_seconds = 0.0
        self.native_seconds = 0.0  # the two together: what the model's compute cost
        # Bytes of logits copied out of llama.cpp into numpy arrays, ever (what the hot
        # path must keep at zero where it needs no full row).
        self.logits_bytes_copied = 0
        self.last_prefill_evaluated = 0
        self.evaluated = 0  # every token ever evaluated, for reuse accounting
        # llama.cpp sets up each batch shape on its first decode in a context (its graph
        # and buffers): that first batch cost 1.2-1.8x the shape's later ones here (the
        # 1.5B target, 3 tokens: 116 ms, then 66-72). Whether the last decode was such a
        # first, so that auto does not time a one-off as the shape's cost.
        self._shapes: set[tuple[int, int]] = set()
        self.last_batch_first = False
        # llama.cpp reuses the last graph only for a batch of the same shape (tokens and
        # rows of logits asked for; see llama_context::process_ubatch); each change
        # builds and allocates the graph again, and on CUDA re-captures its CUDA graph:
        # milliseconds of host time on a GPU. How many decodes changed the shape.
        self._shapes_timed = ShapeTimer()
        self.last_shape_changed = False
        self.last_reshape_seconds = 0.0  # of the last decode's time, what its change of shape cost
        # Called after every decode with its first position and its tokens, while the
        # rows it produced are still in llama.cpp's buffers (engine/mtp.py keeps the
        # target's hidden states this way).
        self.decode_observers: list[Callable[[int, Sequence[int]], None]] = []
        #: how rollbacks are made exact where llama.cpp's memory cannot drop positions (None: it can)
        self._guard = _guard(self, swa_full)

    # -- protocol ------------------------------------------------------------------

    @property
    def ptr(self):
        """llama.cpp's context (for engine modules that set it up further, e.g. mtp.py)."""
        return self._ctx

    @property
    def n_vocab(self) -> int:
        return self._n_vocab

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def n_past(self) -> int:
        return len(self.history)

    @property
    def n_batch(self) -> int:
        return self._n_batch

    @property
    def rollback_costs(self) -> RollbackCosts | None:
        """How this context's rollbacks were made and what they cost (None where
        llama.cpp's memory drops positions itself)."""
        return self._guard.costs if self._guard is not None else None

    def is_eog(self, token: int) -> bool:
        return self.model.is_eog(token)

    def token_bytes(self, token: int) -> bytes:
        return self.model.token_bytes(token)

    def eval(self, tokens: Sequence[int], all_rows: bool = True, cancel: Callable[[], bool] | None = None,
             fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T:
        """Append ``tokens`` at n_past and return a copy of their logits rows (all, or
        the last), or, with ``fn``, ``fn(rows)`` where ``rows`` is a read-only view of
        the rows where llama.cpp wrote them: valid only during the call, nothing copied.

        A long batch runs in chunks of n_batch tokens; ``cancel`` is checked before
        each, and Cancelled is raised with the chunks so far kept (a prompt resumes
        from there, by prefix reuse)."""
        return self._eval(tokens, all_rows, True, cancel, fn)

    def _eval(self, tokens: Sequence[int], all_rows: bool, last_row: bool,
              cancel: Callable[[], bool] | None, fn: Callable[[np.ndarray], T] | None) -> np.ndarray | T | None:
        n = len(tokens)
        if n == 0:
            raise ValueError("cannot evaluate an empty batch")
        if self.n_past + n > self._n_ctx:
            raise ContextOverflowError(
                f"the context is full: {self.n_past} + {n} tokens do not fit in {self._n_ctx}"
            )
        earlier: list[np.ndarray] = []  # rows of the chunks before the last (all rows asked for)
        start = 0
        while True:
            if cancel is not None and cancel():
                raise Cancelled("stopped while reading the prompt")
            chunk = tokens[start : start + self._n_batch] if n > self._n_batch else tokens
            m = len(chunk)
            last = start + m == n
            n_out = m if all_rows else int(last and last_row)
            self._decode(chunk, all_rows, last and last_row)
            if last:
                break
            if n_out:
                earlier.append(self._copy(self._view(n_out)))
            start += m
        if not n_out:
            return None
        if earlier:
            rows = np.concatenate(earlier + [self._copy(self._view(n_out))])
            return fn(rows) if fn is not None else rows
        view = self._view(n_out)
        return fn(view) if fn is not None else self._copy(view)

    def _decode(self, tokens: Sequence[int], all_rows: bool, last_row: bool) -> None:
        """One llama_decode of at most n_batch tokens at n_past, asking for every row or
        only (``last_row``) the last one; the rows stay in llama.cpp's buffer. Where the
        memory needs care (:mod:`.rollback`), a rollback since the last decode is applied
        first, and tokens it must decode again may go in front of this batch."""
        g = self._guard
        if g is None:
            self._decode_at(tokens, all_rows, last_row)
            return
        lead = g.before(len(tokens))
        replayed = self.history[len(self.history) - lead:]
        if lead:
            tokens = replayed + list(tokens)
            del self.history[-lead:]
        p0 = len(self.history)
        try:
            self._decode_at(tokens, all_rows, last_row, lead=lead)
        except BaseException:
            if len(self.history) == p0:  # llama.cpp kept its memory: the replay is still owed
                self.history.extend(replayed)
            raise
        g.after(p0, len(tokens))

    def _decode_at(self, tokens: Sequence[int], all_rows: bool, last_row: bool, lead: int = 0,
                   record: bool = True) -> None:
        """The decode itself, at len(history); the first ``lead`` tokens ask for no row;
        ``record``: the batch's shape is timed (a replay's is not)."""
        if self._rpc:
            check_alive(self._rpc)  # llama.cpp would abort on a server that has gone
        m = len(tokens)
        p0 = len(self.history)
        if m == 1:
            self._ptok[0] = tokens[0]
            self._ppos[0] = p0
            self._plogits[0] = all_rows or last_row
        else:
            self._tok[:m] = tokens
            self._pos[:m] = self._positions[p0 : p0 + m]
            self._out[:m] = all_rows
            if lead:
                self._out[:lead] = 0
            if last_row:
                self._out[m - 1] = 1
        self._batch.n_tokens = m
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(self._ctx, self._batch)
        t1 = time.perf_counter()
        if rc == 0:
            llama_cpp.llama_synchronize(self._ctx)  # the device's wait, timed as the model's
        t2 = time.perf_counter()
        self.launch_seconds += t1 - t0
        self.wait_seconds += t2 - t1
        self.native_seconds += t2 - t0
        if rc != 0:
            # llama.cpp leaves the memory as it was before a failed decode.
            if rc == 1:
                raise ContextOverflowError(f"the context is full: no room for {m} more tokens after {p0}")
            raise SpecDeskError(f"llama_decode failed with code {rc}")
        self.history.extend(map(int, tokens))
        self.evaluated += m
        for observe in self.decode_observers:
            observe(p0, tokens)
        if not record:
            return
        shape = (m, m - lead if all_rows else int(last_row))
        self.last_batch_first = first = shape not in self._shapes
        if first:
            self._shapes.add(shape)
        self.last_shape_changed, self.last_reshape_seconds = self._shapes_timed.record(shape, t2 - t0)

    @contextlib.contextmanager
    def untimed(self) -> Iterator[None]:
        """Decodes inside count nowhere: the seconds, the tokens evaluated, the last
        decode's flags and what the shape timer learns are as they were before. The
        shapes they set up stay set up (their first use is paid)."""
        kept = (self.launch_seconds, self.wait_seconds, self.native_seconds, self.logits_bytes_copied,
                self.evaluated, self.last_prefill_evaluated, self.last_batch_first, self.last_shape_changed,
                self.last_reshape_seconds, self._shapes_timed)
        self._shapes_timed = ShapeTimer()
        try:
            yield
        finally:
            (self.launch_seconds, self.wait_seconds, self.native_seconds, self.logits_bytes_copied, self.evaluated,
             self.last_prefill_evaluated, self.last_batch_first, self.last_shape_changed, self.last_reshape_seconds,
             self._shapes_timed) = kept

    def warm_up(self, shapes: Sequence[tuple[int, int]], tokens: Sequence[int]) -> float:
        """Decode each shape (tokens, rows of logits) once after what the context holds,
        then hold exactly that again, untimed (see :meth:`untimed`): the context's
        first decode and each shape's first use are paid before anything is timed, as
        llama.cpp's warm-up does. ``tokens`` fill the batches (cycled). Shapes that do
        not fit in the context's room are left out. Returns the seconds it took."""
        if not tokens:
            raise ValueError("a warm-up needs tokens to decode")
        p0 = len(self.history)
        t0 = time.perf_counter()
        with self.untimed():
            try:
                for n, rows in shapes:
                    if n <= 0 or n > self._n_batch or p0 + n > self._n_ctx:
                        continue
                    self._decode([tokens[i % len(tokens)] for i in range(n)], rows == n and n > 1, rows > 0)
                    self.rollback(p0)
            finally:
                self.rollback(p0)
        return time.perf_counter() - t0

    @property
    def shape_changes(self) -> int:
        return self._shapes_timed.changes

    @property
    def reshape_cost(self) -> float:
        return self._shapes_timed.cost

    def _view(self, n_out: int) -> np.ndarray:
        """The last decode's ``n_out`` logits rows, read-only, where llama.cpp keeps
        them (its output buffer only grows: a view is rebuilt when it moved or grew)."""
        addr = ctypes.addressof(llama_cpp.llama_get_logits(self._ctx).contents)
        if addr != self._view_addr or n_out > self._view_rows:
            buf = (ctypes.c_float * (n_out * self._n_vocab)).from_address(addr)
            view = np.frombuffer(buf, dtype=np.float32).reshape(n_out, self._n_vocab)
            view.flags.writeable = False
            self._view_all, self._view_addr, self._view_rows = view, addr, n_out
            self._view1 = view[:1]
        return self._view1 if n_out == 1 else self._view_all[:n_out]

    def _copy(self, rows: np.ndarray) -> np.ndarray:
        out = rows.copy()
        self.logits_bytes_copied += out.nbytes
        return out

    def rollback(self, n_past: int) -> None:
        """Forget every position from ``n_past`` on."""
        if n_past < 0 or n_past > len(self.history):
            raise ValueError(f"cannot roll back to {n_past}: the context holds {len(self.history)} tokens")
        if n_past == len(self.history):
            return
        if self._guard is not None:
            if n_past == 0:  # nothing to keep: no rollback to make
                self.reset()
            else:
                self._guard.truncate(n_past)  # made exact at the next decode
            return
        if not llama_cpp.llama_memory_seq_rm(self._mem, 0, n_past, -1):
            raise SpecDeskError(f"llama.cpp could not roll back to position {n_past}")
        del self.history[n_past:]

    def settle(self) -> None:
        """Make llama.cpp's memory hold exactly the history now. A plain KV cache applies
        every rollback at once; a recurrent or sliding-window one (:mod:`.rollback`) at its
        next decode, so here: another context that reads this one's memory (a Gemma 4
        assistant, sharing its KV cache) calls this before it decodes."""
        if self._guard is not None:
            self._guard.sync()

    def prefill(self, tokens: Sequence[int], logits: bool = True, cancel: Callable[[], bool] | None = None,
                fn: Callable[[np.ndarray], T] | None = None) -> np.ndarray | T | None:
        """Hold exactly ``tokens``: keep the longest common prefix with the history and
        evaluate only the rest, asking for the last row only (none with ``logits=False``);
        return a copy of it, or ``fn`` of a read-only view of it, shape (1, n_vocab)."""
        tokens = tokens if isinstance(tokens, list) else list(tokens)  # only read
        if len(tokens) > self._n_ctx:
            raise ContextOverflowError(f"{len(tokens)} tokens do not fit in a context of {self._n_ctx}")
        keep = common_prefix_length(self.history, tokens)
        if logits and keep == len(tokens) and keep > 0:
            keep -= 1  # re-evaluate the last token to get its logits
        self.rollback(keep)
        rest = tokens[keep:]
        self.last_prefill_evaluated = len(rest)
        if not rest:
            return None
        rows = self._eval(rest, False, logits, cancel, fn)
        if self._guard is not None:
            self._guard.rest()
        return rows if fn is not None or rows is None else rows[-1]

    def reset(self) -> None:
        llama_cpp.llama_memory_clear(self._mem, True)
        self.history.clear()
        if self._guard is not None:
            self._guard.reset()

    # -- lifetime --------------------------------------------------------------------

    def close(self) -> None:
        if getattr(self, "_ctx", None) is not None:
            llama_cpp.llama_batch_free(self._batch)
            why = gone(self._rpc) if getattr(self, "_rpc", ()) else None
            if why:
                # freeing its buffers would ask the lost server, and llama.cpp aborts then
                log.info("context left allocated: %s", why)  # the error that follows says it once
            else:
                llama_cpp.llama_free(self._ctx)
            self._ctx = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


def _guard(ctx: Context, swa_full: bool) -> Rollback | None:
    """The rollback a context needs (:mod:`.rollback`): a recurrent or hybrid model's, or
    a sliding-window cache's that may lose positions; None for a plain KV cache."""
    mp = ctx.model.ptr
    recurrent = bool(llama_cpp.llama_model_is_recurrent(mp) or llama_cpp.llama_model_is_hybrid(mp))
    n_swa = 0 if swa_full else max(0, int(llama_cpp.llama_model_n_swa(mp)))
    if not recurrent and not n_swa:
        return None
    rs = sum(b.bytes for b in ctx.buffers if b.kind == "RS")
    return Rollback(ctx, recurrent=recurrent, n_rs_seq=int(llama_cpp.llama_n_rs_seq(ctx.ptr)), n_swa=n_swa, rs_bytes=rs)
