"""The app with a draft head as the draft file (synthetic pairs of tools/synth/heads.py):
the draft picker says what the file is and which target it reads (or why it does not
fit the loaded one), a chat drafts with the head with its own provenance colour, and a
chat that asks for a draft model drafts with the head instead and says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from PySide6.QtGui import QColor

from drive import ask, load
from specdesk.library.pairing import drafts_for
from specdesk.speculative.proposers.base import EAGLE3
from specdesk.ui.chat_view import PROVENANCE
from specdesk.ui.settings import ChatSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from synth.heads import write_dflash_pair, write_eagle3_pair  # noqa: E402


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    d = tmp_path_factory.mktemp("heads")
    return write_eagle3_pair(d / "eagle3"), write_dflash_pair(d / "dflash", layers=(1, 7))


def test_the_picker_says_what_a_head_is_and_whether_it_fits(qtbot, window, pairs):
    (target, head), (_, misfit) = pairs
    pairing = drafts_for(target, [(head, "head.gguf"), (misfit, "misfit.gguf")])
    fits = next(c for c in pairing if c.path == head)
    assert fits.usable and fits.head_label == "EAGLE-3 head" and "for a target 64 wide" in fits.head
    bad = next(c for c in pairing if c.path == misfit)
    assert not bad.usable and "reads layer 7" in bad.reason
    bar = window.model_bar
    bar.populate([target, head, misfit], lambda p: p.parent.name + "/" + p.name, target, None, None, pairing)
    items = {bar.draft_combo.itemText(i): i for i in range(bar.draft_combo.count())}
    i = items["eagle3/head.gguf — EAGLE-3 head"]
    assert "reads its layers 0, 2, 3" in bar.draft_combo.itemData(i, 3)  # Qt.ToolTipRole: which target it reads
    j = next(i for t, i in items.items() if t.startswith("dflash/head.gguf"))
    assert not bar.draft_combo.model().item(j).isEnabled() and "reads layer 7" in bar.draft_combo.itemData(j, 3)


def test_a_head_drafts_in_the_chat_with_its_own_colour(qtbot, window, pairs):
    w = window
    target, head = pairs[0]
    w.apply_settings(ChatSettings(proposer="eagle3", auto_k=False, k=3, p_min=0.0, max_tokens=32, n_ctx=512))
    load(qtbot, w, target, head)
    gen = ask(qtbot, w, "the of and to in is")
    assert gen.stats.drafted > 0 and gen.stats.accepted / gen.stats.drafted >= 0.9
    _, text, spans = w.chat_view.messages()[-1]
    accepted = [s for s in spans if s.kind == "accepted"]
    assert accepted and {s.source for s in accepted} == {"eagle3"}
    assert "EAGLE-3" in accepted[0].describe() and "draft position" in accepted[0].describe()
    assert PROVENANCE["eagle3"][0] == EAGLE3.colour and QColor(EAGLE3.colour).isValid()
    # a chat that asks for a draft model drafts with the head, and says so
    w.apply_settings(ChatSettings(proposer="draft", auto_k=False, k=3, p_min=0.0, max_tokens=16, n_ctx=512))
    gen = ask(qtbot, w, "on are as with")
    assert gen.config.proposer == "eagle3" and "eagle3 instead of draft" in w.chat_panel.run_info.text()
