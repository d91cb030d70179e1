"""generate, serve and compare with their defaults offload both models on a GPU build,
and change nothing on this CPU-only one.

A GPU build is faked where the session reads it (the build's answer and the device
list, :mod:`specdesk.session.offload`); the models then load on this CPU, where
llama.cpp ignores the layer counts, so the whole path from the options to the loaded
models' memory report runs without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fake_devices import as_gpu_build

from specdesk.cli import args as cli_args
from specdesk.cli import main
from specdesk.errors import SpecDeskError
from specdesk.session import supports_gpu_offload

ALL = "target: all 31 layers on CUDA0 (NVIDIA H200); draft: all 31 layers on CUDA0 (NVIDIA H200)"


@pytest.fixture
def gpu_build(monkeypatch):
    """This process as a CUDA build with one H200 (only what the session asks is faked)."""
    as_gpu_build(monkeypatch)


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:  # argparse
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def test_generate_offloads_both_models_by_default(gpu_build, capsys, smol_path, smol_draft_path):
    rc, out, err = run(capsys, "generate", "--target", smol_path, "--draft", smol_draft_path, "--prompt", "hi",
                       "--max-tokens", "2", "--ctx", "256", "--threads", "1", "--json")
    assert rc == 0, err
    assert notes(err) == [f"specdesk: note: {ALL}"]
    models = json.loads(out)["memory"]["models"]
    assert (models["target"]["n_gpu_layers"], models["draft"]["n_gpu_layers"]) == (31, 31)
    assert models["target"]["where"] == models["draft"]["where"] == "all 31 layers on CUDA0 (NVIDIA H200)"


def test_generate_takes_the_counts_given(gpu_build, capsys, smol_path, smol_draft_path):
    rc, out, err = run(capsys, "generate", "--target", smol_path, "--draft", smol_draft_path, "--prompt", "hi",
                       "--max-tokens", "2", "--ctx", "256", "--threads", "1", "--json", "--gpu-layers", "4",
                       "--draft-gpu-layers", "0")
    assert rc == 0, err
    assert notes(err) == ["specdesk: note: target: 4 of 31 layers on CUDA0 (NVIDIA H200), the rest on the CPU; "
                          "draft: on the CPU (as asked)"]
    models = json.loads(out)["memory"]["models"]
    assert (models["target"]["n_gpu_layers"], models["draft"]["n_gpu_layers"]) == (4, 0)


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["compare", "--prompt", "hi"]])
def test_serve_and_compare_load_with_both_models_offloaded(gpu_build, capsys, monkeypatch, smol_path, smol_draft_path,
                                                           command):
    """Their defaults reach Session.load as all layers of both (the load itself stops there)."""
    loads = []

    def load(t, d, **kw):
        loads.append(kw["offload"].apply(t, d))
        raise SpecDeskError("stopped before loading")

    monkeypatch.setattr(cli_args.Session, "load", load)
    rc, _, err = run(capsys, *command, "--target", smol_path, "--draft", smol_draft_path, "--ctx", "256")
    assert rc == 2 and notes(err) == [f"specdesk: note: {ALL}", "specdesk: error: stopped before loading"]
    [(t, d)] = loads
    assert (t.n_gpu_layers, d.n_gpu_layers) == (31, 31)


def test_on_this_cpu_build_the_defaults_change_nothing(smol_path, smol_draft_path):
    """A real run: no layer offloaded, not one line more on stderr."""
    if supports_gpu_offload():
        pytest.skip("this llama.cpp can offload to a GPU")
    r = subprocess.run([sys.executable, "-m", "specdesk", "generate", "--target", str(smol_path), "--draft",
                        str(smol_draft_path), "--prompt", "hi", "--max-tokens", "2", "--ctx", "256", "--threads", "1",
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    models = json.loads(r.stdout)["memory"]["models"]
    assert (models["target"]["n_gpu_layers"], models["draft"]["n_gpu_layers"]) == (0, 0)
    assert models["target"]["where"] == models["draft"]["where"] == ""
