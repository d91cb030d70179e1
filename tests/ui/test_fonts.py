"""Monospace as the reader sees it: every character drawn at one width."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QFont, QFontDatabase, QFontMetrics

from specdesk.ui.fonts import draws_monospace


def test_the_system_fixed_font_draws_monospace_and_the_text_font_does_not(qapp):
    """On Debian or Ubuntu with fonts-noto, the fixed font is Noto Sans Mono, which Qt's
    QFontInfo.fixedPitch() calls proportional; what it draws is what counts."""
    text = QFontDatabase.systemFont(QFontDatabase.SystemFont.GeneralFont)
    if QFontMetrics(text).horizontalAdvance("iiii") == QFontMetrics(text).horizontalAdvance("WWWW"):
        pytest.skip("no proportional font is installed (fontconfig draws every glyph as the same box): "
                    "apt-get install fonts-dejavu-core or fonts-noto-core to test what monospace means")
    mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    fm = QFontMetrics(mono)
    assert fm.horizontalAdvance("iiii") == fm.horizontalAdvance("WWWW") > 0
    assert draws_monospace(mono)
    assert QFontMetrics(text).horizontalAdvance("iiii") < QFontMetrics(text).horizontalAdvance("WWWW")
    assert not draws_monospace(text)
    assert not draws_monospace(QFont(text.family(), 40))  # at any size
