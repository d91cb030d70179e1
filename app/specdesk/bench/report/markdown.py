"""report.md: tables a person can paste into a GitHub issue."""

from __future__ import annotations

from typing import Any

from ...fmt import format_bytes
from ...session.text import (
    claim_text,
    noise_text,
    predicted_cell,
    prediction_verdict_label,
    speed_verdict_text,
    speedup_text,
    stopping_text,
    verdict_label,
    verdict_text,
)
from ...speculative.proposers.registry import BASELINE
from ..rows import rows_of
from ..stats import PairedSpeedup
from .result import drift_of, validate
from .result import basename as _basename
from .result import configs as _configs
from .result import num as _num
from .result import suites as _suites

# At most this many divergences are explained one by one.
MAX_DIVERGENCES = 12


def markdown(result: dict) -> str:
    """The report.md content: tables a person can paste into a GitHub issue."""
    validate(result)
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
    lines.extend(_sureness(result))

    for suite in suites:
        rows = [per_suite[(suite, c)] for c in configs if (suite, c) in per_suite]
        if not rows:
            continue
        prompts = max((r.get("prompts") or 0) for r in rows)
        lines.append(f"## {suite} ({prompts} prompt{'s' if prompts != 1 else ''})")
        lines.append("")
        lines.extend(_table(rows))
        lines.append("")

    lines.extend(_turns_section(result, configs))

    if overall:
        lines.append("## All suites")
        lines.append("")
        rows = [overall[c] for c in configs if c in overall]
        lines.extend(_table(rows))
        lines.append("")
        lines.extend(f"- `{_md_cell(r.get('config'))}`: {_md_cell(speed_verdict_text(_speedup(r)))}." for r in rows
                     if r.get("verdict") not in (None, "baseline"))
        if any(r.get("verdict") not in (None, "baseline") for r in rows):
            lines.append("")

    advisor = result.get("advisor")
    if advisor:
        lines.extend(_advisor_section(advisor, suites, configs))
        lines.extend(_published_quant(result))

    drift = drift_of(result)
    lines.extend(_exactness_section(result, drift, _num(temperature)))
    lines.extend(_memory_section(result.get("memory"), meta))
    lines.extend(_how_to_read(sampled))
    return "\n".join(lines).rstrip("\n") + "\n"


DASH = "–"


