"""The benchmark report: turns the runner's result dict into files a person can read
and paste (report.md), files a program can read (report.json, report.csv) and three
charts (PNG).

Nothing here imports Qt. matplotlib is imported only by the chart functions, and
only through its object-oriented API with the Agg canvas, so importing this module
is cheap and writing a report never touches a GUI backend (nor pyplot's global
figures, should the caller use pyplot itself).

Writing is all-or-nothing per file: the output directory is checked first (by
creating and removing a temporary file), every file's content is rendered in memory,
and each file is written to a temporary name in the directory and moved into place
with os.replace.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from specdesk.errors import SpecDeskError

BASELINE = "none"

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
]

# The stats fields copied into the CSV as they are.
_STATS_FIELDS = CSV_FIELDS[5:18]

FILE_NAMES = [
    "report.json",
    "report.csv",
    "report.md",
    "speedup.png",
    "acceptance_by_position.png",
    "tokens_per_second.png",
]


# -- public API ---------------------------------------------------------------------


def write_report(result: dict, out_dir: str | Path) -> list[Path]:
    """Write report.json, report.csv, report.md and the three PNG charts into
    out_dir (created if missing) and return their paths, in that order.

    Raises SpecDeskError, before anything is written, when result is not a
    benchmark result or out_dir cannot be written.
    """
    _validate(result)
    out = Path(out_dir)
    created = _prepare_dir(out)
    try:
        contents: list[tuple[str, bytes]] = [
            ("report.json", (json.dumps(result, indent=2, ensure_ascii=False) + "\n").encode("utf-8")),
            ("report.csv", csv_text(result).encode("utf-8")),
            ("report.md", markdown(result).encode("utf-8")),
            ("speedup.png", speedup_chart(result)),
            ("acceptance_by_position.png", acceptance_chart(result)),
            ("tokens_per_second.png", tokens_per_second_chart(result)),
        ]
    except BaseException:
        # Nothing written yet: leave no empty directory behind either.
        for d in reversed(created):
            try:
                d.rmdir()
            except OSError:
                pass
        raise
    paths = []
    for name, data in contents:
        path = out / name
        _write_atomic(path, data)
        paths.append(path)
    return paths


def check_writable(out_dir: str | Path) -> None:
    """Create ``out_dir`` if needed and make sure files can be written there; raise a
    one-line SpecDeskError otherwise. The CLI calls it before any model work."""
    _prepare_dir(Path(out_dir))


def markdown(result: dict) -> str:
    """The report.md content: tables a person can paste into a GitHub issue."""
    _validate(result)
    meta = result.get("meta") or {}
    settings = meta.get("settings") or {}
    configs = _configs(result)
    suites = _suites(result)
    per_suite = {(r.get("suite"), r.get("config")): r for r in (result["summary"].get("per_suite") or [])}
    overall = {r.get("config"): r for r in (result["summary"].get("overall") or [])}
    temperature = settings.get("temperature")
    sampled = _num(temperature) is not None and float(temperature) > 0.0

    lines: list[str] = ["# SpecDesk benchmark", "", _header_line(meta), ""]
    if not result["runs"]:
        lines += ["No runs.", ""]

    for suite in suites:
        rows = [per_suite[(suite, c)] for c in configs if (suite, c) in per_suite]
        if not rows:
            continue
        prompts = max((r.get("prompts") or 0) for r in rows)
        lines.append(f"## {suite} ({prompts} prompt{'s' if prompts != 1 else ''})")
        lines.append("")
        lines.extend(_table(rows, ranges=True))
        lines.append("")

    if overall:
        lines.append("## All suites")
        lines.append("")
        lines.extend(_table([overall[c] for c in configs if c in overall], ranges=False))
        lines.append("")

    advisor = result.get("advisor")
    if advisor:
        lines.extend(_advisor_section(advisor, suites, configs))

    lines.extend(_memory_section(result.get("memory"), meta))
    lines.extend(_how_to_read(sampled))
    return "\n".join(lines).rstrip("\n") + "\n"


def csv_text(result: dict) -> str:
    """report.csv: one row per run, in the order they ran; empty cells for nulls."""
    _validate(result)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for run in result["runs"]:
        stats = run.get("stats") or {}
        div = run.get("divergence") or {}
        row = [run.get("suite"), run.get("prompt_id"), run.get("repeat"), run.get("order"), run.get("config")]
        row += [stats.get(k) for k in _STATS_FIELDS]
        row += [run.get("identical"), div.get("verdict"), div.get("margin"), run.get("stop_reason")]
        w.writerow([_csv_cell(v) for v in row])
    return buf.getvalue()


# -- validation and files ---------------------------------------------------------------


def _validate(result: Any) -> None:
    if not isinstance(result, dict):
        raise SpecDeskError(f"not a benchmark result: expected a dict, got {type(result).__name__}")
    for key, kind in (("configs", list), ("runs", list), ("summary", dict)):
        if key not in result:
            raise SpecDeskError(f"not a benchmark result: missing {key!r}")
        if not isinstance(result[key], kind):
            raise SpecDeskError(f"not a benchmark result: {key!r} is not a {kind.__name__}")


def _prepare_dir(out: Path) -> list[Path]:
    """Create out (and missing parents), check that a file can be created in it.
    Returns the directories it created, outermost first."""
    if out.exists() and not out.is_dir():
        raise SpecDeskError(f"cannot write the report to {out}: it exists and is not a directory")
    missing = []
    p = out
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    missing.reverse()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SpecDeskError(f"cannot create the report directory {out}: {e.strerror or e}") from None
    try:
        fd, probe = tempfile.mkstemp(dir=out, prefix=".specdesk-write-test-")
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        for d in reversed(missing):
            try:
                d.rmdir()
            except OSError:
                pass
        raise SpecDeskError(f"cannot write the report to {out}: {e.strerror or e}") from None
    return missing


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise SpecDeskError(f"cannot write {path}: {e.strerror or e}") from None
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def _csv_cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        return ""
    return v


# -- shared helpers ------------------------------------------------------------------------


def _configs(result: dict) -> list[str]:
    """Configs in the runner's order ("none" first), then any that only the runs or
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


