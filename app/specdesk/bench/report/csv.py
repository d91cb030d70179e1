"""report.csv: one row per run, in the order they ran; empty cells for nulls. Each
row has the run's paired ratio (its tokens/s over target alone's in the same repeat
of the same prompt), its (suite, config)'s speedup, 95% interval and verdict, and the
advisor's prediction for it with its interval and verdict."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from ...speculative.proposers.registry import BASELINE
from .result import num, validate

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
    "paired_ratio",
    "suite_speedup",
    "suite_speedup_low",
    "suite_speedup_high",
    "suite_verdict",
    "suite_detectable",
    "predicted_speedup",
    "predicted_low",
    "predicted_high",
    "predicted_verdict",
]

# The stats fields copied into the CSV as they are.
_STATS_FIELDS = CSV_FIELDS[5:18]


def csv_text(result: dict) -> str:
    """report.csv: one row per run, in the order they ran; empty cells for nulls."""
    validate(result)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    base = {(r.get("suite"), r.get("prompt_id"), r.get("repeat")): (r.get("stats") or {}).get("tokens_per_second")
            for r in result["runs"] if r.get("config") == BASELINE}
    suite_rows = {(r.get("suite"), r.get("config")): r for r in (result["summary"].get("per_suite") or [])
                  if isinstance(r, dict)}
    # the advisor's prediction for each (suite, config), with its interval and verdict
    preds = {(p.get("suite"), p.get("config")): p for p in ((result.get("advisor") or {}).get("predictions") or [])
             if isinstance(p, dict) and not p.get("turn")}
    for run in result["runs"]:
        stats = run.get("stats") or {}
        div = run.get("divergence") or {}
        row = [run.get("suite"), run.get("prompt_id"), run.get("repeat"), run.get("order"), run.get("config")]
        row += [stats.get(k) for k in _STATS_FIELDS]
        row += [run.get("identical"), div.get("verdict"), div.get("margin"), run.get("stop_reason"), run.get("turn", 1)]
        b, t = num(base.get((run.get("suite"), run.get("prompt_id"), run.get("repeat")))), num(stats.get("tokens_per_second"))
        row.append(t / b if b and t else None)
        sr = suite_rows.get((run.get("suite"), run.get("config"))) or {}
        ci = sr.get("speedup_ci") or [None, None]
        row += [sr.get("speedup"), ci[0], ci[1], sr.get("verdict"), sr.get("detectable")]
        p = preds.get((run.get("suite"), run.get("config"))) or {}
        pci = p.get("predicted_ci") or [None, None]
        row += [p.get("predicted_speedup"), pci[0], pci[1], p.get("predicted_verdict")]
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
