"""Reading the runner's result dict: is it one, and which configs, suites and numbers
it holds. Shared by the Markdown, CSV and chart writers."""

from __future__ import annotations

import math
from typing import Any

from ...errors import SpecDeskError


def validate(result: Any) -> None:
    if not isinstance(result, dict):
        raise SpecDeskError(f"not a benchmark result: expected a dict, got {type(result).__name__}")
    for key, kind in (("configs", list), ("runs", list), ("summary", dict)):
        if key not in result:
            raise SpecDeskError(f"not a benchmark result: missing {key!r}")
        if not isinstance(result[key], kind):
            raise SpecDeskError(f"not a benchmark result: {key!r} is not a {kind.__name__}")


def configs(result: dict) -> list[str]:
    """Configs in the runner's order (the baseline first), then any that only the runs or
    summary mention."""
    out = list(result.get("configs") or [])
    summary = result.get("summary") or {}
    extra = [r.get("config") for r in result.get("runs") or []]
    extra += [r.get("config") for r in summary.get("per_suite") or []]
    extra += [r.get("config") for r in summary.get("overall") or []]
    for c in extra:
        if c is not None and c not in out:
            out.append(c)
    return out


def suites(result: dict) -> list[str]:
    settings = (result.get("meta") or {}).get("settings") or {}
    out = [s for s in settings.get("suites") or []]
    summary = result.get("summary") or {}
    seen = [r.get("suite") for r in summary.get("per_suite") or []] + [r.get("suite") for r in result.get("runs") or []]
    present = set(s for s in seen if s is not None)
    out = [s for s in out if s in present]
    for s in seen:
        if s is not None and s not in out:
            out.append(s)
    return out


def basename(path: Any) -> str:
    if not path:
        return "none"
    return str(path).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


def num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None



def drift_of(result: dict) -> dict | None:
    """The kernel drift measured for this result's target (``Drift.to_dict()``):
    the result's own, or the advisor's calibration's."""
    d = result.get("drift")
    if isinstance(d, dict):
        return d
    d = (result.get("advisor") or {}).get("drift")
    return d if isinstance(d, dict) else None
