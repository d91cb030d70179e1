#!/usr/bin/env python3
"""Open the app as a user would on a small screen and check that it fits.

    xvfb-run -s "-screen 0 1366x768x24" .venv/bin/python tools/window_check.py [TARGET [DRAFT]] [--out DIR]

The window opens with the default settings on the virtual screen; a prompt is typed
without clicking anywhere (the message box must have the focus) and sent with Enter;
once the answer is done the script checks that the whole window, the statistics
panel and the Send row are on screen, and saves a screenshot named after the screen
size. Exit code 0 when every check passes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("target", nargs="?", type=Path, default=ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("draft", nargs="?", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "assets" / "screenshots")
    ap.add_argument("--prompt", default="Write a Python function that reverses a string.")
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()
    os.environ.setdefault("SPECDESK_DATA_DIR", tempfile.mkdtemp(prefix="specdesk-window-"))

    from PySide6.QtCore import QEventLoop, QPoint, Qt, QTimer
    from PySide6.QtTest import QTest

    from specdesk.ui.app import create_app, data_dir
    from specdesk.ui.main_window import MainWindow
    from specdesk.ui.settings import ChatSettings

    app = create_app()
    screen = app.primaryScreen().availableGeometry()
    w = MainWindow(data_dir(), autoload=False)
    w.apply_settings(ChatSettings(max_tokens=args.max_tokens))
    w.show()
    w.activateWindow()
    app.processEvents()

    def wait(signal, ms: int) -> tuple:
        loop = QEventLoop()
        got: list = []
        signal.connect(lambda *a: (got.append(a), loop.quit()))
        QTimer.singleShot(ms, loop.quit)
        loop.exec()
        return got[0] if got else ()

    w.load_models(args.target, args.draft, confirm_memory=False)
    if not wait(w.models_changed, 120_000):
        print("the models did not load", file=sys.stderr)
        return 1
    app.processEvents()
    focus = w.focusWidget()  # the window's focus (Xvfb has no window manager to activate it)
    if focus is None:
        print("nothing has the keyboard focus", file=sys.stderr)
        return 1
    QTest.keyClicks(focus, args.prompt)  # typed into whatever has the focus: no click
    QTest.keyClick(focus, Qt.Key.Key_Return)
    res = wait(w.generation_finished, 300_000)
    app.processEvents()

    frame = w.frameGeometry()
    checks = {
        "message box had the focus": focus is w.input,
        "an answer streamed": bool(res and res[0].steps),
        "window inside the screen": screen.contains(frame) or (frame.width() <= screen.width() and frame.height() <= screen.height()),
        "statistics panel visible": w.stats_scroll.isVisible() and screen.contains(w.stats_scroll.mapToGlobal(QPoint(w.stats_scroll.width() - 1, 0))),
        "Send row visible": w.send_btn.isVisible() and screen.contains(w.send_btn.mapToGlobal(QPoint(w.send_btn.width() - 1, w.send_btn.height() - 1))),
        "Settings button visible": screen.contains(w.settings_btn.mapToGlobal(QPoint(w.settings_btn.width() - 1, 0))),
        "focus back in the message box": w.focusWidget() is w.input,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = args.out / f"window-{screen.width()}x{screen.height()}.png"
    app.primaryScreen().grabWindow(0).save(str(name))
    print(f"screen {screen.width()}x{screen.height()}, window {frame.width()}x{frame.height()} at {frame.x()},{frame.y()}; saved {name}")
    for k, ok in checks.items():
        print(f"  {'ok ' if ok else 'FAIL'} {k}")
    w.close()
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