def _md_cell(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _pct(v: Any) -> str:
    v = _num(v)
    return DASH if v is None else f"{v * 100:.1f}%"


def _fixed(v: Any, digits: int) -> str:
    v = _num(v)
    return DASH if v is None else f"{v:.{digits}f}"


def _speedup(d: dict) -> PairedSpeedup:
    """A paired speedup read from the report's JSON (a summary row, a history gain, a
    prediction's measurement), as the sentences of session.text take it."""
    return PairedSpeedup.from_dict(d)


def _verdict(row: dict) -> str:
    if row.get("config") == BASELINE:
        return "baseline"
    label = verdict_label(_speedup(row))
    return f"**{label}**" if row.get("verdict") in ("faster", "slower") else label


def _sureness(result: dict) -> list[str]:
    """How many repeats ran and why, and the machine's noise floor."""
    summary = result.get("summary") or {}
    parts = [stopping_text(result.get("stopping"), rows_of(summary.get("overall")))]
    if "noise" in summary:
        parts.append(noise_text(summary.get("noise")))
    text = " ".join(p for p in parts if p)
    return [f"**How sure:** {_md_cell(text)}", ""] if text else []


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


def _table(rows: list[dict]) -> list[str]:
    out = [
        "| config | tok/s | speedup (95% interval) | verdict | acceptance | tokens/step | identical at T=0 | Python overhead |",
        "|---|--:|--:|:-:|--:|--:|:-:|--:|",
    ]
    for r in rows:
        cells = [
            f"`{_md_cell(r.get('config'))}`",
            _fixed(r.get("median_tps"), 1),
            speedup_text(_speedup(r)) if _num(r.get("speedup")) is not None else DASH,
            _verdict(r),
            _pct(r.get("acceptance")),
            _fixed(r.get("mean_accepted_length"), 2),
            _identical(r),
            _pct(r.get("overhead_share")),
        ]
        out.append("| " + " | ".join(cells) + " |")
    return out


def _turns_section(result: dict, configs: list[str]) -> list[str]:
    """Multi-turn suites: one table per suite with a row per (turn, config), then
    history lookup against n-gram lookup without history on the later turns."""
    summary = result.get("summary") or {}
    rows = [r for r in summary.get("per_turn") or [] if isinstance(r, dict)]
    lines: list[str] = []
    c_rank = {c: i for i, c in enumerate(configs)}
    for suite in dict.fromkeys(r.get("suite") for r in rows):
        mine = sorted((r for r in rows if r.get("suite") == suite),
                      key=lambda r: (r.get("turn") or 0, c_rank.get(r.get("config"), len(c_rank))))
        lines += [f"## {_md_cell(suite)} by turn", "",
                  "Turn n's prompt holds the chat so far: turns 2 and 3 revise the first answer, "
                  "and history lookup can copy from the earlier turns.", ""]
        table = _table(mine)
        lines.append("| turn " + table[0])
        lines.append("|--:" + table[1])
        lines += [f"| {r.get('turn')} " + line for r, line in zip(mine, table[2:])]
        lines.append("")
    for h in summary.get("history") or []:
        if not isinstance(h, dict):
            continue
        a = _num(h.get("acceptance"))
        text = (f"**History lookup on turns {h.get('turns_from', 2)}+** ({h.get('prompts')} prompts): "
                f"`{_md_cell(h.get('config'))}` {_speedup_verdict(h)} target alone, "
                f"acceptance {_pct(a)}")
        if h.get("without_history"):
            s0, a0 = _num(h.get("speedup_without_history")), _num(h.get("acceptance_without_history"))
            vs = {"speedup": h.get("speedup_over_without_history"), "speedup_ci": h.get("speedup_over_without_history_ci"),
                  "verdict": h.get("verdict_over_without_history")}
            text += (f"; without history (`{_md_cell(h['without_history'])}`) {DASH if s0 is None else f'{s0:.2f}×'}, "
                     f"acceptance {_pct(a0)}: history lookup is {_speedup_verdict(vs)} "
                     f"the n-gram lookup without history (paired per run).")
        else:
            text += "."
        lines += [text, ""]
    return lines


def _speedup_verdict(row: dict) -> str:
    if _num(row.get("speedup")) is None:
        return DASH
    v = row.get("verdict")
    return speedup_text(_speedup(row)) + (f" ({VERDICT_WORDS[v]})" if v in VERDICT_WORDS else "")


VERDICT_WORDS = {"faster": "faster", "slower": "slower", "within-noise": "within noise"}


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
        s.append(f"{settings['repeats']} repeat{'s' if settings['repeats'] != 1 else ''}"
                 + (" (until sure)" if settings.get("until_sure") else ""))
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
        preds.sort(key=lambda p: (s_rank.get(p.get("suite"), len(s_rank)), p.get("turn") or 0,
                                  c_rank.get(p.get("config"), len(c_rank))))
        lines.append("Speedup predicted from short runs of the real decode loop on the calibration's own prompts "
                     "(95% interval; it says *pays* only when all of it is above 1×), next to what the isolated "
                     "component costs predict, against the speedup measured here (with its 95% interval: a "
                     "prediction inside it is as close as this run can tell):")
        lines.append("")
        lines.append("| suite | config | predicted (95% interval) | advisor says | components | measured (95% interval) "
                     "| verdict | error |")
        lines.append("|---|---|--:|:-:|--:|--:|:-:|--:|")
        errors, inside, judged = [], 0, 0
        for p in preds:
            err = _num(p.get("error"))
            if not p.get("turn"):  # turns are a breakdown of their suite's row
                if err is not None:
                    errors.append(abs(err))
                if p.get("within_interval") is not None:
                    judged += 1
                    inside += bool(p["within_interval"])
            comp = _num(p.get("component_predicted_speedup"))
            measured = {"speedup": p.get("measured_speedup"), "speedup_ci": p.get("measured_ci"),
                        "verdict": p.get("measured_verdict")}
            where = _md_cell(p.get("suite")) + (f" turn {p['turn']}" if p.get("turn") else "")
            said = {"verdict": p.get("predicted_verdict"), "predicted_speedup": p.get("predicted_speedup"),
                    "predicted_ci": p.get("predicted_ci")}
            lines.append(
                f"| {where} | `{_md_cell(p.get('config'))}` | {predicted_cell(p)} | {prediction_verdict_label(said)} | "
                f"{DASH if comp is None else f'{comp:.2f}×'} | "
                f"{speedup_text(_speedup(measured)) if _num(measured['speedup']) is not None else DASH} | "
                f"{_verdict(measured) if measured['verdict'] else DASH} | "
                f"{DASH if err is None else f'{err * 100:.1f}%'} |"
            )
        lines.append("")
        if errors:
            lines.append(f"Mean absolute prediction error: {sum(errors) / len(errors) * 100:.1f}%"
                         + (f"; {inside} of {judged} predictions inside the measured interval." if judged else "."))
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



def _published_quant(result: dict) -> list[str]:
    """The better quantization the draft's memory would buy, where the target's repo
    publishes one (or why none is offered)."""
    pub, note = result.get("published_quant"), result.get("published_quant_note")
    if isinstance(pub, dict) and pub.get("repo"):
        size = f" ({format_bytes(pub['size'])})" if _num(pub.get("size")) else ""
        return [f"**Published:** {_md_cell(pub['repo'])} publishes {_md_cell(pub.get('quant'))} as "
                f"`{_md_cell(pub.get('file'))}`{size}: `{_md_cell(pub.get('command', ''))}`", ""]
    if note:
        return [f"**Published:** {_md_cell(note)}.", ""]
    return []


def _bytes(v: Any) -> str:
    n = _num(v)
    if n is None:
        return DASH
    return "none" if n == 0 else format_bytes(n)


def _exactness_section(result: dict, drift: dict | None, temperature: float | None) -> list[str]:
    """What "identical" means here, the measured kernel drift by batch size, and each
    divergence at T=0 in a sentence."""
    lines = ["## Exactness and kernel drift", "", claim_text(drift, temperature), ""]
    rows = [b for b in (drift or {}).get("by_batch") or [] if isinstance(b, dict)]
    if rows:
        s = (drift.get("sampling") or {}) if drift else {}
        lines.append(
            f"The target's logits from a single-token step against the same position in a verify batch "
            f"({drift.get('positions')} positions; total variation at T={_num(s.get('temperature')) or 0:g}; "
            f"{_pct(drift.get('near_tie_share'))} of positions are near-ties, top two within "
            f"{_num(drift.get('near_tie_logits')) or 0:g} logits):"
        )
        lines.append("")
        lines.append("| batch | mean TV | worst TV | largest logit difference | argmax flips at T=0 |")
        lines.append("|--:|--:|--:|--:|--:|")
        for b in rows:
            label = f"{b.get('batch')}" + (" (control: single steps again)" if b.get("batch") == 1 else "")
            lines.append(
                f"| {label} | {_pct4(b.get('tv_mean'))} | {_pct4(b.get('tv_max'))} | "
                f"{_fixed(b.get('logit_diff_max'), 4)} | {b.get('flips', 0)} ({_pct(b.get('flip_share'))}) |"
            )
        lines.append("")
    explained = []
    for run in result.get("runs") or []:
        div = run.get("divergence")
        if run.get("identical") is False and isinstance(div, dict):
            explained.append(
                f"- {_md_cell(run.get('suite'))}/{_md_cell(run.get('prompt_id'))} #{(run.get('repeat') or 0) + 1} "
                f"`{_md_cell(run.get('config'))}`: {_md_cell(verdict_text(div, drift))}"
            )
    if explained:
        lines.append("Differences from target alone at T=0:")
        lines.append("")
        lines.extend(explained[:MAX_DIVERGENCES])
        if len(explained) > MAX_DIVERGENCES:
            lines.append(f"- … and {len(explained) - MAX_DIVERGENCES} more (report.json has them all)")
        lines.append("")
    return lines


def _pct4(v: Any) -> str:
    v = _num(v)
    if v is None:
        return DASH
    return "0" if v == 0 else f"{v * 100:.3f}%" if v < 0.01 else f"{v * 100:.2f}%"


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
        "- **speedup**: tokens/s of the configuration divided by tokens/s of `none` (the target "
        "alone) in the same repeat of the same prompt (a *paired ratio*: the runs were interleaved, so "
        "both saw the same machine), then the geometric mean of those ratios. Above 1.00× speculation "
        "pays, below it costs.",
        "- **95% interval**: a Student t-interval on the log ratios, with the noise measured between the "
        "repeats of each prompt (between prompts when each ran once). **faster** or **slower** only when "
        "the whole interval is on one side of 1×; otherwise **within noise**, with the smallest "
        "difference these pairs could have shown (±).",
        "- **tok/s**: median decode speed (prompt processing excluded).",
        "- **acceptance**: share of drafted tokens the target accepted.",
        "- **tokens/step**: tokens per target verify pass, the target's own correction or bonus "
        "token included (1.00 means nothing drafted was ever kept).",
        "- **identical at T=0**: outputs equal to the target alone's. A *near-tie* is a "
        "difference where the target's two best tokens were within 0.5 logits (llama.cpp's "
        "batch kernels round differently from single-token steps: see *Exactness and kernel "
        "drift*), which is expected; a *mismatch* is not, and worth reporting.",
        "- **Python overhead**: share of decode time spent outside llama.cpp.",
    ]
    if sampled:
        lines.append("- Outputs are compared only at temperature 0; this run sampled, so the column is empty.")
    lines.append("")
    return lines

