"""The log file opener (specdesk.ui.startup.logfile): a symlink planted in the shared
temp dir is refused, never followed; files and folders are owner-only."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from specdesk.ui.startup import log, logfile

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX links and permissions")


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_symlink_at_the_log_path_is_refused_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    log = tmp_path / "specdesk.log"
    log.symlink_to(victim)
    with pytest.raises(OSError):
        logfile.open_log(log)
    assert victim.read_text() == "precious\n"
    # and rotation renames the link, never writes through it
    with pytest.raises(OSError):
        logfile.open_log(log, max_bytes=0)
    assert victim.read_text() == "precious\n"


def test_a_hard_link_or_a_non_file_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    os.link(victim, tmp_path / "specdesk.log")
    with pytest.raises(OSError, match="hard links"):
        logfile.open_log(tmp_path / "specdesk.log")
    os.mkfifo(tmp_path / "fifo.log")
    with pytest.raises(OSError):
        logfile.open_log(tmp_path / "fifo.log")
    assert victim.read_text() == "precious\n"


def test_the_log_is_owner_only_appended_and_rotated(tmp_path, umask_022):
    path = tmp_path / "specdesk.log"
    with logfile.open_log(path) as f:
        f.write("one\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with logfile.open_log(path, max_bytes=1000) as f:
        f.write("two \udcff\n")  # a surrogate from a file name: written, not an error
    assert path.read_text(encoding="utf-8") == "one\ntwo \\udcff\n"
    with logfile.open_log(path, max_bytes=4) as f:
        f.write("three\n")
    assert path.read_text() == "three\n"
    assert path.with_name("specdesk.log.1").read_text().startswith("one\n")
    os.chmod(path, 0o644)
    logfile.open_log(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_temp_folder_is_per_user_and_private(tmp_path, umask_022):
    assert logfile.temp_log_dir().name == f"specdesk-{os.getuid()}"
    d = logfile.private_dir(tmp_path / "specdesk-x")
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    os.chmod(d, 0o777)
    logfile.private_dir(d)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "specdesk-link").symlink_to(elsewhere)
    with pytest.raises(OSError, match="symlink"):
        logfile.private_dir(tmp_path / "specdesk-link")
    (tmp_path / "specdesk-file").write_text("")
    with pytest.raises(OSError):
        logfile.private_dir(tmp_path / "specdesk-file")


def test_the_launcher_does_not_follow_a_planted_log_symlink(tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    shared = tmp_path / "tmp" / f"specdesk-{os.getuid()}"
    shared.mkdir(parents=True)
    (shared / log.LOG_NAME).symlink_to(victim)
    monkeypatch.setattr(log, "_log_dirs", lambda: [shared])
    log._reset_log_file()
    try:
        log.write_log("hello")
    finally:
        log._reset_log_file()
    assert victim.read_text() == "precious\n"
