"""Chats on disk: a SQLite file with every message, its provenance spans and the
statistics of its generation.

Each write is its own transaction (WAL journal), so killing the app loses at most
the answer being generated.

The file is the user's: it is created owner-only (folder 0o700, file 0o600), its
schema carries a version (``PRAGMA user_version``) and is brought up to date by
:data:`MIGRATIONS` when opened. A file that is not a usable chat database (damaged,
not SQLite, of another schema) is never deleted: it is moved aside
(``chats.sqlite3.damaged-<time>``), a fresh one is started, and
:attr:`ChatStore.recovered` says so in one line for the window to show. A damaged
row is skipped when read (a message whose spans or statistics are damaged keeps its
text), never an error.

Another SpecDesk, of another version, may have the same file open. A database written
by a newer SpecDesk is not damaged, and a database another connection has open is not
this process's to change: neither is ever moved aside or migrated. This process then
keeps its chats in memory (:attr:`ChatStore.saved` is False) and says why in
:attr:`ChatStore.recovered`.

The app's chat window is its only user (the CLI, the server and the benchmarks keep no
chats); it lives below ui/ because it holds no Qt, and its rules (what is kept, what is
moved aside) are the session's, not the window's.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import threading
import time
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Callable

from ..errors import SpecDeskError
from ..files import move_aside
from ..speculative.stats import Stats

log = logging.getLogger(__name__)

# Version 1: the schema SpecDesk 0.1 created without a version. CREATE ... IF NOT
# EXISTS leaves such a file's tables and rows as they are and only stamps the version.
_V1 = [
    """CREATE TABLE IF NOT EXISTS chats (
        id INTEGER PRIMARY KEY,
        title TEXT NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL,
        settings TEXT NOT NULL DEFAULT '{}'
    )""",
    """CREATE TABLE IF NOT EXISTS messages (
        id INTEGER PRIMARY KEY,
        chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        spans TEXT,
        stats TEXT,
        created REAL NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS messages_chat ON messages(chat_id, id)",
]

# MIGRATIONS[i] takes a database from version i to i + 1 (0: new, or unversioned).
# Each runs in one transaction with its version stamp. Append, never edit.
MIGRATIONS: list[list[str]] = [_V1]
SCHEMA_VERSION = len(MIGRATIONS)

# The columns this code reads: a database without them is not ours.
_COLUMNS = {
    "chats": {"id", "title", "created", "updated", "settings"},
    "messages": {"id", "chat_id", "role", "content", "spans", "stats", "created"},
}
ROLES = ("system", "user", "assistant")


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


class _NotOurs(Exception):
    """The file opened but is not a chat database this code can use."""


class _LeftAlone(Exception):
    """The file is a chat database this process must not change (newer, or in use)."""


def _in_use(path: Path) -> bool:
    """Whether another connection, in this process or another, has the database open.
    Every SpecDesk keeps its file in WAL mode, where an open connection holds a shared
    lock on the file for as long as it is open, so an exclusive lock is refused."""
    try:
        probe = sqlite3.connect(str(path), timeout=0, isolation_level=None)
    except sqlite3.Error:
        return False
    try:
        probe.execute("PRAGMA locking_mode=EXCLUSIVE")
        probe.execute("BEGIN EXCLUSIVE")
        probe.execute("ROLLBACK")
        return False
    except sqlite3.Error as e:
        name = getattr(e, "sqlite_errorname", None)  # Python 3.11+
        if name is not None:
            return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
        return "locked" in str(e)
    finally:
        probe.close()


