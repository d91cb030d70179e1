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
import sys
from pathlib import Path

from screenshots import Stage  # tools/screenshots.py: the app opened as for its screenshots

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
    stage = Stage(args.out)

    from PySide6.QtCore import QPoint, Qt
    from PySide6.QtTest import QTest

    from specdesk.ui.settings import ChatSettings

    app, screen = stage.app, stage.screen
    w = stage.window(ChatSettings(max_tokens=args.max_tokens))
    stage.load(w, args.target, args.draft)
    app.processEvents()
    focus = w.focusWidget()  # the window's focus (Xvfb has no window manager to activate it)
    if focus is None:
        print("nothing has the keyboard focus", file=sys.stderr)
        return 1
    QTest.keyClicks(focus, args.prompt)  # typed into whatever has the focus: no click
    res = stage.wait(w.generation_finished, lambda: QTest.keyClick(focus, Qt.Key.Key_Return), what="the answer")
    stage.settle(250)

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
    name = stage.save(stage.grab(), f"window-{screen.width()}x{screen.height()}")
    print(f"screen {screen.width()}x{screen.height()}, window {frame.width()}x{frame.height()} at {frame.x()},{frame.y()}; saved {name}")
    for k, ok in checks.items():
        print(f"  {'ok ' if ok else 'FAIL'} {k}")
    checks.update(settings_checks(stage, w))
    if args.compare:
        checks.update(compare_checks(stage, w, args.compare_repeats))
    w.close()
    return 0 if all(checks.values()) else 1


def settings_checks(stage: Stage, w) -> dict[str, bool]:
    """The Settings dialog as its button opens it (modal): on screen whole, each note it
    shows as tall as its wrapped text; saved as settings-WxH.png."""
    from PySide6.QtCore import QTimer

    from specdesk.ui.settings import SettingsDialog

    app, screen = stage.app, stage.screen
    seen: dict[str, bool] = {}

    def look() -> None:
        dlg = app.activeModalWidget()
        if not isinstance(dlg, SettingsDialog):
            QTimer.singleShot(50, look)
            return
        dlg.n_ctx.setValue(dlg.n_ctx.value() * 2)  # a change that reloads: its note shows too
        stage.settle(150)
        notes = [n for n in (dlg.gpu_note, dlg.rpc_note, dlg.reload_note) if n.isVisible() and n.text()]
        seen["settings dialog inside the screen"] = screen.contains(dlg.frameGeometry())
        seen[f"settings notes whole ({len(notes)} shown)"] = all(n.height() >= n.heightForWidth(n.width()) for n in notes)
        stage.save(stage.grab(), f"settings-{screen.width()}x{screen.height()}")
        print(f"settings dialog {dlg.width()}x{dlg.height()}")
        dlg.reject()  # nothing applied

    QTimer.singleShot(100, look)
    w.settings_btn.click()
    for k, ok in seen.items():
        print(f"  {'ok ' if ok else 'FAIL'} {k}")
    return seen or {"settings dialog opened": False}


def compare_checks(stage: Stage, w, repeats: int = 3) -> dict[str, bool]:
    from PySide6.QtCore import QPoint, QRect
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QPlainTextEdit, QTextEdit

    from screenshots import EDIT_PROMPT
    from specdesk.ui.fonts import draws_monospace

    app, screen = stage.app, stage.screen
    tab = w.compare
    w.tabs.setCurrentWidget(tab)
    for name, box in tab.config_boxes.items():
        box.setChecked(name in ("draft:k=2", "draft:auto", "ngram"))
    tab.until_sure.setChecked(True)
    tab.sure_within.setValue(3.0)
    tab.max_repeats.setValue(max(2, repeats))
    tab.max_tokens.setValue(64)
    tab.use_advisor.setChecked(False)
    tab.prompt.setPlainText(EDIT_PROMPT)
    res = stage.wait(tab.finished, tab.start, ms=1_800_000, what="the comparison")
    stage.settle(250)  # the table and the chart repaint before the screenshot

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
    stage.save(stage.grab(), f"compare-{screen.width()}x{screen.height()}")
    race = tab.race
    race.replay()
    QTest.qWait(int(1000 * race.end / 2))
    app.processEvents()
    partial = [0 < len(lane.text()) < len(lane.run["text"]) for lane in race.lanes]
    checks["replay: the clock runs and the answers type out at their own speeds"] = (
        race.replaying and bool(race.clock_label.text()) and any(partial))
    stage.save(stage.grab(), f"compare-replay-{screen.width()}x{screen.height()}")
    race.stop()
    for k, ok in checks.items():
        print(f"  {'ok ' if ok else 'FAIL'} {k}")
    return checks


if __name__ == "__main__":
    sys.exit(main())
