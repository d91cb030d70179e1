"""A TCP proxy that adds a fixed delay per direction: a network's round trip, on one
machine, for tests and demos of the RPC backend.

    python -m specdesk.bench.latency_proxy --to 127.0.0.1:50052 --listen 127.0.0.1:50053 --delay-ms 5

Every chunk read from one side is written to the other ``delay`` seconds after it
arrived (order kept; bandwidth is not limited), so a request and its answer cost
``up + down`` more than without the proxy.
"""

from __future__ import annotations

import argparse
import collections
import socket
import sys
import threading
import time


class LatencyProxy:
    def __init__(self, upstream: tuple[str, int], delay_up_s: float = 0.0, delay_down_s: float | None = None,
                 listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.upstream = upstream
        self.delay_up_s = max(0.0, delay_up_s)
        self.delay_down_s = self.delay_up_s if delay_down_s is None else max(0.0, delay_down_s)
        self._srv = socket.create_server(listen)
        self._stop = threading.Event()
        self._socks: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="latency-proxy", daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._srv.getsockname()[:2]
        return f"{host}:{port}"

    def start(self) -> "LatencyProxy":
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        for s in [self._srv, *self._socks]:
            try:
                s.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in accept() or recv()
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> "LatencyProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._srv.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._socks.append(s)
            self._pipe(client, server, self.delay_up_s)
            self._pipe(server, client, self.delay_down_s)

    def _pipe(self, src: socket.socket, dst: socket.socket, delay: float) -> None:
        q: collections.deque = collections.deque()
        ready = threading.Condition()

        def read() -> None:
            while True:
                try:
                    data = src.recv(1 << 16)
                except OSError:
                    data = b""
                with ready:
                    q.append((time.perf_counter() + delay, data))
                    ready.notify()
                if not data:
                    return

        def write() -> None:
            while True:
                with ready:
                    while not q:
                        ready.wait()
                    due, data = q.popleft()
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                if not data:  # the other side closed: pass the close on
                    for s in (dst, src):
                        try:
                            s.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                    return
                try:
                    dst.sendall(data)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()


def _hostport(v: str) -> tuple[str, int]:
    host, _, port = v.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected host:port, got {v!r}")
    return host, int(port)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="latency_proxy", description=__doc__.split("\n\n")[0])
    p.add_argument("--to", type=_hostport, required=True, help="the server, host:port")
    p.add_argument("--listen", type=_hostport, default=("127.0.0.1", 0), help="where to listen (default: a free port)")
    p.add_argument("--delay-ms", type=float, default=0.0, help="added delay each way, in ms")
    p.add_argument("--delay-up-ms", type=float, default=None, help="client to server only (overrides --delay-ms)")
    p.add_argument("--delay-down-ms", type=float, default=None, help="server to client only (overrides --delay-ms)")
    a = p.parse_args(argv)
    up = a.delay_ms if a.delay_up_ms is None else a.delay_up_ms
    down = a.delay_ms if a.delay_down_ms is None else a.delay_down_ms
    try:
        proxy = LatencyProxy(a.to, up / 1000, down / 1000, a.listen).start()
    except OSError as e:
        print(f"latency_proxy: error: cannot listen on {a.listen[0]}:{a.listen[1]}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"listening on {proxy.endpoint}, forwarding to {a.to[0]}:{a.to[1]} with +{up:g} ms up, +{down:g} ms down",
          flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        proxy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
