"""``specdesk --self-test [MODEL] [--self-test-draft PATH]``: start the real app
offscreen, load a model pair, generate 8 tokens with speculation, and check what
the window shows.

Meant for a freshly built bundle (are llama.cpp's libraries, the Qt plugins and the
data files really in it?) and for a user's bug report. It never touches the user's
chats or settings: the data, cache and QSettings directories are a temporary folder,
removed at the end. Prints one ``PASS``/``FAIL`` line per check and a summary line;
returns 0 only when every check passed. A watchdog ends the process with code 1
after ``timeout`` seconds, so it can never hang.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, TextIO

DEFAULT_TIMEOUT = 300.0
PROMPT = "Say hello in one short sentence."
MAX_TOKENS = 8


def default_models() -> tuple[Path | None, Path | None]:
    """The SmolLM2 test model (as target and draft) when it is in models/, else the default pair."""
    from ..library.defaults import default_models as manifest_models

    try:
        test = manifest_models(["test"])
        if test and test[0].path.is_file():
            return test[0].path, test[0].path
        pair = {m.role: m.path for m in manifest_models(["target", "draft"])}
        return pair.get("target"), pair.get("draft")
    except Exception:  # noqa: BLE001 - no manifest: the check below reports the missing model
        return None, None


class _Report:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.results: list[tuple[str, bool, str]] = []

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.results.append((name, ok, detail))
        line = f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else "")
        print(" ".join(line.split()), file=self.out, flush=True)
        return ok

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(ok for _, ok, _ in self.results)


def _isolate(tmp: Path) -> dict[str, str | None]:
    """Point every user-data location at ``tmp``; returns the old environment."""
    saved = {k: os.environ.get(k) for k in ("QT_QPA_PLATFORM", "SPECDESK_DATA_DIR", "SPECDESK_CACHE_DIR",
                                            "SPECDESK_CONFIG_DIR")}
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    os.environ["SPECDESK_DATA_DIR"] = str(tmp / "data")
    os.environ["SPECDESK_CACHE_DIR"] = str(tmp / "cache")
    os.environ["SPECDESK_CONFIG_DIR"] = str(tmp / "config")  # create_app points QSettings there
    return saved


def _restore(saved: dict[str, str | None]) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _wait(signal, timeout_s: float, failed: list, error_signal=None) -> tuple[str, tuple]:
    """Run the event loop until ``signal`` fires ("ok", its args), ``error_signal``
    fires ("error", its args), an uncaught exception happens ("exception") or time
    runs out ("timeout")."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    got: list[tuple[str, tuple]] = []

    def on(kind):
        def fired(*args):
            if not got:
                got.append((kind, args))
            loop.quit()

        return fired

    ok, err = on("ok"), on("error")
    signal.connect(ok)
    if error_signal is not None:
        error_signal.connect(err)
    timer = QTimer()
    timer.setSingleShot(True)
    timer.timeout.connect(loop.quit)
    timer.start(max(1, int(timeout_s * 1000)))
    poll = QTimer()  # an exception in a slot ends the wait early
    poll.timeout.connect(lambda: loop.quit() if failed else None)
    poll.start(100)
    if not got:
        loop.exec()
    timer.stop()
    poll.stop()
    for sig, slot in ((signal, ok), (error_signal, err)):
        if sig is not None:
            try:
                sig.disconnect(slot)
            except (RuntimeError, TypeError):
                pass
    if got:
        return got[0]
    return ("exception", ()) if failed else ("timeout", ())


