"""llama.cpp's backend, initialised once, and its log routed through Python logging
(with the buffer sizes it reports captured per thread). Everything in the engine that
calls into llama.cpp or ggml starts here."""

from __future__ import annotations

import atexit
import collections
import contextlib
import ctypes
import logging
import re
import signal
import threading
from dataclasses import dataclass

import llama_cpp

_backend_lock = threading.Lock()
_backend_ready = False


# llama.cpp logs to stderr by default; send it through Python logging instead, so the
# CLI stays clean and the app can show it in its log.
# ggml_log_level: NONE=0, DEBUG=1, INFO=2, WARN=3, ERROR=4, CONT=5 (continues the last).
_LEVELS = {0: logging.INFO, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_llama_log = logging.getLogger("llama.cpp")
_last_level = [logging.DEBUG]
_recent_errors: collections.deque[str] = collections.deque(maxlen=8)
_capture = threading.local()
_BUFFER_RE = re.compile(r"(\S+)\s+(model|KV|compute|output|RS) buffer size (?:=|is) +([\d.]+) MiB")
_HOST_DEVICES = ("CPU", "CPU_Mapped", "CPU_REPACK", "CUDA_Host", "Metal_Mapped")


@dataclass(frozen=True)
class Buffer:
    """One allocation llama.cpp reported: on which device, for what, how big."""

    device: str
    kind: str  # model | KV | compute | output | RS
    bytes: int

    @property
    def on_gpu(self) -> bool:
        return not self.device.startswith(_HOST_DEVICES) and not self.remote

    @property
    def remote(self) -> bool:
        """On another machine's device, through llama.cpp's RPC backend."""
        return self.device.startswith("RPC")


@contextlib.contextmanager
def capture_buffers():
    """Collect the buffer sizes llama.cpp logs while loading/creating on this thread."""
    out: list[Buffer] = []
    _capture.buffers = out
    try:
        yield out
    finally:
        _capture.buffers = None


@contextlib.contextmanager
def deferred_interrupt(flag: list[bool] | None = None):
    """Ctrl+C during a long native call (loading a model, making a context) on the main
    thread: Python raises KeyboardInterrupt at the next bytecode it runs, which is inside
    llama.cpp's log or progress callback, and ctypes prints and drops an exception raised
    there; the call ran on and the command finished as if nothing happened. Here Ctrl+C
    only sets a flag (which a load's progress callback answers by stopping the load), and
    KeyboardInterrupt is raised once the call has returned. Elsewhere (another thread, a
    handler of the caller's own) nothing changes. Yields the flag (``flag``, if given)."""
    flag = flag if flag is not None else [False]
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield flag
        return
    previous = signal.signal(signal.SIGINT, lambda _sig, _frame: flag.__setitem__(0, True))
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)
        if flag[0]:
            raise KeyboardInterrupt


@llama_cpp.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:  # pragma: no cover - native callback
    lvl = _LEVELS.get(level, logging.DEBUG) if level != 5 else _last_level[0]
    _last_level[0] = lvl
    msg = text.decode("utf-8", "replace").rstrip()
    if not msg:
        return
    sink = getattr(_capture, "buffers", None)
    if sink is not None:
        m = _BUFFER_RE.search(msg)
        if m and "does not match" not in msg:
            sink.append(Buffer(m.group(1), m.group(2), int(float(m.group(3)) * 2**20)))
    if lvl >= logging.ERROR:
        _recent_errors.append(msg)
    if _llama_log.isEnabledFor(lvl):
        _llama_log.log(lvl, msg)


def clear_native_errors() -> None:
    """Forget earlier errors, so that ``last_native_error`` names this call's."""
    _recent_errors.clear()


def last_native_error() -> str | None:
    """The last error llama.cpp logged, without its function prefix."""
    if not _recent_errors:
        return None
    msg = _recent_errors[-1]
    # "llama_model_load: error loading model: ..." -> keep the innermost reason
    return msg.rsplit(": ", 1)[-1] if msg.count(": ") >= 2 else msg


def _detach_log() -> None:
    """At exit, stop routing llama.cpp's log into Python: native code that logs while
    the interpreter finalizes would otherwise call into a half-torn-down runtime."""
    try:
        llama_cpp.llama_log_set(ctypes.cast(None, llama_cpp.llama_log_callback), ctypes.c_void_p(0))
    except Exception:  # noqa: BLE001 - best effort at exit
        pass


def ensure_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            atexit.register(_detach_log)
            _backend_ready = True