def _suites(result: dict) -> list[str]:
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


def _basename(path: Any) -> str:
    if not path:
        return "none"
    return str(path).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _colors(configs: list[str]) -> dict[str, str]:
    # tab10 without its grey, which is kept for the baseline.
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"]
    out, i = {}, 0
    for c in configs:
        if c == BASELINE:
            out[c] = "#7f7f7f"
        else:
            out[c] = palette[i % len(palette)]
            i += 1
    return out


# -- markdown ------------------------------------------------------------------------------

DASH = "–"


def _md_cell(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _pct(v: Any) -> str:
    v = _num(v)
    return DASH if v is None else f"{v * 100:.1f}%"


def _fixed(v: Any, digits: int) -> str:
    v = _num(v)
    return DASH if v is None else f"{v:.{digits}f}"


def _speedup(row: dict, ranges: bool) -> str:
    s = _num(row.get("speedup"))
    if s is None:
        return DASH
    text = f"{s:.2f}×"
    lo, hi = _num(row.get("speedup_min")), _num(row.get("speedup_max"))
    if ranges and row.get("config") != BASELINE and lo is not None and hi is not None:
        text += f" ({lo:.2f}–{hi:.2f})"
    return text


def _identical(row: dict) -> str:
    if row.get("config") == BASELINE:
        return "baseline"
    compared = row.get("compared") or 0
    if not compared:
        return DASH
    text = f"{row.get('identical') or 0}/{compared}"
    notes = []
    near, mism = row.get("near_ties") or 0, row.get("mismatches") or 0
    if near:
        notes.append(f"{near} near-tie{'s' if near != 1 else ''}")
    if mism:
        notes.append(f"**{mism} mismatch{'es' if mism != 1 else ''}**")
    if notes:
        text += " (" + ", ".join(notes) + ")"
    return text


def _table(rows: list[dict], ranges: bool) -> list[str]:
    speed_head = "speedup (range)" if ranges else "speedup"
    out = [
        f"| config | tok/s | {speed_head} | acceptance | tokens/step | identical at T=0 | Python overhead |",
        "|---|--:|--:|--:|--:|:-:|--:|",
    ]
    for r in rows:
        cells = [
            f"`{_md_cell(r.get('config'))}`",
            _fixed(r.get("median_tps"), 1),
            _speedup(r, ranges),
            _pct(r.get("acceptance")),
            _fixed(r.get("mean_accepted_length"), 2),
            _identical(r),
            _pct(r.get("overhead_share")),
        ]
        out.append("| " + " | ".join(cells) + " |")
    return out


def _header_line(meta: dict) -> str:
    machine = meta.get("machine") or {}
    settings = meta.get("settings") or {}
    m = str(machine.get("cpu") or "unknown CPU")
    if machine.get("cores"):
        m += f" ({machine['cores']} cores)"
    if machine.get("gpu"):
        m += f", {machine['gpu']}"
    target = f"`{_md_cell(_basename(meta['target']))}`" if meta.get("target") else "unknown"
    parts = [f"**Machine:** {_md_cell(m)}", f"**Target:** {target}"]
    parts.append(f"**Draft:** `{_md_cell(_basename(meta.get('draft')))}`" if meta.get("draft") else "**Draft:** none")
    s = []
    if settings.get("max_tokens") is not None:
        s.append(f"max {settings['max_tokens']} tokens")
    if settings.get("temperature") is not None:
        s.append(f"temperature {settings['temperature']}")
    if settings.get("repeats") is not None:
        s.append(f"{settings['repeats']} repeat{'s' if settings['repeats'] != 1 else ''}")
    if settings.get("seed") is not None:
        s.append(f"seed {settings['seed']}")
    if s:
        parts.append("**Settings:** " + ", ".join(s))
    tail = []
    if meta.get("specdesk_version"):
        tail.append(f"SpecDesk {meta['specdesk_version']}")
    if meta.get("created"):
        tail.append(str(meta["created"]))
    if tail:
        parts.append(", ".join(tail))
    return " · ".join(parts)


def _advisor_section(advisor: dict, suites: list[str], configs: list[str]) -> list[str]:
    lines = ["## Advisor", ""]
    preds = list(advisor.get("predictions") or [])
    if preds:
        s_rank = {s: i for i, s in enumerate(suites)}
        c_rank = {c: i for i, c in enumerate(configs)}
        preds.sort(key=lambda p: (s_rank.get(p.get("suite"), len(s_rank)), c_rank.get(p.get("config"), len(c_rank))))
        lines.append("Speedup predicted from the measured costs and acceptance, against the speedup measured:")
        lines.append("")
        lines.append("| suite | config | predicted | measured | error |")
        lines.append("|---|---|--:|--:|--:|")
        errors = []
        for p in preds:
            err = _num(p.get("error"))
            if err is not None:
                errors.append(abs(err))
            pred, meas = _num(p.get("predicted_speedup")), _num(p.get("measured_speedup"))
            lines.append(
                f"| {_md_cell(p.get('suite'))} | `{_md_cell(p.get('config'))}` | "
                f"{DASH if pred is None else f'{pred:.2f}×'} | {DASH if meas is None else f'{meas:.2f}×'} | "
                f"{DASH if err is None else f'{err * 100:.1f}%'} |"
            )
        lines.append("")
        if errors:
            lines.append(f"Mean absolute prediction error: {sum(errors) / len(errors) * 100:.1f}%.")
            lines.append("")
    costs = advisor.get("costs") or {}
    verify, draft = costs.get("verify") or {}, costs.get("draft") or {}
    sizes = sorted({k for k in list(verify) + list(draft)}, key=lambda k: (not str(k).isdigit(), int(k) if str(k).isdigit() else 0, str(k)))
    if sizes:
        lines.append("Measured costs (milliseconds):")
        lines.append("")
        lines.append("| tokens | verify pass | draft step |")
        lines.append("|--:|--:|--:|")
        for k in sizes:
            v, d = _num(verify.get(k)), _num(draft.get(k))
            lines.append(f"| {k} | {DASH if v is None else f'{v * 1000:.1f}'} | {DASH if d is None else f'{d * 1000:.1f}'} |")
        lines.append("")
    if advisor.get("recommendation"):
        lines.append(f"**Recommendation:** {advisor['recommendation']}")
        lines.append("")
    if advisor.get("memory_alternative"):
        lines.append(f"**If memory is tight:** {advisor['memory_alternative']}")
        lines.append("")
    return lines


def _bytes(v: Any) -> str:
    n = _num(v)
    if n is None:
        return DASH
    if n == 0:
        return "none"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}" if unit == "GiB" else f"{n / size:.0f} {unit}"
    return f"{n:.0f} B"


