"""``specdesk generate`` and ``specdesk compare``."""

from __future__ import annotations

import sys
from dataclasses import replace

from ..bench.comparison import ComparisonOptions, ComparisonResult, run_comparison
from ..bench.configs import BenchConfig, proposer_of
from ..bench.rows import ConfigRow
from ..bench.suites import Prompt, Suite
from ..errors import SpecDeskError
from ..fmt import format_bytes, format_num, format_pct
from ..session import Generation, stop_if_interrupted
from ..session.text import claim_text, speed_verdict_text, verdict_text
from ..speculative.proposers import registry
from .args import config_from_args, load_session, prompt_tokens
from .bench import add_repeat_options, bench_options, comparison_progress
from .output import dump_json


def summary_line(g: Generation) -> str:
    st = g.stats
    parts = [
        f"{st.generated} tokens",
        f"{format_num(st.tokens_per_second, '{:.1f}')} tok/s",
        f"prompt {st.prompt_evaluated} tok at {format_num(st.prompt_tokens_per_second, '{:.0f}')} tok/s",
        f"{st.steps} steps",
    ]
    if st.drafted:
        parts += [f"acceptance {format_pct(st.acceptance_rate)}", f"mean accepted length {format_num(st.mean_accepted_length)}"]
    parts.append(f"stop: {g.stop_reason}")
    return ", ".join(parts)


def _ctrl_c() -> bool:
    """The generation's check between steps: a Ctrl+C kept meanwhile stops the command."""
    stop_if_interrupted()
    return False


def cmd_generate(args) -> int:
    cfg = config_from_args(args)
    with load_session(args, need_draft=cfg.needs_draft) as s:
        stop_if_interrupted()  # a Ctrl+C kept while the models loaded: no answer
        prompt = prompt_tokens(s, args)
        s.check_fits(prompt, cfg.max_tokens)
        if args.json:
            g = s.run(prompt, cfg, cancel=_ctrl_c)
            out = g.to_dict(s.memory())
            out["prompt_tokens"] = len(prompt)
            print(dump_json(out))
            return 0
        steps = []
        for step in s.generate(prompt, cfg, cancel=_ctrl_c):
            steps.append(step)
            sys.stdout.write(step.text)
            sys.stdout.flush()
        sys.stdout.write("\n")
        g = Generation(steps=steps, config=cfg, prompt=prompt)
        print(summary_line(g), file=sys.stderr)
    return 0


def format_compare(base: Generation, spec: Generation, row: ConfigRow, label: str, memory: tuple[dict, dict],
                   divergence: dict | None, greedy: bool, drift: dict | None, temperature: float) -> str:
    """Target alone against ``label`` (the config as it ran on the pair: a draft with
    another vocabulary drafts translated): repeat 1's runs side by side, and the paired
    speedup over every repeat with its interval and verdict."""
    b, s = base.stats, spec.stats
    mem_b = sum(m["total_bytes"] for m in memory[0]["models"].values())
    mem_s = sum(m["total_bytes"] for m in memory[1]["models"].values())
    rows = [
        ("", "target alone", f"speculative ({label})"),
        ("tokens/s", format_num(b.tokens_per_second, "{:.1f}"), format_num(s.tokens_per_second, "{:.1f}")),
        ("generated tokens", str(b.generated), str(s.generated)),
        ("verify steps", str(b.steps), str(s.steps)),
        ("acceptance", "-", format_pct(s.acceptance_rate)),
        ("mean accepted length", format_num(b.mean_accepted_length), format_num(s.mean_accepted_length)),
        ("draft / verify / python s", f"{b.draft_seconds:.2f} / {b.verify_seconds:.2f} / {b.overhead_seconds:.2f}",
         f"{s.draft_seconds:.2f} / {s.verify_seconds:.2f} / {s.overhead_seconds:.2f}"),
        ("weights + KV", format_bytes(mem_b), f"{format_bytes(mem_s)} (+{format_bytes(mem_s - mem_b)} for the draft)"),
    ]
    w0 = max(len(r[0]) for r in rows) + 2
    w1 = max(len(r[1]) for r in rows) + 3
    lines = [f"{r[0]:<{w0}}{r[1]:<{w1}}{r[2]}" for r in rows]
    lines.append(f"speedup: {speed_verdict_text(row)}")
    if greedy:
        if divergence is None:
            lines.append("identical at T=0: yes" + (f" ({row.identical}/{row.compared} runs)" if row.compared else ""))
        else:
            lines.append(f"identical at T=0: no. {verdict_text(divergence, drift)}")
    lines.append(claim_text(drift, temperature))
    lines.append("")
    lines.append("--- target alone ---")
    lines.append(base.text)
    if base.tokens != spec.tokens:
        lines.append("--- speculative ---")
        lines.append(spec.text)
    return "\n".join(lines)


