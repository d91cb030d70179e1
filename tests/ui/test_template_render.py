"""The window while a model's chat template renders: the real widgets, SmolLM2
rewritten with a template whose render runs for minutes in one C-level call (no
step of the sandbox's is ever counted inside it). Stop ends the answer, closing
the window ends promptly, and a template over its budget is one message."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from chat_template_gguf import with_chat_template

from specdesk.chat.worker import shared_renderer
from specdesk.ui.main_window import MainWindow
from specdesk.ui.settings import ChatSettings

LOAD_TIMEOUT = 120_000
SETTLE_TIMEOUT = 30_000
SLOW = "{{ ([[1]] * 300000)|sum(start=[])|length }}"  # about 5 minutes on one core
TOO_WIDE = "{{ '%2000000000d'|format(1) }}"


@pytest.fixture
def renderer(monkeypatch):
    """The shared renderer, with a deadline only Stop or Close can beat."""
    r = shared_renderer()
    monkeypatch.setattr(r, "deadline", 600.0)
    guards = []

    def guard(seconds: float = 60.0) -> threading.Event:
        """Should Stop or Close fail to end the render, kill the helper after a while,
        so that the test fails (the event is set) instead of hanging."""
        fired = threading.Event()

        def kill_helper():
            fired.set()
            if r.pid is not None:
                os.kill(r.pid, signal.SIGKILL)

        timer = threading.Timer(seconds, kill_helper)
        timer.daemon = True
        timer.start()
        guards.append(timer)
        return fired

    monkeypatch.setattr(r, "guard", guard, raising=False)
    yield r
    for t in guards:
        t.cancel()


def _window(qtbot, tmp_path, smol_path, template):
    model = with_chat_template(smol_path, tmp_path / "templated.gguf", template)
    w = MainWindow(tmp_path / "data", autoload=False)
    w.show()
    w.apply_settings(ChatSettings(proposer="none", max_tokens=8, n_ctx=512, threads=1))
    with qtbot.waitSignal(w.models_changed, timeout=LOAD_TIMEOUT) as blocker:
        w.load_models(model, None)
    assert blocker.args[0] is not None, w.error_banner.text()
    return w


def test_stop_during_a_slow_render_ends_the_answer(qtbot, tmp_path, smol_path, renderer):
    w = _window(qtbot, tmp_path, smol_path, SLOW)
    try:
        kills = renderer.kills
        assert w.send("Say hi.")
        qtbot.waitUntil(lambda: renderer.busy, timeout=SETTLE_TIMEOUT)  # the helper is rendering
        killed_by_guard = renderer.guard()
        w.stop_generation()
        qtbot.waitUntil(lambda: not w.generating, timeout=SETTLE_TIMEOUT)
        assert not killed_by_guard.is_set(), "Stop did not end the render"
        assert renderer.kills == kills + 1  # the render was cut off, not finished
        assert w.status_label.text() == "stopped"
        assert not w.error_banner.isVisible()
        assert w.input.toPlainText() == "Say hi."  # nothing was sent: the message is back
        assert w.store.messages(w.chat_id) == []
        assert w.send_btn.isEnabled() and not w.stop_btn.isEnabled()
    finally:
        w.close()


def test_closing_the_window_mid_render_ends_promptly(qtbot, tmp_path, smol_path, renderer):
    w = _window(qtbot, tmp_path, smol_path, SLOW)
    kills = renderer.kills
    assert w.send("Say hi.")
    qtbot.waitUntil(lambda: renderer.busy, timeout=SETTLE_TIMEOUT)
    killed_by_guard = renderer.guard()
    w.close()  # waits for the answer's worker: it must end with the render
    assert not killed_by_guard.is_set(), "closing waited for the render to finish"
    assert renderer.kills == kills + 1
    assert w.session is None and not renderer.busy


def test_a_template_over_its_budget_is_one_message(qtbot, tmp_path, smol_path):
    w = _window(qtbot, tmp_path, smol_path, TOO_WIDE)
    try:
        assert w.send("Say hi.")
        qtbot.waitUntil(lambda: not w.generating, timeout=SETTLE_TIMEOUT)
        assert w.error_banner.isVisible()
        shown = w.error_banner.text()
        assert "the model's chat template needs more than " in shown and "to render" in shown, shown
        assert "\n" not in shown
        # the advice fits the window: no bare command-line flag as if the window had one
        assert "load another model" in shown and "use --raw" not in shown, shown
        assert w.input.toPlainText() == "Say hi."
        assert w.store.messages(w.chat_id) == []
    finally:
        w.close()
