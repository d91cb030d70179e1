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


# A newer SpecDesk: one more migration than this one's.
NEWER_MIGRATION = ["ALTER TABLE chats ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0"]


@pytest.fixture
def newer_schema(monkeypatch):
    """A context in which this process is a SpecDesk with schema version 2."""
    import contextlib

    @contextlib.contextmanager
    def newer():
        with monkeypatch.context() as m:
            migrations = [*chatstore.MIGRATIONS, NEWER_MIGRATION]
            m.setattr(chatstore, "MIGRATIONS", migrations)
            m.setattr(chatstore, "SCHEMA_VERSION", len(migrations))
            yield

    assert chatstore.SCHEMA_VERSION == 1  # the messages below name the versions
    return newer


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



def test_a_database_of_a_newer_version_is_left_as_it_is(tmp_path, newer_schema):
    """Not damaged, only newer: never moved aside, never changed; this session's chats
    are kept in memory, and the window says so in one line."""
    path = tmp_path / "chats.sqlite3"
    with newer_schema():
        _store_with_a_chat(path)
    before = path.read_bytes()
    store = ChatStore(path)
    assert _kept(tmp_path) == [] and path.read_bytes() == before
    assert not store.saved and "\n" not in store.recovered
    assert "newer SpecDesk (schema 2; this one reads up to 1)" in store.recovered and "left as it is" in store.recovered
    assert "not saved" in store.recovered
    assert store.chats() == []
    c = store.create_chat("in memory")  # the window still works
    store.add_message(c.id, Message("user", "hi"))
    assert [m.content for m in store.messages(c.id)] == ["hi"]
    store.close()
    assert path.read_bytes() == before and _kept(tmp_path) == []
    with newer_schema():
        again = ChatStore(path)
    assert again.saved and [c.title for c in again.chats()] == ["kept"]
    again.close()


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
    store.delete_message(c.id, u.id)
    assert store.messages(c.id) == []
    store.close()


def test_deleting_a_message_never_reaches_into_another_chat(tmp_path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    a, b = store.create_chat("a"), store.create_chat("b")
    kept = store.add_message(b.id, Message("user", "b's message"))
    store.delete_message(a.id, kept.id)  # an id from another chat: nothing happens
    assert [m.content for m in store.messages(b.id)] == ["b's message"]
    store.delete_message(b.id, kept.id)
    assert store.messages(b.id) == []
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


# -- two SpecDesks of different versions on one data folder

NEWER_APP = """
import sys
from specdesk.session import chatstore
from specdesk.session.chatstore import ChatStore, Message
chatstore.MIGRATIONS.append(%r)
chatstore.SCHEMA_VERSION = len(chatstore.MIGRATIONS)
store = ChatStore(sys.argv[1])
chat = store.create_chat("newer app's chat")
store.add_message(chat.id, Message("user", "written before the older app started"))
print("OPEN", store.recovered is None, flush=True)
sys.stdin.readline()  # the older app has started meanwhile
store.add_message(chat.id, Message("user", "written after the older app started"))
print("MESSAGES", len(store.messages(chat.id)), flush=True)
store.close()
""" % (NEWER_MIGRATION,)


def test_an_older_app_leaves_a_newer_apps_live_database_and_its_wal_alone(tmp_path):
    """A newer SpecDesk (another process) has the chats open; an older one starts on the
    same folder. The older one used to move the live file and its WAL aside, so the
    newer one went on writing into the moved file and the chats seemed gone."""
    import subprocess
    import sys

    path = tmp_path / "data" / "chats.sqlite3"
    newer = subprocess.Popen([sys.executable, "-c", NEWER_APP, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert newer.stdout.readline().split() == ["OPEN", "True"], newer.stderr.read()
        assert path.with_name("chats.sqlite3-wal").exists()
        older = ChatStore(path)  # this process: schema 1
        assert _kept(path.parent) == [] and path.with_name("chats.sqlite3-wal").exists()
        assert not older.saved and "newer SpecDesk" in older.recovered
        older.create_chat("older app's chat, in memory")
        out, err = newer.communicate("go\n", timeout=60)
    finally:
        if newer.poll() is None:
            newer.kill()
    assert newer.returncode == 0, err
    assert "MESSAGES 2" in out
    older.close()
    assert _kept(path.parent) == []
    db = sqlite3.connect(path)  # both of the newer app's messages are in the file, where it left them
    assert db.execute("PRAGMA user_version").fetchone()[0] == 2
    assert [r[0] for r in db.execute("SELECT title FROM chats")] == ["newer app's chat"]
    assert db.execute("SELECT count(*) FROM messages").fetchone()[0] == 2
    db.close()


def test_a_newer_app_does_not_migrate_a_database_an_older_one_has_open(tmp_path, newer_schema):
    path = tmp_path / "chats.sqlite3"
    older = ChatStore(path)
    chat = older.create_chat("older app's chat")
    with newer_schema():
        newer = ChatStore(path)
    probe = sqlite3.connect(path)
    assert probe.execute("PRAGMA user_version").fetchone()[0] == 1  # not migrated under the older app
    probe.close()
    assert not newer.saved and "open in another program, an older SpecDesk perhaps (schema 1; this one needs 2)" \
        in newer.recovered
    newer.close()
    older.add_message(chat.id, Message("user", "the older app goes on"))  # its schema is as it was
    older.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    db.close()
    with newer_schema():  # once the older one is closed, the newer one migrates it, chats and all
        newer = ChatStore(path)
    assert newer.saved and [m.content for m in newer.messages(chat.id)] == ["the older app goes on"]
    newer.close()


@pytest.mark.parametrize(("version", "said"), [(0, "is open in another program"),  # it could be an old SpecDesk's
                                               (1, "could not be used (not a SpecDesk chat database")])
def test_a_database_another_program_has_open_is_never_moved_aside(tmp_path, version, said):
    path = tmp_path / "chats.sqlite3"
    other = sqlite3.connect(path, isolation_level=None)  # a program of its own, with its own schema
    other.execute("PRAGMA journal_mode=WAL")
    other.execute("CREATE TABLE chats (id INTEGER PRIMARY KEY, name TEXT)")
    other.execute("INSERT INTO chats(name) VALUES ('theirs')")
    other.execute(f"PRAGMA user_version = {version}")
    store = ChatStore(path)
    assert _kept(tmp_path) == []
    assert not store.saved and said in store.recovered and "left as it is" in store.recovered, store.recovered
    store.close()
    assert _kept(tmp_path) == [] and other.execute("SELECT name FROM chats").fetchall() == [("theirs",)]
    other.close()
    store = ChatStore(path)  # closed: moved aside as any unusable file
    assert store.saved and "not a SpecDesk chat database" in store.recovered and len(_kept(tmp_path)) == 1
    store.close()
