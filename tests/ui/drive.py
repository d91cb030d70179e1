"""Driving the real window as the UI tests do: load a pair and wait for it, ask and wait
for the answer (the ``window`` fixture itself is in tests/ui/conftest.py)."""

from __future__ import annotations

from pathlib import Path

LOAD_TIMEOUT = 120_000
GEN_TIMEOUT = 300_000


def load(qtbot, w, target, draft=None, timeout: int = LOAD_TIMEOUT):
    """Load ``target`` (and ``draft``) in window ``w``; the session, once it has loaded."""
    with qtbot.waitSignal(w.models_changed, timeout=timeout) as blocker:
        w.load_models(Path(target), Path(draft) if draft else None)
    assert blocker.args[0] is not None, w.error_banner.text()
    return blocker.args[0]


def ask(qtbot, w, text: str, timeout: int = GEN_TIMEOUT):
    """Send ``text`` in the current chat; the finished Generation."""
    with qtbot.waitSignal(w.generation_finished, timeout=timeout) as blocker:
        assert w.send(text)
    return blocker.args[0]
