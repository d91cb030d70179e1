"""Remote devices through llama.cpp's RPC backend, for the front ends: which build
has it, registering servers, where the target's layers go, and serving this machine.

The target's layers are placed across the remote devices (first, as llama.cpp does,
to keep the network transfers few), the local GPUs, and the local CPU; the draft
stays local. ``tensor_split`` gives one share per device in that order, and
optionally one more for the local CPU (on a CPU-only client the only way to keep
some layers here); without it llama.cpp splits the offloaded layers by free memory.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..engine import rpc as _rpc
from ..engine.devices import Device
from ..errors import RpcError, SpecDeskError
from ..fmt import format_bytes
from ..library.gguf import validate_gguf
from ..library.gguf.estimate import layer_bytes
from .runtime import devices

PROTOCOL = _rpc.PROTOCOL
DEFAULT_PORT = _rpc.DEFAULT_PORT
SECURITY_WARNING = _rpc.SECURITY_WARNING
RemoteServer = _rpc.RemoteServer
parse_endpoints = _rpc.parse_endpoints
reinstall_command = _rpc.reinstall_command
set_lost_handler = _rpc.set_lost_handler
lost_endpoints = _rpc.lost_endpoints
probe = _rpc.probe
registered = _rpc.registered
#: "all layers" for llama.cpp's n_gpu_layers
ALL_LAYERS = 999


def _loopback_address(address: str) -> bool:
    """A numeric address of this machine only: 127.0.0.0/8, ::1, or one IPv4-mapped."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (a server bound there is out of the network's
    reach), however it is spelt: decided from the addresses it resolves to, as a bind
    resolves it, not from its letters. ``LOCALHOST``, ``127.1`` and a host name that
    /etc/hosts maps to 127.0.1.1 (Debian's own name) are loopback; ``0.0.0.0``, ``""``
    and a name that resolves to any other address are not. Give a bound socket's own
    address (``sock.getsockname()[0]``) where there is one: it is what was bound."""
    name = host.strip()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if not name:
        return False
    if _loopback_address(name):
        return True
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):  # unknown names, and ones IDNA cannot encode
        return False
    return bool(infos) and all(_loopback_address(str(info[4][0])) for info in infos)


def rpc_supported() -> bool:
    return _rpc.supported()


def require_rpc() -> None:
    """One line with the reinstall command where this build has no RPC backend."""
    _rpc.require()


def register_servers(endpoints: Sequence[str]) -> list[RemoteServer]:
    """Check and register RPC servers; their devices then show in ``devices()``."""
    require_rpc()
    return _rpc.register(parse_endpoints(endpoints))


def parse_split(text: str) -> tuple[float, ...]:
    """``3,1`` or ``0.75,0.25``: non-negative shares, at least one above zero."""
    try:
        xs = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SpecDeskError(f"tensor split must be comma-separated numbers, e.g. 3,1; got {text!r}") from None
    if not xs or any(x != x or x < 0 or x == float("inf") for x in xs) or sum(xs) <= 0:
        raise SpecDeskError(f"tensor split must be non-negative numbers, not all zero; got {text!r}")
    return xs


@dataclass(frozen=True)
class Placement:
    """Where a model's layers go: what llama.cpp gets, and a plan a user can read."""

    device_names: tuple[str, ...] | None  # offload devices, in order; None = llama.cpp's own choice
    tensor_split: tuple[float, ...] | None  # one share per offload device
    n_gpu_layers: int
    rpc_endpoints: tuple[str, ...]
    plan: tuple[tuple[str, str, int], ...] = ()  # (device, "layers a-b", bytes)

    def describe(self) -> str:
        return "; ".join(f"{dev}: {what} ({format_bytes(b)})" for dev, what, b in self.plan)

    def to_dict(self) -> dict:
        return {"devices": list(self.device_names or []), "tensor_split": list(self.tensor_split or []),
                "n_gpu_layers": self.n_gpu_layers, "rpc": list(self.rpc_endpoints),
                "plan": [{"device": d, "what": w, "bytes": b} for d, w, b in self.plan]}


def _layer_ranges(n_layer: int, ngl: int, shares: Sequence[float]) -> list[tuple[int, list[int]]]:
    """llama.cpp's assignment (llama-model.cpp, load_tensors): layers before
    ``n_layer - ngl`` on the CPU (-1), the rest (the output layer is layer n_layer)
    by the cumulative, normalised shares."""
    total = sum(shares)
    cum, acc = [], 0.0
    for s in shares:
        acc += s / total
        cum.append(acc)
    act = min(ngl, n_layer + 1)
    start = max(n_layer + 1 - act, 0)
    out: dict[int, list[int]] = {}
    for il in range(n_layer + 1):
        if il < start or act <= 0:
            dev = -1
        else:
            x = (il - start) / act
            dev = next((i for i, c in enumerate(cum) if x < c), len(cum) - 1)
        out.setdefault(dev, []).append(il)
    return sorted(out.items(), key=lambda kv: min(kv[1]))


def _describe_layers(layers: list[int], n_layer: int) -> str:
    body = [i for i in layers if i < n_layer]
    s = f"layers {body[0]}–{body[-1]}" if len(body) > 1 else (f"layer {body[0]}" if body else "")
    if n_layer in layers:
        s = f"{s} + output" if s else "output"
    return s


def prepare_placement(path: Path, n_gpu_layers: int, rpc: Sequence[str], tensor_split: Sequence[float] | None) -> Placement:
    """Where the model at ``path`` goes with these servers and shares: each server is
    checked and registered once (one handshake each), the devices read once, and the
    plan drawn from them (:func:`plan_placement`). ``Session.load`` takes the result,
    so a load with --rpc shakes hands with each server once."""
    rpc = parse_endpoints(rpc) if rpc else ()
    servers = register_servers(rpc) if rpc else []
    all_devs = devices(memory=bool(rpc) or bool(tensor_split), remote=rpc, checked=rpc)
    return plan_placement(path, n_gpu_layers, servers, all_devs, tensor_split, any_registered=bool(_rpc.registered()))


def _shares_and_layers(order: Sequence[str], tensor_split: Sequence[float] | None, n_layer: int, n_gpu_layers: int,
                       remote: bool) -> tuple[list[str], tuple[float, ...] | None, int]:
    """The offload devices, their shares and n_gpu_layers from the user's split."""
    order = list(order)
    cpu_share = 0.0
    split = None
    if tensor_split:
        if len(tensor_split) == len(order) + 1:
            cpu_share = tensor_split[-1] / sum(tensor_split)
            split = tuple(tensor_split[:-1])
        elif len(tensor_split) == len(order):
            split = tuple(tensor_split)
        else:
            names = ", ".join(order + ["CPU"])
            raise SpecDeskError(f"tensor split has {len(tensor_split)} shares but there are {len(order)} offload devices "
                                f"({names}): give one share per device, in that order (CPU last, optional)")
        if split and sum(split) <= 0:
            order, split = [], None
    ngl = n_gpu_layers
    if remote or tensor_split:
        if tensor_split:
            ngl = ALL_LAYERS if cpu_share == 0 else max(0, (n_layer + 1) - round((n_layer + 1) * cpu_share))
        elif ngl <= 0:
            ngl = ALL_LAYERS
    return order, split, ngl


def plan_placement(path: Path, n_gpu_layers: int, servers: Sequence[RemoteServer], all_devs: Sequence[Device],
                   tensor_split: Sequence[float] | None, any_registered: bool = False) -> Placement:
    """The plan, from the GGUF's layers and the devices given (no server is asked):
    remote devices first, as llama.cpp places them, then local GPUs, then this CPU."""
    rpc = tuple(sv.endpoint for sv in servers)
    remote = [n for sv in servers for n in sv.device_names]
    local_gpus = [d.name for d in all_devs if d.is_gpu]
    n_layer, per_layer = layer_bytes(validate_gguf(path))  # the plan: which layers on which device, and their bytes
    order, split, ngl = _shares_and_layers(remote + local_gpus, tensor_split, n_layer, n_gpu_layers, bool(rpc))
    explicit = bool(rpc) or any_registered or bool(tensor_split)
    names = tuple(order) if explicit else None
    plan = []
    if order or not explicit:
        shares = list(split) if split else [
            max(d.free_bytes, 1) for n in order for d in all_devs if d.name == n] or [1.0]
        labels = order or ["GPU"]
        for dev, layers in _layer_ranges(n_layer, ngl if (order or not explicit) else 0, shares):
            label = "CPU (local)" if dev < 0 else _label(labels[dev], list(all_devs))
            plan.append((label, _describe_layers(layers, n_layer), sum(per_layer.get(i, 0) for i in layers)))
    else:
        plan.append(("CPU (local)", f"layers 0–{n_layer - 1} + output",
                     sum(per_layer.values())))
    return Placement(names, split, ngl, rpc, tuple(plan))


def _label(name: str, devs: list[Device]) -> str:
    for d in devs:
        if d.name == name:
            where = f"{d.endpoint}, " if d.is_remote else ""
            return f"{name} ({where}{format_bytes(d.free_bytes)} free of {format_bytes(d.total_bytes)})"
    return name


def local_placement() -> Placement | None:
    """For the draft (and any model without servers) once servers are registered in
    this process: only local devices, so it never lands on a remote one."""
    if not _rpc.registered():
        return None
    return Placement(tuple(d.name for d in devices(memory=False) if d.is_gpu), None, 0, ())


# -- serving this machine's devices ----------------------------------------------------


def serving_devices(names: Sequence[str] | None) -> list[Device]:
    """The devices to serve: those named, else every local GPU, else the CPU."""
    local = [d for d in devices(remote=()) if not d.is_remote]
    if names:
        known = {d.name: d for d in local}
        bad = [n for n in names if n not in known]
        if bad:
            raise SpecDeskError(f"no device named {bad[0]!r} here: choose from {', '.join(known)}")
        return [known[n] for n in names]
    gpus = [d for d in local if d.is_gpu]
    return gpus or [d for d in local if d.kind == "CPU"][:1]


def start_server(host: str, port: int, device_names: Sequence[str], threads: int,
                 cache_dir: Path | None) -> threading.Thread:
    """Start llama.cpp's RPC server on a daemon thread and return it once it answers a
    handshake (raises RpcError when it cannot listen or does not answer)."""
    require_rpc()
    _rpc.check_port_free(host, port)
    endpoint = f"{host}:{port}"
    t = _rpc.start_server(endpoint, device_names, threads, cache_dir)
    probe_host = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    deadline = time.monotonic() + 30
    while True:
        try:
            _rpc.probe(f"{probe_host}:{port}", timeout=5.0)
            return t
        except RpcError as e:
            if not t.is_alive():
                raise RpcError(f"llama.cpp's RPC server on {endpoint} stopped at once (see the lines above)") from None
            if time.monotonic() > deadline:
                raise RpcError(f"llama.cpp's RPC server on {endpoint} did not come up: {e}") from None
            time.sleep(0.1)


__all__ = ["ALL_LAYERS", "DEFAULT_PORT", "PROTOCOL", "Placement", "RemoteServer", "SECURITY_WARNING", "local_placement", "lost_endpoints",
           "parse_endpoints", "parse_split", "plan_placement", "prepare_placement", "probe", "register_servers", "registered",
           "reinstall_command", "require_rpc", "rpc_supported", "serving_devices", "set_lost_handler",
           "start_server"]
