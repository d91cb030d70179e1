"""Start the app, and make every failure to start (and every crash) visible.

A double-clicked app has no terminal: when it cannot start, the reason goes to a
dialog where one can be shown, and always to stderr and to a log file in the user
data directory (or, when that is not writable, the cache directory or the temp
directory). A silent exit is never acceptable.

Checked before the QApplication exists, because Qt aborts the whole process when
its platform plugin cannot be loaded:

- the Qt platform plugin(s) Qt will try (``$QT_QPA_PLATFORM``, else xcb, or
  wayland then xcb in a Wayland session): the plugin file is there, it can be
  dlopen'ed (else the missing system library is named, with the package to
  install), and for xcb/wayland the display answers;
- the user data directory is writable. If it is not, the app does NOT start: it
  says which directory, why, and how to fix it, and exits with code 1. Falling back
  to a temporary directory would let a user chat for an hour and lose every chat at
  exit; an unwritable data directory is a setup problem the user has to fix.

While the app runs, an uncaught exception (on the UI thread or any worker thread)
goes to the log file, to stderr and to a (non-modal) message box, and the app keeps
running; Qt's own messages go to the log; a fatal Qt message or a native crash
(faulthandler) is logged before the process ends.

``SPECDESK_NO_DIALOGS=1`` suppresses all dialogs (scripts, CI). No modal dialog is
ever shown on the offscreen/minimal platforms, where nobody could close it.
"""

from __future__ import annotations

import datetime
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

from .paths import user_cache_dir, user_data_dir

log = logging.getLogger(__name__)

LOG_NAME = "specdesk.log"
_LOG_MAX_BYTES = 1_000_000
EXIT_FAILURE = 1
_HEADLESS_PLATFORMS = ("offscreen", "minimal", "vnc", "eglfs", "linuxfb", "minimalegl", "vkkhrdisplay")

_log_path: Path | None = None
_log_resolved = False
_fault_file = None


# ===================================================================== log file & stderr


def _writable_dir(d: Path) -> str | None:
    """None if files can be created in ``d`` (created if needed), else why not."""
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".write-test-", dir=d)
        os.close(fd)
        os.unlink(name)
        return None
    except OSError as e:
        return e.strerror or str(e)


def _log_dirs() -> list[Path]:
    dirs = []
    for get in (user_data_dir, user_cache_dir):
        try:
            dirs.append(get())
        except Exception:  # noqa: BLE001 - platformdirs on a broken HOME
            pass
    dirs.append(Path(tempfile.gettempdir()) / f"specdesk-{os.getuid() if hasattr(os, 'getuid') else 'user'}")
    return dirs


def log_file() -> Path | None:
    """The log file: the first writable of the user data dir, the cache dir, the temp dir."""
    global _log_path, _log_resolved
    if _log_resolved:
        return _log_path
    _log_resolved = True
    for d in _log_dirs():
        f = d / LOG_NAME
        try:
            d.mkdir(parents=True, exist_ok=True)
            if f.is_file() and f.stat().st_size > _LOG_MAX_BYTES:
                os.replace(f, f.with_name(LOG_NAME + ".1"))
            with open(f, "a", encoding="utf-8"):
                pass
            _log_path = f
            break
        except OSError:
            continue
    return _log_path


def _reset_log_file() -> None:  # for tests
    global _log_path, _log_resolved
    _log_path, _log_resolved = None, False


def write_log(text: str) -> Path | None:
    f = log_file()
    if f is None:
        return None
    try:
        with open(f, "a", encoding="utf-8") as out:
            out.write(f"{datetime.datetime.now().isoformat(timespec='seconds')} [{os.getpid()}] {text.rstrip()}\n")
        return f
    except OSError:
        return None


def _stderr(text: str) -> None:
    # A windowed app on Windows (console=False) has sys.stderr = None.
    err = sys.stderr
    if err is None:
        return
    try:
        err.write(text.rstrip("\n") + "\n")
        err.flush()
    except (OSError, ValueError):
        pass


# ===================================================================== dialogs


def _dialogs_allowed() -> bool:
    if os.environ.get("SPECDESK_NO_DIALOGS", "") not in ("", "0"):
        return False
    plat = os.environ.get("QT_QPA_PLATFORM", "").split(";")[0].split(":")[0].strip()
    return plat not in _HEADLESS_PLATFORMS


def _qt_dialog(title: str, message: str, detail: str, where: Path | None) -> bool:
    """A modal error box, creating a QApplication if needed. Only call when the
    platform plugin is known to work."""
    try:
        from PySide6.QtWidgets import QApplication, QMessageBox

        app = QApplication.instance() or QApplication(sys.argv[:1])  # noqa: F841 - keeps it alive
        box = QMessageBox(QMessageBox.Icon.Critical, title, message)
        if where is not None:
            box.setInformativeText(f"Details are in {where}")
        if detail:
            box.setDetailedText(detail)
        box.exec()
        return True
    except Exception:  # noqa: BLE001 - no dialog possible: stderr and the log have it
        return False


