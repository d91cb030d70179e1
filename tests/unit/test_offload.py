"""Offload by default: the fit over a faked device list and real GGUF headers (no
model is loaded, no GPU is needed), and what the CLI's note and doctor say of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdesk.engine.devices import Device
from specdesk.fmt import format_bytes
from specdesk.session import ModelSpec
from specdesk.session import offload as off_mod
from specdesk.session.offload import MARGIN_BYTES, fit_offload, layer_count, most_layers, vram_bytes
from specdesk.session.remote import Placement

GiB = 1 << 30
CPU = Device("CPU", "Intel Xeon", "CPU", "CPU", 100 * GiB, 128 * GiB)


def gpu(free: int, name: str = "CUDA0", description: str = "NVIDIA H200", kind: str = "GPU", backend: str = "CUDA",
        total: int = 141 * GiB) -> Device:
    return Device(name, description, kind, backend, free, total)


H200 = gpu(139 * GiB)


@pytest.fixture(scope="module")
def qwen(qwen_target_path, qwen_draft_path):
    return ModelSpec(qwen_target_path), ModelSpec(qwen_draft_path)


def test_both_fit_all_layers_of_both_on_the_gpu(qwen):
    t, d = qwen
    off = fit_offload(t, d, [CPU, H200], offloads=True)
    assert (layer_count(t), layer_count(d)) == (29, 25)  # 28 and 24 blocks, and each one's output layer
    assert (off.target.layers, off.draft.layers) == (29, 25)
    assert off.describe() == "target: all 29 layers on CUDA0 (NVIDIA H200); draft: all 25 layers on CUDA0 (NVIDIA H200)"
    assert not off.limited and off.free_bytes == 139 * GiB
    ts, ds = off.apply(t, d)
    assert (ts.n_gpu_layers, ds.n_gpu_layers) == (29, 25) and ts.path == t.path and ds.n_ctx == d.n_ctx


def test_only_the_target_fits_partly_the_target_first_and_the_draft_on_the_cpu(qwen):
    t, d = qwen
    budget = vram_bytes(t, 29) // 2  # half of what the whole target needs
    off = fit_offload(t, d, [CPU, gpu(MARGIN_BYTES + budget)], offloads=True)
    n = off.target.layers
    assert 0 < n < 29 and vram_bytes(t, n) <= budget < vram_bytes(t, n + 1)  # as many as fit, no more
    assert off.draft.layers == 0  # the target had first call on the memory
    assert off.describe() == (f"target: {n} of 29 layers on CUDA0 (NVIDIA H200), the rest on the CPU; "
                              "draft: on the CPU (no room left on CUDA0 (NVIDIA H200))")
    assert off.limited


def test_the_draft_takes_what_the_whole_target_leaves(qwen):
    t, d = qwen
    left = vram_bytes(d, 25) // 2
    off = fit_offload(t, d, [gpu(MARGIN_BYTES + vram_bytes(t, 29) + left)], offloads=True)
    assert off.target.layers == 29
    assert 0 < off.draft.layers < 25 and off.draft.layers == most_layers(d, left)
    assert off.draft.describe() == f"draft: {off.draft.layers} of 25 layers on CUDA0 (NVIDIA H200), the rest on the CPU"


def test_an_explicit_count_wins_and_still_takes_its_share(qwen):
    t, d = qwen
    from dataclasses import replace

    off = fit_offload(replace(t, n_gpu_layers=5), d, [H200], offloads=True)
    assert (off.target.layers, off.draft.layers) == (5, 25)
    assert off.target.describe() == "target: 5 of 29 layers on CUDA0 (NVIDIA H200), the rest on the CPU"
    assert not off.limited  # asked for, not cut short by memory
    off = fit_offload(replace(t, n_gpu_layers=99), replace(d, n_gpu_layers=0), [H200], offloads=True)
    assert (off.target.layers, off.draft.layers) == (99, 0)  # llama.cpp takes 99 as "all"
    assert off.describe() == "target: all 29 layers on CUDA0 (NVIDIA H200); draft: on the CPU (as asked)"
    # an explicit target too big for the GPU leaves an auto draft nothing
    small = gpu(MARGIN_BYTES + vram_bytes(t, 29))
    assert fit_offload(replace(t, n_gpu_layers=99), d, [small], offloads=True).draft.layers == 0


def test_a_cpu_only_build_offloads_nothing_and_reads_no_file():
    missing = ModelSpec(Path("/nonexistent/target.gguf"))
    off = fit_offload(missing, ModelSpec(Path("/nonexistent/draft.gguf")), [CPU, H200], offloads=False)
    assert (off.target.layers, off.draft.layers) == (0, 0) and not off.offloads and off.free_bytes is None
    assert off.apply(missing, None)[0].n_gpu_layers == 0
    # a given count is passed on as before (llama.cpp ignores it there; the CLI warns)
    assert fit_offload(ModelSpec(Path("/x.gguf"), n_gpu_layers=8), None, [CPU], offloads=False).target.layers == 8


def test_a_gpu_build_without_a_gpu_device_says_so():
    off = fit_offload(ModelSpec(Path("/nonexistent/t.gguf")), None, [CPU], offloads=True)
    assert off.target.layers == 0 and off.describe() == "target: on the CPU (no GPU device was found)"


def test_the_devices_llama_cpp_would_use_by_default(qwen):
    """Local discrete GPUs (split by llama.cpp, so their free memory adds up, each less
    the margin); an iGPU only without one; never an RPC server's device."""
    t, d = qwen
    remote = Device("RPC0", "10.0.0.2:50052", "GPU", "RPC", 500 * GiB, 500 * GiB)
    igpu = gpu(60 * GiB, name="Vulkan1", description="Intel Graphics", kind="iGPU", backend="Vulkan")
    assert off_mod.offload_gpus([CPU, remote, igpu, H200]) == [H200]
    assert off_mod.offload_gpus([CPU, remote, igpu]) == [igpu]
    assert off_mod.offload_gpus([CPU, remote]) == []
    need = vram_bytes(t, 29) + vram_bytes(d, 25)
    half = MARGIN_BYTES + need // 2 + (1 << 20)
    two = [gpu(half, "CUDA0", "RTX A"), gpu(half, "CUDA1", "RTX B")]
    off = fit_offload(t, d, two, offloads=True)
    assert (off.target.layers, off.draft.layers) == (29, 25)
    assert off.target.place() == "all 29 layers on CUDA0 (RTX A), CUDA1 (RTX B)"
    assert fit_offload(t, d, [two[0]], offloads=True).draft.layers < 25