def run_self_test(target: Path | None = None, draft: Path | None = None, timeout: float = DEFAULT_TIMEOUT,
                  out: TextIO | None = None) -> int:
    out = out or sys.stdout
    t0 = time.monotonic()
    rep = _Report(out)

    if target is None:
        target, default_draft = default_models()
        draft = draft or default_draft
    target = Path(target).expanduser().resolve() if target else None
    draft = Path(draft).expanduser().resolve() if draft else target

    def watchdog():
        print(f"FAIL timeout: the self-test did not finish within {timeout:.0f} s", file=out, flush=True)
        print("SELF-TEST FAILED (timeout)", file=out, flush=True)
        os._exit(1)

    dog = threading.Timer(timeout, watchdog)
    dog.daemon = True
    dog.start()

    tmp = Path(tempfile.mkdtemp(prefix="specdesk-selftest-"))
    saved = _isolate(tmp)
    failed: list[str] = []
    old_hook = sys.excepthook

    def hook(exc_type, exc, tb):
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        failed.append(text)
        print(text, file=sys.stderr, flush=True)

    sys.excepthook = hook
    window = None
    try:
        window = _run(rep, target, draft, timeout, t0, failed)
    except Exception as e:  # noqa: BLE001 - a crash of the self-test is a failure, reported
        rep.check("self-test", False, f"{type(e).__name__}: {e}")
        traceback.print_exc(file=sys.stderr)
    finally:
        if window is not None:
            try:
                window.close()
            except Exception:  # noqa: BLE001
                pass
        if failed:
            rep.check("no uncaught exceptions", False, failed[0].strip().splitlines()[-1])
        sys.excepthook = old_hook
        _restore(saved)
        shutil.rmtree(tmp, ignore_errors=True)
        dog.cancel()
    n_ok = sum(ok for _, ok, _ in rep.results)
    took = time.monotonic() - t0
    verdict = "PASSED" if rep.passed else "FAILED"
    print(f"SELF-TEST {verdict} ({n_ok}/{len(rep.results)} checks, {took:.1f} s)", file=out, flush=True)
    return 0 if rep.passed else 1


def _run(rep: _Report, target: Path | None, draft: Path | None, timeout: float, t0: float, failed: list):
    """Every check in order; returns the window (to close) once one was made."""
    left: Callable[[], float] = lambda: max(1.0, timeout - (time.monotonic() - t0) - 5.0)  # noqa: E731
    app = _check_qt(rep)
    _check_data_files(rep)
    if not _check_llama(rep):
        return None
    from .main_window import MainWindow
    from .settings import ChatSettings

    w = MainWindow(Path(os.environ["SPECDESK_DATA_DIR"]), autoload=False)
    w.show()
    app.processEvents()
    rep.check("window", True, "main window created offscreen")
    if target is None or not target.is_file():
        rep.check("models", False, f"no model to test with: {target or 'no SmolLM2 test model and no default pair in models/'}"
                  " (pass a GGUF path: specdesk --self-test MODEL.gguf)")
        return w
    # the settings under test; applied before loading so the specs use them
    from ..speculative.proposers import registry

    w.apply_settings(ChatSettings(proposer=registry.DEFAULT, auto_k=False, k=2, p_min=0.0, max_tokens=MAX_TOKENS))
    if _check_load(rep, w, target, draft, left, failed) is None:
        return w
    gen = _check_generation(rep, w, left, failed)
    if gen is None:
        return w
    _check_provenance(rep, w, gen)
    _check_stats(rep, w, gen)
    _check_memory(rep, w)
    return w


def _check_qt(rep: _Report):
    """Qt, offscreen, with the settings in the temporary folder ($SPECDESK_CONFIG_DIR)."""
    from PySide6.QtCore import qVersion

    from .. import __version__
    from .app import create_app

    app = create_app([sys.argv[0] if sys.argv and sys.argv[0] else "specdesk"])
    rep.check("qt", True, f"Qt {qVersion()} on the {app.platformName()!r} platform, specdesk {__version__}"
              + (" (frozen bundle)" if getattr(sys, "frozen", False) else ""))
    return app


def _check_data_files(rep: _Report) -> None:
    """The data files a bundle must carry."""
    from ..bench.suites import BUILTIN, builtin_dir
    from ..paths import asset_path, manifest_path

    missing = [n for n in ("icons/specdesk.svg", "style.qss") if asset_path(n) is None]
    suites = [s for s in BUILTIN if not (builtin_dir() / f"{s}.jsonl").is_file()]
    manifest_ok = manifest_path().is_file()
    rep.check("data files", not missing and not suites and manifest_ok,
              "assets, prompt suites and the model manifest found" if not missing and not suites and manifest_ok else
              f"missing assets {missing}, suites {suites}, manifest {'ok' if manifest_ok else manifest_path()}")


