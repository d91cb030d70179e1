"""llama.cpp's RPC backend: remote devices for the target, and the server that offers them.

Everything goes through the libraries llama-cpp-python ships (``ggml-rpc.h``, RPC
protocol 7.0.0): ``ggml_backend_rpc_add_server`` registers a server's devices,
``ggml_backend_rpc_start_server`` serves this machine's devices.

What llama.cpp does on a bad server, read in ggml-rpc.cpp and checked here: it
``GGML_ABORT``s (the process dies) when it cannot connect, when the handshake fails
or the protocol version differs, and when a command fails because the server went
away. So SpecDesk never lets llama.cpp be the first to talk to a server: it shakes
hands itself first (:func:`probe`), before a step it checks that the connection
llama.cpp holds is still open (:func:`check_alive`), and for a server that dies
*during* a step it turns ggml's abort into a handler (:func:`set_lost_handler`): the
CLI prints one line and exits, the app parks the dead connection's thread and tells
the user, who can load again without restarting.
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import struct
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import llama_cpp

from ..errors import RpcError
from .backend import ensure_backend
from .devices import Device, handles
from .devices import devices as _devices

log = logging.getLogger(__name__)

#: The RPC protocol this llama.cpp speaks (ggml-rpc.h's RPC_PROTO_*_VERSION).
PROTOCOL = (7, 0, 0)
DEFAULT_PORT = 50052  # llama.cpp's rpc-server default
_CMD_HELLO = 14
_CAPS_SIZE = 24  # RPC_CONN_CAPS_SIZE in ggml-rpc's transport.h
#: How long a handshake may take before the server is called unreachable.
PROBE_TIMEOUT_S = 5.0

SECURITY_WARNING = ("llama.cpp's RPC protocol has no authentication and no encryption: anyone who can reach "
                    "this port can run code on it and read what it computes. Use it only on a trusted network.")


def version_text(v: Sequence[int]) -> str:
    return ".".join(str(x) for x in v)


def supported() -> bool:
    """Whether the installed llama.cpp was built with the RPC backend (``-DGGML_RPC=ON``)."""
    ensure_backend()
    return bool(llama_cpp.llama_supports_rpc())


def reinstall_command() -> str:
    return (f'CMAKE_ARGS="-DGGML_RPC=ON" .venv/bin/pip install --force-reinstall --no-cache-dir '
            f"llama-cpp-python=={llama_cpp.__version__}")


def require() -> None:
    """Raise the one-line reason and fix when this build has no RPC backend."""
    if not supported():
        raise RpcError("this llama-cpp-python was built without llama.cpp's RPC backend; "
                       f"reinstall it with: {reinstall_command()}")


# -- endpoints -------------------------------------------------------------------------


def parse_endpoint(text: str) -> str:
    """``host:port`` as llama.cpp parses it (the first colon splits; no IPv6 literals)."""
    t = text.strip()
    if t.startswith("[") or t.count(":") > 1:  # [::1]:50052, fe80::1:50052
        raise RpcError(f"RPC server {text!r}: llama.cpp's RPC client takes no IPv6 address; "
                       "give an IPv4 address or a host name, e.g. 192.168.1.20:50052")
    host, sep, port = t.partition(":")
    if not sep or not host or any(c.isspace() for c in host) or ":" in port:
        raise RpcError(f"RPC server {text!r} must be host:port, e.g. 192.168.1.20:{DEFAULT_PORT}")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise RpcError(f"RPC server {text!r}: the port must be a number from 1 to 65535")
    return f"{host}:{int(port)}"


def parse_endpoints(text: str | Sequence[str]) -> tuple[str, ...]:
    """A comma-separated list (or a sequence) of host:port, each once, in order."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for p in parts:
        if not p.strip():
            continue
        ep = parse_endpoint(p)
        if ep not in out:
            out.append(ep)
    return tuple(out)


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def probe(endpoint: str, timeout: float = PROBE_TIMEOUT_S) -> tuple[int, int, int]:
    """Shake hands with an RPC server as llama.cpp would, and return its protocol
    version; raise RpcError naming the endpoint for anything llama.cpp would abort on."""
    host, port = _split(endpoint)
    where = f"RPC server {endpoint}"
    try:
        s = socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError:
        raise RpcError(f"{where} refused the connection: nothing listens on port {port} there "
                       "(start `specdesk rpc-server` on that machine)") from None
    except socket.gaierror:
        raise RpcError(f"{where} is unreachable: unknown host {host!r}") from None
    except TimeoutError:
        raise RpcError(f"{where} is unreachable: no answer within {timeout:g} s") from None
    except OSError as e:
        raise RpcError(f"{where} is unreachable: {e.strerror or e}") from None
    with s:
        try:
            s.sendall(bytes([_CMD_HELLO]) + struct.pack("<Q", _CAPS_SIZE) + bytes(_CAPS_SIZE))
            head = _recv_exact(s, 8)
            if len(head) < 8:
                raise RpcError(f"{where} closed the connection during the handshake: it speaks another RPC protocol "
                               f"than this client's {version_text(PROTOCOL)}, or is not an RPC server")
            (size,) = struct.unpack("<Q", head)
            if size != 4 + _CAPS_SIZE:
                raise RpcError(f"{where} answered the handshake in another format: not RPC protocol "
                               f"{version_text(PROTOCOL)}; run the same llama.cpp version on both machines")
            body = _recv_exact(s, size)
        except TimeoutError:
            raise RpcError(f"{where} accepted the connection but did not answer the handshake within {timeout:g} s "
                           "(busy serving another client, or not an RPC server)") from None
        except OSError as e:
            raise RpcError(f"{where} dropped the connection during the handshake: {e.strerror or e}") from None
    if len(body) < 3:
        raise RpcError(f"{where} closed the connection during the handshake")
    version = (body[0], body[1], body[2])
    if version[0] != PROTOCOL[0] or version[1] > PROTOCOL[1]:
        raise RpcError(f"{where} speaks RPC protocol {version_text(version)} but this client speaks "
                       f"{version_text(PROTOCOL)}: run the same llama.cpp (SpecDesk) version on both machines")
    return version


