"""``specdesk bench`` and ``specdesk advise``."""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from ..bench.advisor import advise, calibrate
from ..bench.comparison import ComparisonOptions, ComparisonResult, run_comparison
from ..bench.configs import DEFAULT_CONFIGS, parse_configs, proposer_of
from ..bench.report import check_writable, markdown, remove_if_empty, write_report
from ..bench.runner import BenchOptions, UntilSure
from ..bench.suites import describe_builtin, load_suite
from ..library.quants import offer_upgrade
from ..session import GenerationConfig
from ..session.source_table import drafts_alone
from ..session.text import drift_summary, memory_buys_text, noise_text, predicted_cell, prediction_verdict_label, stopping_text
from ..speculative.proposers import registry
from .args import add_model_options, default_model_path, float_in, int_at_least, load_session, non_negative_int, positive_int
from .output import dump_json, progress_bar


def add_repeat_options(g, repeats: int) -> None:
    """How many repeats: a fixed number, or until sure (``bench`` and ``compare``)."""
    g.add_argument("--repeats", type=positive_int("repeats"), default=repeats,
                   help=f"interleaved repeats of every prompt (default {repeats}; unused with --until-sure)")
    g.add_argument("--until-sure", nargs="?", type=float_in("--until-sure", 0.0, 100.0, lo_open=True, hi_open=True),
                   const=3.0, default=None, metavar="PCT",
                   help="repeat until every configuration's 95%% interval is within +-PCT%% (default 3), "
                        "or a budget is spent")
    g.add_argument("--max-repeats", type=int_at_least("max repeats", 2, "at least 2"), default=10,
                   help="with --until-sure: at most this many repeats (default 10)")
    g.add_argument("--time-budget", type=float_in("--time-budget", 0.0, None, lo_open=True), default=None,
                   metavar="MINUTES", help="with --until-sure: start no repeat that would end after this many minutes")


def bench_options(args, **over) -> BenchOptions:
    """The repeat, token and sampling options of ``bench`` or ``compare``."""
    until = None
    if args.until_sure is not None:
        until = UntilSure(half_width=args.until_sure / 100.0, max_repeats=args.max_repeats,
                          seconds=60.0 * args.time_budget if args.time_budget else None)
    return BenchOptions(repeats=args.repeats, max_tokens=args.max_tokens, temperature=args.temp, seed=args.seed,
                        until_sure=until, **over)


def comparison_progress(desc: str):
    """A progress bar over a whole comparison (calibration and runs) and its callback;
    run-until-sure's round summaries are printed as they come."""
    bar = progress_bar(total=1000, desc=desc, bar_format="{desc:<44.44} {percentage:3.0f}%|{bar}| {elapsed}")

    def progress(msg: str, frac: float) -> None:
        if msg.startswith("repeat "):
            bar.write(msg, file=sys.stderr)
        bar.set_description_str(msg, refresh=False)
        bar.update(int(1000 * frac) - bar.n)  # redrawn at the bar's own pace (in a log: every few seconds)

    return bar, progress


def _configs_help() -> str:
    """--configs's help, from the registry: every proposer, and how to hold the app's
    default against target alone."""
    others = [k for k in registry.KINDS if k.name not in {proposer_of(c) for c in registry.BENCH_DEFAULT}]
    default = f"{registry.DEFAULT}:auto:p_min={GenerationConfig().p_min:g}"
    return (f"comma-separated proposer[:k=N|:auto][:p_min=X] (default: {DEFAULT_CONFIGS}); also "
            + ", ".join(f"{k.name} ({k.label})" for k in others)
            + f"; {registry.BASELINE},{default} holds the app's default against target alone on every suite")


def add_parsers(sub) -> None:
    b = sub.add_parser(
        "bench",
        help="run prompt suites with and without speculation; write report.json/csv/md and charts",
        description="Runs every prompt of the suites with every configuration, interleaved, "
        "and reports tokens/s, paired speedups against target alone with their 95% intervals and verdicts, "
        "acceptance and identity at T=0.",
    )
    add_model_options(b)
    g = b.add_argument_group("benchmark")
    g.add_argument("--suite", default="all", help="a built-in suite, 'all' (default), a comma-separated list, or a .txt, .jsonl or .json file")
    g.add_argument("--configs", default=DEFAULT_CONFIGS, help=_configs_help())
    add_repeat_options(g, 3)
    g.add_argument("--max-tokens", type=positive_int("max tokens"), default=128)
    g.add_argument("--temp", type=float_in("temperature", 0.0, None), default=0.0)
    g.add_argument("--seed", type=non_negative_int("seed"), default=0)
    g.add_argument("--out", type=_out_dir, default=None, help="output directory (default: bench-out/<date-time>)")
    g.add_argument("--no-advisor", action="store_true", help="skip the calibration and the advisor's predictions")
    g.add_argument("--no-warmup", action="store_true")
    g.add_argument("--list-suites", action="store_true", help="list the built-in suites and exit")

    a = sub.add_parser("advise", help="measure this machine's costs and say whether (and how) speculation pays")
    add_model_options(a)
    a.add_argument("--json", action="store_true")


