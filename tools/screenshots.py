#!/usr/bin/env python3
"""The README's screenshots of the real app (run it under a virtual screen):

    xvfb-run -s "-screen 0 1920x1080x24" .venv/bin/python tools/screenshots.py [SET ...] [--out DIR]
        [--suffix S] [--test-model] [--one-thread]

Sets (all three when none is named), each on the default pair; ``--test-model`` runs
``app`` and ``serve`` with SmolLM2 as target and draft (``drop`` needs a draft that is
not the target's own file):

- ``app``: the empty state, a chat mid-answer and finished (provenance colours and the
  side panel), the settings dialog (with its reload note), the Library tab and the
  Compare tab after a small comparison, in a 1440x880 window: empty-state.png,
  chat-mid-answer.png, chat-finished.png, settings.png, library.png, compare-tab.png;
- ``drop``: the default draft's file dragged over the draft picker while the target is
  loaded (drag-drop.png: where it will land), then dropped on the chat
  (drop-which-role.png: the app asks whether it is the draft or the new target; a screen
  grab, so the question shows over the window as on a desktop). The drag events are the
  real ones (enter, move, drop with the file's URL) sent to the window, as the platform
  sends them;
- ``serve``: Serve switched on with draft:k=3, two requests answered from the ``openai``
  client, then a long one streamed while a chat answer is sent (it waits in the queue):
  serve-WxH.png (the Serve tab, its request list, the running request's statistics in
  the side panel) and serve-chat-queued-WxH.png (the chat saying its answer waits).

The window opens as it does for a user (fitted to the screen) but for ``app``'s. Chats,
settings, data and caches go to temporary folders (tools/scratch.py), never the user's.
``--suffix`` ends every file's name (e.g. ``-1366x768``), ``--one-thread`` runs llama.cpp
on one thread (on a machine shared with other work, two threads wait on each other).
A set whose app does not reach what it shows (a model that does not load, a question
that is not asked) ends the tool with a message and exit 1. tools/window_check.py, the
check that the window fits a small screen, opens the app with the same :class:`Stage`.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
from pathlib import Path

from scratch import scratch_dir  # tools/scratch.py: removed when the tool ends

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Write a Python function that parses one CSV line with quoted fields. Keep it short, with a docstring."
EDIT_PROMPT = ("Rename the variable `tmp` to `total` and reply with the complete code only:\n\n"
               "def add_all(xs):\n    tmp = 0\n    for x in xs:\n        tmp += x\n    return tmp\n")
QUESTIONS = ["Write a Python function that checks whether a number is prime.", "What is a B-tree? One sentence."]
LONG = "Write a Python class for a bank account with deposit, withdraw and a history of transactions."


class Stage:
    """A fresh app on the screen, for screenshots and checks: its data, settings and
    caches in temporary folders, the screen's size, and the waits every set needs."""

    def __init__(self, out: Path, suffix: str = "") -> None:
        for var in ("SPECDESK_DATA_DIR", "SPECDESK_CONFIG_DIR", "SPECDESK_CACHE_DIR"):
            os.environ[var] = scratch_dir(f"specdesk-shots-{var.split('_')[1].lower()}-")
        from PySide6.QtCore import QSettings

        from specdesk.ui.app import create_app

        self.out, self.suffix = out, suffix
        out.mkdir(parents=True, exist_ok=True)
        self.app = create_app()
        QSettings().clear()
        screen = self.app.primaryScreen()
        self.screen = screen.availableGeometry()
        self.size = f"{screen.size().width()}x{screen.size().height()}"

    def window(self, settings=None, size: tuple[int, int] | None = None):
        from specdesk.ui.app import data_dir
        from specdesk.ui.main_window import MainWindow

        w = MainWindow(data_dir(), autoload=False)
        if settings is not None:
            w.apply_settings(settings)
        if size:
            w.resize(*size)
        w.show()
        w.activateWindow()
        self.app.processEvents()
        return w

    def wait(self, signal, then=None, ms: int = 600_000, what: str = "") -> tuple:
        """The first emission of ``signal`` after ``then()`` runs; SystemExit past ``ms``."""
        from PySide6.QtCore import QEventLoop, QTimer

        loop, got = QEventLoop(), []
        signal.connect(lambda *a: (got.append(a), loop.quit()))
        if then is not None:
            then()
        if not got:
            QTimer.singleShot(ms, loop.quit)
            loop.exec()
        if not got:
            raise SystemExit(f"timed out after {ms / 1000:.0f} s waiting for {what or signal}")
        return got[0]

    def until(self, cond, ms: int = 600_000, what: str = "") -> None:
        """Run the event loop until ``cond()``; SystemExit past ``ms``."""
        from PySide6.QtCore import QElapsedTimer
        from PySide6.QtTest import QTest

        t = QElapsedTimer()
        t.start()
        while not cond():
            if t.elapsed() > ms:
                raise SystemExit(f"timed out after {ms / 1000:.0f} s waiting for {what or cond}")
            QTest.qWait(50)

    def settle(self, ms: int = 400) -> None:
        """Layouts and repaints settle, as a person would see the window."""
        from PySide6.QtTest import QTest

        QTest.qWait(ms)

    def load(self, w, target: Path, draft: Path | None):
        session = self.wait(w.models_changed, lambda: w.load_models(target, draft, confirm_memory=False),
                            what="the models to load")[0]
        if session is None:
            raise SystemExit(f"the models did not load: {w.error_banner.text()}")
        return session

    def save(self, what, name: str) -> Path:
        """A widget's own picture (or an image, e.g. a screen grab) as OUT/NAME{suffix}.png."""
        self.app.processEvents()
        image = what.grab() if hasattr(what, "grab") else what
        path = self.out / f"{name}{self.suffix}.png"
        image.save(str(path))
        print("saved", path, f"{image.width()}x{image.height()}", flush=True)
        return path

    def close_all(self) -> None:
        """Close every window (each stops its work first), also when a set gave up."""
        for w in self.app.topLevelWidgets():
            w.close()
        self.settle(300)

    def grab(self, w=None):
        """What the screen shows (of ``w``'s frame only, if given): dialogs over the window too."""
        screen = self.app.primaryScreen()
        if w is None:
            return screen.grabWindow(0)
        g = w.frameGeometry()
        return screen.grabWindow(0, g.x(), g.y(), g.width(), g.height())


