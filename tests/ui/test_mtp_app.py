"""The app with a target that carries MTP heads (a tiny GLM-4.5-shaped GGUF written here):
the heads draft without a draft model, their tokens have their own provenance colour,
and a target without heads greys the choice out with the reason."""

from __future__ import annotations


import pytest
from PySide6.QtGui import QColor, QTextCursor

from mtp_gguf import agreeing, no_heads
from specdesk.ui.chat_view import PROVENANCE
from specdesk.ui.settings import ChatSettings, SettingsDialog
from drive import ask, load



@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("mtp")
    return agreeing(d / "agree.gguf"), no_heads(d / "none.gguf")


def test_the_heads_draft_in_the_chat_with_their_own_colour(qtbot, window, models):
    w = window
    load(qtbot, w, models[0])
    w.apply_settings(ChatSettings(proposer="mtp", auto_k=False, k=4, p_min=0.0, max_tokens=48, n_ctx=512))
    load(qtbot, w, models[0])
    gen = ask(qtbot, w, "the of and to in is")
    assert gen.stats.drafted > 0 and gen.stats.accepted / gen.stats.drafted >= 0.9
    _, text, spans = w.chat_view.messages()[-1]
    mtp = [s for s in spans if s.kind == "accepted"]
    assert mtp and {s.source for s in mtp} == {"mtp"}
    assert "MTP heads" in mtp[0].describe() and "draft position" in mtp[0].describe()
    cur = QTextCursor(w.chat_view.document())
    found = w.chat_view.document().find(text[mtp[0].start: mtp[0].end] or " ")
    if not found.isNull() and mtp[0].end > mtp[0].start:
        cur.setPosition(found.selectionStart() + 1)
        assert cur.charFormat().background().color() == QColor(PROVENANCE["mtp"][0])
    # a chat that asks for a draft model drafts with the heads when none is loaded, and says so
    w.apply_settings(ChatSettings(proposer="draft", auto_k=False, k=4, p_min=0.0, max_tokens=16, n_ctx=512))
    gen = ask(qtbot, w, "on are as with")
    assert gen.config.proposer == "mtp" and "mtp instead of draft" in w.chat_panel.run_info.text()


def test_a_target_without_heads_greys_the_choice_out_with_the_reason(qtbot, window, models):
    w = window
    load(qtbot, w, models[1])
    refusals = w.session.cannot_run()
    why = refusals.get("mtp")
    assert why and "no MTP heads" in why
    dlg = SettingsDialog(w.settings, has_gpu=False, parent=w, refusals=refusals)
    qtbot.addWidget(dlg)
    i = dlg.proposer.findData("mtp")
    assert not dlg.proposer.model().item(i).isEnabled()
    assert dlg.proposer.itemData(i, 3) == why  # Qt.ToolTipRole
    assert any(why in n.text() for n in dlg.refusal_notes)
    dlg.close()
    ok = SettingsDialog(w.settings, has_gpu=False, parent=w, refusals={})
    qtbot.addWidget(ok)
    assert ok.proposer.model().item(ok.proposer.findData("mtp")).isEnabled()
    ok.close()
