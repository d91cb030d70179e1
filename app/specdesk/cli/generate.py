"""``specdesk generate`` and ``specdesk compare``."""

from __future__ import annotations

import sys
from dataclasses import replace

from ..errors import SpecDeskError
from ..fmt import format_bytes, format_num, format_pct
from ..session import Comparison, Generation, GenerationConfig, compare
from ..session.drift import pair_drift
from ..session.text import claim_text, verdict_text
from .args import config_from_args, load_session, prompt_tokens
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


def cmd_generate(args) -> int:
    cfg = config_from_args(args)
    with load_session(args, need_draft=cfg.needs_draft) as s:
        prompt = prompt_tokens(s, args)
        s.check_fits(prompt, cfg.max_tokens)
        if args.json:
            g = s.run(prompt, cfg)
            out = g.to_dict(s.memory())
            out["prompt_tokens"] = len(prompt)
            print(dump_json(out))
            return 0
        steps = []
        for step in s.generate(prompt, cfg):
            steps.append(step)
            sys.stdout.write(step.text)
            sys.stdout.flush()
        sys.stdout.write("\n")
        g = Generation(steps=steps, config=cfg, prompt=prompt)
        print(summary_line(g), file=sys.stderr)
    return 0


def format_compare(res: Comparison, cfg: GenerationConfig, drift: dict | None = None) -> str:
    """``cfg`` as it ran on the pair (a draft with another vocabulary drafts translated)."""
    base, spec = res.baseline, res.speculative
    label = cfg.describe()
    b, s = base.stats, spec.stats
    mem_b = sum(m["total_bytes"] for m in res.baseline_memory["models"].values())
    mem_s = sum(m["total_bytes"] for m in res.speculative_memory["models"].values())
    rows = [
        ("", "target alone", f"speculative ({label})"),
        ("tokens/s", format_num(b.tokens_per_second, "{:.1f}"), format_num(s.tokens_per_second, "{:.1f}")
         + (f"  ({res.speedup:.2f}x)" if res.speedup else "")),
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
    if res.greedy:
        d = res.divergence
        if d is None:
            lines.append("identical at T=0: yes")
        else:
            lines.append(f"identical at T=0: no. {verdict_text(d.to_dict(), drift)}")
    lines.append(claim_text(drift, cfg.sampling.temperature))
    lines.append("")
    lines.append("--- target alone ---")
    lines.append(base.text)
    if base.tokens != spec.tokens:
        lines.append("--- speculative ---")
        lines.append(spec.text)
    return "\n".join(lines)


def cmd_compare(args) -> int:
    cfg = config_from_args(args)
    if cfg.proposer == "none":
        raise SpecDeskError("compare needs a proposer to compare against target alone: use --proposer draft, ngram or hybrid")
    with load_session(args, need_draft=cfg.needs_draft) as s:
        prompt = prompt_tokens(s, args)
        cfg = replace(cfg, proposer=s.proposer_name(cfg))  # named as it runs: draft is translated on such a pair
        res = compare(s, prompt, cfg)
        with s.lease():
            drift = pair_drift(s).to_dict()  # cached per target setup, machine and build
        if args.json:
            out = res.to_dict()
            out["drift"] = drift
            out["translated"] = s.translated
            out["exactness"] = claim_text(drift, cfg.sampling.temperature)
            if res.divergence is not None:
                out["divergence"]["explanation"] = verdict_text(res.divergence.to_dict(), drift)
            print(dump_json(out))
        else:
            print(format_compare(res, cfg, drift))
    return 0
