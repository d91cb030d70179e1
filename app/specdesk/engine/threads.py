"""How llama.cpp's CPU threads are chosen from the machine: how many compute, and how
long they spin while they wait for each other.

No llama_cpp import here: the wait is a setting of llama.cpp's OpenMP runtime (GNU
libgomp, which llama-cpp-python's CPU backend is built with), read once from the
environment when the library is loaded, so the app sets it before anything loads
llama.cpp.

Why the app shortens the spin. ggml's CPU backend meets all its threads at an OpenMP
barrier after every operation of the graph (about 900 per step of the 1.5B target),
and libgomp lets a thread that arrives early spin for about 300000 pause instructions
(several milliseconds) before it sleeps. With as many threads as CPUs, a third
runnable thread (the app's Qt thread waking for a frame, the display server painting
it, or any other process) takes a CPU from one of them, and the other then spins
through that whole time on the other CPU, so no work is done on either and the
preempted thread cannot move over. A short spin (still far longer than a barrier takes
when both threads run) hands the CPU back instead. libgomp does this by itself when it
manages more threads than there are CPUs (its "throttled" spin); it does not count the
UI's thread, so the app says it. The CLI has no UI thread and keeps libgomp's default.

Measured on a 2-core machine shared with other work (load 10-13), the 1.5B target alone
with 2 threads, greedy, beside a process that burns 3 ms every 80 ms (a frame's work),
interleaved runs: 4939 and 6743 ms a token with libgomp's default spin, 787 and 579 with
this one. Where the second thread was preempted, the first spun instead of handing
over its CPU. The app's own figures, in its user's flow, come from tools/app_vs_cli.py.
"""

from __future__ import annotations

import os
from typing import MutableMapping

#: libgomp's spin before a waiting thread sleeps, for a process whose UI thread shares the
#: CPUs with llama.cpp's threads (libgomp's unit: about 100000 a millisecond; its default
#: is 300000). A barrier between two running threads is passed in a few microseconds.
UI_SPIN_COUNT = 10000
#: The variables that set libgomp's wait: one the user set is left as it is.
_WAIT_VARIABLES = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")


def default_threads() -> int:
    """Physical cores if psutil knows them, else all logical CPUs (llama.cpp's habit).

    The app uses this too, with its UI beside llama.cpp's threads. Measured on a 2-core
    machine (tools/app_vs_cli.py, default pair, median of 3): one thread left the UI a
    core of its own (app = 1.03x the CLI) but decoded at 0.65x the speed of two threads
    in the app; with its repaints coalesced the UI costs two threads about 5%, so
    every physical core stays the default there too."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except Exception:  # noqa: BLE001 - psutil is optional here
        n = None
    return max(1, n or os.cpu_count() or 1)


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, as libgomp counts them)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def ui_spin_count(threads: int | None = None, cpus: int | None = None) -> int | None:
    """libgomp's spin for a process with a UI thread beside ``threads`` compute threads
    (default: :func:`default_threads`) on ``cpus`` CPUs (default: :func:`available_cpus`):
    :data:`UI_SPIN_COUNT` when the compute threads take every CPU, None (libgomp's
    default) when a CPU is left for the UI."""
    threads = threads or default_threads()
    cpus = cpus or available_cpus()
    return UI_SPIN_COUNT if threads >= cpus else None


def prepare_for_ui(environ: MutableMapping[str, str] | None = None) -> int | None:
    """Before llama.cpp is loaded, in a process with a UI: set libgomp's spin from the
    machine (:func:`ui_spin_count`), unless the user set the wait already. Returns the
    spin count set, or None when nothing was set."""
    env = os.environ if environ is None else environ
    if any(env.get(name) for name in _WAIT_VARIABLES):
        return None
    count = ui_spin_count()
    if count is not None:
        env["GOMP_SPINCOUNT"] = str(count)
    return count