# -- the library ---------------------------------------------------------------------

_lock = threading.RLock()
_lib: ctypes.CDLL | None = None


def _rpc_lib() -> ctypes.CDLL:
    global _lib
    with _lock:
        if _lib is None:
            require()
            from llama_cpp._ggml import libggml

            lib = libggml  # links libggml-rpc; dlsym on it finds the RPC and base symbols
            vp, sz = ctypes.c_void_p, ctypes.c_size_t
            for name, res, args in (
                ("ggml_backend_rpc_add_server", vp, [ctypes.c_char_p]),
                ("ggml_backend_rpc_start_server", None, [ctypes.c_char_p, ctypes.c_char_p, sz, sz, ctypes.POINTER(vp)]),
                ("ggml_backend_register", None, [vp]),
                ("ggml_set_abort_callback", vp, [vp]),
            ):
                f = getattr(lib, name)
                f.restype = res
                f.argtypes = args
            _lib = lib
        return _lib


# -- a server lost mid-step: ggml's abort, turned into a handler -------------------------

_ABORT_FN = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_abort_hook = None  # keeps the ctypes callback alive
_lost_handler: Callable[[str], None] | None = None
_lost: dict[str, str] = {}  # endpoint -> why, once its server was lost


def set_lost_handler(handler: Callable[[str], None] | None) -> None:
    """What to do when a server dies while llama.cpp is waiting on it.

    ``handler(message)`` runs on llama.cpp's connection thread, with a one-line
    message naming the endpoint. If it returns, that thread is parked for good
    (returning would let ggml abort the process), and so is the thread that was
    waiting for the step: the session that used the server is lost, the process
    lives on and can load another. With no handler, the message goes to stderr and
    the process exits with status 2."""
    global _lost_handler
    _lost_handler = handler


def lost_endpoints() -> dict[str, str]:
    """Servers lost mid-step in this process (endpoint -> message)."""
    return dict(_lost)


