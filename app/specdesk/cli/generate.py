"""The CLI's commands (argparse lives in cli.py). Never imports Qt."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from .cli import EXIT_USAGE, dump_json
from .errors import ModelFileError, SpecDeskError
from .session import Generation, GenerationConfig, ModelSpec, Session
from .speculative.divergence import explain
from .speculative.sampling import SamplingParams


# -- shared helpers ------------------------------------------------------------------

def default_model_path(role: str) -> Path:
    from .library.defaults import default_models

    m = default_models([role])[0]
    if not m.path.is_file():
        raise ModelFileError(
            f"the default {role} ({m.file}) is not in {m.path.parent}; run `specdesk models fetch-default` or pass --{role}"
        )
    return m.path


def specs_from_args(args, need_draft: bool) -> tuple[ModelSpec, ModelSpec | None]:
    target = args.target or default_model_path("target")
    t = ModelSpec(target, n_gpu_layers=args.gpu_layers, threads=args.threads, n_ctx=args.ctx)
    if not need_draft:
        return t, None
    draft = args.draft or default_model_path("draft")
    dgl = args.gpu_layers if args.draft_gpu_layers is None else args.draft_gpu_layers
    return t, ModelSpec(draft, n_gpu_layers=dgl, threads=args.threads, n_ctx=args.ctx)


def config_from_args(args, **over) -> GenerationConfig:
    try:
        sampling = SamplingParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p)
    except ValueError as e:
        raise SpecDeskError(str(e)) from None
    cfg = GenerationConfig(
        proposer=args.proposer,
        k=args.k,
        p_min=args.p_min,
        sampling=sampling,
        seed=args.seed,
        max_tokens=args.max_tokens,
    )
    return replace(cfg, **over) if over else cfg


def prompt_tokens(session: Session, args) -> list[int]:
    if not args.prompt.strip():
        raise SpecDeskError("the prompt is empty")
    if args.raw:
        return session.raw_prompt(args.prompt)
    return session.chat_prompt([{"role": "user", "content": args.prompt}])


def _gib(n: int | float | None) -> str:
    if n is None:
        return "n/a"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def summary_line(g: Generation) -> str:
    st = g.stats
    parts = [
        f"{st.generated} tokens",
        f"{_num(st.tokens_per_second, '{:.1f}')} tok/s",
        f"prompt {st.prompt_evaluated} tok at {_num(st.prompt_tokens_per_second, '{:.0f}')} tok/s",
        f"{st.steps} steps",
    ]
    if st.drafted:
        parts += [f"acceptance {_pct(st.acceptance_rate)}", f"mean accepted length {_num(st.mean_accepted_length)}"]
    parts.append(f"stop: {g.stop_reason}")
    return ", ".join(parts)


# -- generate ------------------------------------------------------------------------

def cmd_generate(args) -> int:
    cfg = config_from_args(args)
    t, d = specs_from_args(args, need_draft=cfg.proposer in ("draft", "hybrid"))
    with Session.load(t, d) as s:
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


# -- compare -------------------------------------------------------------------------

def run_compare(s: Session, prompt: list[int], cfg: GenerationConfig) -> dict:
    """Target alone, then speculative, on the same prompt; each from an empty context."""
    s.check_fits(prompt, cfg.max_tokens)
    s.warm_up()
    base_cfg = replace(cfg, proposer="none")
    s.reset()
    base = s.run(prompt, base_cfg)
    s.reset()
    spec = s.run(prompt, cfg)
    bt, st = base.stats.tokens_per_second, spec.stats.tokens_per_second
    out = {
        "prompt_tokens": len(prompt),
        "baseline": base.to_dict(s.memory(("target",))),
        "speculative": spec.to_dict(s.memory()),
        "speedup": (st / bt) if bt and st else None,
    }
    if cfg.sampling.greedy:
        div = explain(s.target.ctx, prompt, base.steps, spec.steps)
        out["identical"] = div is None
        if div is not None:
            out["divergence"] = {
                "index": div.index,
                "baseline_token": div.baseline_token,
                "speculative_token": div.speculative_token,
                "baseline_text": div.baseline_text,
                "speculative_text": div.speculative_text,
                "margin": div.margin,
                "margin_batched": div.margin_batched,
                "reproduced": div.reproduced,
                "verdict": div.verdict,
            }
    out["_generations"] = (base, spec)
    return out


def format_compare(res: dict, cfg: GenerationConfig) -> str:
    base, spec = res["_generations"]
    b, s = base.stats, spec.stats
    mb = res["baseline"]["memory"]["models"]
    ms = res["speculative"]["memory"]["models"]
    mem_b = sum(m["total_bytes"] for m in mb.values())
    mem_s = sum(m["total_bytes"] for m in ms.values())
    rows = [
        ("", "target alone", f"speculative ({cfg.describe()})"),
        ("tokens/s", _num(b.tokens_per_second, "{:.1f}"), _num(s.tokens_per_second, "{:.1f}")
         + (f"  ({res['speedup']:.2f}x)" if res.get("speedup") else "")),
        ("generated tokens", str(b.generated), str(s.generated)),
        ("verify steps", str(b.steps), str(s.steps)),
        ("acceptance", "-", _pct(s.acceptance_rate)),
        ("mean accepted length", _num(b.mean_accepted_length), _num(s.mean_accepted_length)),
        ("draft / verify / python s", f"{b.draft_seconds:.2f} / {b.verify_seconds:.2f} / {b.overhead_seconds:.2f}",
         f"{s.draft_seconds:.2f} / {s.verify_seconds:.2f} / {s.overhead_seconds:.2f}"),
        ("weights + KV", _gib(mem_b), f"{_gib(mem_s)} (+{_gib(mem_s - mem_b)} for the draft)"),
    ]
    w0 = max(len(r[0]) for r in rows) + 2
    w1 = max(len(r[1]) for r in rows) + 3
    lines = [f"{r[0]:<{w0}}{r[1]:<{w1}}{r[2]}" for r in rows]
    if "identical" in res:
        if res["identical"]:
            lines.append("identical at T=0: yes")
        else:
            d = res["divergence"]
            lines.append(
                f"identical at T=0: no, from token {d['index']}: target alone {d['baseline_text']!r}, "
                f"speculative {d['speculative_text']!r}; logit margin {d['margin']:.3f} -> {d['verdict']}"
            )
            if d["verdict"] == "near-tie":
                lines.append("  (a batched verify pass runs other kernels than a single step; at a near-tie the argmax can flip)")
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
    t, d = specs_from_args(args, need_draft=cfg.proposer in ("draft", "hybrid"))
    with Session.load(t, d) as s:
        prompt = prompt_tokens(s, args)
        res = run_compare(s, prompt, cfg)
        if args.json:
            out = {k: v for k, v in res.items() if not k.startswith("_")}
            print(dump_json(out))
        else:
            print(format_compare(res, cfg))
    return 0


# -- models --------------------------------------------------------------------------

def cmd_models(args) -> int:
    sub = args.models_command
    if sub == "fetch-default":
        return _fetch_default(args)
    if sub == "list":
        return _models_list(args)
    if sub == "inspect":
        return _models_inspect(args)
    if sub == "check-pair":
        return _check_pair(args)
    if sub == "drafts":
        return _drafts(args)
    if sub == "download":
        from .library.hub_cli import cmd_download

        return cmd_download(args)
    raise SpecDeskError(f"unknown models command {sub!r}")


def _fetch_default(args) -> int:
    from tqdm import tqdm

    from .library.defaults import fetch

    roles = ["target", "draft"] + (["test"] if args.test_model else [])
    bar = tqdm(total=100, unit="%", file=sys.stderr, bar_format="{desc:<60.60} {percentage:3.0f}%|{bar}|")
    last = [0]

    def progress(msg: str, frac: float) -> None:
        bar.set_description_str(msg)
        n = int(frac * 100)
        if n != last[0]:
            bar.update(n - last[0]) if n > last[0] else bar.reset(total=100)
            last[0] = n

    try:
        paths = fetch(roles, progress)
    finally:
        bar.close()
    for p in paths:
        print(p)
    return 0


def _models_list(args) -> int:
    from .library.discovery import list_command

    return list_command(args)


def _models_inspect(args) -> int:
    from .engine.model import repack_types
    from .library.gguf_file import estimate_memory, inspect_gguf, validate_gguf

    info = inspect_gguf(args.file)
    info["memory"] = estimate_memory(validate_gguf(args.file), n_ctx=args.ctx, n_gpu_layers=args.gpu_layers, repack_types=repack_types())
    if args.json:
        print(dump_json(info))
        return 0
    for k, v in info.items():
        if isinstance(v, dict):
            print(f"{k}:")
            for kk, vv in v.items():
                print(f"  {kk}: {_gib(vv) if kk.endswith('_bytes') else vv}")
        else:
            print(f"{k}: {_gib(v) if k == 'file_size' else v}")
    return 0


def _drafts(args) -> int:
    from tqdm import tqdm

    from .library.discovery import scan
    from .library.gguf_file import validate_gguf
    from .library.pairing import drafts_for

    validate_gguf(args.target)
    lib = scan()
    cands = [(e.path, e.name) for e in lib.entries if e.present and e.error is None]
    with tqdm(total=len(cands), desc="pairing", file=sys.stderr, leave=False, disable=args.json) as bar:
        res = drafts_for(args.target, cands, progress=lambda m, f: bar.update(int(f * len(cands)) - bar.n))
    if args.json:
        print(dump_json([c.to_dict() for c in res]))
        return 0
    ok = [c for c in res if c.compatible]
    print(f"{len(ok)} of {len(res)} models can draft for {args.target.name}" + (":" if res else "."))
    for c in res:
        if c.compatible:
            print(f"  ok   {_gib(c.size):>10}  {c.name}  ({c.path})")
    for c in res:
        if not c.compatible:
            print(f"  no   {'':>10}  {c.name}: {c.reason}")
    return 0


def _check_pair(args) -> int:
    from .library.pairing import check_pair

    res = check_pair(args.target, args.draft)
    if args.json:
        print(dump_json({"compatible": res.ok, "rule": res.rule or None, "reason": res.reason or None,
                         "common_vocab": res.n_common, "token_id": res.token_id}))
    if res.ok:
        if not args.json:
            print(f"compatible: {args.draft.name} can draft for {args.target.name} (common vocabulary {res.n_common} tokens)")
        return 0
    if not args.json:
        print(f"specdesk: error: {args.draft.name} cannot draft for {args.target.name}: {res.reason}", file=sys.stderr)
    return EXIT_USAGE
