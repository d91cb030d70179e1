"""Monospace as the reader sees it: every character drawn at one width."""

from __future__ import annotations

from PySide6.QtGui import QFont, QFontDatabase, QFontMetrics

from specdesk.ui.fonts import draws_monospace


def test_the_system_fixed_font_draws_monospace_and_the_text_font_does_not(qapp):
    """On Debian or Ubuntu with fonts-noto, the fixed font is Noto Sans Mono, which Qt's
    QFontInfo.fixedPitch() calls proportional; what it draws is what counts."""
    mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    fm = QFontMetrics(mono)
    assert fm.horizontalAdvance("iiii") == fm.horizontalAdvance("WWWW") > 0
    assert draws_monospace(mono)
    text = QFontDatabase.systemFont(QFontDatabase.SystemFont.GeneralFont)
    assert QFontMetrics(text).horizontalAdvance("iiii") < QFontMetrics(text).horizontalAdvance("WWWW")
    assert not draws_monospace(text)
    assert not draws_monospace(QFont(text.family(), 40))  # at any size