def _check_ours_to_change(db: sqlite3.Connection, shared: bool) -> None:
    """Raise _LeftAlone for a database written by a newer SpecDesk, and for an older one
    that another connection has open (an older SpecDesk, still running): neither is this
    process's to migrate or move aside."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise _LeftAlone(f"was written by a newer SpecDesk (schema {version}; this one reads up to {SCHEMA_VERSION})",
                         "open it with that one")
    started = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
    if version < SCHEMA_VERSION and shared and started:
        raise _LeftAlone(f"is open in another program, an older SpecDesk perhaps (schema {version}; this one "
                         f"needs {SCHEMA_VERSION})", "close it and start this one again")


def _is_damage(e: sqlite3.Error) -> bool:
    """SQLITE_NOTADB / SQLITE_CORRUPT ("file is not a database", "database disk image is
    malformed"): the file's fault. Locked, read-only, I/O errors are not."""
    name = getattr(e, "sqlite_errorname", None)  # Python 3.11+
    if name is not None:
        return name.startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT"))
    return type(e) is sqlite3.DatabaseError


def _owner_only_file(path: Path) -> None:
    """Create ``path`` as 0o600 (whatever the umask), or tighten an existing one of ours."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        st = os.fstat(fd)
        if hasattr(os, "fchmod") and st.st_mode & 0o077 and st.st_uid == os.getuid():
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


class ChatStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        # One line for the window when the file could not be used (moved aside, or left alone).
        self.recovered: str | None = None
        # False: the file was left alone and this session's chats live in memory only.
        self.saved = True
        self._shared = False  # another connection had the file open when this one opened it
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._db = self._open()
        except _LeftAlone as e:
            reason, advice = e.args
            self._db = self._in_memory(f"The chat database {self.path} {reason}, so it was left as it is: {advice}")
        except _NotOurs as e:
            self._db = self._unusable(str(e))
        except sqlite3.Error as e:
            if not _is_damage(e):
                raise SpecDeskError(f"cannot open the chat database {self.path}: {e}") from None
            self._db = self._unusable(str(e))
        except OSError as e:
            raise SpecDeskError(f"cannot open the chat database {self.path}: {e.strerror or e}") from None

    def _open(self) -> sqlite3.Connection:
        _owner_only_file(self.path)
        for side in ("-wal", "-shm"):
            p = self.path.with_name(self.path.name + side)
            if p.exists():
                _owner_only_file(p)
        self._shared = _in_use(self.path)
        db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA foreign_keys=ON")
            problems = [r[0] for r in db.execute("PRAGMA quick_check(3)").fetchall()]
            if problems != ["ok"]:
                raise _NotOurs("damaged: " + "; ".join(str(p) for p in problems)[:200])
            _check_ours_to_change(db, self._shared)  # before anything is written to the file
            db.execute("PRAGMA journal_mode=WAL")
            self._migrate(db)
        except BaseException:
            db.close()
            raise
        return db

    @staticmethod
    def _migrate(db: sqlite3.Connection) -> None:
        """Bring ``db`` to :data:`SCHEMA_VERSION`, one transaction per version."""
        version = db.execute("PRAGMA user_version").fetchone()[0]
        while version < SCHEMA_VERSION:
            db.execute("BEGIN IMMEDIATE")
            try:
                # read again under the write lock: another SpecDesk may have migrated it meanwhile
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version < SCHEMA_VERSION:
                    for sql in MIGRATIONS[version]:
                        db.execute(sql)
                    version += 1
                    db.execute(f"PRAGMA user_version = {version}")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        for table, wanted in _COLUMNS.items():
            have = {r[1] for r in db.execute(f"PRAGMA table_info({table})").fetchall()}
            if not wanted <= have:
                raise _NotOurs(f"not a SpecDesk chat database (table {table} lacks {', '.join(sorted(wanted - have))})")

    def _unusable(self, why: str) -> sqlite3.Connection:
        """The file is not a usable chat database: moved aside for a fresh one, unless
        another connection has it open (then it is not this process's to move)."""
        why = " ".join(why.split())
        if self._shared:
            return self._in_memory(f"The chat database {self.path} could not be used ({why}) and another program "
                                   "has it open, so it was left as it is: close that program and start SpecDesk again")
        return self._start_afresh(why)

    def _in_memory(self, why: str) -> sqlite3.Connection:
        """A store for this session only, in memory; ``why`` says what happened to the file."""
        self.saved = False
        self.recovered = f"{why}. Chats in this window are not saved."
        log.warning("%s", self.recovered)
        db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA foreign_keys=ON")
        self._migrate(db)
        return db

    def _start_afresh(self, why: str) -> sqlite3.Connection:
        kept = move_aside(self.path, why)
        if kept is None:
            raise SpecDeskError(f"the chat database {self.path} is unusable ({why}) and could not be moved aside; "
                                "move it away and start again")
        for side in ("-wal", "-shm"):  # they belong to the damaged file: keep them with it
            p = self.path.with_name(self.path.name + side)
            if p.exists():
                try:
                    os.replace(p, kept.with_name(kept.name + side))
                except OSError as e:
                    log.warning("could not move %s aside: %s", p, e)
        self.recovered = (f"The chat database could not be used ({why}); it was kept as {kept.name} "
                          "and a new one was started.")
        try:
            return self._open()
        except (sqlite3.Error, _NotOurs, OSError) as e:
            raise SpecDeskError(f"cannot open the chat database {self.path}: {e}") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _exec(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            try:
                return self._db.execute(sql, args)
            except sqlite3.Error as e:
                raise SpecDeskError(f"the chat database failed: {e}") from None

    def _transaction(self, work: Callable[[sqlite3.Connection], object]) -> object:
        """``work(db)`` in one transaction: all of it is stored, or none."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    out = work(self._db)
                    self._db.execute("COMMIT")
                    return out
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                raise SpecDeskError(f"the chat database failed: {e}") from None

    # -- chats ----------------------------------------------------------------------

    def create_chat(self, title: str = "New chat", settings: dict | None = None) -> Chat:
        now = time.time()
        cur = self._exec(
            "INSERT INTO chats(title, created, updated, settings) VALUES (?, ?, ?, ?)",
            (title, now, now, _dumps(settings or {})),
        )
        return Chat(cur.lastrowid, title, now, now, settings or {})

    def chats(self) -> list[Chat]:
        rows = self._exec(
            "SELECT id, title, created, updated, settings FROM chats ORDER BY updated DESC, id DESC"
        ).fetchall()
        return [c for c in map(_chat_from_row, rows) if c is not None]

    def chat(self, chat_id: int) -> Chat | None:
        r = self._exec("SELECT id, title, created, updated, settings FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return _chat_from_row(r) if r else None

    def rename_chat(self, chat_id: int, title: str) -> None:
        self._exec("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))

    def save_settings(self, chat_id: int, settings: dict) -> None:
        self._exec("UPDATE chats SET settings = ? WHERE id = ?", (_dumps(settings), chat_id))

    def delete_chat(self, chat_id: int) -> None:
        self._exec("DELETE FROM chats WHERE id = ?", (chat_id,))

    # -- messages -------------------------------------------------------------------

    def add_message(self, chat_id: int, msg: Message) -> Message:
        """Store ``msg`` at the end of the chat; sets ``msg.id``."""
        self._transaction(lambda db: _insert(db, chat_id, msg))
        return msg

    def replace_answer(self, chat_id: int, msg: Message, replaces: int | None) -> Message:
        """Store the answer ``msg`` in place of the message with id ``replaces`` (the
        answer Regenerate started from), in one transaction: the chat never lacks both.
        ``replaces`` None (or already gone) stores ``msg`` as a new message."""

        def work(db: sqlite3.Connection) -> None:
            if replaces is not None:
                db.execute("DELETE FROM messages WHERE id = ? AND chat_id = ?", (replaces, chat_id))
            _insert(db, chat_id, msg)

        self._transaction(work)
        return msg

    def messages(self, chat_id: int) -> list[Message]:
        """The chat's messages in order; a damaged row is left out (logged)."""
        rows = self._exec(
            "SELECT id, role, content, spans, stats FROM messages WHERE chat_id = ? ORDER BY id", (chat_id,)
        ).fetchall()
        return [m for m in map(_message_from_row, rows) if m is not None]

    def delete_message(self, chat_id: int, message_id: int) -> None:
        """Delete the message ``message_id`` of chat ``chat_id`` (another chat's is left alone)."""
        self._exec("DELETE FROM messages WHERE id = ? AND chat_id = ?", (message_id, chat_id))

    def clear_messages(self, chat_id: int) -> None:
        self._exec("DELETE FROM messages WHERE chat_id = ?", (chat_id,))


# -- rows ---------------------------------------------------------------------------


def _dumps(x: object) -> str:
    return json.dumps(x, ensure_ascii=True)


def _insert(db: sqlite3.Connection, chat_id: int, msg: Message) -> None:
    now = time.time()
    cur = db.execute(
        "INSERT INTO messages(chat_id, role, content, spans, stats, created) VALUES (?, ?, ?, ?, ?, ?)",
        (
            chat_id,
            msg.role,
            msg.content,
            _dumps(msg.spans) if msg.spans is not None else None,
            _dumps(msg.stats) if msg.stats is not None else None,
            now,
        ),
    )
    db.execute("UPDATE chats SET updated = ? WHERE id = ?", (now, chat_id))
    msg.id = cur.lastrowid


def _loads(text: object) -> object:
    """Parsed JSON, or None when the text is missing or damaged (too deep included)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _valid_span(s: object) -> bool:
    # [start, end, kind, source, position, p, q, lookup_start]
    if not isinstance(s, list) or len(s) != 8:
        return False
    start, end, kind, source, position, p, q, lookup = s
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end))
    optional_ints = all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (position, lookup))
    optional_numbers = all(v is None or _number(v) for v in (p, q))
    texts = isinstance(kind, str) and isinstance(source, str)
    return ints and 0 <= start <= end and texts and optional_ints and optional_numbers


def _stats_defaults() -> dict[str, object]:
    out = {}
    for f in fields(Stats):
        out[f.name] = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
    return out


_STATS_DEFAULTS = _stats_defaults()


def _valid_stats(d: object) -> bool:
    """A dict whose Stats fields (the ones Stats.from_dict reads) have their types."""
    if not isinstance(d, dict):
        return False
    for name, default in _STATS_DEFAULTS.items():
        if name not in d:
            continue
        v = d[name]
        if isinstance(default, float):
            ok = _number(v)
        elif isinstance(default, int):
            ok = isinstance(v, int) and not isinstance(v, bool)
        elif isinstance(default, list):
            ok = isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
        elif isinstance(default, dict):
            ok = isinstance(v, dict) and all(isinstance(x, int) and not isinstance(x, bool) for x in v.values())
        elif isinstance(default, str):
            ok = isinstance(v, str)
        else:
            ok = True
        if not ok:
            return False
    return True


def _message_from_row(r: tuple) -> Message | None:
    mid, role, content, spans_text, stats_text = r
    if not isinstance(mid, int) or role not in ROLES or not isinstance(content, str):
        log.warning("skipping a damaged chat message (id %r)", mid)
        return None
    spans = _loads(spans_text)
    if spans_text is not None and not (isinstance(spans, list) and all(_valid_span(s) for s in spans)):
        log.warning("chat message %d: ignoring its damaged provenance spans", mid)
        spans = None
    stats = _loads(stats_text)
    if stats_text is not None and not _valid_stats(stats):
        log.warning("chat message %d: ignoring its damaged statistics", mid)
        stats = None
    return Message(role=role, content=content, spans=spans, stats=stats, id=mid)  # type: ignore[arg-type]


def _chat_from_row(r: tuple) -> Chat | None:
    cid, title, created, updated, settings_text = r
    if not isinstance(cid, int):
        log.warning("skipping a damaged chat (id %r)", cid)
        return None
    settings = _loads(settings_text)
    return Chat(
        cid,
        title if isinstance(title, str) else "Chat",
        float(created) if _number(created) else 0.0,
        float(updated) if _number(updated) else 0.0,
        settings if isinstance(settings, dict) else {},
    )
