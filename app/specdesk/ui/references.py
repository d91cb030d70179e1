"""Target alone's speed per target model, remembered across sessions (QSettings).

A comparison measures it; a plain answer with no proposer measures it too. The
chat's verdict and the tokens/s chart's reference line use it."""

from __future__ import annotations

import math
from pathlib import Path

from PySide6.QtCore import QSettings


def _key(target: Path) -> str:
    return f"reference/{Path(target).resolve()}"


def measured_reference(target: Path | None) -> float | None:
    """The tokens/s target alone reached on ``target``, if measured; None otherwise
    (also for a damaged value: settings from elsewhere must never crash the app)."""
    if target is None:
        return None
    v = QSettings().value(_key(target))
    try:
        x = float(v) if v not in (None, "") else None
    except (TypeError, ValueError):
        return None
    return x if x is not None and math.isfinite(x) and x > 0 else None


def remember_reference(target: Path, tokens_per_second: float) -> None:
    QSettings().setValue(_key(target), float(tokens_per_second))
