"""A launch that fails is never silent: no display, a missing or broken Qt platform
plugin, an unwritable data directory, a fatal Qt message, an uncaught exception.
Each gives a one-line reason on stderr and a line in the log file, and a non-zero
exit (or, for an exception in the running app, a logged error and an app that keeps
running). Plus the self-test, run from source."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specdesk.ui.startup import failure, log, preflight

ROOT = Path(__file__).resolve().parents[2]
SMOL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture
def env(tmp_path):
    """A clean environment: no display, data/cache/log in tmp_path, no dialogs."""
    e = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM", "XDG_SESSION_TYPE")}
    e.update(
        SPECDESK_DATA_DIR=str(tmp_path / "data"),
        SPECDESK_CACHE_DIR=str(tmp_path / "cache"),
        SPECDESK_NO_DIALOGS="1",
        PYTHONUNBUFFERED="1",
    )
    return e


def run_specdesk(env, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "specdesk", *args], env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def reason_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("specdesk: cannot start:")]


def log_text(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def test_no_display(env, tmp_path):
    r = run_specdesk(env)
    assert r.returncode == 1, r.stderr
    [reason] = reason_lines(r.stderr)
    assert "no display" in reason and "DISPLAY" in reason
    log = tmp_path / "data" / "specdesk.log"
    assert f"details in {log}" in r.stderr
    assert "cannot start: no display" in log_text(log)


def test_unknown_platform_plugin_is_reported_not_aborted(env, tmp_path):
    env["QT_QPA_PLATFORM"] = "doesnotexist"
    r = run_specdesk(env)
    assert r.returncode == 1, (r.returncode, r.stderr)  # not -6: Qt never got to abort()
    [reason] = reason_lines(r.stderr)
    assert "'doesnotexist' is not installed" in reason and "offscreen" in reason and "xcb" in reason
    assert "could not be initialized" not in r.stderr  # Qt's abort dump never happens
    assert "doesnotexist" in log_text(tmp_path / "data" / "specdesk.log")


def _xcb_plugin_load_error() -> str | None:
    """What this machine's loader says about Qt's xcb plugin (None: it loads), asked in
    a fresh process the way the preflight asks: load Qt's own libraries, then the plugin.
    The plugin needs system libraries (libxcb-icccm4, libxcb-keysyms1, libxkbcommon-x11-0,
    ...) that a fresh machine may lack; the README's commands do not install them."""
    code = (
        "import ctypes, pathlib, sys, PySide6.QtGui\n"
        "from PySide6.QtCore import QLibraryInfo\n"
        "d = pathlib.Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / 'platforms'\n"
        "plugins = sorted(d.glob('libqxcb.*'))\n"
        "if not plugins: print('NOPLUGIN'); sys.exit()\n"
        "try: ctypes.CDLL(str(plugins[0]))\n"
        "except OSError as e: print('ERROR', e); sys.exit()\n"
        "print('OK')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    out = r.stdout.strip()
    assert out, r.stderr
    return None if out == "OK" else out


def test_unreachable_x_display(env, tmp_path):
    """The xcb platform with no X server: the display is named. On a machine without the
    xcb plugin's system libraries the preflight stops earlier and names the missing
    library instead; the test checks the message that fits this machine."""
    env["DISPLAY"] = ":987"  # no X server there
    env["QT_QPA_PLATFORM"] = "xcb"
    load_error = _xcb_plugin_load_error()
    r = run_specdesk(env)
    assert r.returncode == 1, r.stderr
    [reason] = reason_lines(r.stderr)
    logged = log_text(tmp_path / "data" / "specdesk.log")
    if load_error is None:
        assert "cannot connect to the X display ':987'" in reason
        assert "':987'" in logged
    elif load_error == "NOPLUGIN":
        assert "the Qt platform plugin 'xcb' is not installed" in reason
    else:
        missing = re.search(r"([\w.+-]+\.so[\w.]*): cannot open shared object file", load_error)
        if missing:
            lib = missing.group(1)
            assert f"the Qt platform plugin 'xcb' cannot be loaded: the system library {lib} is missing" in reason
            assert "install it" in reason and lib in logged
        else:
            assert "the Qt platform plugin 'xcb' cannot be loaded" in reason


def test_every_candidate_failing_is_one_line(env):
    env["QT_QPA_PLATFORM"] = "nope1;nope2"
    r = run_specdesk(env)
    assert r.returncode == 1
    [reason] = reason_lines(r.stderr)
    assert "no Qt platform plugin works" in reason and "'nope1'" in reason and "'nope2'" in reason


def test_unwritable_data_dir_refuses_to_start(env, tmp_path):
    """The chosen behaviour: say which directory and why, log to the cache dir, exit 1
    (no silent fallback to a temporary folder that would lose the chats)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env["SPECDESK_DATA_DIR"] = str(blocker / "data")
    env["QT_QPA_PLATFORM"] = "offscreen"
    r = run_specdesk(env)
    assert r.returncode == 1, r.stderr
    [reason] = reason_lines(r.stderr)
    assert f"SPECDESK_DATA_DIR {blocker / 'data'} is not writable" in reason
    assert "Not a directory" in reason and "writable folder" in reason
    fallback_log = tmp_path / "cache" / "specdesk.log"
    assert f"details in {fallback_log}" in r.stderr
    assert "is not writable" in log_text(fallback_log)
    assert not blocker.with_name("data").exists()


def test_no_log_location_at_all_still_reports_on_stderr(monkeypatch, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setattr(log, "_log_dirs", lambda: [blocker / "data", blocker / "cache", blocker / "tmp"])
    monkeypatch.setenv("SPECDESK_NO_DIALOGS", "1")
    log._reset_log_file()
    try:
        failure.report_startup_failure("something\nbroke", "detail")
    finally:
        log._reset_log_file()
    err = capsys.readouterr().err
    assert "specdesk: cannot start: something broke\n" in err
    assert "no log file could be written" in err


def test_the_app_starts_offscreen(env, tmp_path):
    """No false alarm: with a working platform the app starts and keeps running."""
    env["QT_QPA_PLATFORM"] = "offscreen"
    p = subprocess.Popen([sys.executable, "-m", "specdesk"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (tmp_path / "data" / "chats.sqlite3").exists():
            assert p.poll() is None, p.communicate()[1]
            time.sleep(0.2)
        time.sleep(1.0)
        assert p.poll() is None, p.communicate()[1]
        assert (tmp_path / "data" / "chats.sqlite3").exists()
    finally:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    assert "cannot start" not in log_text(tmp_path / "data" / "specdesk.log")


def test_fatal_qt_message_is_reported_not_a_silent_abort(env, tmp_path):
    """The safety net behind the preflight: a qFatal during QApplication creation."""
    env["QT_QPA_PLATFORM"] = "doesnotexist"
    code = ("from specdesk.ui.startup import install_crash_logging; install_crash_logging()\n"
            "from PySide6.QtWidgets import QApplication; QApplication(['x'])\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "specdesk: cannot start: Qt could not start" in r.stderr
    assert "no Qt platform plugin could be initialized" in log_text(tmp_path / "data" / "specdesk.log")


def test_uncaught_exceptions_are_logged_and_the_app_keeps_running(env, tmp_path):
    env["QT_QPA_PLATFORM"] = "offscreen"
    env.pop("SPECDESK_NO_DIALOGS")  # offscreen: the box is created but never blocks
    code = """
import threading, sys
from specdesk.ui.startup import install_crash_logging
install_crash_logging()
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
app = QApplication(['x'])
def boom():
    raise ValueError('a bug in a slot')
QTimer.singleShot(50, boom)
QTimer.singleShot(100, lambda: threading.Thread(target=lambda: 1 / 0, name='worker-7').start())
QTimer.singleShot(1500, lambda: (print('ALIVE', flush=True), app.quit()))
sys.exit(app.exec())
"""
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "ALIVE" in r.stdout
    log = log_text(tmp_path / "data" / "specdesk.log")
    assert "uncaught exception:" in log and "ValueError: a bug in a slot" in log
    assert "uncaught exception in thread worker-7" in log and "ZeroDivisionError" in log


# -- the preflight's pieces, in process


def test_missing_library_is_named_with_the_package(monkeypatch, tmp_path):
    import ctypes

    plugdir = tmp_path / "platforms"
    plugdir.mkdir()
    (plugdir / "libqxcb.so").write_bytes(b"")
    monkeypatch.setattr(preflight, "_plugin_dirs", lambda: [plugdir])

    class Frozen(OSError):  # PyInstaller's ctypes hook hides the loader's message on __cause__
        pass

    def cdll(path, *a, **k):
        try:
            raise OSError("libxcb-cursor.so.0: cannot open shared object file: No such file or directory")
        except OSError as base:
            raise Frozen(f"Failed to load dynlib/dll {path!r}.") from base

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    problem = preflight._candidate_problem("xcb", preflight._available_plugins())
    assert "libxcb-cursor.so.0 is missing" in problem
    assert "apt install libxcb-cursor0" in problem and "dnf install xcb-util-cursor" in problem


def test_platform_candidates(monkeypatch):
    monkeypatch.setenv("QT_QPA_PLATFORM", "wayland:foo=bar;xcb")
    assert preflight.platform_candidates() == ["wayland", "xcb"]
    monkeypatch.delenv("QT_QPA_PLATFORM")
    monkeypatch.setenv("XDG_SESSION_TYPE", "wayland")
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    if sys.platform.startswith("linux"):
        assert preflight.platform_candidates() == ["wayland", "xcb"]
        monkeypatch.setenv("XDG_SESSION_TYPE", "x11")
        assert preflight.platform_candidates() == ["xcb"]


def test_offscreen_passes_the_preflight(monkeypatch):
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert preflight.platform_problem() is None


# -- the self-test, from source


def test_self_test_from_source_passes():
    if not SMOL.is_file():
        pytest.fail(f"{SMOL} is missing: run `specdesk models fetch-default --test-model` first")
    code = f"import sys; from specdesk.ui.selftest import run_self_test; sys.exit(run_self_test({str(SMOL)!r}, None))"
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=400)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    names = {line.split()[1].rstrip(":") for line in lines}
    assert {"qt", "llama.cpp", "models", "generation", "provenance", "stats", "memory"} <= names
    assert all(line.startswith("PASS") for line in lines), r.stdout
    assert "SELF-TEST PASSED" in r.stdout
    print(f"self-test from source: {took:.1f} s")


def test_self_test_fails_cleanly_on_a_bad_model(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    code = f"import sys; from specdesk.ui.selftest import run_self_test; sys.exit(run_self_test({str(bad)!r}, None, timeout=200))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL models" in r.stdout and "SELF-TEST FAILED" in r.stdout


def test_self_test_leaves_the_users_data_alone(tmp_path, monkeypatch):
    """The self-test's chats and settings live in a temporary folder, removed after."""
    home = tmp_path / "home"
    env = dict(os.environ, HOME=str(home), XDG_DATA_HOME=str(home / "share"), XDG_CONFIG_HOME=str(home / "config"),
               XDG_CACHE_HOME=str(home / "cache"))
    for k in ("SPECDESK_DATA_DIR", "SPECDESK_CACHE_DIR", "SPECDESK_CONFIG_DIR"):  # as a user runs it
        env.pop(k, None)
    code = "import sys; from specdesk.ui.selftest import run_self_test; sys.exit(run_self_test(sys.argv[1], None, timeout=200))"
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "missing.gguf")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1 and "FAIL models" in r.stdout
    left = [p for p in home.rglob("*") if "specdesk" in str(p).lower()] if home.exists() else []
    assert left == [], left