def _external_dialog(title: str, message: str) -> bool:
    """zenity / kdialog / xmessage, for when Qt itself cannot show anything."""
    if not sys.platform.startswith("linux") or not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    for argv in (
        ["zenity", "--error", "--no-wrap", f"--title={title}", f"--text={message}"],
        ["kdialog", "--title", title, "--error", message],
        ["xmessage", "-center", "-title", title, f"{title}\n\n{message}"],
    ):
        if shutil.which(argv[0]):
            try:
                subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
                return True
            except OSError:
                continue
    return False


def report_startup_failure(message: str, detail: str = "", qt_dialog: bool = True) -> None:
    """stderr (one line), the log file, and a dialog where one can be shown.

    ``qt_dialog=False`` when Qt cannot show anything (no display, broken platform
    plugin): then an external dialog tool is tried instead.
    """
    message = " ".join(message.split())  # one line
    _stderr(f"specdesk: cannot start: {message}")
    where = write_log(f"cannot start: {message}" + (f"\n{detail.rstrip()}" if detail else ""))
    if where is not None:
        _stderr(f"specdesk: details in {where}")
    else:
        _stderr("specdesk: (no log file could be written anywhere)")
    if not _dialogs_allowed():
        return
    try:
        from PySide6.QtWidgets import QApplication

        have_app = QApplication.instance() is not None
    except Exception:  # noqa: BLE001
        have_app = False
    if (qt_dialog or have_app) and _qt_dialog("SpecDesk cannot start", message, detail, where):
        return
    _external_dialog("SpecDesk cannot start", message + (f"\n\nDetails are in {where}" if where else ""))


# ===================================================================== Qt platform preflight

# A missing system library -> (Debian/Ubuntu package, Fedora package)
_LIB_PACKAGES = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-xinerama.so.0": ("libxcb-xinerama0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libwayland-client.so.0": ("libwayland-client0", "libwayland-client"),
    "libwayland-cursor.so.0": ("libwayland-cursor0", "libwayland-cursor"),
    "libwayland-egl.so.1": ("libwayland-egl1", "libwayland-egl"),
}


def _missing_library(err: str) -> str | None:
    # "libxcb-cursor.so.0: cannot open shared object file: No such file or directory"
    for part in err.split(":"):
        part = part.strip()
        if ".so" in part and "cannot open" not in part and "/" not in part:
            return part
    return None


def _install_hint(lib: str) -> str:
    pk = _LIB_PACKAGES.get(lib)
    if pk:
        return f"install it (Debian/Ubuntu: sudo apt install {pk[0]}; Fedora: sudo dnf install {pk[1]})"
    return "install the system package that provides it"


def platform_candidates() -> list[str]:
    """The platform plugins Qt will try, in order."""
    env = os.environ.get("QT_QPA_PLATFORM", "").strip()
    if env:
        return [p.split(":", 1)[0].strip() for p in env.split(";") if p.split(":", 1)[0].strip()]
    if sys.platform.startswith("linux"):
        if os.environ.get("XDG_SESSION_TYPE") == "wayland" and os.environ.get("WAYLAND_DISPLAY"):
            return ["wayland", "xcb"]
        return ["xcb"]
    return []  # macOS / Windows: one built-in choice, not checked


def _plugin_dirs() -> list[Path]:
    dirs: list[Path] = []
    extra = os.environ.get("QT_QPA_PLATFORM_PLUGIN_PATH")
    if extra:
        dirs += [Path(p) for p in extra.split(os.pathsep) if p]
    from PySide6.QtCore import QCoreApplication, QLibraryInfo

    for p in [*QCoreApplication.libraryPaths(), QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)]:
        d = Path(p) / "platforms"
        if d not in dirs:
            dirs.append(d)
    return dirs