def test_with_a_plan_the_target_goes_by_it_and_the_draft_fits_what_it_leaves(qwen):
    t, d = qwen
    plan = Placement(("RPC0", "CUDA0"), None, 999, ("10.0.0.2:50052",),
                     (("RPC0 (10.0.0.2:50052, 10 GiB free of 12 GiB)", "layers 0–13", 500 << 20),
                      ("CUDA0 (2.0 GiB free of 16 GiB)", "layers 14–27 + output", 900 << 20)))
    room = MARGIN_BYTES + (900 << 20) + vram_bytes(d, 25) // 2
    off = fit_offload(t, d, [CPU, gpu(room)], offloads=True, plan=plan)
    assert off.target.layers == 999 and off.target.plan == plan.describe()
    assert 0 < off.draft.layers < 25 and off.draft.layers == most_layers(d, vram_bytes(d, 25) // 2)


def test_smollm2_counts_its_tied_output_layer(smol_path):
    s = ModelSpec(smol_path, n_ctx=2048)
    assert layer_count(s) == 31
    off = fit_offload(s, s, [H200], offloads=True)
    assert off.describe() == "target: all 31 layers on CUDA0 (NVIDIA H200); draft: all 31 layers on CUDA0 (NVIDIA H200)"


def test_resolve_reads_this_build_and_its_local_devices_only(monkeypatch, smol_path):
    asked = []
    monkeypatch.setattr(off_mod, "supports_gpu_offload", lambda: True)
    monkeypatch.setattr(off_mod, "devices", lambda **kw: asked.append(kw) or [CPU, H200])
    off = off_mod.resolve_offload(ModelSpec(smol_path), None)
    assert off.target.layers == 31 and asked == [{"remote": ()}]  # no RPC server is asked
    monkeypatch.setattr(off_mod, "supports_gpu_offload", lambda: False)
    assert off_mod.resolve_offload(ModelSpec(smol_path), None).target.layers == 0 and len(asked) == 1


# -- what is said ------------------------------------------------------------------------


def test_the_cli_note(qwen):
    from specdesk.cli.args import offload_note

    t, d = qwen
    assert offload_note(fit_offload(t, d, [CPU, H200], offloads=True)) == (
        "target: all 29 layers on CUDA0 (NVIDIA H200); draft: all 25 layers on CUDA0 (NVIDIA H200)")
    free = MARGIN_BYTES + vram_bytes(t, 29) // 2
    part = fit_offload(t, d, [CPU, gpu(free)], offloads=True)
    assert offload_note(part) == (
        f"target: {part.target.layers} of 29 layers on CUDA0 (NVIDIA H200), the rest on the CPU; "
        f"draft: on the CPU (no room left on CUDA0 (NVIDIA H200)) — auto fits what {format_bytes(free)} of free GPU "
        "memory holds, keeping 1.00 GiB free per device, the target first; --gpu-layers N and --draft-gpu-layers N choose")
    # a CPU-only build says nothing: nothing changed there
    assert offload_note(fit_offload(t, d, [CPU], offloads=False)) is None


def test_doctor_says_where_the_default_pair_goes(monkeypatch):
    from specdesk.cli import doctor

    monkeypatch.setattr(doctor, "devices", lambda: [CPU, H200])
    monkeypatch.setattr(doctor, "supports_gpu_offload", lambda: True)
    text = doctor._text(doctor.report(scan_library=False))
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("GPU offload:"))
    assert lines[i] == ("GPU offload: yes: by default as many layers as the GPU's free memory holds, less 1.00 GiB per "
                        "device, the target first (--gpu-layers N and the app's settings choose)")
    assert lines[i + 1] == ("  the default pair, by default: target: all 29 layers on CUDA0 (NVIDIA H200); "
                            "draft: all 25 layers on CUDA0 (NVIDIA H200)")
    monkeypatch.setattr(doctor, "devices", lambda: [CPU])
    r = doctor.report(scan_library=False)["gpu_offload"]
    assert r["gpu_layers_effect"] == "no GPU device was found, so models run on the CPU" and r["default_pair"] is None
