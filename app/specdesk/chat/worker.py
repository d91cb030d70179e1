"""Chat templates rendered in a helper process that the operating system bounds.

The sandbox in :mod:`.chat` refuses what it can see coming, but it cannot interrupt
one C-level call (a sort that lowercases gigabytes, a sum of lists that runs for
minutes), and its size checks are estimates. So every chat prompt is rendered in a
long-lived helper process, with the sandbox inside it as the first filter:

- memory: the helper limits its own address space (``RLIMIT_AS``) to its baseline
  after start-up plus :data:`MEMORY_LIMIT`, so a render that wants more gets a
  MemoryError there; where the limit is not enforced (macOS, Windows) this side
  polls the helper's resident memory instead and kills it past the same amount;
- time: this side waits at most :data:`DEADLINE` seconds for the answer; and the
  helper limits its own CPU time per render (``RLIMIT_CPU``, the deadline + 1 s), so
  a render ends even if this side is gone;
- cancel: this side polls ``cancel()`` while it waits.

On a breach, a crash or a cancel the helper is killed and a fresh one started for
the next render; the user gets one line ("the model's chat template needs more than
2 s to render; use --raw or another template").

The helper is a fresh interpreter (no fork of a process holding models and threads)
that runs ``python -m specdesk.chat.worker`` on one end of a socket pair. Not
multiprocessing's ``spawn``: that re-imports the parent's ``__main__`` script in the
child, so a script without a ``__main__`` guard (a user's own, a test's) ran again in
the helper, which then never answered. A PyInstaller bundle has no ``-m``, so there
the helper is multiprocessing's (the bundle's entry point calls ``freeze_support``
and is guarded). It imports the sandbox only: no llama.cpp. Start it early
(:meth:`TemplateRenderer.start`, when a model loads); it is reused for every render
and ends with this process (it reads end-of-file once the parent is gone).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Sequence

import psutil

from ..errors import Cancelled, SpecDeskError
from ..fmt import format_bytes
from .sandbox import DEFAULT_BUDGET, HINT, Budget, TemplateBudgetError, TemplateMemoryError, render_chat

log = logging.getLogger(__name__)

#: What one render may allocate above the helper's own baseline.
MEMORY_LIMIT = 512 << 20
#: How long one render may take, in seconds (the sandbox's own clock stops most sooner).
DEADLINE = 2.0
_POLL = 0.01  # seconds between checks of cancel, the deadline and the watchdog
_START_TIMEOUT = 60.0  # for a fresh interpreter to import the sandbox, on a busy machine
_JOIN = 5.0

Cancel = Callable[[], bool]


class TemplateRenderer:
    """One helper process and the limits it renders under. Thread-safe: renders
    are served one at a time (a render takes milliseconds)."""

    def __init__(self, memory: int = MEMORY_LIMIT, deadline: float = DEADLINE, budget: Budget = DEFAULT_BUDGET,
                 os_limit: bool = True, cpu_seconds: float | None = None) -> None:
        """``os_limit``: let the helper limit its address space where the OS enforces
        it (Linux); off, the watchdog on its resident memory is the only bound.
        ``cpu_seconds`` (default: the deadline + 1): the CPU time after which the OS
        ends the helper itself (SIGXCPU), should this side be gone or stuck."""
        self.memory = memory
        self.deadline = deadline
        self.cpu_seconds = cpu_seconds
        self.budget = budget
        self.os_limit = os_limit
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Any = None
        self._ps: psutil.Process | None = None
        self._hello: dict | None = None
        #: helpers started and killed so far (for tests and the benchmark tool)
        self.starts = 0
        self.kills = 0
        #: a render is waiting for the helper's answer
        self.busy = False

    # -- the process ----------------------------------------------------------------

    def start(self) -> None:
        """Start the helper now, if none runs, without waiting for it to be ready
        (nor for a render in progress: that one has a helper)."""
        if self._lock.acquire(blocking=False):
            try:
                self._ensure_started()
            except SpecDeskError as e:
                log.warning("%s", e)  # the first render says so again, to the user
            finally:
                self._lock.release()

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            return
        self._discard()
        try:
            proc, ours = _launch(self.memory, self.os_limit)
        except Exception as e:  # noqa: BLE001 - no process to be had (limits, a broken interpreter): one line
            raise SpecDeskError(f"the chat template's renderer could not start: {type(e).__name__}: {e}; {HINT}") from None
        self._proc, self._conn, self._hello = proc, ours, None
        self.starts += 1
        try:
            self._ps = psutil.Process(proc.pid)
        except psutil.Error:
            self._ps = None

    def _discard(self) -> None:
        """Kill the helper (if any) and forget it; the next render starts another."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = self._ps = self._hello = None
        if conn is not None:
            conn.close()
        if proc is not None:
            if proc.is_alive():
                proc.kill()
                self.kills += 1
            proc.join(_JOIN)

    def _restart(self) -> None:
        self._discard()
        self._ensure_started()  # warm for the next render; this returns at once

    def close(self) -> None:
        """End the helper (it also ends with this process)."""
        with self._lock:
            self._discard()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def bounded_by(self) -> str | None:
        """How the helper's memory is bounded: "address space" (RLIMIT_AS) or
        "watchdog" (its resident memory, polled here); None until it is ready."""
        if self._hello is None:
            return None
        return "address space" if self._hello.get("rlimit") else "watchdog"

    # -- rendering --------------------------------------------------------------------

    def render(self, template: str | None, messages: Sequence[dict], *, bos_token: str = "", eos_token: str = "",
               add_generation_prompt: bool = True, cancel: Cancel | None = None) -> str:
        """What :func:`.chat.render_chat` returns, rendered in the helper under this
        renderer's limits. Raises TemplateBudgetError past a limit, SpecDeskError when
        the template fails, Cancelled when ``cancel()`` turns true meanwhile."""
        request = {
            "template": template,
            "messages": [dict(m) for m in messages],
            "bos_token": bos_token,
            "eos_token": eos_token,
            "add_generation_prompt": add_generation_prompt,
            "budget": self.budget,
            "cpu_seconds": self.cpu_seconds if self.cpu_seconds is not None else self.deadline + 1,
        }
        self._acquire(cancel)
        try:
            self._send(request, cancel)
            self.busy = True
            reply = self._await_reply(cancel)
        finally:
            self.busy = False
            self._lock.release()
        return reply

    def _send(self, request: dict, cancel: Cancel | None) -> None:
        """To a ready helper; one that died while idle is replaced once."""
        for attempt in (1, 2):
            self._ensure_started()
            self._await_hello(cancel)
            try:
                self._conn.send(request)
                return
            except (OSError, ValueError):
                self._discard()
                if attempt == 2:
                    raise SpecDeskError(f"the chat template's renderer stopped; {HINT}") from None

    def _acquire(self, cancel: Cancel | None) -> None:
        while not self._lock.acquire(timeout=_POLL * 5):
            if cancel is not None and cancel():
                raise Cancelled("stopped")

    def _await_hello(self, cancel: Cancel | None) -> None:
        if self._hello is not None:
            return
        until = time.monotonic() + _START_TIMEOUT
        while not self._conn.poll(_POLL):
            if cancel is not None and cancel():
                raise Cancelled("stopped")
            if not self._proc.is_alive() or time.monotonic() > until:
                code = self._proc.exitcode
                self._discard()
                raise SpecDeskError(f"the chat template's renderer did not start (exit code {code}); {HINT}")
        try:
            self._hello = self._conn.recv()
        except (EOFError, OSError):
            code = self._proc.exitcode
            self._discard()
            raise SpecDeskError(f"the chat template's renderer did not start (exit code {code}); {HINT}") from None

    def _await_reply(self, cancel: Cancel | None) -> str:
        until = time.monotonic() + self.deadline
        watch = self._ps if not self._hello.get("rlimit") else None
        baseline = int(self._hello.get("rss", 0))
        while not self._conn.poll(_POLL):
            if cancel is not None and cancel():
                self._restart()
                raise Cancelled("stopped")
            if time.monotonic() > until:
                self._restart()
                raise TemplateBudgetError(f"{self.deadline:g} s")
            if watch is not None and _rss(watch) - baseline > self.memory:
                self._restart()
                raise TemplateBudgetError(format_bytes(self.memory))
            if not self._proc.is_alive():
                break
        try:
            reply = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(_JOIN)
            code = self._proc.exitcode
            self._restart()
            if code is not None and code == -getattr(signal, "SIGXCPU", 0):
                cpu = self.cpu_seconds if self.cpu_seconds is not None else self.deadline + 1
                raise TemplateBudgetError(f"{cpu:g} s of CPU time") from None
            raise SpecDeskError(f"the model's chat template stopped its renderer (exit code {code}); {HINT}") from None
        return self._answer(reply)

    def _answer(self, reply: tuple) -> str:
        kind = reply[0]
        if kind == "ok":
            return reply[1]
        if kind == "memory":
            self._restart()  # a fresh heap for the next render
            raise TemplateBudgetError(format_bytes(self.memory))
        if kind == "budget":
            raise TemplateBudgetError(reply[1])
        raise SpecDeskError(reply[1])


