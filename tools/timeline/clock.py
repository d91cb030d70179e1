"""The decode loop's clock, outside the code under test: every ``llama_decode`` wrapped.

A wrapped call is timed (``launch``: on a GPU the host's part, the graph's build and the
kernels' launch), then ``llama_synchronize`` is called and timed (``wait``: the device's
work still running; 0 on a CPU, where a decode returns when it is done). Both together
are the call's native time, in wall seconds and in the calling thread's CPU seconds
(Python runs on the calling thread, and so does llama.cpp with one thread). Per context
it also keeps the calls, the tokens they evaluated, the single-token calls' times (a
model's own step) and the batch shapes, as llama.cpp sees them (tokens, rows of logits
asked for), with how often the shape changed from one call to the next: every change
makes llama.cpp build its graph again (and on CUDA re-capture its CUDA graph).

The same wrapper runs in every process of a comparison between two checkouts, so what
it costs itself is in both sides' figures alike (``--floor`` measures it).
"""

from __future__ import annotations

import time
from collections import defaultdict


class Timeline:
    """``llama_decode`` wrapped for the whole process; it records while ``on``."""

    def __init__(self) -> None:
        import llama_cpp

        self.on = False
        self.reset()
        decode, sync = llama_cpp.llama_decode, llama_cpp.llama_synchronize
        self.plain_decode, self.plain_sync = decode, sync  # unwrapped, for --floor's measure of this wrapper

        def timed(ctx, batch):
            if not self.on:
                return decode(ctx, batch)
            key = int(ctx or 0)
            n = batch.n_tokens
            outs = batch.logits[0] if n == 1 else sum(batch.logits[i] != 0 for i in range(n))
            c0, t0 = time.thread_time(), time.perf_counter()
            rc = decode(ctx, batch)
            t1 = time.perf_counter()
            sync(ctx)
            t2, c2 = time.perf_counter(), time.thread_time()
            self.launch[key] += t1 - t0
            self.wait[key] += t2 - t1
            self.cpu[key] += c2 - c0
            self.calls[key] += 1
            self.tokens[key] += n
            if n == 1:
                self.singles[key].append(t2 - t0)
            shape = (n, int(outs))
            self.shapes[key][shape] += 1
            if self.last.get(key, shape) != shape:
                self.changes[key] += 1
            self.last[key] = shape
            return rc

        llama_cpp.llama_decode = timed

    def reset(self) -> None:
        self.launch: dict[int, float] = defaultdict(float)
        self.wait: dict[int, float] = defaultdict(float)
        self.cpu: dict[int, float] = defaultdict(float)
        self.calls: dict[int, int] = defaultdict(int)
        self.tokens: dict[int, int] = defaultdict(int)
        self.singles: dict[int, list[float]] = defaultdict(list)
        self.shapes: dict[int, dict[tuple[int, int], int]] = defaultdict(lambda: defaultdict(int))
        self.changes: dict[int, int] = defaultdict(int)
        self.last: dict[int, tuple[int, int]] = {}

    def native(self, key: int | None = None) -> float:
        """Wall seconds inside llama.cpp (launch and wait), of one context or all."""
        if key is not None:
            return self.launch.get(key, 0.0) + self.wait.get(key, 0.0)
        return sum(self.launch.values()) + sum(self.wait.values())

    def native_cpu(self) -> float:
        return sum(self.cpu.values())