def _check_llama(rep: _Report) -> bool:
    """llama.cpp's libraries load."""
    try:
        from ..session import build_info

        info = build_info()
        rep.check("llama.cpp", True, f"llama-cpp-python {info['llama_cpp_python']}, {info['library'] or '?'}")
    except Exception as e:  # noqa: BLE001
        rep.check("llama.cpp", False, f"cannot load llama.cpp: {type(e).__name__}: {e}")
        return False
    return True


def _check_load(rep: _Report, w, target: Path, draft: Path | None, left, failed: list):
    """The pair loads through the window; returns the session, or None."""
    t_load = time.monotonic()
    w.load_models(target, draft, confirm_memory=False)
    kind, args = _wait(w.models_changed, left(), failed, w.error_shown)
    session = args[0] if kind == "ok" else None
    if session is None:
        why = {"error": args[0] if args else "", "timeout": "timed out", "exception": "an uncaught exception"}.get(kind, "load failed")
        rep.check("models", False, f"{target.name} + {draft.name if draft else 'no draft'}: {why}")
        return None
    rep.check("models", session.draft is not None,
              f"target {target.name}, draft {draft.name if draft else '-'} loaded in {time.monotonic() - t_load:.1f} s")
    return session


def _check_generation(rep: _Report, w, left, failed: list):
    """The window answers a prompt; returns the Generation, or None."""
    t_gen = time.monotonic()
    if not w.send(PROMPT):
        rep.check("generation", False, f"the window refused the prompt: {w.error_banner.text()}")
        return None
    kind, args = _wait(w.generation_finished, left(), failed, w.error_shown)
    gen = args[0] if kind == "ok" else None
    if gen is None or not getattr(gen, "steps", None):
        why = {"error": args[0] if args else "", "timeout": "timed out", "exception": "an uncaught exception"}.get(kind, "nothing generated")
        rep.check("generation", False, why)
        return None
    st = gen.stats
    n = st.generated
    ok_gen = n == MAX_TOKENS or (gen.stop_reason == "eos" and 0 < n <= MAX_TOKENS)
    rep.check("generation", ok_gen, f"{n} tokens ({gen.stop_reason}) in {time.monotonic() - t_gen:.1f} s: {gen.text!r}")
    return gen


def _check_provenance(rep: _Report, w, gen) -> None:
    """One coloured span per token, covering the answer's text exactly."""
    n = gen.stats.generated
    msgs = w.chat_view.messages()
    role, text, spans = msgs[-1] if msgs else (None, "", None)
    spans = spans or []
    contiguous = all(a.end == b.start for a, b in zip(spans, spans[1:]))
    ok_prov = (role == "assistant" and len(spans) == n and bool(spans) and spans[0].start == 0
               and spans[-1].end == len(text) and contiguous and text == gen.text)
    kinds = sorted({s.kind for s in spans})
    rep.check("provenance", ok_prov, f"{len(spans)} spans for {n} tokens, kinds {kinds}"
              + ("" if ok_prov else f", contiguous={contiguous}, role={role}"))


def _check_stats(rep: _Report, w, gen) -> None:
    """The side panel shows the answer's acceptance and speed."""
    st = gen.stats
    acc_shown = w.stats.m_accept.value.text()
    tps_shown = w.stats.m_tps.value.text()
    try:
        tps_val = float(tps_shown)
    except ValueError:
        tps_val = 0.0
    ok_stats = st.acceptance_rate is not None and acc_shown.endswith("%") and tps_val > 0 and (st.tokens_per_second or 0) > 0
    rep.check("stats", ok_stats, f"acceptance {acc_shown}, {tps_shown} tok/s, {st.steps} verify steps, {st.accepted}/{st.drafted} drafts accepted")


def _check_memory(rep: _Report, w) -> None:
    """The memory readout names both models' weights and the process RSS."""
    mt, md, mr = w.stats.mem_target.text(), w.stats.mem_draft.text(), w.stats.mem_rss.text()
    ok_mem = "weights" in mt and "weights" in md and "RSS" in mr and "–" not in mr
    plain = lambda s: s.replace("<b>", "").replace("</b>", "")  # noqa: E731
    rep.check("memory", ok_mem, f"{plain(mt)}; {plain(md)}; {mr}")
