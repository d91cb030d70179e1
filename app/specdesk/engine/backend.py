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


# -- Ctrl+C and native calls ------------------------------------------------------------
#
# Python runs a signal handler at the next bytecode of the main thread. During a long
# native call (a model load, a context) that is inside one of llama.cpp's callbacks into
# Python (its log, a load's progress), and a KeyboardInterrupt raised there is printed and
# dropped by ctypes: the call ran on and the command finished as if nothing happened.
# So where SpecDesk handles Ctrl+C (``ctrl_c_guard``, for a CLI command's whole run, and
# ``deferred_interrupt``, around each long native call), the handler raises
# KeyboardInterrupt only in Python's own code; inside a callback, or in a native call
# whose result must be freed first, it sets a flag instead. A load's progress callback
# answers the flag by stopping the load; ``deferred_interrupt`` raises once its call has
# returned; ``stop_if_interrupted`` raises at the checks between a generation's steps;
# and ``ctrl_c_guard`` raises at the end of the command at the latest: a Ctrl+C is never
# lost.

_CALLBACK_CODE: set = set()  # the code of every Python function llama.cpp calls back
_pending = [False]  # a Ctrl+C that could not be raised where it arrived
_open_flags: list[list[bool]] = []  # the flags of the deferred_interrupt blocks now open


def native_callback(fn):
    """Mark ``fn`` as one llama.cpp calls from inside a native call (a log or progress
    callback): a Ctrl+C that arrives while it runs is kept, not raised there."""
    _CALLBACK_CODE.add(fn.__code__)
    return fn


def _in_native_callback(frame) -> bool:
    while frame is not None:
        if frame.f_code in _CALLBACK_CODE:
            return True
        frame = frame.f_back
    return False


def _on_sigint(_sig, frame) -> None:
    if _open_flags or _in_native_callback(frame):
        _pending[0] = True
        for flag in _open_flags:
            flag[0] = True
        return
    raise KeyboardInterrupt


def interrupted() -> bool:
    """A Ctrl+C arrived and has not been raised yet."""
    return _pending[0]


def stop_if_interrupted() -> None:
    """Raise the KeyboardInterrupt of a Ctrl+C that arrived where it could not be (a check
    between steps, or before a long job)."""
    if _pending[0]:
        _pending[0] = False
        raise KeyboardInterrupt


@contextlib.contextmanager
def ctrl_c_guard():
    """For a command's whole run on the main thread: Ctrl+C as usual, except inside
    llama.cpp's callbacks (see above). Where Ctrl+C is not Python's own (ignored, as for a
    command its shell started in the background, or a handler of the caller's), nothing
    changes. On the way out a kept Ctrl+C is raised, so the command ends as interrupted."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    stop_if_interrupted()


@contextlib.contextmanager
def deferred_interrupt(flag: list[bool] | None = None):
    """Ctrl+C during a long native call (loading a model, making a context) on the main
    thread only sets ``flag`` (which a load's progress callback answers by stopping the
    load), and KeyboardInterrupt is raised once the call has returned and the block ends.
    Elsewhere (another thread, a Ctrl+C that is ignored or handled by the caller's own
    handler) nothing changes. Yields the flag (``flag``, if given)."""
    flag = flag if flag is not None else [False]
    current = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or current not in (signal.default_int_handler, _on_sigint):
        yield flag
        return
    previous = signal.signal(signal.SIGINT, _on_sigint) if current is not _on_sigint else None
    _open_flags.append(flag)
    try:
        yield flag
    finally:
        _open_flags.remove(flag)
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if flag[0]:
            if not _open_flags:
                _pending[0] = False
            raise KeyboardInterrupt


@llama_cpp.llama_log_callback
@native_callback
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
    # the loader's own reason comes before the wrapper's "...: failed to load model"
    msg = next((m for m in reversed(_recent_errors) if not m.endswith("failed to load model")), _recent_errors[-1])
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