# -- how llama.cpp's threads wait: set by the app's launch path, not by the CLI


def _gomp_spin(stderr: str) -> str:
    """GOMP_SPINCOUNT as llama.cpp's OpenMP runtime read it when it was loaded
    (OMP_DISPLAY_ENV=VERBOSE: libgomp prints its settings then)."""
    found = re.findall(r"GOMP_SPINCOUNT = '(\d+)'", stderr)
    assert found, f"libgomp printed no settings: is llama.cpp built with OpenMP?\n{stderr[-2000:]}"
    return found[0]


def test_the_app_chooses_how_llamas_threads_wait_from_the_core_count_and_the_cli_does_not(env):
    """The app's Qt thread shares the CPUs with llama.cpp's threads: where those take every
    CPU, the app shortens their spin (engine/threads.py) before llama.cpp is loaded, so the
    value reaches the OpenMP runtime that runs every llama.cpp step of the app; the CLI
    keeps the runtime's default."""
    from specdesk.engine.threads import ui_spin_count

    if not SMOL.is_file():
        pytest.fail(f"{SMOL} is missing: run `specdesk models fetch-default --test-model` first")
    env = {k: v for k, v in env.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env["OMP_DISPLAY_ENV"] = "VERBOSE"
    bare = subprocess.run([sys.executable, "-c", "import llama_cpp"], env=env, capture_output=True, text=True, timeout=120)
    default = _gomp_spin(bare.stderr)
    app = run_specdesk(env, "--self-test", str(SMOL), timeout=400)  # the app, offscreen: loads and answers
    assert app.returncode == 0, app.stdout + app.stderr
    cli = run_specdesk(env, "generate", "--target", str(SMOL), "--prompt", "hi", "--max-tokens", "2", "--json")
    assert cli.returncode == 0, cli.stderr
    chosen = ui_spin_count()
    assert _gomp_spin(app.stderr) == (str(chosen) if chosen is not None else default)
    assert _gomp_spin(cli.stderr) == default
