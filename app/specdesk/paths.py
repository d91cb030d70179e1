"""Where SpecDesk keeps things: models, caches, user data."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import platformdirs

APP_NAME = "SpecDesk"
_PKG_DIR = Path(__file__).resolve().parent


def project_root() -> Path | None:
    """The source checkout this package runs from, if any (app/specdesk -> ../..)."""
    root = _PKG_DIR.parent.parent
    return root if (root / "models" / "manifest.json").is_file() else None


def models_dir() -> Path:
    """models/ of the checkout, or $SPECDESK_MODELS_DIR, or the user data dir."""
    env = os.environ.get("SPECDESK_MODELS_DIR")
    if env:
        return Path(env).expanduser()
    root = project_root()
    if root is not None:
        return root / "models"
    return user_data_dir() / "models"


def manifest_path() -> Path:
    root = project_root()
    if root is not None:
        return root / "models" / "manifest.json"
    bundled = _PKG_DIR / "data" / "manifest.json"  # bundles and wheels carry a copy
    return bundled


def load_manifest() -> dict:
    return json.loads(manifest_path().read_text(encoding="utf-8"))


def user_data_dir() -> Path:
    env = os.environ.get("SPECDESK_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def user_cache_dir() -> Path:
    env = os.environ.get("SPECDESK_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_cache_dir(APP_NAME.lower(), appauthor=False))


def user_config_dir() -> Path | None:
    """$SPECDESK_CONFIG_DIR, the config home for SpecDesk's settings when it is set (tests,
    the self-test, a second profile): the settings are then an INI file there,
    ``SpecDesk/SpecDesk.ini``, on every platform. None: where the platform keeps them
    (Qt's choice: ``~/.config/SpecDesk/SpecDesk.conf`` on Linux, the registry on Windows,
    a plist on macOS)."""
    env = os.environ.get("SPECDESK_CONFIG_DIR")
    return Path(env).expanduser() if env else None


def frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def asset_path(name: str) -> Path | None:
    """A file from assets/ (checkout) or the bundled copy; None if missing."""
    candidates = []
    root = project_root()
    if root is not None:
        candidates.append(root / "assets" / name)
    candidates.append(_PKG_DIR / "data" / "assets" / name)
    meipass = getattr(sys, "_MEIPASS", None)
    if meipass:
        candidates.append(Path(meipass) / "assets" / name)
    for c in candidates:
        if c.is_file():
            return c
    return None


def hf_hub_cache(home: Path | None = None) -> Path:
    """HF_HUB_CACHE (or HUGGINGFACE_HUB_CACHE, or HF_HOME/hub), else huggingface_hub's
    default; with an explicit ``home``, ``home/.cache/huggingface/hub`` as the default."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    if home is not None:
        return Path(home) / ".cache" / "huggingface" / "hub"
    try:
        from huggingface_hub import constants

        return Path(constants.HF_HUB_CACHE)
    except ImportError:  # pragma: no cover
        return Path.home() / ".cache" / "huggingface" / "hub"