class _Child:
    """A helper started with :mod:`subprocess`, seen through the part of
    ``multiprocessing.Process`` this module uses."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self._popen = popen
        self.pid = popen.pid

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()  # negative: the signal that ended it, as multiprocessing says

    def kill(self) -> None:
        try:
            self._popen.kill()
        except OSError:
            pass

    def join(self, timeout: float | None = None) -> None:
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


def _launch(memory: int, os_limit: bool) -> tuple[Any, Any]:
    """A started helper and this side's end of its connection."""
    if getattr(sys, "frozen", False) or os.name != "posix":
        ctx = multiprocessing.get_context("spawn")
        ours, theirs = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=serve, args=(theirs, memory, os_limit), name="specdesk-chat-template", daemon=True)
        try:
            proc.start()
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return proc, ours
    from multiprocessing.connection import Connection

    a, b = socket.socketpair()
    try:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds specdesk/
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        popen = subprocess.Popen(
            [sys.executable, "-m", "specdesk.chat.worker", str(b.fileno()), str(memory), "1" if os_limit else "0"],
            pass_fds=(b.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=env, close_fds=True)
    except BaseException:
        a.close()
        raise
    finally:
        b.close()
    return _Child(popen), Connection(a.detach())


def _rss(p: psutil.Process) -> int:
    try:
        return p.memory_info().rss
    except psutil.Error:
        return 0


# --------------------------------------------------------------------------------------
# The helper's side
# --------------------------------------------------------------------------------------


def serve(conn, memory: int, os_limit: bool) -> None:
    """The helper's loop: limit this process, say hello, render each request. It
    never raises (a traceback on the terminal would break the one-line rule): what
    it cannot answer ends it, and the parent reports that."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
        me = psutil.Process()
        rss = me.memory_info().rss
        limited = os_limit and _limit_address_space(me.memory_info().vms + memory)
        _set_limit("RLIMIT_CORE", 0)  # a render the OS ends leaves no core file
        conn.send({"rss": rss, "rlimit": limited})
        while True:
            try:
                request = conn.recv()
                _limit_cpu(request["cpu_seconds"])
                reply = _render(request)
            except (EOFError, OSError):
                return  # the parent is gone
            except MemoryError:
                reply = ("memory",)
            try:
                conn.send(reply)
            except MemoryError:
                conn.send(("memory",))
    except BaseException:  # noqa: BLE001 - see above; the parent sees the pipe close
        return


def _render(request: dict) -> tuple:
    try:
        text = render_chat(request["template"], request["messages"], bos_token=request["bos_token"],
                           eos_token=request["eos_token"], add_generation_prompt=request["add_generation_prompt"],
                           budget=request["budget"])
        return ("ok", text)
    except (TemplateMemoryError, MemoryError):
        return ("memory",)
    except TemplateBudgetError as e:
        return ("budget", e.need)
    except SpecDeskError as e:
        return ("error", str(e))
    except Exception as e:  # noqa: BLE001 - nothing of an untrusted template may end the helper
        return ("error", f"the model's chat template failed: {type(e).__name__}")


def _set_limit(name: str, soft: int) -> bool:
    """Set this process's soft limit ``name`` (a ``resource.RLIMIT_*``), at most its
    hard limit; False where there is no such limit (Windows)."""
    try:
        import resource

        which = getattr(resource, name)
        _soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(which, (soft, hard))
        return True
    except (ImportError, AttributeError, ValueError, OSError):
        return False


def _limit_cpu(seconds: float) -> None:
    """The OS ends this process (SIGXCPU) once this render has used ``seconds`` of
    CPU time: a render cannot outlive its deadline by much even if the parent is gone."""
    try:
        import resource
    except ImportError:
        return
    ru = resource.getrusage(resource.RUSAGE_SELF)
    _set_limit("RLIMIT_CPU", int(ru.ru_utime + ru.ru_stime + seconds) + 1)


def _limit_address_space(limit: int) -> bool:
    """Limit this process's address space to ``limit`` bytes where the OS enforces it
    (Linux); False elsewhere, and the parent's watchdog bounds the memory instead."""
    if not sys.platform.startswith("linux"):
        return False
    return _set_limit("RLIMIT_AS", limit)


# --------------------------------------------------------------------------------------
# The renderer every session shares
# --------------------------------------------------------------------------------------

_shared: TemplateRenderer | None = None
_shared_lock = threading.Lock()


def shared_renderer() -> TemplateRenderer:
    """The process's renderer (created, not started, on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = TemplateRenderer()
        return _shared


def render_bounded(template: str | None, messages: Sequence[dict], *, bos_token: str = "", eos_token: str = "",
                   add_generation_prompt: bool = True, cancel: Cancel | None = None) -> str:
    """:func:`.chat.render_chat`, in the shared helper under the OS's limits."""
    return shared_renderer().render(template, messages, bos_token=bos_token, eos_token=eos_token,
                                    add_generation_prompt=add_generation_prompt, cancel=cancel)


__all__ = ["DEADLINE", "MEMORY_LIMIT", "TemplateRenderer", "render_bounded", "serve", "shared_renderer"]


def _main(argv: Sequence[str]) -> None:
    """The helper's entry point: ``python -m specdesk.chat.worker FD MEMORY OS_LIMIT``."""
    from multiprocessing.connection import Connection

    fd, memory, os_limit = int(argv[0]), int(argv[1]), argv[2] == "1"
    serve(Connection(fd), memory, os_limit)


if __name__ == "__main__":
    _main(sys.argv[1:])
