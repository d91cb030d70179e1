#!/usr/bin/env python3
"""The app against the engine: the same prompt and settings through
`specdesk generate --json` and through the real app on a virtual X screen.

    .venv/bin/python tools/app_vs_cli.py [--runs 3] [--tokens 215] [--prompt P]
        [--proposer draft] [--k auto] [--p-min 0.75] [--threads N]
        [--target T --draft D] [--source DIR] [--offscreen] [--json OUT]

Each run is a fresh process (the CLI, then the app), alternating, so that drift on a
shared machine hits both alike; both use one temporary cost cache, as a user's
CLI and app share theirs. It reports per run and as medians: decode tokens/s, the
target's verify step time (verify seconds / steps), tokens per step and tokens
drafted; for the app also the Qt thread's milliseconds per repaint (chat text and
statistics panel), the step handler's worst time and all the Qt thread's CPU time
during the generation (painting included); then the ratio app / CLI.

The app runs under `xvfb-run` (the Debian package xvfb) with the xcb platform, as
a user's desktop would; ``--offscreen`` uses Qt's offscreen platform instead.
``--source DIR`` runs another copy of the package (its app/ folder), e.g. the code
before a change. A tool, not a test: its figures hold only on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
PROMPT = "Write a Python module with a small LRU cache class, with docstrings and a short usage example."
RESULT = "APP-RESULT "


# -- the app, inside the virtual screen --------------------------------------------------

def app_worker(cfg: dict) -> int:
    """Load the pair in the real MainWindow, send the prompt, print the result as one line."""
    os.environ.setdefault("SPECDESK_DATA_DIR", tempfile.mkdtemp(prefix="specdesk-appvscli-"))
    from PySide6.QtCore import QSettings, QTimer

    from specdesk.ui.app import create_app, data_dir
    from specdesk.ui.main_window import MainWindow
    from specdesk.ui.settings import ChatSettings

    app = create_app()
    QSettings().clear()
    w = MainWindow(data_dir(), autoload=False)
    w.resize(1440, 900)
    w.show()
    auto = cfg["k"] == "auto"
    # settings first: applied before loading, nothing has to reload
    w.apply_settings(ChatSettings(proposer=cfg["proposer"], auto_k=auto, k=4 if auto else int(cfg["k"]),
                                  p_min=cfg["p_min"], temperature=0.0, max_tokens=cfg["tokens"],
                                  threads=cfg["threads"] or 0))
    handler_ms: list[float] = []
    owner = getattr(w, "chats", w)  # the step handler lives in the chat controller (the window, in older trees)
    orig = getattr(owner, "_on_step", None)
    if orig is not None:  # the Qt thread's own work per step signal (the window connects it per generation)
        def timed(step) -> None:
            t0 = time.perf_counter()
            orig(step)
            handler_ms.append((time.perf_counter() - t0) * 1000)

        owner._on_step = timed
    out: dict = {}
    state = {"sent": False}

    def loaded(session) -> None:
        if session is None:
            out["error"] = "load failed: " + getattr(getattr(w, "error_banner", None), "text", lambda: "?")()
            app.exit(1)
            return
        if not state["sent"]:
            state["sent"] = True
            out["qt_cpu0"] = time.thread_time()  # this is the Qt thread
            w.send(cfg["prompt"])

    def done(gen) -> None:
        chat = getattr(w, "chat_view", None)
        panel = getattr(w, "stats", None)
        out["stats"] = gen.stats.to_dict()
        out["text"] = gen.text
        out["prompt_tokens"] = len(gen.prompt)
        out["chat_repaint_ms"] = list(getattr(chat, "repaint_ms", []))
        out["stats_repaint_ms"] = list(getattr(panel, "repaint_ms", []))
        out["handler_ms"] = handler_ms
        # every bit of the Qt thread's own work during the generation: slots, repaints,
        # layout, painting, timers
        out["qt_cpu_s"] = time.thread_time() - out.pop("qt_cpu0")
        lat = getattr(w, "latency", None)
        out["loop_late_max_ms"] = lat.max_ms if lat is not None else None
        app.quit()

    w.models_changed.connect(loaded)
    w.generation_finished.connect(done)
    QTimer.singleShot(int(cfg["timeout"] * 1000), lambda: (out.setdefault("error", "timed out"), app.exit(1)))
    w.load_models(Path(cfg["target"]), Path(cfg["draft"]) if cfg["draft"] else None, confirm_memory=False)
    app.exec()
    w.close()
    print(RESULT + json.dumps(out), flush=True)
    return 0 if "stats" in out else 1


# -- the driver --------------------------------------------------------------------------

def _env(args, cache: str) -> dict:
    env = dict(os.environ)
    src = str(Path(args.source).resolve()) if args.source else str(REPO / "app")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["SPECDESK_CACHE_DIR"] = cache
    return env


def run_cli(args, cache: str) -> dict:
    cmd = [sys.executable, "-m", "specdesk", "generate", "--json", "--prompt", args.prompt,
           "--max-tokens", str(args.tokens), "--proposer", args.proposer, "--k", str(args.k),
           "--p-min", str(args.p_min), "--temp", "0", "--target", str(args.target)]
    if args.draft:
        cmd += ["--draft", str(args.draft)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=_env(args, cache), timeout=args.timeout)
    if p.returncode != 0:
        raise SystemExit(f"specdesk generate failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    doc = json.loads(p.stdout)
    return {"stats": doc["stats"], "text": doc["text"], "prompt_tokens": doc.get("prompt_tokens")}


def run_app(args, cache: str) -> dict:
    cfg = {"prompt": args.prompt, "tokens": args.tokens, "proposer": args.proposer, "k": str(args.k),
           "p_min": args.p_min, "threads": args.threads, "target": str(args.target),
           "draft": str(args.draft) if args.draft else None, "timeout": args.timeout}
    env = _env(args, cache)
    env["SPECDESK_DATA_DIR"] = tempfile.mkdtemp(prefix="specdesk-appvscli-data-")
    cmd = [sys.executable, str(HERE), "--app-worker", json.dumps(cfg)]
    if args.offscreen:
        env["QT_QPA_PLATFORM"] = "offscreen"
    else:
        env.pop("QT_QPA_PLATFORM", None)
        env["QT_QPA_PLATFORM"] = "xcb"
        cmd = ["xvfb-run", "-a", "-s", "-screen 0 1600x1000x24"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout + 60)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith(RESULT)), None)
    if line is None:
        raise SystemExit(f"the app run failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-2000:]}")
    out = json.loads(line[len(RESULT):])
    if "error" in out:
        raise SystemExit(f"the app run failed: {out['error']}")
    return out


def figures(r: dict) -> dict:
    st = r["stats"]
    steps = st["steps"] or 1
    f = {
        "tok_s": st["tokens_per_second"],
        "verify_ms": 1000 * st["verify_seconds"] / steps,
        "tok_per_step": st["generated"] / steps,
        "generated": st["generated"],
        "drafted": st["drafted"],
        "draft_s": st["draft_seconds"],
    }
    for key in ("chat_repaint_ms", "stats_repaint_ms", "handler_ms"):
        xs = r.get(key)
        if xs is not None:
            f[key] = {"n": len(xs), "mean": statistics.fmean(xs) if xs else 0.0, "max": max(xs, default=0.0),
                      "total": sum(xs)}
    if r.get("qt_cpu_s") is not None:
        f["qt_cpu_s"] = r["qt_cpu_s"]
        f["qt_cpu_share"] = r["qt_cpu_s"] / st["decode_seconds"] if st["decode_seconds"] else None
    if r.get("loop_late_max_ms") is not None:
        f["loop_late_max_ms"] = r["loop_late_max_ms"]
    return f


def _med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--app-worker":
        return app_worker(json.loads(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=215)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--proposer", default="draft")
    ap.add_argument("--k", default="auto")
    ap.add_argument("--p-min", type=float, default=0.75)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--target", type=Path)
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--source", type=Path, help="the package source root to run (default: this checkout's app/)")
    ap.add_argument("--offscreen", action="store_true", help="Qt's offscreen platform instead of xvfb-run")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    args = ap.parse_args()
    if not args.offscreen and shutil.which("xvfb-run") is None:
        raise SystemExit("xvfb-run is missing: apt-get install xvfb (or pass --offscreen)")
    if args.target is None or (args.draft is None and args.proposer in ("draft", "hybrid")):
        sys.path.insert(0, str(REPO / "app"))
        from specdesk.library.defaults import default_models

        args.target = args.target or default_models(["target"])[0].path
        if args.proposer in ("draft", "hybrid"):
            args.draft = args.draft or default_models(["draft"])[0].path

    cache = tempfile.mkdtemp(prefix="specdesk-appvscli-cache-")
    print(f"{args.target.name}{' + ' + args.draft.name if args.draft else ''}, {args.proposer}:k={args.k}, "
          f"p-min {args.p_min}, {args.tokens} tokens, threads {args.threads or 'default'}, "
          f"{'offscreen' if args.offscreen else 'xvfb'}, source {args.source or 'this checkout'}", flush=True)
    rows: dict[str, list[dict]] = {"cli": [], "app": []}
    texts: dict[str, set] = {"cli": set(), "app": set()}
    for i in range(args.runs):
        for kind, fn in (("cli", run_cli), ("app", run_app)):
            r = fn(args, cache)
            f = figures(r)
            rows[kind].append(f)
            texts[kind].add(r["text"])
            extra = ""
            if kind == "app":
                c, s = f.get("chat_repaint_ms"), f.get("stats_repaint_ms")
                if c and s and c["n"]:
                    extra = (f"; Qt thread per repaint: text {c['mean']:.1f} ms (max {c['max']:.1f}, {c['n']}x), "
                             f"stats {s['mean']:.1f} ms (max {s['max']:.1f}, {s['n']}x)")
                if f.get("handler_ms"):
                    extra += f"; step handler max {f['handler_ms']['max']:.1f} ms"
                if f.get("qt_cpu_share") is not None:
                    extra += f"; Qt thread CPU {f['qt_cpu_s']:.2f} s = {100 * f['qt_cpu_share']:.1f}% of decode"
            print(f"run {i + 1} {kind}: {f['tok_s']:.1f} tok/s, verify step {f['verify_ms']:.1f} ms, "
                  f"{f['tok_per_step']:.2f} tok/step, {f['generated']} tokens, drafted {f['drafted']} "
                  f"({f['draft_s']:.2f} s){extra}", flush=True)
    cli, app = rows["cli"], rows["app"]
    tps_ratio = _med(app, "tok_s") / _med(cli, "tok_s")
    ver_ratio = _med(app, "verify_ms") / _med(cli, "verify_ms")
    print(f"\nmedian of {args.runs}:        decode tok/s   verify step ms   tok/step")
    for kind, rs in rows.items():
        print(f"  {kind:<20} {_med(rs, 'tok_s'):>12.1f} {_med(rs, 'verify_ms'):>16.1f} {_med(rs, 'tok_per_step'):>10.2f}")
    print(f"  app / CLI            {tps_ratio:>12.3f} {ver_ratio:>16.3f}")
    if texts["cli"] != texts["app"]:
        print("note: the app's answer differed from the CLI's (same prompt and settings expected)")
    if args.json:
        from specdesk.files import write_json_atomic

        write_json_atomic(args.json, {"args": {k: str(v) for k, v in vars(args).items()}, "runs": rows,
                                      "ratio_tok_s": tps_ratio, "ratio_verify_ms": ver_ratio}, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
