"""The app when the RPC server holding the target's layers dies under an answer: the
answer ends with the error (what was shown is kept), the window loads again locally
and answers, and closing it does not wait for the thread llama.cpp left stuck on the
dead server. In a subprocess, as the app runs: llama.cpp parks that thread for good,
and the app's process exits without it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import textwrap

import pytest

from specdesk.session.remote import reinstall_command, rpc_supported

PY = sys.executable
pytestmark = pytest.mark.skipif(not rpc_supported(), reason=f"llama.cpp built without RPC: {reinstall_command()}")

SCRIPT = textwrap.dedent("""
    import os, sys, tempfile
    from pathlib import Path
    from PySide6.QtCore import QEventLoop, QTimer
    from specdesk.session.remote import set_lost_handler
    from specdesk.ui.app import RpcLostRelay, create_app
    from specdesk.ui.main_window import MainWindow
    from specdesk.ui.settings import ChatSettings
    from specdesk.ui.tasks import running_tasks
    from PySide6.QtWidgets import QMessageBox

    QMessageBox.warning = staticmethod(lambda *a, **k: QMessageBox.StandardButton.Ok)  # no modal loop in a test
    model, endpoint = Path(sys.argv[1]), sys.argv[2]
    app = create_app()
    w = MainWindow(Path(tempfile.mkdtemp()) / "data", autoload=False)
    relay = RpcLostRelay(w)
    set_lost_handler(relay.lost.emit)
    w.show()

    def wait(signal, ms):
        loop, got = QEventLoop(), []
        signal.connect(lambda *a: (got.append(a), loop.quit()))
        QTimer.singleShot(ms, loop.quit)
        loop.exec()
        return got[0] if got else None

    def say(*a):
        print(*a, flush=True)

    w.apply_settings(ChatSettings(rpc=endpoint, threads=1, n_ctx=512, max_tokens=400, proposer="none"))
    w.load_models(model, None)
    s = wait(w.models_changed, 120_000)
    say("LOADED", bool(s and s[0] is not None and s[0].target.spec.rpc))
    errors = []
    w.error_shown.connect(errors.append)
    assert w.send("Tell a very long story about a lighthouse keeper.")
    first = []
    w.chats.step.connect(lambda st: first.append(1) if st.tokens and len(first) == 0 and say("STREAMING") is None else None)
    loop = QEventLoop(); QTimer.singleShot(120_000, loop.quit)
    t = QTimer(); t.timeout.connect(lambda: (errors or not w.generating) and loop.quit()); t.start(50)
    loop.exec(); t.stop()
    say("ERROR", errors[0] if errors else "none")
    say("GENERATING", w.generating, "SESSION", w.session is not None)
    shown = [m for m in w.chat_view.messages()]
    say("SHOWN", [r for r, _, _ in shown])
    # load again, locally, and answer
    w.apply_settings(ChatSettings(rpc="", threads=1, n_ctx=512, max_tokens=4, proposer="none"))
    if w.session is None:
        w.load_models(model, None)
    s = wait(w.models_changed, 120_000)
    say("RELOADED", bool(s and s[0] is not None and not s[0].target.spec.rpc))
    assert w.send("Say hi.")
    g = wait(w.generation_finished, 120_000)
    say("ANSWERED", bool(g and g[0].steps))
    w.close()
    say("CLOSED", len(running_tasks()))
    os._exit(0)
""")


def test_a_server_lost_under_an_answer_ends_it_and_the_window_loads_again(tmp_path, smol_path):
    from clirun import free_port

    port = free_port()
    server = subprocess.Popen([PY, "-m", "specdesk", "rpc-server", "--port", str(port), "--threads", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        watchdog = threading.Timer(120, server.kill)  # a server that never says ready ends the loop
        watchdog.start()
        for line in server.stdout:
            if "ready: on the client" in line:  # llama.cpp's banner shares the stream: not always a line's start
                break
        watchdog.cancel()
        script = tmp_path / "lost.py"
        script.write_text(SCRIPT)
        env = dict(os.environ, QT_QPA_PLATFORM="offscreen", SPECDESK_DATA_DIR=str(tmp_path / "data"))
        app = subprocess.Popen([PY, str(script), str(smol_path), f"127.0.0.1:{port}"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
        lines = []
        for line in app.stdout:
            lines.append(line.strip())
            if line.startswith("STREAMING") or line.startswith("LOADED False"):
                break
        assert lines[-1] == "STREAMING", (lines, app.stderr.read() if app.poll() is not None else "")
        server.kill()
        server.wait(timeout=30)
        out, err = app.communicate(timeout=300)
        lines += out.splitlines()
        got = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] if " " in ln else "" for ln in lines}
        assert app.returncode == 0, (lines, err[-3000:])
        assert got["LOADED"] == "True"
        assert f"RPC server 127.0.0.1:{port}" in got["ERROR"]
        assert got["GENERATING"].startswith("False")
        assert got["SHOWN"].startswith("['user', 'assistant']")  # what streamed before the loss is kept
        assert got["RELOADED"] == "True" and got["ANSWERED"] == "True"
        assert got["CLOSED"] == "0"
    finally:
        if server.poll() is None:
            server.kill()
