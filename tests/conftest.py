"""Fixtures shared by every test directory.

Real GGUF models: the README's test command fetches them first
(`specdesk models fetch-default --test-model`); a missing file is an error, not a
skip, so a broken fetch cannot turn the suite silently green.
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# Every folder where an app, CLI or library run keeps user state, for the whole run.
USER_FOLDERS = {
    "HOME": "home",
    "XDG_CONFIG_HOME": "home/.config",
    "XDG_DATA_HOME": "home/.local/share",
    "XDG_CACHE_HOME": "home/.cache",
    "XDG_STATE_HOME": "home/.local/state",
    "SPECDESK_CONFIG_DIR": "specdesk/config",
    "SPECDESK_DATA_DIR": "specdesk/data",
    "SPECDESK_CACHE_DIR": "specdesk/cache",
}
# Set outside, these would lead a test's download or scan to the user's own caches.
USER_CACHE_VARIABLES = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "OLLAMA_MODELS")
# The keyring library's backend for the whole run: none (as on a machine without a keyring),
# never the user's own; a test that keeps a key picks one of its own (tests/keyring_file.py).
TEST_SETTINGS = {"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}
_saved_env: dict[str, str | None] = {}  # the variables as the run found them
_run_root: list[Path] = []


def pytest_configure(config):
    """Tests never touch the user's files: HOME, the XDG folders and SpecDesk's own config,
    data and cache folders point at one temporary folder for the whole run, so every
    subprocess a test starts (the app, the CLI, the self-test) inherits them too, and one
    test's saved costs cannot steer another's decisions run to run. Set here, before
    collection, rather than in a session fixture: modules imported while collecting fix
    their folders when imported (matplotlib reads its matplotlibrc from the config home)."""
    if _run_root:
        return
    root = Path(tempfile.mkdtemp(prefix="specdesk-tests-"))
    _run_root.append(root)
    for var, rel in USER_FOLDERS.items():
        _saved_env[var] = os.environ.get(var)
        (root / rel).mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(root / rel)
    for var in USER_CACHE_VARIABLES:
        _saved_env[var] = os.environ.pop(var, None)
    for var, value in TEST_SETTINGS.items():
        _saved_env[var] = os.environ.get(var)
        os.environ[var] = value


def pytest_unconfigure(config):
    for var, old in _saved_env.items():
        if old is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = old
    _saved_env.clear()
    while _run_root:
        shutil.rmtree(_run_root.pop(), ignore_errors=True)


# tests/fakes.py and tests/hubserver.py are shared by the unit, integration and UI tests.
sys.path.insert(0, str(Path(__file__).parent))

from specdesk.library.defaults import default_models  # noqa: E402


def _model(role: str) -> Path:
    m = default_models([role])[0]
    if not m.path.is_file():
        pytest.fail(f"{m.path} is missing: run `specdesk models fetch-default --test-model` first")
    return m.path


@pytest.fixture(scope="session")
def smol_path():
    return _model("test")


#: The fixtures that hand a test the default Qwen pair (about 1.6 GB, seconds a step):
#: every test that uses one is marked slow by that alone.
QWEN_FIXTURES = ("qwen_target_path", "qwen_draft_path")


def pytest_collection_modifyitems(config, items):
    """A test that uses the Qwen pair is ``slow`` (``-m 'not slow'`` leaves it out),
    whether or not its file says so."""
    for item in items:
        if any(f in getattr(item, "fixturenames", ()) for f in QWEN_FIXTURES):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def qwen_target_path():
    return _model("target")


@pytest.fixture(scope="session")
def qwen_draft_path():
    return _model("draft")


@pytest.fixture(scope="session")
def smol_draft_path(smol_path, tmp_path_factory):
    """A compatible but different draft: SmolLM2 requantized to Q4_0 by llama.cpp."""
    from quantize import quantize

    return quantize(smol_path, tmp_path_factory.mktemp("models") / "smol-q4_0.gguf", "Q4_0")


@pytest.fixture(autouse=True)
def _quick_fetch_retries(monkeypatch):
    """Index fetches retry as pip does (5 times, sleeping longer each time); tests of
    failures count the tries, not the seconds between them."""
    from specdesk.library.pypi_fetch import net, transfer

    monkeypatch.setattr(net, "_BACKOFF", 0.01)  # between tries of a page
    monkeypatch.setattr(transfer, "_BACKOFF", 0.01)  # between tries of a download
