#!/usr/bin/env python3
"""Screenshots of dropping GGUF files on the real app (run it under xvfb-run):

    xvfb-run -s "-screen 0 1366x768x24" .venv/bin/python tools/drop_screenshots.py [OUT_DIR] [SUFFIX]

With the default target loaded (Qwen2.5-Coder 1.5B), the default draft's file is
dragged over the draft picker (drag-drop.png: where it will land, while dragging), then
dropped on the chat (drop-which-role.png: the app asks whether it is the draft or the new
target; a screen grab, so the question shows over the window as on a desktop). The drag
events are the real ones (QDragEnterEvent, QDragMoveEvent, QDropEvent with the file's
URL) sent to the window, as the platform sends them. Chats and settings go to temporary
folders.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from scratch import scratch_dir  # tools/scratch.py: removed when the tool ends

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets" / "screenshots"
SUFFIX = sys.argv[2] if len(sys.argv) > 2 else ""
OUT.mkdir(parents=True, exist_ok=True)
_tmp = scratch_dir("specdesk-drop-shots-")
os.environ["SPECDESK_DATA_DIR"] = str(Path(_tmp) / "data")
os.environ["XDG_CONFIG_HOME"] = str(Path(_tmp) / "config")  # the app's settings stay out of the user's
os.environ["SPECDESK_CONFIG_DIR"] = str(Path(_tmp) / "config")
os.environ["SPECDESK_CACHE_DIR"] = str(Path(_tmp) / "cache")

from PySide6.QtCore import QCoreApplication, QEventLoop, QMimeData, Qt, QTimer, QUrl  # noqa: E402
from PySide6.QtGui import QDragEnterEvent, QDragLeaveEvent, QDragMoveEvent, QDropEvent, QGuiApplication  # noqa: E402

from specdesk.library.defaults import default_models  # noqa: E402
from specdesk.ui.app import create_app, data_dir  # noqa: E402
from specdesk.ui.main_window import MainWindow  # noqa: E402

ACTIONS = Qt.DropAction.CopyAction | Qt.DropAction.MoveAction
app = create_app()


def wait(signal, timeout_ms: int = 300_000):
    loop = QEventLoop()
    got = []
    signal.connect(lambda *a: (got.append(a), loop.quit()))
    QTimer.singleShot(timeout_ms, loop.quit)
    loop.exec()
    if not got:
        raise SystemExit(f"timed out waiting for {signal}")
    return got[0]


def settle(ms: int = 400) -> None:
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def save(image, name: str) -> None:
    path = OUT / f"{name}{SUFFIX}.png"
    image.save(str(path))
    print("saved", path, f"{image.width()}x{image.height()}", flush=True)


def main() -> int:
    target, draft = (m.path for m in default_models(["target", "draft"]))
    w = MainWindow(data_dir(), autoload=False)
    w.show()
    w.load_models(target, None)
    (session,) = wait(w.models_changed)
    if session is None:
        print("load failed:", w.error_banner.text())
        return 1
    w.library.rescan()
    settle(1500)  # the library's names for the models

    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(draft))])
    handle = w.windowHandle()
    pos = w.draft_combo.mapTo(w, w.draft_combo.rect().center())
    QCoreApplication.sendEvent(handle, QDragEnterEvent(pos, ACTIONS, mime, Qt.MouseButton.LeftButton,
                                                       Qt.KeyboardModifier.NoModifier))
    move = QDragMoveEvent(pos, ACTIONS, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QCoreApplication.sendEvent(handle, move)
    print("drag accepted:", move.isAccepted(), "-", w.drops.overlay.text(), flush=True)
    settle()
    save(w.grab(), "drag-drop")
    QCoreApplication.sendEvent(handle, QDragLeaveEvent())

    chat = w.chat_view.mapTo(w, w.chat_view.rect().center())
    QCoreApplication.sendEvent(handle, QDragEnterEvent(chat, ACTIONS, mime, Qt.MouseButton.LeftButton,
                                                       Qt.KeyboardModifier.NoModifier))
    QCoreApplication.sendEvent(handle, QDropEvent(chat.toPointF(), ACTIONS, mime, Qt.MouseButton.LeftButton,
                                                  Qt.KeyboardModifier.NoModifier))
    (box,) = wait(w.opener.asked)
    settle(800)
    print("asked:", box.text(), flush=True)
    screen = QGuiApplication.primaryScreen()
    g = w.frameGeometry()
    save(screen.grabWindow(0, g.x(), g.y(), g.width(), g.height()), "drop-which-role")
    box.reject()
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