def _plugin_key(filename: str) -> str | None:
    name = filename
    for pre in ("libq", "q"):
        if name.startswith(pre):
            name = name[len(pre):]
            break
    else:
        return None
    for suf in (".so", ".dylib", ".dll"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return None


def _available_plugins() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in _plugin_dirs():
        try:
            entries = sorted(d.iterdir())
        except OSError:
            continue
        for f in entries:
            key = _plugin_key(f.name)
            if key and key not in found:
                found[key] = f
    if "wayland" in found:
        for alias in ("wayland-egl", "wayland-brcm"):
            found.setdefault(alias, found["wayland"])
    if "wayland-generic" in found:
        found.setdefault("wayland", found["wayland-generic"])
    return found


def _connect_problem(name: str) -> str | None:
    """For xcb and wayland: does the display answer?"""
    import ctypes

    if name == "xcb":
        disp = os.environ.get("DISPLAY", "")
        if not disp:
            return "no X display: DISPLAY is unset (the 'xcb' platform needs one)"
        try:
            xcb = ctypes.CDLL("libxcb.so.1")
            xcb.xcb_connect.restype = ctypes.c_void_p
            xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
            xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
            xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
            conn = xcb.xcb_connect(disp.encode(), None)
            bad = xcb.xcb_connection_has_error(conn)
            xcb.xcb_disconnect(conn)
        except (OSError, AttributeError):
            return None  # cannot check: let Qt try
        return f"cannot connect to the X display {disp!r} (is the X server running, and may this user use it?)" if bad else None
    if name.startswith("wayland"):
        try:
            wl = ctypes.CDLL("libwayland-client.so.0")
            wl.wl_display_connect.restype = ctypes.c_void_p
            wl.wl_display_connect.argtypes = [ctypes.c_char_p]
            wl.wl_display_disconnect.argtypes = [ctypes.c_void_p]
            conn = wl.wl_display_connect(None)
            if conn:
                wl.wl_display_disconnect(conn)
        except (OSError, AttributeError):
            return None
        if not conn:
            return f"cannot connect to the Wayland display {os.environ.get('WAYLAND_DISPLAY') or 'wayland-0'!r}"
    return None


def _candidate_problem(name: str, available: dict[str, Path]) -> str | None:
    path = available.get(name)
    if path is None:
        return f"the Qt platform plugin {name!r} is not installed (available: {', '.join(sorted(available)) or 'none'})"
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(str(path))
        except OSError as e:
            # In a PyInstaller bundle the loader's own message is on __cause__.
            err = str(e.__cause__ or e)
            lib = _missing_library(err)
            if lib:
                return f"the Qt platform plugin {name!r} cannot be loaded: the system library {lib} is missing; {_install_hint(lib)}"
            return f"the Qt platform plugin {name!r} cannot be loaded: {err}"
    return _connect_problem(name)


def platform_problem() -> str | None:
    """Why Qt would abort creating the QApplication, or None when one candidate works."""
    cands = platform_candidates()
    if not cands:
        return None
    if not os.environ.get("QT_QPA_PLATFORM", "").strip() and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        return ("no display: DISPLAY and WAYLAND_DISPLAY are unset (run it in a desktop session, "
                "or set QT_QPA_PLATFORM=offscreen)")
    import PySide6.QtGui  # noqa: F401 - load Qt's own libraries first, as the plugin expects them

    available = _available_plugins()
    problems = []
    for name in cands:
        p = _candidate_problem(name, available)
        if p is None:
            return None
        problems.append(p)
    if len(problems) == 1:
        return problems[0]
    return "no Qt platform plugin works: " + "; ".join(problems)


# ===================================================================== data directory


def data_dir_problem(d: Path) -> str | None:
    why = _writable_dir(d)
    if why is None:
        return None
    src = "SPECDESK_DATA_DIR" if os.environ.get("SPECDESK_DATA_DIR") else "the user data directory"
    fix = "point SPECDESK_DATA_DIR at a writable folder" if os.environ.get("SPECDESK_DATA_DIR") else \
        "fix its permissions, free some disk space, or set SPECDESK_DATA_DIR to a writable folder"
    return f"{src} {d} is not writable ({why}); chats and settings could not be saved: {fix}"


# ===================================================================== running app: crashes


class _ErrorBox:
    """Shows uncaught exceptions in a non-modal box on the UI thread; one box at a time."""

    def __init__(self) -> None:
        from PySide6.QtCore import QObject, Qt, Signal

        class Bridge(QObject):
            raised = Signal(str, str)

        self.bridge = Bridge()
        self.bridge.raised.connect(self._show, Qt.ConnectionType.QueuedConnection)
        self.box = None
        self.more = 0

    def emit(self, summary: str, detail: str) -> None:
        try:
            self.bridge.raised.emit(summary, detail)
        except RuntimeError:  # the bridge is gone (shutdown)
            pass

    def _show(self, summary: str, detail: str) -> None:
        from PySide6.QtCore import Qt
        from PySide6.QtWidgets import QMessageBox

        where = log_file()
        tail = f"\n\nDetails are in {where}" if where else ""
        if self.box is not None and self.box.isVisible():
            self.more += 1
            self.box.setInformativeText(f"The app keeps running. {self.more} more error(s) since.{tail}")
            return
        self.more = 0
        box = QMessageBox(QMessageBox.Icon.Critical, "SpecDesk: unexpected error", f"Something went wrong: {summary}")
        box.setInformativeText(f"The app keeps running; please report this.{tail}")
        box.setDetailedText(detail)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.setWindowModality(Qt.WindowModality.NonModal)
        box.destroyed.connect(lambda *_: setattr(self, "box", None))
        self.box = box
        box.show()


_error_box: _ErrorBox | None = None


def _report_uncaught(exc_type, exc, tb, where: str = "") -> None:
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    write_log(f"uncaught exception{where}:\n{text}")
    _stderr(text)
    if _error_box is not None and _dialogs_allowed():
        _error_box.emit(f"{exc_type.__name__}: {exc}", text)


def _excepthook(exc_type, exc, tb) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    _report_uncaught(exc_type, exc, tb)


def _thread_excepthook(args) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    _report_uncaught(args.exc_type, args.exc_value, args.exc_traceback, f" in thread {name}")


def _qt_message(mode, context, message: str) -> None:
    from PySide6.QtCore import QtMsgType

    qlog = logging.getLogger("qt")
    if mode == QtMsgType.QtFatalMsg:
        from PySide6.QtCore import QCoreApplication

        if not _app_started or QCoreApplication.startingUp():
            report_startup_failure(f"Qt could not start: {message.strip().splitlines()[0] if message.strip() else message}",
                                   message, qt_dialog=False)
        else:
            _stderr(f"specdesk: Qt stopped the app: {message}")
            write_log(f"Qt stopped the app (fatal): {message}")
        logging.shutdown()
        os._exit(EXIT_FAILURE)
    level = {
        QtMsgType.QtDebugMsg: logging.DEBUG,
        QtMsgType.QtInfoMsg: logging.INFO,
        QtMsgType.QtWarningMsg: logging.WARNING,
        QtMsgType.QtCriticalMsg: logging.ERROR,
    }.get(mode, logging.WARNING)
    qlog.log(level, "%s", message)


_app_started = False
_hooks_installed = False


def install_crash_logging() -> None:
    """Uncaught exceptions, Qt messages and native crashes go to the log file (and a
    box on screen for exceptions). Call once the Qt platform is known to work."""
    global _error_box, _hooks_installed, _fault_file
    if _hooks_installed:
        return
    _hooks_installed = True
    f = log_file()
    if f is not None:
        h = logging.FileHandler(f, encoding="utf-8")
        h.setLevel(logging.WARNING)
        h.setFormatter(logging.Formatter("%(asctime)s [%(process)d] %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S"))
        logging.getLogger().addHandler(h)
        try:
            import faulthandler

            _fault_file = open(f, "a", encoding="utf-8")  # noqa: SIM115 - kept open for faulthandler
            faulthandler.enable(_fault_file, all_threads=True)
        except (OSError, RuntimeError, ValueError):
            pass
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook
    try:
        from PySide6.QtCore import qInstallMessageHandler

        qInstallMessageHandler(_qt_message)
        _error_box = _ErrorBox()
    except Exception:  # noqa: BLE001 - Qt unusable: the hooks above still log
        pass


def uninstall_crash_logging() -> None:
    global _error_box, _hooks_installed
    try:
        from PySide6.QtCore import qInstallMessageHandler

        qInstallMessageHandler(None)
    except Exception:  # noqa: BLE001
        pass
    sys.excepthook = sys.__excepthook__
    threading.excepthook = threading.__excepthook__
    _error_box = None
    _hooks_installed = False


# ===================================================================== entry


def launch_gui(argv: list[str] | None = None) -> int:
    global _app_started
    try:
        import PySide6.QtCore  # noqa: F401
        import PySide6.QtWidgets  # noqa: F401
    except ImportError as e:
        report_startup_failure(f"the Qt library (PySide6) is missing or broken: {e}", traceback.format_exc(), qt_dialog=False)
        return EXIT_FAILURE
    try:
        problem = platform_problem()
    except Exception as e:  # noqa: BLE001 - the check itself failed: let Qt try, the handler catches aborts
        write_log(f"platform check failed: {type(e).__name__}: {e}")
        problem = None
    if problem:
        report_startup_failure(problem, qt_dialog=False)
        return EXIT_FAILURE
    # From here on Qt can show a dialog. A fatal Qt message is reported, not a silent abort.
    install_crash_logging()
    try:
        from .ui.app import data_dir, run
    except ImportError as e:
        report_startup_failure(f"a required library is missing or broken: {e}", traceback.format_exc())
        return EXIT_FAILURE
    try:
        d = data_dir()
        problem = data_dir_problem(d)
    except Exception as e:  # noqa: BLE001
        problem = f"cannot determine the user data directory: {e}"
    if problem:
        report_startup_failure(problem)
        return EXIT_FAILURE
    _app_started = True
    try:
        return run(argv)
    except Exception as e:  # noqa: BLE001 - shown to the user instead of a silent exit
        report_startup_failure(f"{type(e).__name__}: {e}", traceback.format_exc())
        return EXIT_FAILURE
    finally:
        _app_started = False
        uninstall_crash_logging()
