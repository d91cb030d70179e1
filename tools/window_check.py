#!/usr/bin/env python3
"""Open the app as a user would on a small screen and check that it fits.

    xvfb-run -s "-screen 0 1366x768x24" .venv/bin/python tools/window_check.py [TARGET [DRAFT]] [--out DIR]

The window opens with the default settings on the virtual screen; a prompt is typed
without clicking anywhere (the message box must have the focus) and sent with Enter;
once the answer is done the script checks that the whole window, the statistics
panel and the Send row are on screen, and saves a screenshot named after the screen
size. Then it opens the Settings dialog with its button and checks that it is on
screen whole, each note it shows as tall as its wrapped text (settings-WxH.png).
Exit code 0 when every check passes.

With ``--compare`` it then runs a small comparison on the Compare tab (target alone,
two draft lengths and n-gram, run until sure within +-3% or ``--compare-repeats``
repeats, a code-editing prompt) and checks that the form, the results table (no
sideways scrolling, intervals and verdicts shown), the chart and the answer columns
(monospace, not word-wrapped) are all on screen, and saves compare-WxH.png; then it
replays the answers and, halfway through the slowest, saves compare-replay-WxH.png
(the race, its clock and every lane partly typed out).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from scratch import scratch_dir  # tools/scratch.py: removed when the tool ends

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("target", nargs="?", type=Path, default=ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("draft", nargs="?", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "assets" / "screenshots")
    ap.add_argument("--prompt", default="Write a Python function that reverses a string.")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--compare", action="store_true", help="also run a small comparison and check the Compare tab")
    ap.add_argument("--compare-repeats", type=int, default=3, help="the comparison's budget of repeats (until sure)")
    args = ap.parse_args()
    os.environ.setdefault("SPECDESK_DATA_DIR", scratch_dir("specdesk-window-"))
    os.environ.setdefault("SPECDESK_CONFIG_DIR", scratch_dir("specdesk-window-config-"))  # never the user's settings
    os.environ.setdefault("SPECDESK_CACHE_DIR", scratch_dir("specdesk-window-cache-"))  # nor what auto learnt

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
    for _ in range(5):  # layouts and repaints settle, as a person would see the window
        app.processEvents()
        QTest.qWait(50)

    frame = w.frameGeometry()
    checks = {
        "message box had the focus": focus is w.input,
        "an answer streamed": bool(res and res[0].steps),
        "window inside the screen": screen.contains(frame) or (frame.width() <= screen.width() and frame.height() <= screen.height()),
        "statistics panel visible": w.stats_scroll.isVisible() and screen.contains(w.stats_scroll.mapToGlobal(QPoint(w.stats_scroll.width() - 1, 0))),
        "statistics panel not cut at its side": w.stats.width() <= w.stats_scroll.viewport().width(),
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
    checks.update(settings_checks(app, w, screen, args.out))
    if args.compare:
        checks.update(compare_checks(app, w, screen, wait, args.out, args.compare_repeats))
    w.close()
    return 0 if all(checks.values()) else 1


def settings_checks(app, w, screen, out: Path) -> dict[str, bool]:
    """The Settings dialog as its button opens it (modal): on screen whole, each note it
    shows as tall as its wrapped text; saved as settings-WxH.png."""
    from PySide6.QtCore import QTimer
    from PySide6.QtTest import QTest

    from specdesk.ui.settings import SettingsDialog

    seen: dict[str, bool] = {}

    def look() -> None:
        dlg = app.activeModalWidget()
        if not isinstance(dlg, SettingsDialog):
            QTimer.singleShot(50, look)
            return
        dlg.n_ctx.setValue(dlg.n_ctx.value() * 2)  # a change that reloads: its note shows too
        for _ in range(3):
            app.processEvents()
            QTest.qWait(50)
        notes = [n for n in (dlg.gpu_note, dlg.rpc_note, dlg.reload_note) if n.isVisible() and n.text()]
        seen["settings dialog inside the screen"] = screen.contains(dlg.frameGeometry())
        seen[f"settings notes whole ({len(notes)} shown)"] = all(n.height() >= n.heightForWidth(n.width()) for n in notes)
        name = out / f"settings-{screen.width()}x{screen.height()}.png"
        app.primaryScreen().grabWindow(0).save(str(name))
        print(f"settings dialog {dlg.width()}x{dlg.height()}; saved {name}")
        dlg.reject()  # nothing applied

    QTimer.singleShot(100, look)
    w.settings_btn.click()
    for k, ok in seen.items():
        print(f"  {'ok ' if ok else 'FAIL'} {k}")
    return seen or {"settings dialog opened": False}


def compare_checks(app, w, screen, wait, out: Path, repeats: int = 3) -> dict[str, bool]:
    from PySide6.QtCore import QPoint, QRect
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QPlainTextEdit, QTextEdit

    from specdesk.ui.fonts import draws_monospace

    tab = w.compare
    w.tabs.setCurrentWidget(tab)
    for name, box in tab.config_boxes.items():
        box.setChecked(name in ("draft:k=2", "draft:auto", "ngram"))
    tab.until_sure.setChecked(True)
    tab.sure_within.setValue(3.0)
    tab.max_repeats.setValue(max(2, repeats))
    tab.max_tokens.setValue(64)
    tab.use_advisor.setChecked(False)
    tab.prompt.setPlainText(
        "Rename the variable `tmp` to `total` and reply with the complete code only:\n\n"
        "def add_all(xs):\n    tmp = 0\n    for x in xs:\n        tmp += x\n    return tmp\n"
    )
    tab.start()
    res = wait(tab.finished, 600_000)
    for _ in range(5):  # let the table and the chart repaint before the screenshot
        app.processEvents()
        QTest.qWait(50)

    def on_screen(widget) -> bool:
        if not widget.isVisible():
            return False
        r = QRect(widget.mapToGlobal(QPoint(0, 0)), widget.size())
        return screen.contains(r)

    def shown_whole(widget) -> bool:
        """Inside the screen and not cut by its parents (the visible region is all of it)."""
        return on_screen(widget) and widget.visibleRegion().boundingRect().size() == widget.size()

    views = [v for v in tab.answer_split.findChildren(QTextEdit)] + list(tab.answer_split.findChildren(QPlainTextEdit))
    checks = {
        "the comparison ran": bool(res and res[0]),
        "form on screen (Run and Save buttons)": on_screen(tab.run_btn) and on_screen(tab.save_btn),
        "results table whole, no sideways scrolling": shown_whole(tab.table)
        and tab.table.horizontalScrollBar().maximum() == 0,
        "every table row shown": tab.table.verticalScrollBar().maximum() == 0,
        "chart on screen": on_screen(tab.chart),
        "one answer column per configuration": len(views) == tab.table.rowCount() > 0,
        "answers whole on screen": bool(views) and all(on_screen(v) for v in views),
        "answers in monospace": bool(views) and all(draws_monospace(v.font()) for v in views),
        "answers not word-wrapped": bool(views) and all(
            (v.lineWrapMode() == QTextEdit.LineWrapMode.NoWrap) if isinstance(v, QTextEdit)
            else (v.lineWrapMode() == QPlainTextEdit.LineWrapMode.NoWrap) for v in views),
    }
    checks["every speedup with its interval and verdict"] = all(
        "(" in tab.table.item(r, 2).text() and (tab.table.item(r, 3).text() in ("faster", "slower")
                                                or tab.table.item(r, 3).text().startswith("within noise"))
        for r in range(1, tab.table.rowCount()))
    name = out / f"compare-{screen.width()}x{screen.height()}.png"
    app.primaryScreen().grabWindow(0).save(str(name))
    print(f"compare tab: saved {name}")
    race = tab.race
    race.replay()
    QTest.qWait(int(1000 * race.end / 2))
    app.processEvents()
    partial = [0 < len(lane.text()) < len(lane.run["text"]) for lane in race.lanes]
    checks["replay: the clock runs and the answers type out at their own speeds"] = (
        race.replaying and bool(race.clock_label.text()) and any(partial))
    name = out / f"compare-replay-{screen.width()}x{screen.height()}.png"
    app.primaryScreen().grabWindow(0).save(str(name))
    print(f"compare tab, replaying: saved {name}")
    race.stop()
    for k, ok in checks.items():
        print(f"  {'ok ' if ok else 'FAIL'} {k}")
    return checks


if __name__ == "__main__":
    sys.exit(main())
