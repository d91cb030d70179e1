"""The folders a user added to the library (library.json in the user data folder)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ..errors import SpecDeskError
from ..files import read_json_object, write_json_atomic
from ..paths import user_data_dir

_SETTINGS_FORMAT = 1
_settings_lock = threading.Lock()


def settings_path() -> Path:
    return user_data_dir() / "library.json"


def _read_settings(strict: bool = False) -> dict:
    """library.json's object. ``strict`` (before writing it back): a file that could not
    be read (too many open files, an I/O error) is a SpecDeskError, never read as empty,
    so the folders it lists are not written over with one."""
    try:
        return read_json_object(settings_path(), "library settings", keep_damaged=True, strict=strict)
    except OSError as e:
        raise SpecDeskError(f"could not read the library's folders from {settings_path()}: {e.strerror or e}; "
                            "nothing was changed, try again") from None


def user_folders() -> list[Path]:
    """The folders the user added to the library, in the order they were added."""
    raw = _read_settings().get("folders", [])
    if not isinstance(raw, list):
        return []
    return [Path(x) for x in raw if isinstance(x, str) and x]


def _norm_folder(p: Path | str) -> Path:
    return Path(os.path.abspath(Path(p).expanduser()))


def add_folder(p: Path | str) -> None:
    """Add a folder to scan (an absolute path; a folder already there is not added twice)."""
    folder = _norm_folder(p)
    if not folder.is_dir():
        raise SpecDeskError(f"{folder} is not a folder")
    with _settings_lock:
        data = _read_settings(strict=True)
        current = [x for x in data.get("folders", []) if isinstance(x, str)] if isinstance(data.get("folders"), list) else []
        if str(folder) in current:
            return
        data["format"] = _SETTINGS_FORMAT
        data["folders"] = current + [str(folder)]
        write_json_atomic(settings_path(), data, indent=1)


def remove_folder(p: Path | str) -> None:
    """Stop scanning a folder that was added with ``add_folder``."""
    folder = _norm_folder(p)
    with _settings_lock:
        data = _read_settings(strict=True)
        current = [x for x in data.get("folders", []) if isinstance(x, str)] if isinstance(data.get("folders"), list) else []
        if str(folder) not in current:
            raise SpecDeskError(f"{folder} is not one of the library's folders")
        data["format"] = _SETTINGS_FORMAT
        data["folders"] = [x for x in current if x != str(folder)]
        write_json_atomic(settings_path(), data, indent=1)
