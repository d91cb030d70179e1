"""Which role each given file takes (the command line, a second launch, a drop), split
models named by any part, the request's wire format, and the running app's answer to a
bad request on its socket (a real QLocalServer and QLocalSocket)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QUrl
from PySide6.QtNetwork import QLocalSocket

from specdesk.ui.drop import Dropped, dropped_models, landing
from specdesk.library.opening import OpenRequest, plan
from specdesk.ui.single_instance import InstanceGuard, InstanceUnavailable, claim_for_launch, server_name


@pytest.fixture(autouse=True)
def _runtime_dir(tmp_path_factory, monkeypatch):
    """The guards' sockets go to a temporary runtime folder, not the user's."""
    run = tmp_path_factory.mktemp("run")
    run.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))


def sized(path: Path, n: int) -> Path:
    path.write_bytes(b"GGUF" + b"\0" * (n - 4))
    return path


def test_two_files_without_roles_the_larger_is_the_target(tmp_path):
    small, big = sized(tmp_path / "small.gguf", 100), sized(tmp_path / "big.gguf", 300)
    o = plan(OpenRequest.from_command_line([small, big]))
    assert (o.target, o.draft, o.error) == (big, small, None)
    o = plan(OpenRequest.from_command_line([big, small]))
    assert (o.target, o.draft) == (big, small)


def test_roles_given_are_kept_and_files_fill_the_other(tmp_path):
    small, big = sized(tmp_path / "small.gguf", 100), sized(tmp_path / "big.gguf", 300)
    o = plan(OpenRequest.from_command_line([big], target=small))  # as the user says, even if smaller
    assert (o.target, o.draft) == (small, big)
    o = plan(OpenRequest.from_command_line([small], draft=big))
    assert (o.target, o.draft) == (small, big)
    o = plan(OpenRequest.from_command_line(target=big, draft=small))
    assert (o.target, o.draft, o.either) == (big, small, None)
    o = plan(OpenRequest.from_command_line([small]))
    assert (o.target, o.draft, o.either) == (None, None, small)  # the window decides (or asks)
    assert plan(OpenRequest.from_command_line(draft=small)).draft == small


def test_too_many_models_or_one_in_both_roles_is_one_clear_line(tmp_path):
    a, b, c = (sized(tmp_path / f"{n}.gguf", 10) for n in "abc")
    err = plan(OpenRequest.from_command_line([a, b, c])).error
    assert err == "SpecDesk opens a target and at most one draft, but 3 models were given: a.gguf, b.gguf, c.gguf"
    assert "3 models were given" in plan(OpenRequest.from_command_line([b, c], target=a)).error
    assert "both the target and the draft" in plan(OpenRequest.from_command_line(target=a, draft=a)).error


def test_a_split_model_is_named_by_any_part_and_opened_by_its_first(tmp_path):
    parts = [sized(tmp_path / f"big-0000{i}-of-00003.gguf", 200) for i in (1, 2, 3)]
    small = sized(tmp_path / "small.gguf", 300)  # larger than any one part, smaller than the model
    o = plan(OpenRequest.from_command_line([small, parts[1]]))
    assert (o.target, o.draft) == (parts[0], small)
    o = plan(OpenRequest.from_command_line([parts[2], parts[1]]))  # two parts of one model: one model
    assert o.either == parts[0]
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in (parts[2], parts[0])])
    assert dropped_models(mime) == Dropped((parts[0],))


def test_paths_are_made_absolute_for_the_running_app(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    req = OpenRequest.from_command_line(["m.gguf", "~/x.gguf"], target="sub/../t.gguf")
    assert req.files == (str(tmp_path / "m.gguf"), str(Path.home() / "x.gguf"))
    assert req.target == str(tmp_path / "t.gguf")
    assert OpenRequest.from_json(req.to_json()) == req


@pytest.mark.parametrize("text", ["[]", '{"files": "x"}', '{"files": ["relative.gguf"]}', '{"target": 3}',
                                  json.dumps({"files": ["/m.gguf"] * 17}), "not json"])
def test_a_malformed_request_is_refused(text):
    with pytest.raises(ValueError):
        OpenRequest.from_json(text)


def test_a_draft_needs_a_target_to_draft_for(tmp_path):
    m = sized(tmp_path / "m.gguf", 10)
    land = landing(Dropped((m,)), "draft", None, None)
    assert not land.ok and land.text == "Choose a target first: a draft speculates for a target"
    assert landing(Dropped((m,)), "draft", tmp_path / "t.gguf", None).opening.draft == m


def test_the_socket_name_follows_the_data_folder(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    assert server_name(a) == server_name(tmp_path / "b" / ".." / "a")
    assert server_name(a) != server_name(tmp_path / "b")


def test_the_running_app_answers_a_bad_request_with_an_error_and_keeps_listening(qtbot, tmp_path):
    guard = InstanceGuard(tmp_path / "data")
    assert guard.claim()
    got = []
    guard.request_received.connect(got.append)
    try:
        def ask(payload: bytes) -> bytes:
            sock = QLocalSocket()
            sock.connectToServer(guard.name)
            assert sock.waitForConnected(2000)
            sock.write(payload)
            sock.flush()
            reply = bytearray()

            def answered() -> bool:
                reply.extend(bytes(sock.readAll()))
                return b"\n" in reply

            qtbot.waitUntil(answered, timeout=5000)
            sock.abort()
            return bytes(reply)

        assert ask(b"hello\n").startswith(b"error: ")
        assert ask(b"x" * (70 * 1024)).startswith(b"error: message too long")
        assert got == []
        good = OpenRequest(files=(str(tmp_path / "m.gguf"),))
        assert ask(good.to_json().encode() + b"\n").startswith(b"ok ")
        assert got == [good]
        # a second guard on the folder does not take it
        other = InstanceGuard(tmp_path / "data")
        assert not other.claim()
    finally:
        guard.release()
    assert Path(guard.name).parent == Path(os.environ["XDG_RUNTIME_DIR"])
    assert not Path(guard.name).exists()  # the socket file goes with the app
    again = claim_for_launch(tmp_path / "data", OpenRequest(), False)  # free again
    assert again is not None and again.held
    again.release()


def test_a_lock_file_cut_short_by_a_crash_is_taken_over_but_not_one_being_written(tmp_path):
    """QLockFile calls a lock file that names no process held for ever; the app would
    never start again on that folder."""
    import time

    from specdesk.ui.single_instance import LOCK_NAME, UNREADABLE_LOCK_AGE_S

    data = tmp_path / "data"
    data.mkdir()
    lock = data / LOCK_NAME
    lock.write_bytes(b"")  # as a power cut leaves it
    fresh = InstanceGuard(data)
    assert not fresh.claim()  # it may be an app writing its lock right now
    old = time.time() - UNREADABLE_LOCK_AGE_S - 5
    os.utime(lock, (old, old))
    guard = InstanceGuard(data)
    try:
        assert guard.claim() and guard.held
        assert guard.holder_pid() == os.getpid()
    finally:
        guard.release()


SECOND_LAUNCH = """
import sys
from PySide6.QtCore import QCoreApplication
from specdesk.library.opening import OpenRequest
from specdesk.ui.single_instance import InstanceGuard
app = QCoreApplication([])
guard = InstanceGuard(sys.argv[1])
print(guard.name, guard.hand_off(OpenRequest.from_json(sys.argv[2]), timeout_s=60))
"""


def _long_runtime_dir(tmp_path_factory, monkeypatch) -> Path:
    """XDG_RUNTIME_DIR over 100 bytes (no room for a socket's path in it), and a short
    temporary folder of the test's own instead of the system's."""
    run = tmp_path_factory.mktemp("run") / ("r" * 120)
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    tmp = tmp_path_factory.mktemp("t")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def test_a_runtime_folder_too_long_for_a_socket_gets_a_private_folder_not_a_guessable_name(
        qtbot, tmp_path, tmp_path_factory, monkeypatch):
    """The socket fell back to a bare name, which Qt puts in the shared temporary folder,
    where another local user could take it first."""
    tmp = _long_runtime_dir(tmp_path_factory, monkeypatch)
    guard = InstanceGuard(tmp_path / "data")
    assert guard.name is not None and os.path.isabs(guard.name), guard.name
    folder = Path(guard.name).parent
    assert folder == tmp / f"specdesk-{os.getuid()}"
    st = folder.lstat()
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert guard.claim()
    try:
        assert Path(guard.name).exists()  # listening there
        got = []
        guard.request_received.connect(got.append)
        second = InstanceGuard(tmp_path / "data")
        assert second.name == guard.name and not second.claim()
        req = OpenRequest(files=(str(tmp_path / "m.gguf"),))
        # a second launch, a process of its own with the same folders, hands its request over
        launch = subprocess.Popen(
            [sys.executable, "-c", SECOND_LAUNCH, str(tmp_path / "data"), req.to_json()],
            env={**os.environ, "TMPDIR": str(tmp), "QT_QPA_PLATFORM": "offscreen"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        qtbot.waitUntil(lambda: launch.poll() is not None, timeout=120_000)
        out, err = launch.communicate()
        assert launch.returncode == 0 and out.split() == [guard.name, str(os.getpid())], (out, err)
        assert got == [req]
    finally:
        guard.release()


def test_a_private_folder_that_is_not_this_users_alone_is_never_used(qtbot, tmp_path, tmp_path_factory, monkeypatch):
    tmp = _long_runtime_dir(tmp_path_factory, monkeypatch)
    folder = tmp / f"specdesk-{os.getuid()}"
    folder.mkdir(mode=0o700)
    folder.chmod(0o777)  # made open, by mistake or by someone else
    guard = InstanceGuard(tmp_path / "data")
    assert guard.name is None and "is not this user's alone" in guard.unreachable
    assert guard.claim()  # the app runs; only a second launch cannot reach it
    try:
        other = InstanceGuard(tmp_path / "data")
        with pytest.raises(InstanceUnavailable) as e:
            other.hand_off(OpenRequest())
        assert "cannot reach it" in str(e.value) and "--new-instance" in str(e.value)
        assert list(folder.iterdir()) == []
    finally:
        guard.release()
    if os.getuid() == 0:  # another user's folder (made first by someone who guessed the name)
        folder.chmod(0o700)
        os.chown(folder, 65534, 65534)
        assert InstanceGuard(tmp_path / "data").name is None
