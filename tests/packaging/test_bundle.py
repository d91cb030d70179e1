"""The one-folder bundle, built with packaging/build into a temporary folder: it runs
the self-test on the real SmolLM2 model, carries llama.cpp's libraries, the Qt
plugins and the data files, and never a model file or anything from tests/.

Slow (a full PyInstaller build, about a minute on 2 cores, plus pip if PyInstaller
is not installed yet): deselect with ``-m "not bundle"``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.bundle

ROOT = Path(__file__).resolve().parents[2]
SMOL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
EXE_NAME = "SpecDesk.exe" if sys.platform == "win32" else "SpecDesk"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if sys.prefix == sys.base_prefix:
        pytest.skip("packaging/build needs a virtual environment (run the tests from .venv)")
    out = tmp_path_factory.mktemp("bundle")
    dist, work = out / "dist", out / "work"
    cmd = ["bash", str(ROOT / "packaging" / "build"), "--venv", sys.prefix, "--dist", str(dist), "--work", str(work)]
    try:
        import PyInstaller  # noqa: F401

        cmd.append("--no-install")  # the venv is ready: no pip run, no network
    except ImportError:
        pass
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=out, stdin=subprocess.DEVNULL)
    took = time.monotonic() - t0
    assert r.returncode == 0, f"packaging/build failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    bundle = dist / "SpecDesk"
    size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file() and not f.is_symlink())
    info = {"bundle": bundle, "seconds": took, "bytes": size, "stdout": r.stdout}
    return info


def test_build_reports_size_and_time(built, capsys):
    out = built["stdout"]
    assert "bundle size:" in out and "build time:" in out
    with capsys.disabled():
        print(f"\n[bundle] {built['bundle']}: {built['bytes'] / 2**20:.0f} MiB, built in {built['seconds']:.0f} s "
              f"({[line for line in out.splitlines() if line.startswith(('bundle size', 'build time'))]})")


def test_self_test_passes_in_the_bundle(built, capsys, tmp_path):
    if not SMOL.is_file():
        pytest.fail(f"{SMOL} is missing: run `specdesk models fetch-default --test-model` first")
    exe = built["bundle"] / EXE_NAME
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    t0 = time.monotonic()
    # run from an unrelated folder: the bundle must not depend on the checkout
    r = subprocess.run([str(exe), "--self-test", str(SMOL)], env=env, capture_output=True, text=True, timeout=400, cwd=tmp_path,
                       stdin=subprocess.DEVNULL)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    lines = [line for line in r.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert lines and all(line.startswith("PASS") for line in lines), r.stdout
    assert {"qt", "data files", "llama.cpp", "models", "generation", "provenance", "stats", "memory"} <= {
        line.split(":")[0][5:] for line in lines
    }
    assert "(frozen bundle)" in r.stdout
    # llama.cpp came from the bundle, not from the virtual environment
    [ll] = [line for line in lines if line.startswith("PASS llama.cpp")]
    assert str(built["bundle"]) in ll, ll
    assert "SELF-TEST PASSED" in r.stdout
    with capsys.disabled():
        print(f"\n[bundle] self-test: {took:.1f} s")


def test_cli_works_in_the_bundle(built, tmp_path):
    exe = built["bundle"] / EXE_NAME
    r = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip().startswith("specdesk "), r.stdout + r.stderr
    if SMOL.is_file():
        r = subprocess.run([str(exe), "models", "inspect", str(SMOL), "--json"], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert "llama" in r.stdout.lower()


def test_launch_failure_is_reported_by_the_bundle(built, tmp_path):
    """The frozen ctypes and Qt paths: a bad platform plugin is a clear message, exit 1."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(QT_QPA_PLATFORM="doesnotexist", SPECDESK_DATA_DIR=str(tmp_path / "data"), SPECDESK_NO_DIALOGS="1")
    r = subprocess.run([str(built["bundle"] / EXE_NAME)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "specdesk: cannot start: the Qt platform plugin 'doesnotexist' is not installed" in r.stderr
    assert "doesnotexist" in (tmp_path / "data" / "specdesk.log").read_text()


def test_no_models_and_no_tests_in_the_bundle(built):
    bundle = built["bundle"]
    files = [p for p in bundle.rglob("*")]
    assert not [p for p in files if p.name.lower().endswith((".gguf", ".gguf.partial"))]
    test_names = {p.name for p in (ROOT / "tests").rglob("*") if p.is_file() and p.suffix in (".py", ".json", ".jsonl", ".txt")}
    test_names -= {"__init__.py"}
    leaked = [p for p in files if p.name in test_names and "specdesk" in str(p.relative_to(bundle)).lower()]
    assert not leaked, leaked
    # nor in the Python archive inside the executable
    from PyInstaller.archive.readers import CArchiveReader

    pkg = CArchiveReader(str(bundle / EXE_NAME))
    pyz = pkg.open_embedded_archive("PYZ.pyz")
    modules = set(pyz.toc)
    assert "specdesk.ui.selftest" in modules and "specdesk.library.pypi_fetch" in modules and "specdesk.ui.startup" in modules
    bad = sorted(m for m in modules if m.split(".")[0] in ("tests", "conftest", "fakes", "hubserver", "pytest", "_pytest",
                                                          "hypothesis", "pytestqt", "tkinter", "PyInstaller"))
    assert not bad, bad


def test_bundle_contents(built):
    internal = built["bundle"] / "_internal"
    # llama.cpp where llama_cpp's loader looks
    lib = internal / "llama_cpp" / "lib"
    for name in ("libllama.so", "libggml.so", "libggml-base.so.0", "libggml-cpu.so.0") if sys.platform.startswith("linux") else ():
        assert (lib / name).is_file(), name
    # Qt plugins
    plugins = internal / "PySide6" / "Qt" / "plugins"
    if sys.platform.startswith("linux"):
        for rel in ("platforms/libqxcb.so", "platforms/libqoffscreen.so", "platforms/libqwayland.so",
                    "imageformats/libqsvg.so", "imageformats/libqjpeg.so",
                    "iconengines/libqsvgicon.so", "xcbglintegrations/libqxcb-glx-integration.so"):
            assert (plugins / rel).is_file(), rel
        assert not (plugins / "platformthemes" / "libqgtk3.so").exists()
    assert not (internal / "PySide6" / "Qt" / "qml").exists()
    assert not list(internal.glob("**/*WebEngine*"))
    # data files
    for rel in ("specdesk/data/manifest.json", "specdesk/data/suites/chat_qa.jsonl", "assets/style.qss",
                "assets/icons/specdesk.svg", "assets/icons/hicolor/256x256/specdesk.png",
                "matplotlib/mpl-data/matplotlibrc", "certifi/cacert.pem",
                "packaging/install-desktop", "packaging/specdesk.desktop"):
        assert (internal / rel).is_file(), rel
    assert os.access(built["bundle"] / "install-desktop", os.X_OK)
    assert not (internal / "tkinter").exists() and not list(internal.glob("libtk*"))
