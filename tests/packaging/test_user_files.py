"""The test command never touches the user's own files. A user who runs the UI and
packaging tests from their shell (their HOME, no SPECDESK_* folders set) keeps their
settings, chats, log and caches byte for byte: the tests' app, launcher and self-test
subprocesses run against the temporary folders tests/conftest.py sets for the whole
run, never against the user's. (They did not: the app subprocesses wrote the tests'
settings, proposer none and 4 tokens on one thread, into ~/.config/SpecDesk/SpecDesk.conf.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from specdesk.session.chatstore import ChatStore, Message

ROOT = Path(__file__).resolve().parents[2]

# The tests that start the app, the launcher or the self-test in a subprocess (the bundle's
# are left out: building it takes minutes, and it runs the same self-test).
SUBPROCESS_TESTS = ["tests/packaging/test_launcher.py", "tests/packaging/test_desktop_files.py",
                    "tests/ui/test_rpc_lost.py"]


def _users_files(home: Path) -> None:
    """A user's SpecDesk state, where SpecDesk keeps it on Linux."""
    conf = home / ".config" / "SpecDesk" / "SpecDesk.conf"
    conf.parent.mkdir(parents=True)
    defaults = {"proposer": "draft", "auto_k": True, "max_tokens": 1024, "threads": 0, "n_ctx": 8192}
    conf.write_text("[chat]\ndefaults=" + json.dumps(json.dumps(defaults)) + "\n\n"
                    "[models]\nrecent=/home/someone/models/my-target.gguf\n", encoding="utf-8")
    data = home / ".local" / "share" / "SpecDesk"
    store = ChatStore(data / "chats.sqlite3")
    chat = store.create_chat("my chat", defaults)
    store.add_message(chat.id, Message("user", "my question"))
    store.add_message(chat.id, Message("assistant", "its answer"))
    store.close()
    (data / "library.json").write_text(json.dumps({"folders": ["/home/someone/models"]}), encoding="utf-8")
    (data / "specdesk.log").write_text("2026-01-01 12:00:00 the user's own log line\n", encoding="utf-8")
    cache = home / ".cache" / "specdesk"
    cache.mkdir(parents=True)
    (cache / "auto-costs.json").write_text(json.dumps({"version": 1, "pairs": {}}), encoding="utf-8")
    (cache / "vocab-fingerprints.json").write_text("{}", encoding="utf-8")


def _snapshot(home: Path) -> dict[str, bytes | None]:
    """Every path under ``home``: a file's bytes, None for a folder."""
    return {str(p.relative_to(home)): (p.read_bytes() if p.is_file() else None) for p in sorted(home.rglob("*"))}


def test_the_ui_and_packaging_tests_leave_the_users_files_alone(tmp_path):
    home = tmp_path / "home"
    _users_files(home)
    before = _snapshot(home)
    assert len([v for v in before.values() if v is not None]) == 6
    # the environment of the user's shell: their home and XDG folders, no SPECDESK_* folders
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECDESK_", "XDG_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local" / "share"),
               XDG_CACHE_HOME=str(home / ".cache"), QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not bundle",
                        "--basetemp", str(tmp_path / "inner"), *SUBPROCESS_TESTS],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout.splitlines()[-1], r.stdout[-2000:]
    after = _snapshot(home)
    changed = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    assert (changed, sorted(after.keys() - before.keys()), sorted(before.keys() - after.keys())) == ([], [], [])


def test_the_app_keeps_its_settings_in_specdesk_config_dir(tmp_path):
    """An explicit config folder is honoured by the app itself, not only by the tests'
    fixtures: what the window saves goes to $SPECDESK_CONFIG_DIR/SpecDesk/SpecDesk.ini."""
    home, config = tmp_path / "home", tmp_path / "config"
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), SPECDESK_CONFIG_DIR=str(config),
               QT_QPA_PLATFORM="offscreen")
    code = ("from specdesk.ui.app import create_app\n"
            "from specdesk.ui.settings import ChatSettings, load_defaults, save_defaults\n"
            "app = create_app()\n"
            "save_defaults(ChatSettings(max_tokens=77))\n"
            "print(load_defaults().max_tokens)\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["77"], r.stderr
    assert '\\"max_tokens\\": 77' in (config / "SpecDesk" / "SpecDesk.ini").read_text(encoding="utf-8")
    assert not home.exists() or not [p for p in home.rglob("*") if "specdesk" in str(p).lower()]