def _install_abort_hook() -> None:
    global _abort_hook
    with _lock:
        if _abort_hook is not None:
            return

        def on_abort(raw: bytes | None) -> None:  # pragma: no cover - runs on a native thread
            text = (raw or b"").decode("utf-8", "replace").strip()
            if "RPC" not in text and "connect" not in text:
                print(text, file=sys.stderr, flush=True)  # not ours: ggml's own behaviour (then abort)
                return
            joining = _registering[0]
            if joining is not None:  # it answered our handshake, then failed llama.cpp's own
                dead = [joining]
                msg = (f"RPC server {joining} stopped answering while its devices were being registered (it was "
                       "stopped, or it is not a working llama.cpp RPC server of this version): restart it and try again")
            else:
                named = [ep for ep in _registered if ep in text]  # "Failed to connect to host:port"
                dead = named or [ep for ep in _registered if not _connection_open(ep)] or list(_registered)
                eps = ", ".join(dead) or "?"
                msg = (f"RPC server {eps} stopped answering mid-generation (it was stopped, crashed, or the network "
                       "dropped); the target's layers on it are gone: restart the server and load the model again")
            log.info("llama.cpp aborted: %s", text)  # --verbose shows it
            for ep in dead:
                _lost[ep] = msg
            handler = _lost_handler
            try:
                sys.stdout.flush()
            except Exception:  # noqa: BLE001
                pass
            if handler is None:
                print(f"specdesk: error: {msg}", file=sys.stderr, flush=True)
                os._exit(2)
            try:
                handler(msg)
            except SystemExit as e:
                os._exit(e.code if isinstance(e.code, int) else 2)
            except BaseException:  # noqa: BLE001 - nothing may escape into C
                log.exception("the RPC lost handler failed")
            threading.Event().wait()  # park: never return into ggml_abort

        _abort_hook = _ABORT_FN(on_abort)
        _rpc_lib().ggml_set_abort_callback(ctypes.cast(_abort_hook, ctypes.c_void_p))


# -- registering servers ------------------------------------------------------------

_registered: dict[str, ctypes.c_void_p] = {}  # endpoint -> its backend reg
_registering: list[str | None] = [None]  # the endpoint whose devices llama.cpp is asking for, if any
_sockets: dict[str, int] = {}  # endpoint -> the fd of llama.cpp's connection, once seen


@dataclass(frozen=True)
class RemoteServer:
    endpoint: str
    version: tuple[int, int, int]
    device_names: tuple[str, ...]


def register(endpoints: Sequence[str], timeout: float = PROBE_TIMEOUT_S) -> list[RemoteServer]:
    """Register each server's devices with ggml (``ggml_backend_rpc_add_server``), after
    a handshake of our own so that llama.cpp never aborts on a bad one."""
    lib = _rpc_lib()
    _install_abort_hook()
    out = []
    for ep in endpoints:
        ep = parse_endpoint(ep)
        if ep in _lost:
            raise RpcError(f"RPC server {ep} was lost earlier in this process and llama.cpp cannot reconnect to it; "
                           "restart SpecDesk to use it again (or start the server on another port)")
        version = probe(ep, timeout)
        with _lock:
            if ep not in _registered:
                _registering[0] = ep  # a server that fails now is named by the abort hook
                try:
                    reg = lib.ggml_backend_rpc_add_server(ep.encode("utf-8"))
                finally:
                    _registering[0] = None
                if not reg:
                    raise RpcError(f"RPC server {ep} offers no devices")
                lib.ggml_backend_register(reg)
                _registered[ep] = reg
        names = tuple(d.name for d in _devices(memory=False) if d.backend == "RPC" and d.description == ep)
        out.append(RemoteServer(ep, version, names))
    return out


def registered() -> tuple[str, ...]:
    return tuple(_registered)


