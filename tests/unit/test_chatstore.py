"""The chat store on a real SQLite file: damaged files are moved aside (never deleted)
and the app starts afresh, damaged rows are skipped, the schema is versioned and
migrated, files are owner-only, and the answer operations the window needs."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from specdesk.session import chatstore
from specdesk.session.chatstore import ChatStore, Message

# The schema SpecDesk 0.1 wrote, with no version.
UNVERSIONED = """
CREATE TABLE IF NOT EXISTS chats (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL,
    updated REAL NOT NULL, settings TEXT NOT NULL DEFAULT '{}');
CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY,
    chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE, role TEXT NOT NULL, content TEXT NOT NULL,
    spans TEXT, stats TEXT, created REAL NOT NULL);
CREATE INDEX IF NOT EXISTS messages_chat ON messages(chat_id, id);
"""


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _kept(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if ".damaged-" in p.name)


def _store_with_a_chat(path: Path) -> int:
    s = ChatStore(path)
    c = s.create_chat("kept")
    s.add_message(c.id, Message("user", "hello"))
    s.close()
    return c.id


@pytest.mark.parametrize("content", [b"this is not a database " * 200, b"SQLite format 3\x00" + b"\xff" * 8000])
def test_a_file_that_is_not_a_database_is_moved_aside_and_a_fresh_one_started(tmp_path, content):
    path = tmp_path / "data" / "chats.sqlite3"
    path.parent.mkdir()
    path.write_bytes(content)
    store = ChatStore(path)  # raised "cannot open the chat database ... file is not a database"
    assert store.chats() == []
    store.create_chat("new")
    [kept] = _kept(path.parent)
    assert kept.read_bytes() == content  # never deleted
    assert store.recovered is not None and kept.name in store.recovered and "\n" not in store.recovered
    store.close()
    again = ChatStore(path)
    assert again.recovered is None and [c.title for c in again.chats()] == ["new"]
    again.close()


def test_a_malformed_database_is_moved_aside(tmp_path):
    path = tmp_path / "chats.sqlite3"
    _store_with_a_chat(path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    assert len(data) >= 3 * page
    data[page : 3 * page] = b"\x5a" * (2 * page)  # the pages after the first: garbage
    path.write_bytes(bytes(data))
    store = ChatStore(path)
    assert store.recovered and ("damaged" in store.recovered or "malformed" in store.recovered), store.recovered
    assert store.chats() == [] and len(_kept(tmp_path)) >= 1
    store.close()


def test_a_database_of_another_schema_or_a_newer_version_is_kept_aside(tmp_path):
    path = tmp_path / "chats.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE chats (id INTEGER PRIMARY KEY, name TEXT)")
    db.commit()
    db.close()
    store = ChatStore(path)
    assert "not a SpecDesk chat database" in store.recovered
    store.close()

    path2 = tmp_path / "newer.sqlite3"
    _store_with_a_chat(path2)
    db = sqlite3.connect(path2)
    db.execute(f"PRAGMA user_version = {chatstore.SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    store = ChatStore(path2)
    assert "newer SpecDesk" in store.recovered and store.chats() == []
    store.close()


def test_an_unversioned_database_is_migrated_with_its_chats(tmp_path):
    path = tmp_path / "chats.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(UNVERSIONED)
    db.execute("INSERT INTO chats VALUES (1, 'old chat', 1.0, 2.0, '{\"k\": 3}')")
    db.execute("INSERT INTO messages VALUES (1, 1, 'user', 'hi', NULL, NULL, 1.0)")
    db.commit()
    assert db.execute("PRAGMA user_version").fetchone()[0] == 0
    db.close()
    store = ChatStore(path)
    assert store.recovered is None
    [c] = store.chats()
    assert (c.title, c.settings) == ("old chat", {"k": 3})
    assert [(m.role, m.content) for m in store.messages(1)] == [("user", "hi")]
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == chatstore.SCHEMA_VERSION == len(chatstore.MIGRATIONS)
    db.close()


def test_damaged_rows_are_skipped(tmp_path):
    path = tmp_path / "chats.sqlite3"
    cid = _store_with_a_chat(path)
    good_span = [0, 2, "accepted", "draft", 1, 0.5, 0.25, None]
    db = sqlite3.connect(path)
    rows = [
        ("assistant", "bad spans json", "[[0, 1", None),
        ("assistant", "spans too deep", "[" * 100_000 + "]" * 100_000, None),
        ("assistant", "spans of the wrong shape", json.dumps([[0, 1, "x"]]), None),
        ("assistant", "stats a list", None, "[1, 2]"),
        ("assistant", "stats of wrong types", None, json.dumps({"generated": "many"})),
        ("wizard", "unknown role", None, None),
        ("user", b"\xff\xfe", None, None),  # SQLite keeps a blob in a TEXT column
        ("assistant", "fine", json.dumps([good_span]), json.dumps({"generated": 2, "decode_seconds": 0.5})),
    ]
    for role, content, spans, stats in rows:
        db.execute("INSERT INTO messages(chat_id, role, content, spans, stats, created) VALUES (?, ?, ?, ?, ?, 1.0)",
                   (cid, role, content, spans, stats))
    db.execute("INSERT INTO chats VALUES (99, 'bad settings', 'yesterday', 1.0, '[not json')")
    db.commit()
    db.close()
    store = ChatStore(path)
    msgs = store.messages(cid)
    assert [m.content for m in msgs] == ["hello", "bad spans json", "spans too deep", "spans of the wrong shape",
                                         "stats a list", "stats of wrong types", "fine"]
    assert all(m.spans is None and m.stats is None for m in msgs[:-1])
    assert msgs[-1].spans == [good_span] and msgs[-1].stats["generated"] == 2
    bad = store.chat(99)
    assert bad.settings == {} and bad.created == 0.0
    assert {c.id for c in store.chats()} == {cid, 99}
    store.close()


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
def test_the_folder_and_the_file_are_owner_only(tmp_path, umask_022):
    path = tmp_path / "data" / "chats.sqlite3"
    store = ChatStore(path)
    store.create_chat()
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for p in [path, *path.parent.glob("chats.sqlite3-*")]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    store.close()
    # an existing file of ours that others could read is tightened
    os.chmod(path, 0o644)
    ChatStore(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_replace_answer_keeps_the_old_answer_until_the_new_one_is_stored(tmp_path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    c = store.create_chat()
    store.add_message(c.id, Message("user", "q"))
    old = store.add_message(c.id, Message("assistant", "old answer"))
    # Regenerate: the old answer stays while the new one is generated ...
    assert [m.content for m in store.messages(c.id)] == ["q", "old answer"]
    new = store.replace_answer(c.id, Message("assistant", "new answer", stats={"generated": 2}), replaces=old.id)
    assert new.id is not None
    assert [(m.role, m.content) for m in store.messages(c.id)] == [("user", "q"), ("assistant", "new answer")]
    # a failed run keeps its partial text: stored as the answer, replacing nothing
    store.add_message(c.id, Message("user", "q2"))
    store.replace_answer(c.id, Message("assistant", "partial", stats={"stop_reason": "error"}), replaces=None)
    assert [m.content for m in store.messages(c.id)][-2:] == ["q2", "partial"]
    store.close()


def test_a_failed_send_can_be_rolled_back(tmp_path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    c = store.create_chat()
    u = store.add_message(c.id, Message("user", "did not fit"))
    store.delete_message(u.id)
    assert store.messages(c.id) == []
    store.close()


def test_a_failed_replace_changes_nothing(tmp_path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    c = store.create_chat()
    store.add_message(c.id, Message("user", "q"))
    old = store.add_message(c.id, Message("assistant", "old"))
    with pytest.raises(TypeError):  # the stats cannot be stored as JSON
        store.replace_answer(c.id, Message("assistant", "new", stats={"x": object()}), replaces=old.id)
    assert [m.content for m in store.messages(c.id)] == ["q", "old"]
    store.close()