def _memory_section(memory: dict | None, meta: dict) -> list[str]:
    lines = ["## Memory", ""]
    if not memory:
        lines += ["Not measured.", ""]
        return lines
    lines.append(f"- Target model: {_bytes(memory.get('target_bytes'))}")
    if meta.get("draft") or _num(memory.get("draft_bytes")):
        lines.append(f"- Draft model: {_bytes(memory.get('draft_bytes'))}")
        lines.append(
            f"- The draft adds {_bytes(memory.get('extra_ram_bytes'))} of RAM and "
            f"{_bytes(memory.get('extra_vram_bytes'))} of VRAM."
        )
    else:
        lines.append("- No draft model: n-gram lookup needs no extra memory.")
    lines.append("")
    return lines


def _how_to_read(sampled: bool) -> list[str]:
    lines = [
        "## How to read this",
        "",
        "- **speedup**: for each prompt, tokens/s of the configuration divided by tokens/s of "
        "`none` (the target alone) on the same prompt; the median over prompts, and in the "
        "suite tables the range over prompts. Above 1.00× speculation pays, below it costs.",
        "- **tok/s**: median decode speed (prompt processing excluded).",
        "- **acceptance**: share of drafted tokens the target accepted.",
        "- **tokens/step**: tokens per target verify pass, the target's own correction or bonus "
        "token included (1.00 means nothing drafted was ever kept).",
        "- **identical at T=0**: outputs equal to the target alone's. A *near-tie* is a "
        "difference where the target's two best tokens were within 0.5 logits (llama.cpp's "
        "batch kernels round differently from single-token steps), which is expected; a "
        "*mismatch* is not, and worth reporting.",
        "- **Python overhead**: share of decode time spent outside llama.cpp.",
    ]
    if sampled:
        lines.append("- Outputs are compared only at temperature 0; this run sampled, so the column is empty.")
    lines.append("")
    return lines