# -- the sets ----------------------------------------------------------------------------------


def app_set(stage: Stage, target: Path, draft: Path, threads: int) -> None:
    from specdesk.ui.settings import ChatSettings, SettingsDialog

    models = os.environ.get("SPECDESK_MODELS_DIR")
    os.environ["SPECDESK_MODELS_DIR"] = scratch_dir("specdesk-nomodels-")  # nothing to offer: the empty state
    w = stage.window(size=(1440, 880))
    stage.save(w, "empty-state")
    w.close()
    if models is None:
        del os.environ["SPECDESK_MODELS_DIR"]
    else:
        os.environ["SPECDESK_MODELS_DIR"] = models

    w = stage.window(ChatSettings(proposer="draft", auto_k=False, k=4, p_min=0.0, max_tokens=160, threads=threads),
                     size=(1440, 880))
    stage.load(w, target, draft)
    steps = [0]

    def on_step(_step) -> None:
        steps[0] += 1
        if steps[0] == 22:
            stage.save(w, "chat-mid-answer")

    w.chats.step.connect(on_step)
    stage.wait(w.generation_finished, lambda: w.send(PROMPT), what="the answer")
    stage.save(w, "chat-finished")
    dlg = SettingsDialog(w.settings, has_gpu=False, parent=w)
    dlg.n_ctx.setValue(8192)  # shows the reload note
    dlg.show()
    stage.settle(300)
    stage.save(dlg, "settings")
    dlg.close()
    w.tabs.setCurrentWidget(w.library)  # the Library tab, with the target selected
    if w.library.entries:
        w.library.select_path(w.target_path)
    stage.save(w, "library")
    tab = w.compare
    w.tabs.setCurrentWidget(tab)
    for name, box in tab.config_boxes.items():
        box.setChecked(name in ("draft:k=2", "draft:k=4", "draft:auto", "ngram"))
    tab.until_sure.setChecked(True)
    tab.max_repeats.setValue(3)
    tab.max_tokens.setValue(48)
    tab.use_advisor.setChecked(True)
    tab.prompt.setPlainText(EDIT_PROMPT)
    stage.wait(tab.finished, tab.start, ms=1_800_000, what="the comparison")
    stage.settle(300)
    stage.save(w, "compare-tab")
    w.close()


