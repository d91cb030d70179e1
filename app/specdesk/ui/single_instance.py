"""One running app per data folder.

Two windows on one data folder would share its chat database, and on a laptop each
would load its own pair of models. So the first app to start on a data folder holds it:

- a lock file in the folder (``QLockFile``: it names the holder's process, so a lock
  left by an app that crashed is known as stale, and taken over);
- a local socket (``QLocalServer``; on Unix a socket file in the user's runtime folder,
  on Windows a named pipe), named after the folder, that only this user can reach.
  Where the runtime folder's path is too long for a socket (``sun_path`` holds about
  100 bytes), the socket goes to a private folder of this user's in the temporary
  folder (``specdesk-<uid>``, made 0700; used only when it is a real folder this user
  owns that nobody else may enter), never under a bare name in the shared temporary
  folder: there another local user could take the guessable name first, and so both
  stop this app from starting and receive the files a second launch hands over.

A second launch on the same folder finds the lock held, hands its files (or, without
files, just "show yourself") to the running app through the socket, and exits 0. A
socket left behind by a crashed app is removed before the new holder listens.
``--new-instance`` opts out: that app runs beside the others, with a data folder of its
own (the first one no running app holds: the data folder, else ``instances/2``, ``3``…
inside it), so two windows never share a chat database.

The protocol is one JSON line each way: the request (``open_files.OpenRequest``), then
``ok <pid>`` or ``error: <reason>``.
"""

from __future__ import annotations

import getpass
import hashlib
import logging
import os
import stat
import sys
import tempfile
import time
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, QStandardPaths, QTimer, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from ..errors import SpecDeskError
from .open_files import OpenRequest

log = logging.getLogger(__name__)

LOCK_NAME = "instance.lock"
#: How long a second launch waits for the running app to answer (it may be busy starting).
ANSWER_TIMEOUT_S = 15.0
#: A message longer than this is refused, not read.
MAX_MESSAGE = 64 * 1024
#: The folders ``--new-instance`` tries: the data folder, then instances/2 .. instances/99.
MAX_INSTANCES = 99
_MAX_SOCKET_PATH = 100  # sun_path holds 104-108 bytes
#: A lock file that names no process is left over once it is this old (one being
#: written names its process within microseconds).
UNREADABLE_LOCK_AGE_S = 10.0


class InstanceUnavailable(SpecDeskError):
    """The data folder is held by an app that does not answer."""


def _fits(path: str) -> bool:
    return len(os.fsencode(path)) <= _MAX_SOCKET_PATH


