"""Chats on disk: a SQLite file with every message, its provenance spans and the
statistics of its generation.

Each write is its own transaction (WAL journal), so killing the app loses at most
the answer being generated.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SpecDeskError

SCHEMA = """
CREATE TABLE IF NOT EXISTS chats (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    settings TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    spans TEXT,
    stats TEXT,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_chat ON messages(chat_id, id);
"""


@dataclass
class Message:
    role: str
    content: str
    # One span per output token: [start, end, kind, source, position, p, q, lookup_start]
    spans: list | None = None
    stats: dict | None = None
    id: int | None = None


@dataclass
class Chat:
    id: int
    title: str
    created: float
    updated: float
    settings: dict = field(default_factory=dict)


class ChatStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as e:
            raise SpecDeskError(f"cannot open the chat database {self.path}: {e}") from None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _exec(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            try:
                return self._db.execute(sql, args)
            except sqlite3.Error as e:
                raise SpecDeskError(f"the chat database failed: {e}") from None

    # -- chats ----------------------------------------------------------------------

    def create_chat(self, title: str = "New chat", settings: dict | None = None) -> Chat:
        now = time.time()
        cur = self._exec(
            "INSERT INTO chats(title, created, updated, settings) VALUES (?, ?, ?, ?)",
            (title, now, now, json.dumps(settings or {})),
        )
        return Chat(cur.lastrowid, title, now, now, settings or {})

    def chats(self) -> list[Chat]:
        rows = self._exec("SELECT id, title, created, updated, settings FROM chats ORDER BY updated DESC, id DESC").fetchall()
        return [Chat(r[0], r[1], r[2], r[3], json.loads(r[4] or "{}")) for r in rows]

    def chat(self, chat_id: int) -> Chat | None:
        r = self._exec("SELECT id, title, created, updated, settings FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return Chat(r[0], r[1], r[2], r[3], json.loads(r[4] or "{}")) if r else None

    def rename_chat(self, chat_id: int, title: str) -> None:
        self._exec("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))

    def save_settings(self, chat_id: int, settings: dict) -> None:
        self._exec("UPDATE chats SET settings = ? WHERE id = ?", (json.dumps(settings), chat_id))

    def delete_chat(self, chat_id: int) -> None:
        self._exec("DELETE FROM chats WHERE id = ?", (chat_id,))

    # -- messages -------------------------------------------------------------------

    def add_message(self, chat_id: int, msg: Message) -> Message:
        now = time.time()
        cur = self._exec(
            "INSERT INTO messages(chat_id, role, content, spans, stats, created) VALUES (?, ?, ?, ?, ?, ?)",
            (
                chat_id,
                msg.role,
                msg.content,
                json.dumps(msg.spans) if msg.spans is not None else None,
                json.dumps(msg.stats) if msg.stats is not None else None,
                now,
            ),
        )
        self._exec("UPDATE chats SET updated = ? WHERE id = ?", (now, chat_id))
        msg.id = cur.lastrowid
        return msg

    def messages(self, chat_id: int) -> list[Message]:
        rows = self._exec(
            "SELECT id, role, content, spans, stats FROM messages WHERE chat_id = ? ORDER BY id", (chat_id,)
        ).fetchall()
        return [
            Message(role=r[1], content=r[2], spans=json.loads(r[3]) if r[3] else None, stats=json.loads(r[4]) if r[4] else None, id=r[0])
            for r in rows
        ]

    def delete_message(self, message_id: int) -> None:
        self._exec("DELETE FROM messages WHERE id = ?", (message_id,))

    def clear_messages(self, chat_id: int) -> None:
        self._exec("DELETE FROM messages WHERE chat_id = ?", (chat_id,))