# -- charts ----------------------------------------------------------------------------------


def _new_figure(width: float, height: float):
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        # Headless. If the caller already uses pyplot, leave its backend alone: the
        # figures below never go through pyplot anyway.
        matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _subtitle(result: dict) -> str:
    meta = result.get("meta") or {}
    settings = meta.get("settings") or {}
    parts = [f"target {_basename(meta.get('target'))}"]
    if meta.get("draft"):
        parts.append(f"draft {_basename(meta.get('draft'))}")
    if settings.get("temperature") is not None:
        parts.append(f"T={settings['temperature']}")
    if settings.get("max_tokens") is not None:
        parts.append(f"{settings['max_tokens']} tokens")
    machine = meta.get("machine") or {}
    if machine.get("cpu"):
        parts.append(str(machine["cpu"]))
    return ", ".join(parts)


def _caption(fig, result: dict, width_in: float) -> None:
    """The models, settings and machine, small and grey under the chart, wrapped to
    the figure's width (a long model name would otherwise be clipped)."""
    import textwrap

    text = textwrap.fill(_subtitle(result), width=max(40, int(width_in * 14)), break_long_words=True)
    fig.supxlabel(text, fontsize=8.5, color="#555555")


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#555555")
    ax.set_xticks([])
    ax.set_yticks([])


