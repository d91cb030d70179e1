"""Fixtures shared by every test directory.

Real GGUF models: the README's test command fetches them first
(`specdesk models fetch-default --test-model`); a missing file is an error, not a
skip, so a broken fetch cannot turn the suite silently green.
"""

import os
import sys
import tempfile
from pathlib import Path

import pytest

# The user's cache (pairing fingerprints, auto's saved costs) stays out of the tests,
# and one test's saved costs cannot steer another's decisions run to run.
os.environ.setdefault("SPECDESK_CACHE_DIR", tempfile.mkdtemp(prefix="specdesk-test-cache-"))

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
