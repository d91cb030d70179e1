"""``specdesk rpc-server``: serve this machine's devices to another SpecDesk (or
llama.cpp) through llama.cpp's own RPC server, from the libraries SpecDesk ships."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import SpecDeskError
from ..fmt import format_bytes
from ..session import default_threads
from ..session.remote import DEFAULT_PORT, PROTOCOL, SECURITY_WARNING, is_loopback, require_rpc, serving_devices, start_server
from .args import int_at_least, positive_int


def add_parser(sub) -> None:
    r = sub.add_parser("rpc-server", help="serve this machine's devices to a SpecDesk on another machine (llama.cpp RPC)")
    r.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 for every network)")
    r.add_argument("--port", type=int_at_least("port", 1, "a port from 1 to 65535"), default=DEFAULT_PORT,
                   help=f"port (default {DEFAULT_PORT})")
    r.add_argument("--threads", type=positive_int("threads"), default=None, help="CPU threads (default: physical cores)")
    r.add_argument("--device", default=None, metavar="NAME[,NAME...]",
                   help="devices to serve, as `specdesk doctor` names them (default: every GPU, else the CPU)")
    r.add_argument("--cache", type=Path, default=None, metavar="DIR",
                   help="keep the tensors clients send in DIR, so a model's second load does not cross the network again")


def cmd_rpc_server(args) -> int:
    require_rpc()
    if args.port > 65535:
        raise SpecDeskError(f"port must be a port from 1 to 65535, got {args.port}")
    names = [n.strip() for n in args.device.split(",") if n.strip()] if args.device else None
    devs = serving_devices(names)
    cache = None
    if args.cache is not None:
        cache = args.cache.expanduser()
        try:
            cache.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SpecDeskError(f"cannot use {cache} as the cache: {e.strerror or e}") from None
        if not os.access(cache, os.W_OK):
            raise SpecDeskError(f"cannot use {cache} as the cache: not writable")
    threads = args.threads or default_threads()
    warn = f"WARNING: {SECURITY_WARNING}"
    if not is_loopback(args.host):
        warn += f" It listens on {args.host}: every machine that can reach it can use it."
    print(warn, file=sys.stderr, flush=True)
    thread = start_server(args.host, args.port, [d.name for d in devs], threads, cache)
    print(f"specdesk rpc-server: RPC protocol {'.'.join(map(str, PROTOCOL))}, listening on {args.host}:{args.port} "
          f"({threads} threads{f', cache {cache}' if cache else ''})", flush=True)
    for d in devs:
        print(f"  serving {d.name}: {d.description}, {format_bytes(d.free_bytes)} free of {format_bytes(d.total_bytes)}",
              flush=True)
    print(f"ready: on the client, add --rpc {args.host if not args.host.startswith('0.') else '<this-machine>'}:{args.port}"
          " (Ctrl+C stops)", flush=True)
    try:
        while thread.is_alive():
            thread.join(0.5)
    except KeyboardInterrupt:
        print("specdesk rpc-server: stopped", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(0)  # llama.cpp's server thread never returns
    raise SpecDeskError(f"llama.cpp's RPC server on {args.host}:{args.port} stopped (see the lines above)")
