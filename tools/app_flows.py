"""The app's side of tools/app_vs_cli.py: the two ways it runs the app, and what it
reads from /proc about the app's threads.

- The user's flow (:func:`run_user_flow`): the installed ``specdesk`` entry point (the
  gui-script ``pip install -e .`` writes, which calls ``specdesk.__main__:main``) under
  ``xvfb-run`` at a given screen size, with fresh settings and data folders; the prompt
  is typed into the message box with xdotool once the pair has loaded, Enter pressed, and
  the default answer left to finish. Its statistics are read from the chat database the
  app writes (``chats.sqlite3`` in the data folder), not from the screen.
- The built window (:func:`window_worker`): this tool builds the MainWindow itself in a
  process of its own, applies the settings it compares, loads the pair and sends the
  prompt through the window's API.

Both report, for the answer, each thread's CPU time and context switches (grouped by the
thread's name: llama.cpp's OpenMP workers carry the name of the thread that started
them) and the virtual X server's CPU time.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

RESULT = "APP-RESULT "
_TICK = os.sysconf("SC_CLK_TCK")


# -- /proc ---------------------------------------------------------------------------------

def thread_counters(pid: int) -> dict[int, tuple[str, float, int, int]]:
    """Per thread of ``pid``: (name, CPU seconds, voluntary and involuntary context switches)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        except OSError:
            continue  # the thread ended meanwhile
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / _TICK
        out[int(tid)] = (name, cpu, int(status["voluntary_ctxt_switches"]), int(status["nonvoluntary_ctxt_switches"]))
    return out


def thread_delta(before: dict, after: dict) -> dict[str, dict]:
    """What each group of threads (by name) did between two :func:`thread_counters`:
    threads, CPU seconds, voluntary and involuntary switches."""
    groups: dict[str, dict] = {}
    for tid, (name, cpu, vol, inv) in after.items():
        _, cpu0, vol0, inv0 = before.get(tid, (name, 0.0, 0, 0))
        g = groups.setdefault(name, {"threads": 0, "cpu_s": 0.0, "voluntary": 0, "involuntary": 0})
        g["threads"] += 1
        g["cpu_s"] = round(g["cpu_s"] + cpu - cpu0, 3)
        g["voluntary"] += vol - vol0
        g["involuntary"] += inv - inv0
    return {k: v for k, v in groups.items() if v["cpu_s"] > 0 or v["voluntary"] or v["involuntary"]}


