"""``specdesk bench`` and ``specdesk advise``."""

from __future__ import annotations

import copy
import datetime
import sys
from pathlib import Path

from ..bench.advisor import advise, advisor_section, calibrate
from ..bench.configs import DEFAULT_CONFIGS, parse_configs, resolve_configs
from ..bench.report import check_writable, markdown, write_report
from ..bench.runner import BenchOptions, SessionTarget, run_bench
from ..bench.suites import describe_builtin, load_suite
from ..library.quants import offer_upgrade
from ..session.text import drift_summary
from .args import add_model_options, float_in, load_session, positive_int
from .output import dump_json, progress_bar


def add_parsers(sub) -> None:
    b = sub.add_parser(
        "bench",
        help="run prompt suites with and without speculation; write report.json/csv/md and charts",
        description="Runs every prompt of the suites with every configuration, interleaved, "
        "and reports tokens/s, paired speedups against target alone, acceptance and identity at T=0.",
    )
    add_model_options(b)
    g = b.add_argument_group("benchmark")
    g.add_argument("--suite", default="all", help="a built-in suite, 'all' (default), a comma-separated list, or a .txt/.jsonl file")
    g.add_argument("--configs", default=DEFAULT_CONFIGS,
                   help=f"comma-separated (default: {DEFAULT_CONFIGS}); also translated (a draft with another "
                   "vocabulary) and ngram+history (n-gram lookup over the earlier turns too)")
    g.add_argument("--repeats", type=positive_int("repeats"), default=3)
    g.add_argument("--max-tokens", type=positive_int("max tokens"), default=128)
    g.add_argument("--temp", type=float_in("temperature", 0.0, None), default=0.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", type=Path, default=None, help="output directory (default: bench-out/<date-time>)")
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
    out = args.out or Path("bench-out") / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    check_writable(out)  # fail before any model work when the report could not be written
    need_draft = any(c.needs_draft for c in configs) or not args.no_advisor
    with load_session(args, need_draft) as s:
        # on a draft with another vocabulary, draft configs run (and are named) translated
        configs = resolve_configs(configs, s.translated)
        if s.translated:
            print(f"the draft {s.draft.spec.path.name} has another vocabulary than the target: it drafts translated text",
                  file=sys.stderr)
        cal = None
        if not args.no_advisor:
            with progress_bar(total=100, desc="calibrating", leave=False, bar_format="{desc:<40.40} {percentage:3.0f}%|{bar}|") as bar:
                def cal_progress(msg: str, frac: float) -> None:
                    bar.set_description_str(msg)
                    bar.n = int(100 * frac)
                    bar.refresh()

                cal = calibrate(s, progress=cal_progress)
            s.auto.costs = copy.deepcopy(cal.costs)  # auto starts from the measured costs
            print(f"calibrated in {cal.seconds:.1f} s: a verify batch of 4 costs {cal.verify_ratio(4):.2f} steps, "
                  f"a draft token {cal.draft_ratio(1):.2f}", file=sys.stderr)
        n_runs = sum(len(p.messages) for x in suites for p in x.prompts) * args.repeats * len(configs)
        with progress_bar(total=n_runs + (0 if args.no_warmup else len(configs)), desc="bench", unit="run") as bar:
            def progress(done: int, total: int, what: str) -> None:
                bar.set_postfix_str(what[-40:], refresh=False)
                bar.update(done - bar.n)

            options = BenchOptions(
                repeats=args.repeats, max_tokens=args.max_tokens, temperature=args.temp, seed=args.seed,
                warmup=not args.no_warmup,
            )
            result = run_bench(SessionTarget(s), suites, configs, options, progress=progress)
        if cal is not None:
            result["advisor"] = advisor_section(cal, result)
    paths = write_report(result, out)
    print(markdown(result))
    print(f"\nwrote {', '.join(p.name for p in paths)} to {out}", file=sys.stderr)
    return 0


def cmd_advise(args) -> int:
    with load_session(args, need_draft=True) as s:
        cal = calibrate(s)
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
    print("predicted speedup over target alone:")
    for row in adv.table:
        print(f"  {row['config']:<12} {row['predicted_speedup']:.2f}x")
    if cal.drift is not None:
        print(f"kernel drift: {drift_summary(cal.drift)}")
    print()
    print(adv.text)
    if cal.quant_upgrade is not None:
        print(f"The draft's memory would buy the target at {cal.quant_upgrade.describe()} (estimated); "
              + (f"{pub.describe()}." if pub else f"{pub_note}."))
    if adv.exactness:
        print()
        print(adv.exactness)
    return 0
