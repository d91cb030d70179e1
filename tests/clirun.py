"""The command line as a user runs it, for every test that does: a real ``specdesk``
process (it inherits the run's temporary HOME, data and cache folders from
tests/conftest.py), its one-line errors, and a free local port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

PY = sys.executable


def cli(*args, timeout: float = 600, entry: list[str] | None = None, **kw) -> subprocess.CompletedProcess:
    """``specdesk ARGS`` in a subprocess (``entry``: another way in than ``python -m
    specdesk``, e.g. one that registers a test's own draft source first)."""
    env = kw.pop("env", None) or dict(os.environ)
    cmd = (entry or [PY, "-m", "specdesk"]) + [str(a) for a in args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **kw)


def assert_one_line_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    """A bad input's answer: exit 2, one line on stderr holding each of ``needles``, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