def process_cpu(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


def find_child(pid: int, name: str) -> int | None:
    """The first descendant of ``pid`` whose command name is ``name``."""
    import psutil

    try:
        for p in psutil.Process(pid).children(recursive=True):
            if p.name() == name:
                return p.pid
    except psutil.Error:
        pass
    return None


# -- the user's flow -------------------------------------------------------------------------

def entry_point() -> Path:
    """The ``specdesk`` gui-script of this environment: what a user's ``pip install -e .``
    put on the PATH (it runs ``specdesk.__main__:main``, as ``python -m specdesk`` does)."""
    script = Path(sys.executable).parent / "specdesk"
    if not script.is_file() or "specdesk.__main__ import main" not in script.read_text(errors="replace"):
        raise SystemExit(f"{script} is not the specdesk entry point: pip install -e . in this environment first")
    return script


def _chat_rows(db: Path, role: str) -> list[tuple[int, str, str | None]]:
    if not db.exists():
        return []
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            return con.execute("SELECT id, content, stats FROM messages WHERE role = ? ORDER BY id", (role,)).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return []  # being created, or busy: asked again at the next poll


def _wait_idle(pid: int, deadline: float, quiet_s: float = 0.05) -> None:
    """Until the app has used under ``quiet_s`` CPU seconds in a second (the pair is
    loaded and nothing else runs): what a user sees as 'loaded', read from outside."""
    last = process_cpu(pid)
    time.sleep(1.0)
    while time.monotonic() < deadline:
        now = process_cpu(pid)
        if now is None:
            raise RuntimeError("the app ended while loading")
        if last is not None and now - last < quiet_s:
            return
        last = now
        time.sleep(1.0)
    raise RuntimeError("the app did not settle after starting")


def _type_prompt(xdo, prompt: str) -> None:
    """Replace the message box's text with ``prompt`` and press Enter: lines are typed as
    a user does, with Shift+Enter between them."""
    xdo("key", "ctrl+a")
    for i, line in enumerate(prompt.split("\n")):
        if i:
            xdo("key", "shift+Return")
        if line:
            xdo("type", "--delay", "8", line)
    xdo("key", "Return")


def _close(proc: subprocess.Popen, app: int | None, xdo) -> None:
    """Ctrl+Q (the window's Quit), then SIGTERM, then the whole group."""
    try:
        xdo("key", "ctrl+q")
    except (RuntimeError, subprocess.SubprocessError):
        pass
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        if app is not None:
            try:
                os.kill(app, signal.SIGTERM)
            except OSError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # Xvfb, the chat template helper: nothing outlives the run
    except OSError:
        pass
    proc.wait()


def run_user_flow(prompt: str, screen: str, env: dict, timeout: float, app_env: dict | None = None) -> dict:
    """One answer through the user's flow at ``screen`` (WxH); returns the answer's
    statistics (as the app stored them), its text, and what its threads did."""
    import psutil

    env = dict(env, **(app_env or {}))
    env.pop("QT_QPA_PLATFORM", None)  # a user's desktop session sets none
    env.pop("DISPLAY", None)
    auth = Path(env["HOME"]) / ".Xauthority-run"
    db = Path(env["SPECDESK_DATA_DIR"]) / "chats.sqlite3"
    cmd = ["xvfb-run", "-a", "-f", str(auth), "-s", f"-screen 0 {screen}x24", str(entry_point())]
    console = open(Path(env["HOME"]) / "console.txt", "w+b")  # what the app prints, read when it fails
    proc = subprocess.Popen(cmd, env=env, stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    app = None
    xenv: dict = {}

    def xdo(*args: str) -> str:
        p = subprocess.run(["xdotool", *args], env=xenv, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise RuntimeError(f"xdotool {args[0]}: {p.stderr.strip()}")
        return p.stdout

    try:
        while app is None and time.monotonic() < deadline and proc.poll() is None:
            app = find_child(proc.pid, "specdesk")  # the gui-script's process takes the script's name
            time.sleep(0.2)
        if app is None:
            raise RuntimeError("the app did not start")
        display = psutil.Process(app).environ().get("DISPLAY")
        xenv = dict(os.environ, DISPLAY=display, XAUTHORITY=str(auth))
        wid = xdo("search", "--sync", "--onlyvisible", "--name", "^SpecDesk$").split()[0]
        _wait_idle(app, deadline)
        for _ in range(30):  # a user presses Enter again when the pair was not quite loaded
            xdo("windowfocus", "--sync", wid)
            _type_prompt(xdo, prompt)
            t = time.monotonic() + 3
            while time.monotonic() < t and not _chat_rows(db, "user"):
                time.sleep(0.1)
            if _chat_rows(db, "user"):
                break
            _wait_idle(app, deadline)
        else:
            raise RuntimeError("the app never took the prompt")
        x_server = find_child(proc.pid, "Xvfb")
        t0, th0, x0 = time.monotonic(), thread_counters(app), process_cpu(x_server) if x_server else None
        answers = []
        while not answers:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the answer did not finish")
            time.sleep(2.0)  # a read every 2 s: the driver itself stays off the cores
            answers = [r for r in _chat_rows(db, "assistant") if r[2]]
        th1, x1 = thread_counters(app), process_cpu(x_server) if x_server else None
        wall = time.monotonic() - t0
        typed = _chat_rows(db, "user")[0][1]
        if typed != prompt:
            raise RuntimeError(f"the message box sent {typed[:80]!r}, not the prompt")
        out = {"stats": json.loads(answers[0][2]), "text": answers[0][1], "threads": thread_delta(th0, th1),
               "wall_s": wall, "screen": screen}
        if x0 is not None and x1 is not None:
            out["x_cpu_s"] = x1 - x0
        return out
    except RuntimeError as e:
        _close(proc, app, xdo)
        console.seek(0)
        raise SystemExit(f"the user's flow at {screen} failed: {e}\n{console.read().decode(errors='replace')[-2000:]}") from None
    finally:
        if proc.returncode is None:
            _close(proc, app, xdo)
        console.close()


def run_cli_user(prompt: str, tokens: int, env: dict, timeout: float, cli_env: dict | None = None) -> dict:
    """``specdesk generate --prompt P --max-tokens N --json`` with the CLI's defaults,
    through the same entry point; with its CPU time and context switches (wait4)."""
    cmd = [str(entry_point()), "generate", "--prompt", prompt, "--max-tokens", str(tokens), "--json"]
    p = subprocess.Popen(cmd, env=dict(env, **(cli_env or {})), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        raise SystemExit("specdesk generate timed out") from None
    if p.returncode != 0:
        raise SystemExit(f"specdesk generate failed ({p.returncode}): {stderr.strip()[-2000:]}")
    doc = json.loads(stdout)
    return {"stats": doc["stats"], "text": doc["text"]}


# -- the built window ------------------------------------------------------------------------

def window_worker(cfg: dict) -> int:
    """Inside xvfb-run (or offscreen): build the MainWindow, apply the compared settings,
    load the pair, send the prompt; print the result as one line. llama.cpp's threads
    wait as in the app (set by its entry point before llama.cpp loads)."""
    from specdesk.engine.threads import prepare_for_ui

    prepare_for_ui()
    from PySide6.QtCore import QSettings, QTimer

    from specdesk.ui.app import create_app, data_dir
    from specdesk.ui.main_window import MainWindow
    from specdesk.ui.settings import ChatSettings

    app = create_app()
    QSettings().clear()
    w = MainWindow(data_dir(), autoload=False)
    w.resize(*(int(v) for v in cfg.get("size", "1366x768").split("x")))
    w.show()
    auto = cfg["k"] == "auto"
    # the app's defaults but for what is compared: settings first, applied before loading
    w.apply_settings(ChatSettings(proposer=cfg["proposer"], auto_k=auto, k=4 if auto else int(cfg["k"]),
                                  p_min=cfg["p_min"], temperature=0.0, max_tokens=cfg["tokens"],
                                  threads=cfg["threads"] or 0))
    out: dict = {}
    state: dict = {"sent": False}
    pid = os.getpid()

    def x_server() -> float | None:
        x = find_child(os.getppid(), "Xvfb")
        return process_cpu(x) if x else None

    def loaded(session) -> None:
        if session is None:
            out["error"] = "load failed: " + getattr(getattr(w, "error_banner", None), "text", lambda: "?")()
            app.exit(1)
            return
        if not state["sent"]:
            state["sent"] = True
            out["qt_cpu0"] = time.thread_time()  # this is the Qt thread
            state["x0"], state["th0"] = x_server(), thread_counters(pid)
            w.send(cfg["prompt"])

    def done(gen) -> None:
        out["stats"] = gen.stats.to_dict()
        out["text"] = gen.text
        out["qt_cpu_s"] = time.thread_time() - out.pop("qt_cpu0")
        out["threads"] = thread_delta(state["th0"], thread_counters(pid))
        x1 = x_server()
        if state["x0"] is not None and x1 is not None:
            out["x_cpu_s"] = x1 - state["x0"]
        label = getattr(getattr(w, "stats", None), "auto_estimate", None)
        out["estimate"] = label.text() if label is not None else ""
        app.quit()

    w.models_changed.connect(loaded)
    w.generation_finished.connect(done)
    QTimer.singleShot(int(cfg["timeout"] * 1000), lambda: (out.setdefault("error", "timed out"), app.exit(1)))
    w.load_models(Path(cfg["target"]), Path(cfg["draft"]) if cfg["draft"] else None, confirm_memory=False)
    app.exec()
    w.close()
    print(RESULT + json.dumps(out), flush=True)
    return 0 if "stats" in out else 1
