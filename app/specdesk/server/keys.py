"""The app's serving API key across restarts: kept in the system's keyring, never in the
settings file.

Serving to other machines always takes a key (``ServeTab.start_settings``); this module
keeps the one in use in the keyring the ``keyring`` library finds (the Secret Service of
a Linux desktop, the macOS Keychain, the Windows Credential Manager), so that after a
restart the same key serves again and clients keep working. Where there is none (a Linux
machine without a Secret Service: ``keyring`` then has only its ``fail`` backend) or it
fails (locked, D-Bus gone), nothing is kept and a new key is made next time, and shown:
serving never falls back to no key. Tests point ``keyring`` at a backend of their own
(``PYTHON_KEYRING_BACKEND``, set for the whole run), never at the user's keyring.
"""

from __future__ import annotations

import logging
import secrets

log = logging.getLogger(__name__)

SERVICE = "SpecDesk"
USER = "serve-api-key"


def _keyring():
    """The ``keyring`` module, or None when it is not installed."""
    try:
        import keyring
    except Exception as e:  # noqa: BLE001 - an incomplete install is no keyring
        log.info("no keyring: %s", e)
        return None
    return keyring


def new_key() -> str:
    """A fresh API key: 32 random URL-safe characters (192 bits)."""
    return secrets.token_urlsafe(24)


def stored_key() -> str | None:
    """The key kept by an earlier session, or None (none kept, or no keyring)."""
    kr = _keyring()
    if kr is None:
        return None
    try:
        key = kr.get_password(SERVICE, USER)
    except Exception as e:  # noqa: BLE001 - no backend, a locked or unreachable keyring: none kept
        log.info("the API key could not be read from the keyring: %s", e)
        return None
    return (key.strip() or None) if isinstance(key, str) else None


def store_key(key: str) -> bool:
    """Keep ``key`` for the next session; False when there is no keyring to keep it in."""
    kr = _keyring()
    if kr is None:
        return False
    try:
        kr.set_password(SERVICE, USER, key)
    except Exception as e:  # noqa: BLE001 - no backend, a locked or unreachable keyring: not kept
        log.info("the API key could not be kept in the keyring: %s", e)
        return False
    return True


__all__ = ["SERVICE", "USER", "new_key", "store_key", "stored_key"]
