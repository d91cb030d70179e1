"""Real GGUF models for integration tests. The README's test command fetches them
first (`specdesk models fetch-default --test-model`); a missing file is an error,
not a skip, so a broken fetch cannot turn the suite silently green."""

from __future__ import annotations

import pytest

from specdesk.library.defaults import default_models


def _path(role: str):
    m = default_models([role])[0]
    if not m.path.is_file():
        pytest.fail(f"{m.path} is missing: run `specdesk models fetch-default --test-model` first")
    return m.path


@pytest.fixture(scope="session")
def smol_path():
    return _path("test")


@pytest.fixture(scope="session")
def qwen_target_path():
    return _path("target")


@pytest.fixture(scope="session")
def qwen_draft_path():
    return _path("draft")


@pytest.fixture(scope="session")
def smol_draft_path(smol_path, tmp_path_factory):
    """A compatible but different draft: SmolLM2 requantized to Q4_0."""
    from specdesk.engine.quantize import quantize

    return quantize(smol_path, tmp_path_factory.mktemp("models") / "smol-q4_0.gguf", "Q4_0")


@pytest.fixture(scope="module")
def smol_session(smol_path, smol_draft_path):
    from specdesk.session import ModelSpec, Session

    s = Session.load(ModelSpec(smol_path, n_ctx=1024, threads=2), ModelSpec(smol_draft_path, n_ctx=1024, threads=2))
    yield s
    s.close()


@pytest.fixture(scope="module")
def qwen_session(qwen_target_path, qwen_draft_path):
    from specdesk.session import ModelSpec, Session

    s = Session.load(ModelSpec(qwen_target_path, n_ctx=2048, threads=2), ModelSpec(qwen_draft_path, n_ctx=2048, threads=2))
    yield s
    s.close()
