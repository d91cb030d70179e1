"""A CUDA build with one H200, as the session sees it (only what it asks is faked: the
build's GPU support and ggml's device list), for the tests of offload by default."""

from __future__ import annotations

from specdesk.engine.devices import Device

GiB = 1 << 30
CPU = Device("CPU", "Intel Xeon", "CPU", "CPU", 100 * GiB, 128 * GiB)
H200 = Device("CUDA0", "NVIDIA H200", "GPU", "CUDA", 139 * GiB, 141 * GiB)


def as_gpu_build(monkeypatch, devices=(CPU, H200)) -> None:
    """This process as a build with GPU offload over ``devices``."""
    from specdesk.session import offload, runtime

    monkeypatch.setattr(offload, "supports_gpu_offload", lambda: True)
    monkeypatch.setattr(offload, "devices", lambda **kw: list(devices))
    monkeypatch.setattr(runtime, "supports_gpu_offload", lambda: True)  # no "GPU layers have no effect"
