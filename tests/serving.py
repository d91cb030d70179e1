"""A real ``specdesk serve`` subprocess for the tests: port 0 (the server picks a free
one and prints it), temporary data, cache and home folders, and its stderr in a file."""

from __future__ import annotations

import http.client
import json as jsonlib
import os
import queue
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

PY = sys.executable
#: How long a server may take to load SmolLM2 and print "ready" on a busy machine.
START_S = 180


def isolated_env(root: Path, **extra: str) -> dict:
    """The environment of a subprocess that must not touch the user's files."""
    env = dict(os.environ)
    for name in ("data", "cache", "home"):
        (root / name).mkdir(parents=True, exist_ok=True)
    env.update(SPECDESK_DATA_DIR=str(root / "data"), SPECDESK_CACHE_DIR=str(root / "cache"), HOME=str(root / "home"),
               XDG_CONFIG_HOME=str(root / "home" / ".config"), XDG_DATA_HOME=str(root / "home" / ".local" / "share"),
               XDG_CACHE_HOME=str(root / "home" / ".cache"))
    env.pop("SPECDESK_API_KEY", None)
    env.update(extra)
    return env


@dataclass
class Served:
    proc: subprocess.Popen
    url: str
    stdout: list[str]
    stderr_path: Path
    key: str | None

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def request(self, method: str, path: str, body: bytes | dict | None = None, headers: dict | None = None,
                timeout: float = 300) -> "Reply":
        """One plain HTTP request (the standard library's client): for what an SDK never
        sends (a malformed body, a missing key, a huge prompt)."""
        u = urlsplit(self.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        h = self.headers() if headers is None else dict(headers)
        if isinstance(body, dict):
            body = jsonlib.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def get(self, path: str) -> "Reply":
        return self.request("GET", path, timeout=60)

    def post(self, path: str, body: bytes | dict | None = None, headers: dict | None = None) -> "Reply":
        return self.request("POST", path, body, headers)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def client(self, **kw):
        import openai

        kw.setdefault("timeout", 300)
        kw.setdefault("max_retries", 0)  # a 503 is the answer under test, not something to retry
        return openai.OpenAI(base_url=self.v1, api_key=self.key or "none", **kw)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        return self.proc.returncode


@dataclass
class Reply:
    status: int
    headers: dict
    body: bytes

    def json(self):
        return jsonlib.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def start_serve(args: list, root: Path, key: str | None = None, entry: list[str] | None = None, **env_extra: str) -> Served:
    """Start ``specdesk serve ARGS --port 0`` (``entry``: another way in than ``python -m
    specdesk``) and wait for its "ready" line."""
    env = isolated_env(root, **env_extra)
    err = root / "serve.stderr"
    cmd = (entry or [PY, "-m", "specdesk"]) + ["serve", *map(str, args), "--port", "0"] + (["--api-key", key] if key else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(err, "w"), text=True, env=env)
    lines: queue.Queue = queue.Queue()
    seen: list[str] = []

    def pump() -> None:
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=START_S)
        except queue.Empty:
            proc.kill()
            raise RuntimeError(f"specdesk serve printed no 'ready' in {START_S} s: {seen} {err.read_text()}") from None
        if line is None:
            proc.wait(30)
            raise RuntimeError(f"specdesk serve exited with {proc.returncode}: {seen} {err.read_text()}")
        seen.append(line)
        if line.startswith("ready"):
            break
    url = seen[0].split()[2].removesuffix("/v1")
    return Served(proc, url, seen, err, key)
