#!/usr/bin/env python3
"""Take the README's screenshots of the real app (run it under xvfb-run).

    xvfb-run -s "-screen 0 1600x1000x24" .venv/bin/python tools/screenshots.py [OUT_DIR]

Shots: the empty state, a chat mid-answer on the default pair (provenance colours
and the side panel), the settings dialog, the Library tab and the Compare tab after
a small comparison.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from scratch import scratch_dir  # tools/scratch.py: removed when the tool ends

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "assets" / "screenshots")
OUT.mkdir(parents=True, exist_ok=True)
os.environ["SPECDESK_DATA_DIR"] = scratch_dir("specdesk-shots-")
os.environ["SPECDESK_CONFIG_DIR"] = scratch_dir("specdesk-shots-config-")  # never the user's settings
os.environ["SPECDESK_CACHE_DIR"] = scratch_dir("specdesk-shots-cache-")  # nor its caches

from PySide6.QtCore import QSettings, QTimer  # noqa: E402

from specdesk.library.defaults import default_models  # noqa: E402
from specdesk.ui.app import create_app, data_dir  # noqa: E402
from specdesk.ui.main_window import MainWindow  # noqa: E402
from specdesk.ui.settings import ChatSettings, SettingsDialog  # noqa: E402

PROMPT = "Write a Python function that parses one CSV line with quoted fields. Keep it short, with a docstring."

app = create_app()
QSettings().clear()


def shot(widget, name: str) -> None:
    app.processEvents()
    path = OUT / name
    widget.grab().save(str(path))
    print("saved", path, flush=True)


def empty_state() -> None:
    models = os.environ.get("SPECDESK_MODELS_DIR")
    os.environ["SPECDESK_MODELS_DIR"] = scratch_dir("specdesk-nomodels-")
    w = MainWindow(data_dir(), autoload=False)
    w.resize(1440, 880)
    w.show()
    app.processEvents()
    shot(w, "empty-state.png")
    w.close()
    if models is None:
        del os.environ["SPECDESK_MODELS_DIR"]
    else:
        os.environ["SPECDESK_MODELS_DIR"] = models


def chat() -> None:
    w = MainWindow(data_dir(), autoload=False)
    w.resize(1440, 880)
    w.show()
    state = {"steps": 0, "taken": False}

    def on_loaded(session) -> None:
        if session is None:
            print("load failed:", w.error_banner.text(), flush=True)
            app.exit(1)
            return
        w.apply_settings(ChatSettings(proposer="draft", auto_k=False, k=4, p_min=0.0, max_tokens=160))
        w.send(PROMPT)
        w.chats.step.connect(on_step)

    def on_step(step) -> None:
        state["steps"] += 1
        if state["steps"] == 22 and not state["taken"]:
            state["taken"] = True
            shot(w, "chat-mid-answer.png")

    def done(gen) -> None:
        shot(w, "chat-finished.png")
        dlg = SettingsDialog(w.settings, has_gpu=False, parent=w)
        dlg.n_ctx.setValue(8192)  # shows the reload note
        dlg.show()
        QTimer.singleShot(300, lambda: (shot(dlg, "settings.png"), dlg.close(), finish()))

    def finish() -> None:
        # the Library tab, with the default target selected
        w.tabs.setCurrentWidget(w.library)
        if w.library.entries:
            w.library.select_path(w.target_path)
        app.processEvents()
        shot(w, "library.png")
        # the Compare tab, after a small comparison
        tab = w.compare
        w.tabs.setCurrentWidget(tab)
        for name, box in tab.config_boxes.items():
            box.setChecked(name in ("draft:k=2", "draft:k=4", "draft:auto", "ngram"))
        tab.until_sure.setChecked(True)
        tab.max_repeats.setValue(3)
        tab.max_tokens.setValue(48)
        tab.use_advisor.setChecked(True)
        tab.prompt.setPlainText(
            "Rename the variable `tmp` to `total` and reply with the complete code only:\n\n"
            "def add_all(xs):\n    tmp = 0\n    for x in xs:\n        tmp += x\n    return tmp\n"
        )
        tab.finished.connect(lambda _r: QTimer.singleShot(300, compared))
        tab.start()

    def compared() -> None:
        shot(w, "compare-tab.png")
        w.close()
        app.quit()

    w.models_changed.connect(on_loaded)
    w.generation_finished.connect(done)
    t, d = (m.path for m in default_models(["target", "draft"]))
    w.load_models(t, d, confirm_memory=False)
    app.exec()


if __name__ == "__main__":
    empty_state()
    chat()