def speedup_chart(result: dict) -> bytes:
    """Grouped bars: median speedup by suite (and over all suites) and config, the
    range over prompts as whiskers, the advisor's prediction as a marker."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    configs = [c for c in _configs(result) if c != BASELINE]
    suites = _suites(result)
    summary = result["summary"]
    per_suite = {(r.get("suite"), r.get("config")): r for r in summary.get("per_suite") or []}
    overall = {r.get("config"): r for r in summary.get("overall") or []}
    preds = {}
    for p in (result.get("advisor") or {}).get("predictions") or []:
        if _num(p.get("predicted_speedup")) is not None:
            preds[(p.get("suite"), p.get("config"))] = _num(p["predicted_speedup"])

    groups = list(suites) + (["all suites"] if overall and len(suites) > 1 else [])
    width_in = max(7.0, 2.6 + len(groups) * (0.35 + 0.32 * max(1, len(configs))))
    fig = _new_figure(width_in, 5.0)
    ax = fig.add_subplot()
    fig.suptitle("Speedup over the target alone (median over prompts)", fontsize=13)
    _caption(fig, result, width_in)
    if not configs or not groups:
        _empty(ax, "only the baseline was run: nothing to compare")
        return _png(fig)

    colors = _colors(_configs(result))
    n = len(configs)
    width = 0.8 / n
    ymax = 1.0
    any_range = any_pred = False
    labels: list[tuple[float, float, float]] = []
    plotted: set[str] = set()
    for gi, group in enumerate(groups):
        for ci, config in enumerate(configs):
            row = overall.get(config) if group == "all suites" and gi == len(suites) else per_suite.get((group, config))
            if not row:
                continue
            s = _num(row.get("speedup"))
            if s is None:
                continue
            x = gi + (ci - (n - 1) / 2) * width
            ax.bar(x, s, width * 0.92, color=colors[config], zorder=2)
            ymax = max(ymax, s)
            lo, hi = _num(row.get("speedup_min")), _num(row.get("speedup_max"))
            if lo is not None and hi is not None:
                ax.errorbar(x, s, yerr=[[max(0.0, s - lo)], [max(0.0, hi - s)]], fmt="none",
                            ecolor="#333333", elinewidth=0.9, capsize=2.5, zorder=3)
                ymax = max(ymax, hi)
                any_range = True
            p = preds.get((group, config))
            if p is not None:
                ax.plot([x], [p], marker="D", markersize=5.5, markerfacecolor="white",
                        markeredgecolor="black", markeredgewidth=1.1, linestyle="none", zorder=4)
                ymax = max(ymax, p)
                any_pred = True
            labels.append((x, s, max(s, hi) if hi is not None else s))
            plotted.add(config)
    top = ymax * 1.08
    for x, s, above in labels:
        # The value, written up the bar from its foot; above a bar (and its whisker)
        # too short to hold it.
        inside = s >= 0.16 * top
        ax.text(x, 0.015 * top if inside else above + 0.015 * top, f"{s:.2f}", rotation=90, ha="center",
                va="bottom", fontsize=7, color="white" if inside else "#333333",
                fontweight="bold", zorder=5)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, zorder=3)
    if len(groups) > len(suites):
        ax.axvline(len(suites) - 0.5, color="#bbbbbb", linewidth=0.8, zorder=1)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=0 if len(groups) <= 4 else 20, ha="center" if len(groups) <= 4 else "right")
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.set_ylim(0, top)
    ax.set_ylabel("speedup (×)")
    ax.grid(axis="y", color="#e5e5e5", zorder=0)
    ax.set_axisbelow(True)

    handles = [Patch(color=colors[c], label=c) for c in configs if c in plotted]
    handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1, label="target alone (1.0×)"))
    if any_range:
        handles.append(Line2D([], [], color="#333333", marker="|", markersize=8, linestyle="none", label="range over prompts"))
    if any_pred:
        handles.append(Line2D([], [], marker="D", markersize=5.5, markerfacecolor="white", markeredgecolor="black",
                              linestyle="none", label="advisor's prediction"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=9)
    return _png(fig)


def _acceptance_by_position(result: dict) -> dict[str, list[float | None]]:
    """Per config: sum of accepted / sum of drafted at each draft position, over runs;
    configs that never drafted are left out."""
    acc: dict[str, list[int]] = {}
    dra: dict[str, list[int]] = {}
    for run in result["runs"]:
        stats = run.get("stats") or {}
        config = run.get("config")
        d = stats.get("drafted_per_position") or []
        a = stats.get("accepted_per_position") or []
        ds, as_ = dra.setdefault(config, []), acc.setdefault(config, [])
        for xs, src in ((ds, d), (as_, a)):
            if len(xs) < len(src):
                xs.extend([0] * (len(src) - len(xs)))
            for i, v in enumerate(src):
                xs[i] += int(v or 0)
    out = {}
    for config in _configs(result):
        d, a = dra.get(config) or [], acc.get(config) or []
        if not sum(d):
            continue
        while d and d[-1] == 0:
            d = d[:-1]
        out[config] = [(a[i] if i < len(a) else 0) / d[i] if d[i] else None for i in range(len(d))]
    return out


def acceptance_chart(result: dict) -> bytes:
    """Acceptance rate at each draft position, per config."""
    rates = _acceptance_by_position(result)
    colors = _colors(_configs(result))
    fig = _new_figure(8.0, 4.8)
    ax = fig.add_subplot()
    fig.suptitle("Acceptance by draft position (accepted / drafted, all runs)", fontsize=13)
    _caption(fig, result, 8.0)
    never = [c for c in _configs(result) if c != BASELINE and c not in rates]
    if not rates:
        _empty(ax, "no configuration drafted any tokens" + (f" ({', '.join(never)})" if never else ""))
        return _png(fig)
    longest = max(len(r) for r in rates.values())
    markers = ["o", "s", "^", "v", "D", "P", "X", "*"]
    n = len(rates)
    for i, (config, r) in enumerate(rates.items()):
        # Configs with the same draft model share their acceptance: dodge them a little.
        dx = (i - (n - 1) / 2) * min(0.06, 0.3 / n)
        xs = [j + 1 + dx for j in range(len(r))]
        ys = [math.nan if v is None else v for v in r]
        ax.plot(xs, ys, marker=markers[i % len(markers)], markersize=5, linewidth=1.6,
                color=colors[config], label=config)
    ax.set_xlim(0.6, longest + 0.4)
    ax.set_ylim(0, 1.03)
    ax.set_xticks(range(1, longest + 1) if longest <= 16 else range(1, longest + 1, max(1, longest // 12)))
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate")
    ax.yaxis.set_major_formatter(_percent_formatter())
    ax.grid(color="#e5e5e5")
    ax.set_axisbelow(True)
    if never:
        ax.plot([], [], linestyle="none", label="never drafted:\n" + "\n".join(never))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=9)
    return _png(fig)


def _percent_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v * 100:.0f}%")


def tokens_per_second_chart(result: dict) -> bytes:
    """Tokens/s of every run, per suite and config: box plots with the runs as points."""
    configs = _configs(result)
    suites = _suites(result)
    colors = _colors(configs)
    values: dict[tuple[str, str], list[float]] = {}
    for run in result["runs"]:
        v = _num((run.get("stats") or {}).get("tokens_per_second"))
        if v is not None:
            values.setdefault((run.get("suite"), run.get("config")), []).append(v)

    ncols = max(1, min(3, len(suites)))
    nrows = max(1, math.ceil(len(suites) / ncols))
    height = 1.1 + nrows * (0.6 + 0.42 * max(1, len(configs)))
    width_in = 3.9 * ncols + 0.9
    fig = _new_figure(width_in, height + 0.3)
    fig.suptitle("Decode speed per run (tokens/s; box: quartiles, line: median, dots: runs)", fontsize=13)
    _caption(fig, result, width_in)
    if not suites:
        _empty(fig.add_subplot(), "no runs")
        return _png(fig)
    axes = fig.subplots(nrows, ncols, sharey=True, squeeze=False)
    all_values = [v for vs in values.values() for v in vs]
    hi = max(all_values) if all_values else 1.0
    for i, suite in enumerate(suites):
        ax = axes[i // ncols][i % ncols]
        ax.set_title(suite, fontsize=10)
        for ci, config in enumerate(configs):
            vs = values.get((suite, config)) or []
            if not vs:
                continue
            box = ax.boxplot([vs], positions=[ci], orientation="horizontal", widths=0.55, patch_artist=True,
                             showfliers=False, manage_ticks=False)
            for patch in box["boxes"]:
                patch.set_facecolor(colors[config])
                patch.set_alpha(0.35)
                patch.set_edgecolor(colors[config])
            for key in ("whiskers", "caps"):
                for line in box[key]:
                    line.set_color(colors[config])
            for line in box["medians"]:
                line.set_color("black")
                line.set_linewidth(1.5)
            # Deterministic spread so that equal values do not hide each other.
            k = len(vs)
            offsets = [((j + 0.5) / k - 0.5) * 0.4 for j in range(k)]
            ax.scatter(vs, [ci + o for o in offsets], s=12, color=colors[config], edgecolors="white",
                       linewidths=0.5, zorder=3)
        ax.set_xlim(0, hi * 1.08)
        ax.grid(axis="x", color="#e5e5e5")
        ax.set_axisbelow(True)
        if i // ncols == nrows - 1 or i + ncols >= len(suites):
            ax.set_xlabel("tokens/s")
    ax0 = axes[0][0]
    ax0.set_yticks(range(len(configs)))
    ax0.set_yticklabels(configs)
    ax0.set_ylim(len(configs) - 0.5, -0.5)  # baseline on top
    for j in range(len(suites), nrows * ncols):
        axes[j // ncols][j % ncols].set_visible(False)
    for r in range(nrows):
        axes[r][0].tick_params(axis="y", labelleft=True)
    return _png(fig)