def compare_json(base: Generation, spec: Generation, row: ConfigRow, res: ComparisonResult, memory: tuple[dict, dict],
                 prompt_tokens: int, divergence: dict | None, greedy: bool, translated: bool, temperature: float) -> dict:
    """``compare --json``: repeat 1's two runs in full, and the pair's statistics as
    ``bench`` reports them per configuration."""
    drift = res.to_dict()["drift"]
    figures = row.to_dict()
    out = {
        "prompt_tokens": prompt_tokens,
        "baseline": {**base.to_dict(), "memory": memory[0]},
        "speculative": {**spec.to_dict(), "memory": memory[1]},
        "config": row.config,
        **{k: figures[k] for k in ("speedup", "speedup_ci", "pairs", "verdict", "detectable", "spread_from", "spread_df")},
        "stopping": res.stopping,
        "noise": res.bench["summary"].get("noise"),
        "drift": drift,
        "translated": translated,
        "exactness": claim_text(drift, temperature),
    }
    if greedy:
        out["identical"] = divergence is None
        out["identical_runs"] = row.identical
        out["compared_runs"] = row.compared
        if divergence is not None:
            out["divergence"] = {**divergence, "explanation": verdict_text(divergence, drift)}
    return out


def add_compare_options(p) -> None:
    """``compare``'s repeats: a fixed number (3) or until sure, as ``bench``."""
    add_repeat_options(p.add_argument_group("repeats"), 3)


def cmd_compare(args) -> int:
    cfg = config_from_args(args)
    if cfg.baseline:
        others = [n for n in registry.CHOICES if not registry.kind(n).baseline]
        raise SpecDeskError("compare needs a proposer to compare against target alone: use --proposer "
                            f"{', '.join(others[:-1])} or {others[-1]}")
    config = BenchConfig(cfg.proposer, cfg.k, cfg.p_min)
    options = ComparisonOptions(bench=bench_options(args, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                                                    warmup=not args.no_warmup),
                                advisor=False, raw=args.raw, keep_repeats=(0,))
    suite = Suite("compare", (Prompt("prompt", args.prompt, "compare"),), None, "")
    with load_session(args, need_draft=cfg.needs_draft) as s:
        prompt = prompt_tokens(s, args)
        s.check_fits(prompt, cfg.max_tokens)
        bar, progress = comparison_progress("compare")
        with bar:
            res = run_comparison(s, [suite], [BenchConfig(registry.BASELINE), config], options, progress=progress)
        memory = (s.memory(("target",)).to_dict(), s.memory().to_dict())
    name = res.configs[1]  # named as it ran: draft is translated on such a pair
    label = replace(cfg, proposer=proposer_of(name)).describe()
    base, spec = res.generations[("compare", "prompt", 0, registry.BASELINE)], res.generations[("compare", "prompt", 0, name)]
    row = res.overall()[name]
    run0 = next(r for r in res.bench["runs"] if r["config"] == name and r["repeat"] == 0)
    greedy = cfg.sampling.greedy
    divergence = run0.get("divergence") if greedy and run0.get("identical") is False else None
    if args.json:
        print(dump_json(compare_json(base, spec, row, res, memory, len(prompt), divergence, greedy, s.translated,
                                     cfg.sampling.temperature)))
    else:
        print(format_compare(base, spec, row, label, memory, divergence, greedy, res.to_dict()["drift"],
                             cfg.sampling.temperature))
    return 0
