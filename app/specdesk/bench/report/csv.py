"""report.csv: one row per run, in the order they ran; empty cells for nulls."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from .result import validate

CSV_FIELDS = [
    "suite",
    "prompt_id",
    "repeat",
    "order",
    "config",
    "tokens_per_second",
    "generated",
    "steps",
    "drafted",
    "accepted",
    "acceptance_rate",
    "mean_accepted_length",
    "decode_seconds",
    "draft_seconds",
    "verify_seconds",
    "overhead_seconds",
    "prompt_tokens",
    "prompt_seconds",
    "identical",
    "divergence_verdict",
    "divergence_margin",
    "stop_reason",
    "turn",
]

# The stats fields copied into the CSV as they are.
_STATS_FIELDS = CSV_FIELDS[5:18]


def csv_text(result: dict) -> str:
    """report.csv: one row per run, in the order they ran; empty cells for nulls."""
    validate(result)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for run in result["runs"]:
        stats = run.get("stats") or {}
        div = run.get("divergence") or {}
        row = [run.get("suite"), run.get("prompt_id"), run.get("repeat"), run.get("order"), run.get("config")]
        row += [stats.get(k) for k in _STATS_FIELDS]
        row += [run.get("identical"), div.get("verdict"), div.get("margin"), run.get("stop_reason"), run.get("turn", 1)]
        w.writerow([_csv_cell(v) for v in row])
    return buf.getvalue()


def _csv_cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        return ""
    return v
