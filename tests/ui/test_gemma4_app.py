"""The app with a Gemma 4 target and its assistant as the draft file (tiny synthetic
GGUFs written here): the assistant drafts in the chat, its tokens have their own
provenance colour, and a chat that asks for a draft model drafts with the assistant and
says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from PySide6.QtGui import QColor, QTextCursor

from drive import ask, load
from specdesk.ui.chat_view import PROVENANCE
from specdesk.ui.settings import ChatSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from synth.gemma4_assistant import write_pair  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return write_pair(tmp_path_factory.mktemp("gemma4"))


def test_the_assistant_drafts_in_the_chat_with_its_own_colour(qtbot, window, pair):
    w = window
    load(qtbot, w, *pair)
    w.apply_settings(ChatSettings(proposer="gemma4-assistant", auto_k=False, k=4, p_min=0.0, max_tokens=40, n_ctx=512))
    load(qtbot, w, *pair)
    gen = ask(qtbot, w, "the of and to in is")
    assert gen.stats.drafted > 0 and gen.stats.accepted / gen.stats.drafted >= 0.9
    _, text, spans = w.chat_view.messages()[-1]
    mine = [s for s in spans if s.kind == "accepted"]
    assert mine and {s.source for s in mine} == {"gemma4-assistant"}
    assert "Gemma 4 assistant" in mine[0].describe()
    found = w.chat_view.document().find(text[mine[0].start: mine[0].end] or " ")
    if not found.isNull() and mine[0].end > mine[0].start:
        cur = QTextCursor(w.chat_view.document())
        cur.setPosition(found.selectionStart() + 1)
        assert cur.charFormat().background().color() == QColor(PROVENANCE["gemma4-assistant"][0])
    # a chat that asks for a draft model drafts with the assistant the draft file is, and says so
    w.apply_settings(ChatSettings(proposer="draft", auto_k=False, k=4, p_min=0.0, max_tokens=16, n_ctx=512))
    gen = ask(qtbot, w, "on are as with")
    assert gen.config.proposer == "gemma4-assistant"
    assert "gemma4-assistant instead of draft" in w.chat_panel.run_info.text()
