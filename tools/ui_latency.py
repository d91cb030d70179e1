#!/usr/bin/env python3
"""How responsive the app stays while it generates: the lateness of the answer's
frame clock (an 80 ms QTimer on the Qt thread, which shows the streamed steps) during
a generation on the default pair (or given models).

    QT_QPA_PLATFORM=offscreen .venv/bin/python tools/ui_latency.py [--tokens 200] [--target T --draft D]

Prints the maximum, p99 and p95 lateness, and the time the Qt thread spent showing
each frame's steps. Target: under 50 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from scratch import scratch_dir  # tools/scratch.py: removed when the tool ends

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("SPECDESK_DATA_DIR", scratch_dir("specdesk-latency-"))
os.environ["SPECDESK_CONFIG_DIR"] = scratch_dir("specdesk-latency-config-")  # never the user's settings
os.environ["SPECDESK_CACHE_DIR"] = scratch_dir("specdesk-latency-cache-")  # nor its caches

from PySide6.QtCore import QSettings  # noqa: E402

from specdesk.library.defaults import default_models  # noqa: E402
from specdesk.ui.app import create_app, data_dir  # noqa: E402
from specdesk.ui.main_window import MainWindow  # noqa: E402
from specdesk.ui.settings import ChatSettings  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--target", type=Path)
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--k", default="auto")
    a = ap.parse_args()
    t = a.target or default_models(["target"])[0].path
    d = a.draft or default_models(["draft"])[0].path
    app = create_app()
    QSettings().clear()
    w = MainWindow(data_dir(), autoload=False)
    w.resize(1440, 900)
    w.show()
    handler_ms: list[float] = []
    orig = w.chats._frame

    def timed() -> None:
        t0 = time.perf_counter()
        orig()
        handler_ms.append((time.perf_counter() - t0) * 1000)

    w.latency.tick.disconnect(orig)
    w.latency.tick.connect(timed)
    out: dict = {}

    def loaded(session) -> None:
        if session is None:
            print("load failed:", w.error_banner.text())
            app.exit(1)
            return
        auto = a.k == "auto"
        w.apply_settings(ChatSettings(proposer="draft", auto_k=auto, k=4 if auto else int(a.k), p_min=0.0, max_tokens=a.tokens))
        w.send("Write a Python module with a small LRU cache class, with docstrings and a short usage example.")

    def done(gen) -> None:
        lat = w.latency.samples
        out["gen"] = gen
        print(f"generated {gen.stats.generated} tokens at {gen.stats.tokens_per_second:.1f} tok/s in {gen.stats.decode_seconds:.1f} s "
              f"({gen.config.describe()}, acceptance {gen.stats.acceptance_rate})")
        print(f"event-loop lateness over {len(lat)} ticks of {w.latency.interval_ms} ms: max {w.latency.max_ms:.1f} ms, "
              f"p99 {w.latency.percentile(0.99):.1f} ms, p95 {w.latency.percentile(0.95):.1f} ms, "
              f"median {statistics.median(lat) if lat else 0:.1f} ms")
        worst = sorted(range(len(lat)), key=lambda i: -lat[i])[:5]
        print("worst ticks (ms late @ tick number):", ", ".join(f"{lat[i]:.0f} @ {i}" for i in worst))
        print(f"frame handler on the Qt thread: max {max(handler_ms):.1f} ms, mean {statistics.mean(handler_ms):.1f} ms over {len(handler_ms)} frames")
        app.quit()

    w.models_changed.connect(loaded)
    w.generation_finished.connect(done)
    w.load_models(t, d, confirm_memory=False)
    app.exec()
    w.close()
    return 0 if "gen" in out else 1


if __name__ == "__main__":
    raise SystemExit(main())