def _connection_fd(endpoint: str) -> int | None:
    """The socket llama.cpp holds open to ``endpoint``, if any (Linux/macOS: via psutil)."""
    fd = _sockets.get(endpoint)
    host, port = _split(endpoint)
    try:
        addrs = {a[4][0] for a in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
    except OSError:
        return None
    if fd is not None and _peer_is(fd, addrs, port):
        return fd
    _sockets.pop(endpoint, None)
    try:
        import psutil

        conns = psutil.Process().net_connections(kind="tcp")
    except Exception:  # noqa: BLE001 - no way to look: assume open
        return None
    for c in conns:
        if c.raddr and c.raddr.port == port and c.raddr.ip in addrs and c.fd not in (None, -1) \
                and c.status in ("ESTABLISHED", "CLOSE_WAIT"):
            _sockets[endpoint] = c.fd
            return c.fd
    return None


def _peer_is(fd: int, addrs: set[str], port: int) -> bool:
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        return False
    try:
        peer = s.getpeername()
        return peer[1] == port and peer[0] in addrs
    except OSError:
        return False
    finally:
        s.close()


def _connection_open(endpoint: str) -> bool:
    """False when llama.cpp's connection to ``endpoint`` was closed by the other side."""
    fd = _connection_fd(endpoint)
    if fd is None:
        return True
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        return True
    try:
        data = s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        return bool(data)
    except BlockingIOError:
        return True  # open, nothing to read: the normal state between steps
    except OSError:
        return False  # reset
    finally:
        s.close()


def unreachable_reason(endpoint: str) -> str | None:
    """Why asking ``endpoint`` anything now would make llama.cpp abort, or None."""
    if endpoint in _lost:
        return _lost[endpoint]
    if _connection_fd(endpoint) is not None:
        return None if _connection_open(endpoint) else f"RPC server {endpoint} closed the connection"
    try:
        probe(endpoint, timeout=2.0)
    except RpcError as e:
        return str(e)
    return None


def devices(memory: bool = True, remote: Sequence[str] | None = None, checked: Sequence[str] = ()) -> list[Device]:
    """Every device, with its memory now; a remote one is asked only while its server
    answers (``unreachable_reason``), since llama.cpp aborts on a dead one. The servers
    in ``checked`` answered a handshake a moment ago (registration): they are not
    asked again."""
    ok = set(checked)
    return _devices(memory, remote, reachable=lambda ep: None if ep in ok and ep not in _lost else unreachable_reason(ep))


def gone(endpoints: Sequence[str]) -> str | None:
    """Why one of ``endpoints`` cannot be asked anything any more (lost, closed,
    unreachable), or None. Freeing memory on such a server would make llama.cpp abort:
    its buffers are left as they are (the server's memory went with it)."""
    for ep in endpoints:
        why = unreachable_reason(ep)
        if why:
            return why
    return None


def check_alive(endpoints: Sequence[str]) -> None:
    """Raise RpcError when a server the target uses has gone since the last step (its
    connection was closed), instead of letting llama.cpp abort on it."""
    for ep in endpoints:
        if ep in _lost:
            raise RpcError(_lost[ep])
        if not _connection_open(ep):
            _lost[ep] = (f"RPC server {ep} closed the connection (it was stopped, crashed, or the network dropped); "
                         "restart it and load the model again")
            raise RpcError(_lost[ep])


# -- serving -------------------------------------------------------------------------


def check_port_free(host: str, port: int) -> None:
    """Fail early, in one line, when the server could not listen there."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        raise RpcError(f"cannot listen on {host}:{port}: unknown host {host!r}") from None
    fam, _, _, _, addr = infos[0]
    s = socket.socket(fam, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(addr)
    except OSError as e:
        raise RpcError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    finally:
        s.close()


def start_server(endpoint: str, device_names: Sequence[str], threads: int, cache_dir: Path | None) -> threading.Thread:
    """Run llama.cpp's RPC server on a daemon thread (it serves one client at a time,
    forever); the caller waits on the thread, so Ctrl+C still reaches Python."""
    lib = _rpc_lib()
    devs = handles(device_names)
    arr = (ctypes.c_void_p * len(devs))(*devs)
    ep = endpoint.encode("utf-8")
    cache = str(cache_dir).encode("utf-8") if cache_dir else None

    def run() -> None:  # pragma: no cover - native, runs until the process ends
        lib.ggml_backend_rpc_start_server(ep, cache, threads, len(devs), arr)

    t = threading.Thread(target=run, name="rpc-server", daemon=True)
    t._specdesk_keep = (arr, ep, cache)  # type: ignore[attr-defined]
    t.start()
    return t
