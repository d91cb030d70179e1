"""A keyring backend for tests: passwords in a JSON file of the test's own.

The run's backend is keyring's ``fail`` one (tests/conftest.py), so no test ever reads
or writes the user's keyring; a test that needs a keyring that keeps a key sets this
one with ``keyring.set_keyring(FileKeyring(path))`` and puts the previous one back."""

from __future__ import annotations

import json
from pathlib import Path

from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError


class FileKeyring(KeyringBackend):
    priority = 0.5  # never chosen by keyring itself (the run names its backend)

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = Path(path)

    def _read(self) -> dict:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def get_password(self, service: str, username: str) -> str | None:
        return self._read().get(f"{service}\0{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        data = self._read()
        data[f"{service}\0{username}"] = password
        self.path.write_text(json.dumps(data))

    def delete_password(self, service: str, username: str) -> None:
        data = self._read()
        if data.pop(f"{service}\0{username}", None) is None:
            raise PasswordDeleteError(username)
        self.path.write_text(json.dumps(data))
