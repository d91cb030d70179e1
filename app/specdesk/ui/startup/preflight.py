"""Checks made before the QApplication exists, because Qt aborts the whole process when
its platform plugin cannot be loaded:

- the Qt platform plugin(s) Qt will try (``$QT_QPA_PLATFORM``, else xcb, or
  wayland then xcb in a Wayland session): the plugin file is there, it can be
  dlopen'ed (else the missing system library is named, with the package to
  install), and for xcb/wayland the display answers;
- the user data directory is writable. If it is not, the app does NOT start: it
  says which directory, why, and how to fix it. Falling back to a temporary
  directory would let a user chat for an hour and lose every chat at exit.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .log import writable_dir_problem


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




def data_dir_problem(d: Path) -> str | None:
    why = writable_dir_problem(d)
    if why is None:
        return None
    src = "SPECDESK_DATA_DIR" if os.environ.get("SPECDESK_DATA_DIR") else "the user data directory"
    fix = "point SPECDESK_DATA_DIR at a writable folder" if os.environ.get("SPECDESK_DATA_DIR") else \
        "fix its permissions, free some disk space, or set SPECDESK_DATA_DIR to a writable folder"
    return f"{src} {d} is not writable ({why}); chats and settings could not be saved: {fix}"
