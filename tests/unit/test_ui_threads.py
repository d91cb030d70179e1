"""How llama.cpp's threads wait in a process with a UI (engine/threads.py), and which
command lines the entry point treats as the app before llama.cpp is loaded."""

from __future__ import annotations

from specdesk import __main__ as entry
from specdesk.cli import COMMANDS
from specdesk.engine import threads


def test_the_spin_is_short_only_where_the_compute_threads_take_every_cpu():
    assert threads.ui_spin_count(threads=2, cpus=2) == threads.UI_SPIN_COUNT
    assert threads.ui_spin_count(threads=4, cpus=2) == threads.UI_SPIN_COUNT
    assert threads.ui_spin_count(threads=2, cpus=4) is None  # a CPU is left for the UI: libgomp's default
    assert threads.ui_spin_count(threads=8, cpus=16) is None


def test_the_spin_follows_this_machine(monkeypatch):
    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    monkeypatch.setattr(threads, "default_threads", lambda: 2)
    env: dict[str, str] = {}
    assert threads.prepare_for_ui(env) == threads.UI_SPIN_COUNT
    assert env == {"GOMP_SPINCOUNT": str(threads.UI_SPIN_COUNT)}
    monkeypatch.setattr(threads, "available_cpus", lambda: 4)  # SMT: the UI has a CPU of its own
    env = {}
    assert threads.prepare_for_ui(env) is None and env == {}


def test_a_wait_the_user_set_is_kept(monkeypatch):
    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    monkeypatch.setattr(threads, "default_threads", lambda: 2)
    for name, value in (("GOMP_SPINCOUNT", "777"), ("OMP_WAIT_POLICY", "active")):
        env = {name: value}
        assert threads.prepare_for_ui(env) is None
        assert env == {name: value}


def test_the_entry_point_knows_the_clis_commands():
    assert set(entry.CLI_COMMANDS) == set(COMMANDS)


def test_the_entry_point_tells_the_app_from_the_cli_before_loading_llama_cpp():
    for argv in ([], ["gui"], ["gui", "a.gguf"], ["a.gguf", "b.gguf"], ["--self-test"], ["--self-test", "m.gguf"],
                 ["-v"], ["--new-instance"]):
        assert entry.opens_app(argv), argv
    for argv in (["generate", "--prompt", "x"], ["-v", "bench"], ["serve"], ["models", "list"], ["rpc-server"]):
        assert not entry.opens_app(argv), argv