def cmd_bench(args) -> int:
    if args.list_suites:
        for name, n, desc in describe_builtin():
            what = "tasks  " if name == "multi_turn" else "prompts"
            print(f"{name:<18} {n:>2} {what}  {desc}")
        return 0
    configs = parse_configs(args.configs)
    suites = load_suite(args.suite)
    options = ComparisonOptions(bench=bench_options(args, warmup=not args.no_warmup), advisor=not args.no_advisor)
    out = args.out or Path("bench-out") / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    created = check_writable(out)  # fail before any model work when the report could not be written
    # the advisor calibrates the draft file's source, unless the configs draft with the target's own
    need_draft = any(c.needs_draft for c in configs) or (
        not args.no_advisor and not any(c.drafts_with_target for c in configs))
    try:
        with load_session(args, need_draft) as s:
            if s.translated:
                print(f"the draft {s.draft.spec.path.name} has another vocabulary than the target: it drafts translated text",
                      file=sys.stderr)
            bar, progress = comparison_progress("bench")
            with bar:
                res = run_comparison(s, suites, configs, options, progress=progress)
        result = res.to_dict()
        paths = write_report(result, out)
    except BaseException:  # Ctrl+C, a model that would not load: no empty report folder left behind
        remove_if_empty(created)
        raise
    print(markdown(result))
    print_comparison_notes(res)
    print(f"\nwrote {', '.join(p.name for p in paths)} to {out}", file=sys.stderr)
    return 0


def _out_dir(v: str) -> Path:
    if not v.strip():  # Path("") is the current folder: a report written where the user did not ask
        raise argparse.ArgumentTypeError("--out needs a folder name")
    return Path(v)


def print_comparison_notes(res: ComparisonResult) -> None:
    """On stderr: the calibration, how the repeats stopped, the machine's noise, and
    the better quantization the draft's memory would buy."""
    cal = res.calibration
    if cal is not None:
        print(f"calibrated in {cal.seconds:.1f} s: a verify batch of 4 costs {cal.verify_ratio(4):.2f} steps, "
              f"a draft token {cal.draft_ratio(1):.2f}", file=sys.stderr)
    rows = list(res.overall().values())
    print(stopping_text(res.stopping, rows), file=sys.stderr)
    print(noise_text(res.bench["summary"].get("noise")), file=sys.stderr)
    if cal is not None and cal.quant_upgrade is not None:
        pub = res.published_quant
        print(memory_buys_text(cal.quant_upgrade.to_dict(), pub.to_dict() if pub else None, res.published_quant_note),
              file=sys.stderr)


def cmd_advise(args) -> int:
    # a target that drafts for itself (its own heads) is advised on that, unless a draft is named
    target = args.target or default_model_path("target")
    with load_session(args, need_draft=args.draft is not None or not drafts_alone(target)) as s:
        bar, progress = comparison_progress("advise")
        with bar:
            cal = calibrate(s, progress=progress)
        adv = advise(cal)
        target = s.target.spec.path
    pub, pub_note = offer_upgrade(target, cal.quant_upgrade, cal.draft_bytes)
    if args.json:
        print(dump_json({"calibration": cal.to_dict(), **adv.to_dict(),
                         "published_quant": pub.to_dict() if pub else None, "published_quant_note": pub_note}))
        return 0
    print(f"measured in {cal.seconds:.1f} s at a {cal.context_tokens}-token context:")
    print(f"  one target step: {1000 * cal.step:.1f} ms")
    print("  verify batch b:  " + "  ".join(f"b={b} {cal.verify_ratio(b):.2f}" for b in range(2, cal.k_max + 2)) + "  (in target steps)")
    print("  per verified token: " + "  ".join(f"b={b} {cal.verify_per_token(b):.2f}" for b in range(2, cal.k_max + 2))
          + "  (in target steps" + (f"; over RPC to {', '.join(cal.remote)}" if cal.remote else "") + ")")
    print("  draft of k:      " + "  ".join(f"k={k} {cal.draft_ratio(k):.2f}" for k in range(1, cal.k_max + 1)) + "  (in target steps)")
    if cal.draft_acceptance is not None:
        print("  acceptance by draft position: " + "  ".join(f"{a:.2f}" for a in cal.draft_acceptance.alphas(cal.k_max)))
    if cal.loop is not None:
        print(f"predicted speedup over target alone, from {cal.loop.runs} short runs of the real loop "
              f"({cal.loop.repeats} interleaved repeats, {cal.loop.seconds:.0f} s), with 95% intervals:")
    for row in adv.table:
        print(f"  {row['config']:<12} {predicted_cell(row):<20} {prediction_verdict_label(row)}")
    print("what the isolated component costs predict (they choose the k to try, not the verdict): "
          + "  ".join(f"k={r['config'].split('=')[-1]} {r['predicted_speedup']:.2f}x" for r in adv.components))
    if cal.drift is not None:
        print(f"kernel drift: {drift_summary(cal.drift)}")
    print()
    print(adv.text)
    if cal.quant_upgrade is not None:
        print(memory_buys_text(cal.quant_upgrade.to_dict(), pub.to_dict() if pub else None, pub_note))
    if adv.exactness:
        print()
        print(adv.exactness)
    return 0
