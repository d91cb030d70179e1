"""The three PNG charts: speedup by suite and config, acceptance by draft position,
tokens/s per run.

matplotlib is imported only inside these functions, and only through its
object-oriented API with the Agg canvas, so importing the report is cheap and
drawing never touches a GUI backend (nor pyplot's global figures, should the
caller use pyplot itself).
"""

from __future__ import annotations

import io
import math
import sys

from ...speculative.proposers.registry import BASELINE
from .result import basename as _basename
from .result import configs as _configs
from .result import num as _num
from .result import suites as _suites


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
    """Grouped bars: the speedup by suite (and over all suites) and config, its 95%
    interval as whiskers, hatched where the interval holds 1 (within noise), the
    advisor's prediction as a marker."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    configs = [c for c in _configs(result) if c != BASELINE]
    suites = _suites(result)
    summary = result["summary"]
    per_suite = {(r.get("suite"), r.get("config")): r for r in summary.get("per_suite") or []}
    overall = {r.get("config"): r for r in summary.get("overall") or []}
    preds = {}
    for p in (result.get("advisor") or {}).get("predictions") or []:
        if _num(p.get("predicted_speedup")) is not None and not p.get("turn"):
            preds[(p.get("suite"), p.get("config"))] = _num(p["predicted_speedup"])

    groups = list(suites) + (["all suites"] if overall and len(suites) > 1 else [])
    width_in = max(7.0, 2.6 + len(groups) * (0.35 + 0.32 * max(1, len(configs))))
    fig = _new_figure(width_in, 5.0)
    ax = fig.add_subplot()
    fig.suptitle("Speedup over the target alone (geometric mean of paired runs, 95% interval)", fontsize=13)
    _caption(fig, result, width_in)
    if not configs or not groups:
        _empty(ax, "only the baseline was run: nothing to compare")
        return _png(fig)

    colors = _colors(_configs(result))
    n = len(configs)
    width = 0.8 / n
    ymax = 1.0
    any_ci = any_pred = any_noise = False
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
            noise = row.get("verdict") not in ("faster", "slower")
            any_noise |= noise
            # within noise: hatched and pale, never a solid bar that reads as a result
            ax.bar(x, s, width * 0.92, color=colors[config], alpha=0.35 if noise else 1.0,
                   hatch="///" if noise else None, edgecolor=colors[config], linewidth=0.8, zorder=2)
            ymax = max(ymax, s)
            interval = row.get("speedup_ci") or []
            lo, hi = (_num(interval[0]), _num(interval[1])) if len(interval) == 2 else (None, None)
            if lo is not None and hi is not None:
                ax.errorbar(x, s, yerr=[[max(0.0, s - lo)], [max(0.0, hi - s)]], fmt="none",
                            ecolor="#333333", elinewidth=0.9, capsize=2.5, zorder=3)
                ymax = max(ymax, hi)
                any_ci = True
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
                va="bottom", fontsize=7, color="#222222" if inside else "#333333",
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
    if any_ci:
        handles.append(Line2D([], [], color="#333333", marker="|", markersize=8, linestyle="none", label="95% interval"))
    if any_noise:
        handles.append(Patch(facecolor="white", edgecolor="#555555", hatch="///",
                             label="hatched: within noise\n(the interval holds 1×)"))
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