def private_folder(base: str) -> str | None:
    """``base/specdesk-<uid>``, made 0700 when missing; None (logged) unless it is a
    folder (not a link) this user owns that no one else may enter or write: one made
    first by another user, or left open, could hold a socket that answers for this app."""
    path = os.path.join(base, f"specdesk-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        log.warning("cannot make a private folder for the app's socket at %s: %s", path, e.strerror or e)
        return None
    try:
        st = os.lstat(path)
    except OSError as e:
        log.warning("cannot use %s for the app's socket: %s", path, e.strerror or e)
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        log.warning("not using %s for the app's socket: it is not a folder of this user's that only this user "
                    "may enter (owner uid %d, mode %o)", path, st.st_uid, stat.S_IMODE(st.st_mode))
        return None
    return path


def server_name(data_dir: Path) -> str | None:
    """The socket's name for ``data_dir``: the same for every launch by this user on that
    folder (however it is spelled), another for any other folder or user. On Unix a path
    in a folder only this user can reach; None when there is none (no second launch can
    reach this app then, see ``InstanceGuard.unreachable``)."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in the environment or passwd
        user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    key = f"{user}\0{os.path.normcase(os.path.realpath(data_dir))}"
    name = "specdesk-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    if sys.platform == "win32":
        return name  # a named pipe
    # the user's own runtime folder (XDG_RUNTIME_DIR, or a private one Qt creates), not the shared /tmp
    run = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.RuntimeLocation)
    if run and _fits(os.path.join(run, name + ".sock")):
        return os.path.join(run, name + ".sock")
    base = tempfile.gettempdir()
    if not _fits(os.path.join(base, f"specdesk-{os.getuid()}", name + ".sock")):
        log.warning("the runtime folder %r and the temporary folder %r are too long a path for the app's socket", run, base)
        return None
    folder = private_folder(base)
    return os.path.join(folder, name + ".sock") if folder is not None else None


class _Connection(QObject):
    """One second launch talking to the running app: read its line, answer, hang up."""

    def __init__(self, sock: QLocalSocket, guard: "InstanceGuard") -> None:
        super().__init__(guard)
        self.sock = sock
        self.guard = guard
        self.buf = bytearray()
        sock.setParent(self)
        sock.readyRead.connect(self._read)
        sock.disconnected.connect(self.deleteLater)
        timer = QTimer(self)  # a client that never finishes its line is dropped
        timer.setSingleShot(True)
        timer.timeout.connect(self.deleteLater)
        timer.start(5000)

    def _answer(self, text: str) -> None:
        self.sock.write(text.encode("utf-8") + b"\n")
        self.sock.flush()
        self.sock.disconnectFromServer()

    def _read(self) -> None:
        self.buf += bytes(self.sock.readAll())
        if len(self.buf) > MAX_MESSAGE:
            self._answer("error: message too long")
            return
        if b"\n" not in self.buf:
            return
        line = bytes(self.buf).split(b"\n", 1)[0]
        self.buf.clear()
        try:
            req = OpenRequest.from_json(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            log.warning("a second launch sent a bad request: %s", e)
            self._answer(f"error: {e}")
            return
        self._answer(f"ok {os.getpid()}")
        self.guard.request_received.emit(req)


class InstanceGuard(QObject):
    """Holds ``data_dir`` for this app (``claim``), or hands a request to the app that
    holds it (``hand_off``)."""

    #: (OpenRequest) a second launch asked this app to open files, or to show itself
    request_received = Signal(object)

    def __init__(self, data_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.data_dir = Path(data_dir)
        self.name = server_name(self.data_dir)
        #: why a second launch cannot reach this app (no private folder for the socket), or None
        self.unreachable = None if self.name is not None else (
            "no folder of this user's alone has room for its socket (the runtime folder's path is too long, and "
            f"{os.path.join(tempfile.gettempdir(), 'specdesk-' + str(os.getuid()))} is not this user's alone: see "
            "the log)")
        self._lock = QLockFile(str(self.data_dir / LOCK_NAME))
        self._lock.setStaleLockTime(0)  # stale only when its process is gone, however old
        self._server: QLocalServer | None = None

    @property
    def held(self) -> bool:
        return self._lock.isLocked()

    def holder_pid(self) -> int | None:
        """The process that holds the folder, as its lock file says."""
        info = self._lock.getLockInfo()
        pid = info[0] if isinstance(info, tuple) and info else None
        return pid if isinstance(pid, int) and pid > 0 else None

    def claim(self) -> bool:
        """Hold the folder and listen: True when no running app held it (a crashed
        app's lock and socket are taken over), False when one does."""
        if self.held:
            return True
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self._lock.tryLock(0):
            if self._lock.error() != QLockFile.LockError.LockFailedError:  # not held: it cannot be written
                raise InstanceUnavailable(f"cannot hold the data folder {self.data_dir}: its lock file {LOCK_NAME} "
                                          "cannot be written there")
            if not self._unreadable_lock_left_behind() or not self._lock.removeStaleLockFile() \
                    or not self._lock.tryLock(0):
                return False
        if self._answers():  # its lock file was deleted, but that app still runs and listens
            self._lock.unlock()
            return False
        if self.name is None:
            log.warning("a second launch on %s cannot reach this app: %s", self.data_dir, self.unreachable)
            return True
        # the socket a crashed app left behind (it answered nobody above): replaced, never
        # a live one (on Unix, listen with UserAccessOption renames its socket into place)
        QLocalServer.removeServer(self.name)
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        if server.listen(self.name):
            server.newConnection.connect(self._accept)
            self._server = server
        else:  # the app still runs; only a second launch will open a second window
            log.warning("cannot listen on %s for second launches: %s", self.name, server.errorString())
        return True

    def _unreadable_lock_left_behind(self) -> bool:
        """The lock file names no process (empty or cut short: the machine went down as it
        was written), is not a fresh one being written, and nobody answers: QLockFile
        would call it held for ever."""
        path = self.data_dir / LOCK_NAME
        try:
            age = time.time() - path.stat().st_mtime
        except OSError:
            return False
        return self.holder_pid() is None and path.is_file() and age > UNREADABLE_LOCK_AGE_S and not self._answers()

    def release(self) -> None:
        if self._server is not None:
            self._server.close()  # removes the socket file
            self._server = None
        if self.held:
            self._lock.unlock()

    def _accept(self) -> None:
        while self._server is not None and self._server.hasPendingConnections():
            _Connection(self._server.nextPendingConnection(), self)

    def _answers(self) -> bool:
        if self.name is None:
            return False
        sock = QLocalSocket()
        sock.connectToServer(self.name)
        ok = sock.waitForConnected(300)
        sock.abort()
        return ok

    def _send(self, req: OpenRequest, timeout_s: float) -> str | None:
        """The running app's answer to ``req``; None when nothing listens."""
        if self.name is None:
            return None
        sock = QLocalSocket()
        sock.connectToServer(self.name)
        if not sock.waitForConnected(1000):
            return None
        sock.write(req.to_json().encode("utf-8") + b"\n")
        sock.flush()
        reply = b""
        end = time.monotonic() + timeout_s
        while b"\n" not in reply:
            left = int((end - time.monotonic()) * 1000)
            if left <= 0 or not sock.waitForReadyRead(left):
                if sock.bytesAvailable() == 0:
                    break
            reply += bytes(sock.readAll())
        sock.abort()
        return reply.decode("utf-8", "replace").strip() or "error: no answer"

    def hand_off(self, req: OpenRequest, timeout_s: float = ANSWER_TIMEOUT_S) -> int | None:
        """Give ``req`` to the app that holds the folder: its pid once it took it, or None
        when that app went away meanwhile and this one holds the folder now (``claim``).
        Raises InstanceUnavailable when the holder runs but does not answer."""
        end = time.monotonic() + timeout_s
        while True:
            reply = self._send(req, max(0.5, end - time.monotonic()))
            if reply is not None and reply.startswith("ok"):
                parts = reply.split()
                return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else (self.holder_pid() or 0)
            if reply is not None and reply.startswith("error:"):
                raise InstanceUnavailable(f"the SpecDesk already running refused the request: {reply[6:].strip()}")
            if self.claim():
                return None
            if self.name is None:
                raise InstanceUnavailable(f"SpecDesk runs with the data folder {self.data_dir}, and this launch cannot "
                                          f"reach it: {self.unreachable}; run `specdesk --new-instance` for a window "
                                          "with its own data folder")
            if time.monotonic() >= end:
                pid = self.holder_pid()
                raise InstanceUnavailable(
                    f"SpecDesk{f' (process {pid})' if pid else ''} runs with the data folder {self.data_dir} but does not "
                    f"answer: close it, or run `specdesk --new-instance` for a window with its own data folder")
            time.sleep(0.1)  # it holds the folder and is about to listen, or is ending


def instance_folders(data_dir: Path) -> list[Path]:
    """The folders ``--new-instance`` may use, in order."""
    return [Path(data_dir)] + [Path(data_dir) / "instances" / str(n) for n in range(2, MAX_INSTANCES + 1)]


def claim_for_launch(data_dir: Path, req: OpenRequest, new_instance: bool,
                     parent: QObject | None = None) -> InstanceGuard | None:
    """The guard this launch runs the app with, holding its data folder; None when the
    request went to the app already running on that folder (this launch should exit 0)."""
    if new_instance:
        for d in instance_folders(data_dir):
            guard = InstanceGuard(d, parent)
            if guard.claim():
                return guard
            guard.deleteLater()
        raise InstanceUnavailable(f"every data folder from {data_dir} to instances/{MAX_INSTANCES} is in use")
    guard = InstanceGuard(data_dir, parent)
    if guard.claim():
        return guard
    pid = guard.hand_off(req)
    if pid is None:
        return guard  # the holder ended while we asked: this launch holds the folder now
    what = "opens " + ", ".join(Path(p).name for p in (*req.files, req.target, req.draft) if p) if not req.empty \
        else "comes to the front"
    if sys.stderr is not None:  # None in a windowed app on Windows
        print(f"specdesk: SpecDesk is already running with this data folder (process {pid}); it {what}", file=sys.stderr)
    guard.deleteLater()
    return None


__all__ = ["InstanceGuard", "InstanceUnavailable", "claim_for_launch", "instance_folders", "private_folder",
           "server_name"]
