"""Fonts judged by what they draw, not by what their metadata says."""

from __future__ import annotations

from PySide6.QtGui import QFont, QFontMetrics

# Narrow, wide and punctuation glyphs: a proportional font gives these different widths.
_PROBES = ("iiii", "WWWW", "....", "mmmm", "    ")


def draws_monospace(font: QFont) -> bool:
    """Whether ``font`` draws every character at one width, as a reader sees monospace.

    Not ``QFontInfo.fixedPitch()``: fontconfig marks Noto Sans Mono (Debian's and
    Ubuntu's default ``monospace``) as dual-width, for its few double-width glyphs, and
    Qt then calls it not fixed pitch although every Latin glyph has the same advance."""
    fm = QFontMetrics(font)
    return len({fm.horizontalAdvance(s) for s in _PROBES}) == 1
