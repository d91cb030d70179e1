"""Model paths whose names are not UTF-8 survive QSettings and the pickers (issue 42, 7).

A file name with the byte 0xff reaches Python as ``\\udcff`` (``os.fsdecode``); Qt's
text drops that character, so the recent files, the pickers and the per-model
reference speeds named another file. Real files with such names, a real QSettings INI
file in a temporary folder, the real model bar and empty page."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from PySide6.QtCore import QSettings

from specdesk.ui.empty_state import EmptyState
from specdesk.ui.model_bar import ModelBar
from specdesk.ui.model_catalog import ModelCatalog
from specdesk.ui.references import measured_reference, remember_reference


@pytest.fixture
def settings_dir(tmp_path):
    """Every QSettings made in the test is an INI file in a folder of its own."""
    before = Path(QSettings().fileName()).parent.parent
    folder = tmp_path / "qsettings"
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder))
    yield folder
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(before))


@pytest.fixture
def nonutf8(tmp_path) -> Path:
    """A real file whose name has the byte 0xff (not UTF-8), beside two look-alikes: one
    without that byte, one with 0xfe in its place (Qt turned both bytes into U+FFFD)."""
    folder = os.fsencode(tmp_path)
    path = Path(os.fsdecode(folder + b"/nonutf8-\xff.gguf"))
    for name in (b"/nonutf8-\xff.gguf", b"/nonutf8-.gguf", b"/nonutf8-\xfe.gguf"):
        Path(os.fsdecode(folder + name)).write_bytes(b"GGUF")
    assert "\udcff" in str(path) and os.path.isfile(os.fsencode(path))
    return path


def test_recent_files_keep_a_name_that_is_not_utf8(qtbot, settings_dir, nonutf8, tmp_path):
    plain = tmp_path / "plain.gguf"
    plain.write_bytes(b"GGUF")
    catalog = ModelCatalog(SimpleNamespace(entries=[]), start_task=lambda t: t)
    catalog.remember(plain)
    catalog.remember(nonutf8)
    QSettings().sync()
    ini = Path(QSettings().fileName())
    assert ini.is_relative_to(settings_dir) and ini.is_file()
    assert b"nonutf8-\\xff.gguf" in ini.read_bytes()  # the byte itself is on disk
    assert str(plain).encode() in ini.read_bytes()  # a UTF-8 name stays readable text
    # read back from the file, as after a restart
    again = ModelCatalog(SimpleNamespace(entries=[]), start_task=lambda t: t)
    assert again.recent() == [nonutf8, plain]
    assert nonutf8 in again.known()  # the file itself, not the look-alike without 0xff


def test_recent_files_written_as_plain_text_by_older_versions_still_read(qtbot, settings_dir, tmp_path):
    QSettings().setValue("models/recent", [str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")])
    catalog = ModelCatalog(SimpleNamespace(entries=[]), start_task=lambda t: t)
    assert catalog.recent() == [tmp_path / "a.gguf", tmp_path / "b.gguf"]
    QSettings().setValue("models/recent", str(tmp_path / "a.gguf"))  # one entry comes back alone
    assert catalog.recent() == [tmp_path / "a.gguf"]
    for damaged in (5, "", [""], [None, 3]):
        QSettings().setValue("models/recent", damaged)
        assert catalog.recent() == []


def test_the_pickers_and_the_model_list_give_back_the_file_that_was_listed(qtbot, nonutf8):
    bar = ModelBar()
    qtbot.addWidget(bar)
    look_alike = nonutf8.with_name("nonutf8-.gguf")
    bar.populate([look_alike, nonutf8], lambda p: p.name, target=nonutf8, draft=None, picked=None, pairing=[])
    assert bar.path_of(bar.target_combo) == nonutf8
    bar.target_combo.setCurrentIndex(0)
    assert bar.path_of(bar.target_combo) == look_alike
    # the draft picker lists every model but the target, and keeps the one chosen
    bar.populate([look_alike, nonutf8], lambda p: p.name, target=look_alike, draft=nonutf8, picked=None, pairing=[])
    assert bar.path_of(bar.target_combo) == look_alike and bar.path_of(bar.draft_combo) == nonutf8
    drafts = []
    for i in range(bar.draft_combo.count()):
        bar.draft_combo.setCurrentIndex(i)
        drafts.append(bar.path_of(bar.draft_combo))
    assert drafts == [None, nonutf8]  # "(no draft)", then the model that is not the target

    empty = EmptyState()
    qtbot.addWidget(empty)
    empty.set_models([nonutf8])
    with qtbot.waitSignal(empty.model_chosen) as chosen:
        empty.models.itemDoubleClicked.emit(empty.models.item(0))
    assert chosen.args[0] == nonutf8 and Path(chosen.args[0]).is_file()


def test_reference_speeds_are_kept_per_file_whatever_its_name(qtbot, settings_dir, nonutf8):
    """Keys, unlike values, keep the character (Qt writes it as %UDCFF): a guard."""
    remember_reference(nonutf8, 42.5)
    QSettings().sync()
    assert measured_reference(nonutf8) == 42.5
    for other in ("nonutf8-.gguf", "nonutf8-\udcfe.gguf"):
        assert measured_reference(nonutf8.with_name(other)) is None  # another file, another key

