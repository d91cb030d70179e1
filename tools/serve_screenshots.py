#!/usr/bin/env python3
"""Screenshots of serving from the app, as a person sees it (run under a virtual screen):

    xvfb-run -s "-screen 0 1366x768x24" .venv/bin/python tools/serve_screenshots.py [--test-model] [--one-thread] [OUT_DIR]
    xvfb-run -s "-screen 0 1920x1080x24" .venv/bin/python tools/serve_screenshots.py [--test-model] [--one-thread] [OUT_DIR]

The window opens as it does for a user (fitted to the screen), loads the default pair
(or SmolLM2 with ``--test-model``) with draft:k=3, switches Serve on, answers two requests from the
``openai`` client, then streams a long one; while it runs a chat answer is sent (it
waits in the queue). Shots, named by the screen size: ``serve-WxH.png`` (the Serve tab,
its request list, the running request's statistics in the side panel) and
``serve-chat-queued-WxH.png`` (the chat saying its answer waits).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path

from scratch import scratch_dir  # tools/scratch.py: removed when the tool ends

args = [a for a in sys.argv[1:] if not a.startswith("--")]
TEST_MODEL = "--test-model" in sys.argv
#: --one-thread: llama.cpp on one thread (on a machine shared with other work, two threads wait on each other)
THREADS = 1 if "--one-thread" in sys.argv else 0
SETTINGS = dict(proposer="draft", auto_k=False, k=3, p_min=0.0, max_tokens=96, threads=THREADS)
OUT = Path(args[0] if args else Path(__file__).resolve().parent.parent / "assets" / "screenshots")
OUT.mkdir(parents=True, exist_ok=True)
os.environ["SPECDESK_DATA_DIR"] = scratch_dir("specdesk-shots-")
os.environ["SPECDESK_CONFIG_DIR"] = scratch_dir("specdesk-shots-config-")  # never the user's settings
os.environ["SPECDESK_CACHE_DIR"] = scratch_dir("specdesk-shots-cache-")  # nor its caches

import openai  # noqa: E402
from PySide6.QtCore import QSettings, QTimer  # noqa: E402
from PySide6.QtGui import QGuiApplication  # noqa: E402

from specdesk.library.defaults import default_models  # noqa: E402
from specdesk.ui.app import create_app, data_dir  # noqa: E402
from specdesk.ui.main_window import MainWindow  # noqa: E402
from specdesk.ui.settings import ChatSettings  # noqa: E402

app = create_app()
QSettings().clear()
screen = QGuiApplication.primaryScreen().size()
SIZE = f"{screen.width()}x{screen.height()}"
QUESTIONS = ["Write a Python function that checks whether a number is prime.", "What is a B-tree? One sentence."]
LONG = "Write a Python class for a bank account with deposit, withdraw and a history of transactions."


def shot(widget, name: str) -> None:
    app.processEvents()
    path = OUT / name
    widget.grab().save(str(path))
    print("saved", path, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Clients(threading.Thread):
    """Two answered requests, then a long stream that hangs up when told."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.c = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
        self.streaming = threading.Event()
        self.hang_up = threading.Event()

    def run(self) -> None:
        model = self.c.models.list().data[0].id
        for q in QUESTIONS:
            self.c.chat.completions.create(model=model, messages=[{"role": "user", "content": q}], max_tokens=48)
        stream = self.c.chat.completions.create(model=model, messages=[{"role": "user", "content": LONG}], max_tokens=400,
                                                stream=True)
        for i, _chunk in enumerate(stream):
            if i == 40:
                self.streaming.set()
            if self.hang_up.is_set():
                stream.close()
                return
        self.streaming.set()


def main() -> int:
    w = MainWindow(data_dir(), autoload=False)
    w.show()
    state: dict = {}

    def loaded(session) -> None:
        if session is None:
            print("load failed:", w.error_banner.text(), flush=True)
            app.exit(1)
            return
        w.serve_tab.port.setValue(free_port())
        w.tabs.setCurrentWidget(w.serve_tab)
        w.serve_tab.switch.click()
        poll(lambda: w.serve.url is not None, serving)

    def serving() -> None:
        state["clients"] = c = Clients(w.serve.url)
        c.start()
        poll(c.streaming.is_set, streaming)

    def streaming() -> None:
        w.tabs.setCurrentIndex(0)
        w.send("Say hello in three languages.")
        poll(lambda: "queued" in w.run_info.text(), queued)

    def queued() -> None:
        QTimer.singleShot(600, queued_shot)  # the side panel repaints at a bounded rate

    def queued_shot() -> None:
        shot(w, f"serve-chat-queued-{SIZE}.png")
        w.tabs.setCurrentWidget(w.serve_tab)
        QTimer.singleShot(1500, served)

    def served() -> None:
        shot(w, f"serve-{SIZE}.png")
        state["clients"].hang_up.set()
        w.generation_finished.connect(lambda _g: QTimer.singleShot(200, finish))

    def finish() -> None:
        w.close()
        app.quit()

    def poll(cond, then, every: int = 100) -> None:
        if cond():
            then()
        else:
            QTimer.singleShot(every, lambda: poll(cond, then, every))

    w.apply_settings(ChatSettings(**SETTINGS))
    w.models_changed.connect(loaded)
    if TEST_MODEL:
        smol = default_models(["test"])[0].path
        w.load_models(smol, smol, confirm_memory=False)
    else:
        t, d = (m.path for m in default_models(["target", "draft"]))
        w.load_models(t, d, confirm_memory=False)
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
