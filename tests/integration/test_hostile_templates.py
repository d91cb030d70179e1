"""Hostile chat templates, as a user meets them: SmolLM2 rewritten with each
template, through `specdesk generate` in a real process. Each is refused with one
line and exit 2, within 10 s and under 1.2 GiB peak memory (the CLI and its
template helper, measured here); the same rewrite with SmolLM2's own template still
generates. Before the helper process, these took the CLI to 2.2-8.1 GB or ran for
minutes (issue 21)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from chat_template_gguf import chat_template_of, with_chat_template

from specdesk.chat.sandbox import CHATML

PY = sys.executable
LIMIT_BYTES = int(1.2 * (1 << 30))
HOSTILE_TIMEOUT = 10

_S = "{% set s = 'x' * 4000000 %}"
HOSTILE = {
    # values the old sandbox built before it measured them (issue 21)
    "format filter with a huge width": "{{ '%2000000000d'|format(1) }}",
    "a list of a long string": _S + "{{ [s] * 60 }}",
    "joined": _S + "{{ ([s] * 60)|join }}",
    "as json": _S + "{{ ([s] * 60)|tojson }}",
    "joined by a string": _S + "{{ ''.join([s] * 60) }}",
    "concatenated": _S + "{{ " + " ~ ".join(["s"] * 60) + " }}",
    "a mapping key with a huge width": "{{ '%(a)300000000d' % {'a': 1} }}",
    "strftime of a long format": "{{ strftime_now('%c' * 2000000) }}",
    "a sort that lowercases gigabytes":
        "{% set s = 'x' * 1000000 %}{% set t = s ~ 'y' %}{{ ([s, t] * 4000)|sort|length }}",
    # what no estimate sees: only the operating system's bounds stop these
    "one C-level call that runs for minutes": "{{ ([[1]] * 300000)|sum(start=[])|length }}",
    "a list literal of 1.6 GB": _S + "{{ [" + ", ".join(f"s ~ {i}" for i in range(400)) + "]|length }}",
}

# Runs a command as its only child and writes the child's exit code and peak
# resident memory (its largest process, helpers it waited for included) to argv[1].
_MEASURE = textwrap.dedent("""
    import json, resource, subprocess, sys
    r = subprocess.run(sys.argv[2:], stdin=subprocess.DEVNULL)
    kb = 1 if sys.platform == "darwin" else 1024
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * kb
    with open(sys.argv[1], "w") as f:
        json.dump({"rc": r.returncode, "peak": peak}, f)
""")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("templates")


@pytest.fixture
def rewritten(smol_path, model_dir):
    """SmolLM2 with another chat template; the 98 MB copy is removed afterwards."""
    made = []

    def make(template: str, name: str):
        path = with_chat_template(smol_path, model_dir / f"{name}.gguf", template)
        made.append(path)
        return path

    yield make
    for p in made:
        p.unlink(missing_ok=True)


def _env(tmp_path) -> dict:
    env = dict(os.environ)
    env.update(SPECDESK_DATA_DIR=str(tmp_path / "data"), SPECDESK_CACHE_DIR=str(tmp_path / "cache"))
    return env


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def generate(model, tmp_path, timeout: float) -> dict:
    """`specdesk generate` on ``model``, measured: its exit code, stdout, stderr, the
    peak resident memory of its largest process (getrusage) and the largest sum over
    its process tree seen by polling. Killed (with its helpers) past ``timeout``."""
    out = tmp_path / "measure.json"
    cmd = [PY, "-c", _MEASURE, str(out), PY, "-m", "specdesk", "generate", "--target", str(model), "--prompt", "Say hi.",
           "--max-tokens", "4", "--proposer", "none", "--ctx", "512", "--threads", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path),
                            stdin=subprocess.DEVNULL, start_new_session=True)
    ps = psutil.Process(proc.pid)
    tree_peak = 0
    give_up = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < give_up:
        tree_peak = max(tree_peak, _tree_rss(ps))
        time.sleep(0.02)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"specdesk generate ran past {timeout} s (peak {tree_peak / 2**20:.0f} MiB so far)")
    stdout, stderr = proc.communicate()
    measured = json.loads(out.read_text())
    return {"rc": measured["rc"], "stdout": stdout, "stderr": stderr, "peak": measured["peak"], "tree_peak": tree_peak}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_template_is_one_line_within_bounds(name, rewritten, tmp_path):
    model = rewritten(HOSTILE[name], "hostile")
    r = generate(model, tmp_path, HOSTILE_TIMEOUT)
    lines = [line for line in r["stderr"].splitlines() if line.strip()]
    assert r["peak"] < LIMIT_BYTES, f"peak RSS {r['peak'] / 2**20:.0f} MiB"
    assert r["tree_peak"] < LIMIT_BYTES, f"peak RSS of the process tree {r['tree_peak'] / 2**20:.0f} MiB"
    assert r["rc"] == 2, r["stderr"][-2000:]
    assert len(lines) == 1, r["stderr"][-2000:]
    assert lines[0].startswith("specdesk: error: the model's chat template needs more than "), lines[0]
    assert lines[0].endswith(" to render; use --raw or another template"), lines[0]


def test_the_same_rewrite_with_a_normal_template_still_generates(rewritten, smol_path, tmp_path):
    own = chat_template_of(smol_path)
    # the rewrite itself changes nothing else: with the model's own template it is the same file
    assert rewritten(own, "own").read_bytes() == smol_path.read_bytes()
    model = rewritten(CHATML, "control")
    assert chat_template_of(model) == CHATML != own
    r = generate(model, tmp_path, 300)
    assert r["rc"] == 0, r["stderr"][-2000:]
    assert r["stdout"].strip()
    assert "stop: max_tokens" in r["stderr"] or "stop: eos" in r["stderr"], r["stderr"]
    assert r["peak"] < LIMIT_BYTES and r["tree_peak"] < LIMIT_BYTES
