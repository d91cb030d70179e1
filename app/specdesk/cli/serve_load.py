"""``specdesk serve-load``: M concurrent clients × R streamed chat completions against a
``specdesk serve`` that this command starts (on a free port, with the serve options
given after ``--``) or one already running (``--url``), and what a user of the endpoint
sees: throughput, time to first token, the wait in line, decode speed per request,
refusals (503) and errors, and the server's memory before and after."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from ..bench.serve_load import Endpoint, run_load, rss, summarize
from ..errors import SpecDeskError
from ..paths import frozen
from ..session.text import serve_load_text
from .args import float_in, positive_int
from .serve import API_KEY_ENV

#: Seconds the server this command starts may take to load its models and say "ready".
START_S = 600.0
_URL = re.compile(r"(https?://\S+?)/v1\b")


def add_parser(sub) -> None:
    s = sub.add_parser(
        "serve-load", help="load a `specdesk serve` with concurrent streamed clients: throughput, time to first token, "
                           "waits in line, 503s, the server's memory",
        description="Starts `specdesk serve SERVE_OPTIONS --port 0` (give its options after --, e.g. -- --target "
                    "T.gguf --draft D.gguf --k 3; none: the default pair), or loads the server at --url, with M "
                    "clients sending R streamed chat completions each, and reports what they saw. Exits 1 if a "
                    "request ended in an error (a 503 is the queue's answer, not an error).")
    s.add_argument("--clients", type=positive_int("clients"), default=4, help="concurrent clients, M (default 4)")
    s.add_argument("--requests", type=positive_int("requests"), default=3, help="requests per client, R (default 3)")
    s.add_argument("--max-tokens", type=positive_int("max tokens"), default=32, help="per request (default 32)")
    s.add_argument("--temp", type=float_in("temperature", 0.0, None), default=0.0, help="temperature (default 0)")
    s.add_argument("--retry-pause", type=float_in("retry pause", 0.0, None), default=0.5, metavar="SECONDS",
                   help="how long a refused (503) client waits before its next request (default 0.5)")
    s.add_argument("--url", help="a running server (e.g. http://127.0.0.1:8080) instead of starting one")
    s.add_argument("--pid", type=positive_int("pid"), help="with --url: the server's process id, for its memory")
    s.add_argument("--api-key", default=None, help=f"the server's API key (default: ${API_KEY_ENV}, else none)")
    s.add_argument("--json", type=Path, metavar="FILE", help="also write the report, every request included, as JSON")
    s.add_argument("serve_args", nargs="*", metavar="-- SERVE_OPTIONS", help="options for the server this command starts")


class StartedServer:
    """``specdesk serve ARGS --port 0`` in a child process, until :meth:`stop`."""

    def __init__(self, args: list[str], key: str | None) -> None:
        cmd = ([sys.executable] if frozen() else [sys.executable, "-m", "specdesk"]) + ["serve", *args, "--port", "0"]
        env = dict(os.environ)
        if key:
            env[API_KEY_ENV] = key  # not on the command line, where other users of the machine can read it
        self._err = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._err, stdin=subprocess.DEVNULL, text=True,
                                     env=env)
        self.url = self._wait_ready()

    def _wait_ready(self) -> str:
        lines: queue.Queue = queue.Queue()

        def pump() -> None:
            for line in self.proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        url = None
        while True:
            try:
                line = lines.get(timeout=START_S)
            except queue.Empty:
                self.stop()
                raise SpecDeskError(f"specdesk serve did not say it was ready within {START_S:.0f} s") from None
            if line is None:
                self.proc.wait(30)
                raise SpecDeskError(f"specdesk serve did not start: {self._last_error()}")
            m = _URL.search(line)
            url = url or (m.group(1) if m else None)
            if line.startswith("ready") and url:
                return url

    def _last_error(self) -> str:
        self._err.seek(0)
        said = [line.strip() for line in self._err.read().splitlines() if line.strip()]
        last = said[-1] if said else f"it exited with code {self.proc.returncode}"
        return last.removeprefix("specdesk: error: ")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # specdesk serve stops as on Ctrl+C: the answers end, the models are freed
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self._err.close()


def cmd_serve_load(args) -> int:
    if args.url and args.serve_args:
        raise SpecDeskError("give the options of a server to start after --, or --url of a running one, not both")
    if args.pid and not args.url:
        raise SpecDeskError("--pid names a running server's process: it goes with --url")
    key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV) or None
    started = None
    if args.url:
        ep, pid = Endpoint.parse(args.url, key), args.pid
    else:
        started = StartedServer(args.serve_args, key)
        ep, pid = Endpoint(started.url, key), started.proc.pid
        print(f"specdesk serve-load: started {' '.join(['specdesk serve', *args.serve_args])} at {started.url}",
              file=sys.stderr, flush=True)
    try:
        model = ep.model()
        ep.chat(model, "Hello", 4, 0.0)  # a warm-up that pages the weights in; not counted
        before = rss(pid)
        results, wall = run_load(ep, model, args.clients, args.requests, args.max_tokens, args.temp, args.retry_pause)
        after = rss(pid)
    finally:
        if started is not None:
            started.stop()
    report = summarize(results, wall, args.clients, args.requests, args.max_tokens, before, after)
    print(serve_load_text(report))
    if args.json:
        try:
            args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
        except OSError as e:
            raise SpecDeskError(f"cannot write {args.json}: {e.strerror or e}") from None
    return 0 if report["error_count"] == 0 else 1
