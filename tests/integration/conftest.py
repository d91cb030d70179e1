"""Loaded sessions for the integration tests (the model files: tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def smol_session(smol_path, smol_draft_path):
    from specdesk.session import ModelSpec, Session

    s = Session.load(ModelSpec(smol_path, n_ctx=1024, threads=2), ModelSpec(smol_draft_path, n_ctx=1024, threads=2),
                     remember_costs=False)
    yield s
    s.close()


@pytest.fixture(scope="module")
def qwen_session(qwen_target_path, qwen_draft_path):
    from specdesk.session import ModelSpec, Session

    s = Session.load(ModelSpec(qwen_target_path, n_ctx=2048, threads=2), ModelSpec(qwen_draft_path, n_ctx=2048, threads=2))
    yield s
    s.close()
