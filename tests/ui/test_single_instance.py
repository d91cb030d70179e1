"""The app as a user starts it, in real processes under the offscreen platform: files on
the command line, one running app per data folder (a second launch hands its files to
the first and exits 0), a socket left by a crashed app, ``--new-instance``, and the
QFileOpenEvent the macOS Finder sends.

Each app is ``specdesk ARGS`` run through ``app_probe.py``, which reports its window's
events as JSON lines; a second launch is the plain ``python -m specdesk ARGS``. Every
process gets temporary data, cache, config and runtime folders and an empty models
folder (so nothing loads but what the test gives)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("app_probe.py")
START_TIMEOUT = 120  # seconds: importing Qt and llama.cpp on a busy 2-core machine
LOAD_TIMEOUT = 180


@pytest.fixture
def app_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("app")
    home = root / "home"
    run = root / "run"
    for d in (home, run, root / "models"):
        d.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPECDESK_", "XDG_", "HF_", "HUGGINGFACE_", "QT_")) and k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(
        HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"),
        XDG_CACHE_HOME=str(home / ".cache"), XDG_RUNTIME_DIR=str(run),
        SPECDESK_DATA_DIR=str(root / "data"), SPECDESK_CACHE_DIR=str(root / "cache"),
        SPECDESK_CONFIG_DIR=str(root / "config"),  # where the app's settings go once it honours it
        SPECDESK_MODELS_DIR=str(root / "models"), QT_QPA_PLATFORM="offscreen", SPECDESK_NO_DIALOGS="1",
        PYTHONUNBUFFERED="1",
    )
    return env


class App:
    """A probed app process and the events its window reported."""

    def __init__(self, env: dict, *args) -> None:
        self.proc = subprocess.Popen([sys.executable, str(PROBE), *map(str, args)], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.events: queue.Queue = queue.Queue()
        self.seen: list[dict] = []
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.put(json.loads(line))
        self.events.put({"event": "eof"})

    def wait_for(self, event: str, timeout: float = START_TIMEOUT) -> dict:
        """The next event of that kind (failing on an error or the end of the process)."""
        while True:
            try:
                e = self.events.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"no {event!r} event in {timeout} s; seen {self.seen}; stderr {''.join(self.stderr)[-2000:]}")
            self.seen.append(e)
            if e["event"] == event:
                return e
            if e["event"] in ("eof", "load_failed") or (e["event"] == "error" and event != "error"):
                pytest.fail(f"waiting for {event!r}, got {e}; seen {self.seen}; stderr {''.join(self.stderr)[-2000:]}")

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def quit(self) -> int:
        try:
            self.send("quit")
        except (BrokenPipeError, ValueError):
            pass
        try:
            return self.proc.wait(60)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


@pytest.fixture
def apps():
    started: list[App] = []
    yield started
    for a in started:
        a.kill()


def start(apps, env, *args) -> App:
    a = App(env, *args)
    apps.append(a)
    return a


def launch(env, *args) -> subprocess.CompletedProcess:
    """A plain second launch: ``specdesk ARGS``."""
    return subprocess.run([sys.executable, "-m", "specdesk", *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=START_TIMEOUT, stdin=subprocess.DEVNULL)


def same(a, b) -> bool:
    return a is not None and b is not None and Path(a).resolve() == Path(b).resolve()


def test_specdesk_file_opens_the_window_with_it_loading(app_env, apps, smol_path):
    a = start(apps, app_env, smol_path)
    a.wait_for("ready")
    loaded = a.wait_for("loaded", LOAD_TIMEOUT)
    assert same(loaded["target"], smol_path) and loaded["draft"] is None
    assert a.quit() == 0


def test_two_files_on_the_command_line_are_a_pair_the_larger_the_target(app_env, apps, smol_path, smol_draft_path):
    assert smol_path.stat().st_size > smol_draft_path.stat().st_size
    a = start(apps, app_env, smol_draft_path, smol_path)
    loaded = a.wait_for("loaded", LOAD_TIMEOUT)
    assert same(loaded["target"], smol_path) and same(loaded["draft"], smol_draft_path)
    assert a.quit() == 0


def test_a_bad_file_on_the_command_line_gets_the_pickers_reason_in_the_window(app_env, apps, tmp_path):
    from specdesk.errors import SpecDeskError
    from specdesk.session import ModelSpec
    from specdesk.session.preflight import preflight

    notes = tmp_path / "notes.txt"
    notes.write_text("not a model")
    with pytest.raises(SpecDeskError) as picker:  # what Open… says of that file (the same check)
        preflight(ModelSpec(notes))
    a = start(apps, app_env, "--target", notes)
    shown = a.wait_for("error")
    assert shown["text"] == str(picker.value) and "\n" not in shown["text"]
    assert a.proc.poll() is None  # the app runs on
    assert a.quit() == 0


def test_a_second_launch_hands_its_file_to_the_running_app_and_exits_0(app_env, apps, smol_path):
    first = start(apps, app_env)
    ready = first.wait_for("ready")
    second = launch(app_env, smol_path)
    assert second.returncode == 0, second.stderr
    assert f"already running with this data folder (process {ready['pid']})" in second.stderr
    req = first.wait_for("request")
    assert len(req["files"]) == 1 and same(req["files"][0], smol_path)
    assert same(first.wait_for("loaded", LOAD_TIMEOUT)["target"], smol_path)
    # no files: the running app only comes to the front
    third = launch(app_env)
    assert third.returncode == 0, third.stderr
    assert "comes to the front" in third.stderr
    assert first.wait_for("request") == {"event": "request", "files": [], "target": None, "draft": None}
    assert first.quit() == 0


def test_a_socket_left_by_a_crashed_app_is_replaced(app_env, apps, smol_path, smol_draft_path):
    crashed = start(apps, app_env)
    ready = crashed.wait_for("ready")
    sock, lock = Path(ready["socket"]), Path(ready["data_dir"]) / "instance.lock"
    crashed.proc.send_signal(signal.SIGKILL)
    crashed.proc.wait(30)
    assert sock.exists() and lock.exists()  # what a crash leaves behind
    again = start(apps, app_env, smol_path)
    assert again.wait_for("ready")["socket"] == str(sock)
    assert same(again.wait_for("loaded", LOAD_TIMEOUT)["target"], smol_path)
    # the new app is the one a further launch reaches
    r = launch(app_env, "--draft", smol_draft_path)
    assert r.returncode == 0, r.stderr
    assert same(again.wait_for("request")["draft"], smol_draft_path)
    loaded = again.wait_for("loaded", LOAD_TIMEOUT)
    assert same(loaded["target"], smol_path) and same(loaded["draft"], smol_draft_path)
    assert again.quit() == 0
    assert not sock.exists() and not lock.exists()  # a clean exit leaves nothing


def test_new_instance_runs_beside_with_its_own_data_folder(app_env, apps, smol_path):
    first = start(apps, app_env)
    data = Path(first.wait_for("ready")["data_dir"])
    beside = start(apps, app_env, "--new-instance", smol_path)
    ready = beside.wait_for("ready")
    assert Path(ready["data_dir"]) == data / "instances" / "2"
    assert same(beside.wait_for("loaded", LOAD_TIMEOUT)["target"], smol_path)
    assert (data / "chats.sqlite3").is_file() and (data / "instances" / "2" / "chats.sqlite3").is_file()
    assert beside.quit() == 0
    assert first.quit() == 0
    assert not [e for e in first.seen if e["event"] == "request"]  # the first was never asked


def test_a_file_the_finder_opens_loads(app_env, apps, smol_path):
    """macOS hands documents to a running app as a QFileOpenEvent."""
    a = start(apps, app_env)
    a.wait_for("ready")
    a.send(f"fileopen {smol_path}")
    assert same(a.wait_for("loaded", LOAD_TIMEOUT)["target"], smol_path)
    assert a.quit() == 0