def drop_set(stage: Stage, target: Path, draft: Path, threads: int) -> None:
    from PySide6.QtCore import QCoreApplication, QMimeData, Qt, QUrl
    from PySide6.QtGui import QDragEnterEvent, QDragLeaveEvent, QDragMoveEvent, QDropEvent

    from specdesk.ui.settings import ChatSettings

    actions, button, mods = (Qt.DropAction.CopyAction | Qt.DropAction.MoveAction, Qt.MouseButton.LeftButton,
                             Qt.KeyboardModifier.NoModifier)
    w = stage.window(ChatSettings(threads=threads))
    stage.load(w, target, None)
    w.library.rescan()
    stage.settle(1500)  # the library's names for the models
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(draft))])
    handle = w.windowHandle()
    pos = w.draft_combo.mapTo(w, w.draft_combo.rect().center())
    QCoreApplication.sendEvent(handle, QDragEnterEvent(pos, actions, mime, button, mods))
    move = QDragMoveEvent(pos, actions, mime, button, mods)
    QCoreApplication.sendEvent(handle, move)
    if not move.isAccepted():
        raise SystemExit("the window refused the dragged model")
    print("drag over the draft picker:", w.drops.overlay.text(), flush=True)
    stage.settle()
    stage.save(w, "drag-drop")
    QCoreApplication.sendEvent(handle, QDragLeaveEvent())
    chat = w.chat_view.mapTo(w, w.chat_view.rect().center())
    QCoreApplication.sendEvent(handle, QDragEnterEvent(chat, actions, mime, button, mods))
    box = stage.wait(w.opener.asked, lambda: QCoreApplication.sendEvent(
        handle, QDropEvent(chat.toPointF(), actions, mime, button, mods)), ms=60_000, what="the question")[0]
    stage.settle(800)
    print("asked:", box.text(), flush=True)
    stage.save(stage.grab(w), "drop-which-role")
    box.reject()
    w.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Clients(threading.Thread):
    """Two answered requests, then a long stream that hangs up when told."""

    def __init__(self, url: str) -> None:
        import openai

        super().__init__(daemon=True)
        self.c = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
        self.streaming = threading.Event()
        self.hang_up = threading.Event()

    def run(self) -> None:
        model = self.c.models.list().data[0].id
        for q in QUESTIONS:
            self.c.chat.completions.create(model=model, messages=[{"role": "user", "content": q}], max_tokens=48)
        stream = self.c.chat.completions.create(model=model, messages=[{"role": "user", "content": LONG}],
                                                max_tokens=400, stream=True)
        for i, _chunk in enumerate(stream):
            if i == 40:
                self.streaming.set()
            if self.hang_up.is_set():
                stream.close()
                return
        self.streaming.set()


def serve_set(stage: Stage, target: Path, draft: Path, threads: int) -> None:
    from specdesk.ui.settings import ChatSettings

    w = stage.window(ChatSettings(proposer="draft", auto_k=False, k=3, p_min=0.0, max_tokens=96, threads=threads))
    stage.load(w, target, draft)
    w.serve_tab.port.setValue(_free_port())
    w.tabs.setCurrentWidget(w.serve_tab)
    w.serve_tab.switch.click()
    stage.until(lambda: w.serve.url is not None, what="the endpoint")
    clients = Clients(w.serve.url)
    clients.start()
    stage.until(clients.streaming.is_set, what="the long request's stream")
    w.tabs.setCurrentIndex(0)
    w.send("Say hello in three languages.")
    stage.until(lambda: "queued" in w.run_info.text(), what="the chat's answer to wait in the queue")
    stage.settle(600)  # the side panel repaints at a bounded rate
    stage.save(w, f"serve-chat-queued-{stage.size}")
    w.tabs.setCurrentWidget(w.serve_tab)
    stage.settle(1500)
    stage.save(w, f"serve-{stage.size}")
    stage.wait(w.generation_finished, clients.hang_up.set, what="the chat's answer after the stream")
    stage.settle(200)
    w.close()


SETS = {"app": app_set, "drop": drop_set, "serve": serve_set}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sets", nargs="*", metavar="SET", help="app, drop, serve (default: all three)")
    ap.add_argument("--out", type=Path, default=ROOT / "assets" / "screenshots")
    ap.add_argument("--suffix", default="", help="added to every file's name")
    ap.add_argument("--test-model", action="store_true", help="app and serve: SmolLM2 as target and draft")
    ap.add_argument("--one-thread", action="store_true", help="llama.cpp on one thread")
    args = ap.parse_args(argv)
    unknown = set(args.sets) - set(SETS)
    if unknown:
        ap.error(f"unknown set {sorted(unknown)[0]!r}: choose from {', '.join(SETS)}")
    from specdesk.library.defaults import default_models

    pair = tuple(m.path for m in default_models(["target", "draft"]))
    smol = default_models(["test"])[0].path
    stage = Stage(args.out, args.suffix)
    try:
        for name in args.sets or SETS:
            target, draft = (smol, smol) if args.test_model and name != "drop" else pair
            SETS[name](stage, target, draft, 1 if args.one_thread else 0)
    finally:
        stage.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
