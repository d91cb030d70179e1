#!/usr/bin/env python3
"""The app against the CLI: the same unseen prompts through `specdesk generate --json`
and through the real app on a virtual X screen, repeats interleaved, in one of two ways.

    .venv/bin/python tools/app_vs_cli.py [--flow user] [--repeats 3] [--screens 1920x1080,1366x768]
        [--prompts code] [--app-env K=V ...] [--cli-env K=V ...] [--source DIR] [--json OUT]
    .venv/bin/python tools/app_vs_cli.py --flow window [--repeats 3] [--tokens 512] [--prompts code,editing,prose]
        [--configs auto,none] [--p-min 0.75] [--threads N] [--target T --draft D] [--screens 1366x768]
        [--source DIR] [--before DIR --configs auto,auto@before,none] [--shared-cache] [--offscreen] [--json OUT]
    .venv/bin/python tools/app_vs_cli.py --combine RUN1.json RUN2.json   # earlier runs' reports, together

``--flow user`` (the default) drives the app as a user does (tools/app_flows.py): the
installed ``specdesk`` entry point under `xvfb-run` at each of ``--screens``, fresh
settings, the default pair from models/, the prompt typed into the message box with
xdotool (Debian's xdotool) once the pair has loaded, Enter, and the default answer (a
fresh user's settings: 512 tokens, draft:auto) left to finish; its statistics are read
from the chat database the app wrote. Against it, ``specdesk generate --prompt P
--max-tokens 512 --json`` with the CLI's defaults, through the same entry point. Only
the prompts and the screens vary. ``--app-env``/``--cli-env`` add environment variables
to one side (an A/B of a suspect, e.g. OMP_WAIT_POLICY=passive).

``--flow window`` builds the MainWindow in a process of this tool, applies the settings
it compares (``--configs``, ``--p-min``, ``--threads``, ``--tokens``) and sends the prompt
through the window's API: configurations the user's flow cannot reach without the
Settings dialog, e.g. draft:auto against target alone; ``--offscreen`` uses Qt's
offscreen platform instead of xvfb-run, ``--before DIR`` with configurations named
NAME@before measures the code before a change in the same run.

Every run is a fresh process with fresh data, cache and config folders and a fresh
HOME (never the user's); ``--shared-cache`` gives all runs one cache and HOME instead.
Within each repeat the prompts, the configurations (screens) and the two front ends
alternate, so that drift on a shared machine hits all alike. The report says which
flow ran. Per prompt: the ratios within each repeat (the app against the CLI; in the
window flow also draft:auto against target alone), their median [min-max] and their
geometric mean with its 95% interval (``specdesk.bench.stats.paired_speedup``); per
run: decode tokens/s, drafting, a step's time split into llama.cpp's compute and the
rest, and for the app what each of its threads did during the answer (CPU seconds,
voluntary/involuntary context switches, from /proc) and the X server's CPU. ``--source
DIR`` runs another copy of the package (its app/ folder), e.g. the code before a change.
A tool, not a test: its figures hold only on a quiet machine (the load is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from app_flows import RESULT, run_cli_user, run_user_flow, window_worker  # tools/app_flows.py
from scratch import scratch_dir  # tools/scratch.py: removed when the tool ends

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent

# Unseen prompts (none is in the project's suites), one of each kind.
PROMPTS = {
    "code": "Write a bash script that backs up a directory into a dated tar.gz and keeps only the last 7 backups.",
    "editing": (
        "Rename the variable `total` to `running_sum` in this function and change nothing else. "
        "Reply with the complete function only.\n\n"
        "```python\n"
        "def summarize(values, skip_negative=False):\n"
        "    \"\"\"Sum, count and mean of the numbers in values, ignoring None.\"\"\"\n"
        "    total = 0\n"
        "    count = 0\n"
        "    for v in values:\n"
        "        if v is None:\n"
        "            continue\n"
        "        if skip_negative and v < 0:\n"
        "            continue\n"
        "        total += v\n"
        "        count += 1\n"
        "    mean = total / count if count else 0.0\n"
        "    return {\"total\": total, \"count\": count, \"mean\": mean}\n"
        "```"
    ),
    "prose": "Explain in a few plain paragraphs, for someone starting a vegetable garden, why tomato plants need staking and how to do it.",
}
ALIASES = {"auto": "draft:auto", "none": "none"}


def parse_config(name: str) -> tuple[str, str]:
    """(proposer, k) of a configuration: auto (draft:auto), none, or PROPOSER:auto /
    PROPOSER:k=N, e.g. ngram:auto, ngram:k=4, draft:k=2; a tail @before runs it with
    the --before package."""
    name = ALIASES.get(name.removesuffix("@before"), name.removesuffix("@before"))
    if name == "none":
        return "none", "auto"
    proposer, _, k = name.partition(":")
    k = k.removeprefix("k=") or "auto"
    if proposer not in ("draft", "ngram", "hybrid") or not (k == "auto" or k.isdigit()):
        raise SystemExit(f"unknown configuration {name!r}: auto, none, or PROPOSER:auto / PROPOSER:k=N")
    return proposer, k


# -- the driver --------------------------------------------------------------------------

def package_root(folder: str) -> Path:
    """The folder to put on PYTHONPATH for a copy of the package: ``folder`` when it
    holds ``specdesk/``, or its ``app/`` (a checkout, or ``git archive REV app`` unpacked)."""
    d = Path(folder).resolve()
    for root in (d / "app", d):
        if (root / "specdesk" / "__init__.py").is_file():
            return root
    raise SystemExit(f"{folder}: neither it nor its app/ folder holds the specdesk package")


def check_imports(env: dict, want: Path) -> None:
    """The package a run imports is the one asked for (an installed copy would
    otherwise win silently, and a comparison would measure the same code twice)."""
    got = subprocess.run([sys.executable, "-c", "import specdesk; print(specdesk.__file__)"], env=env,
                         capture_output=True, text=True, check=True).stdout.strip()
    if not Path(got).resolve().is_relative_to(want):
        raise SystemExit(f"runs would import {got}, not the package under {want}")


def fresh_env(args, folders: dict, before: bool = False) -> dict:
    """The environment of one run: this checkout's (or --source's, or for a
    configuration@before --before's) package, and the given data, cache and config
    folders and HOME."""
    env = dict(os.environ)
    source = args.before if before else args.source
    src = str(package_root(source)) if source else str(REPO / "app")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["HOME"] = folders["home"]
    env["SPECDESK_DATA_DIR"] = folders["data"]
    env["SPECDESK_CACHE_DIR"] = folders["cache"]
    env["SPECDESK_CONFIG_DIR"] = folders["config"]  # where a version reads one
    env["XDG_CONFIG_HOME"] = folders["config"]  # Qt's settings
    env["XDG_CACHE_HOME"] = folders["cache"]
    env["XDG_DATA_HOME"] = folders["data"]
    return env


def new_folders(root: Path) -> dict:
    d = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    out = {name: str(d / name) for name in ("home", "data", "cache", "config")}
    for p in out.values():
        os.makedirs(p, exist_ok=True)
    return out


def run_cli(args, prompt: str, proposer: str, k: str, env: dict) -> dict:
    env = dict(env, **args.cli_env)
    cmd = [sys.executable, "-m", "specdesk", "generate", "--json", "--prompt", prompt,
           "--max-tokens", str(args.tokens), "--proposer", proposer, "--k", k,
           "--p-min", str(args.p_min), "--temp", "0", "--target", str(args.target)]
    if args.draft and proposer in ("draft", "hybrid"):
        cmd += ["--draft", str(args.draft)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if p.returncode != 0:
        raise SystemExit(f"specdesk generate failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    doc = json.loads(p.stdout)
    return {"stats": doc["stats"], "text": doc["text"]}


def run_app(args, prompt: str, proposer: str, k: str, env: dict, screen: str) -> dict:
    cfg = {"prompt": prompt, "tokens": args.tokens, "proposer": proposer, "k": k, "p_min": args.p_min,
           "threads": args.threads, "target": str(args.target), "size": screen,
           "draft": str(args.draft) if args.draft and proposer in ("draft", "hybrid") else None, "timeout": args.timeout}
    env = dict(env, **args.app_env)
    cmd = [sys.executable, str(HERE), "--app-worker", json.dumps(cfg)]
    if args.offscreen:
        env["QT_QPA_PLATFORM"] = "offscreen"
    else:
        env["QT_QPA_PLATFORM"] = "xcb"
        cmd = ["xvfb-run", "-a", "-s", f"-screen 0 {screen}x24"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout + 60)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith(RESULT)), None)
    if line is None:
        raise SystemExit(f"the app run failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-2000:]}")
    out = json.loads(line[len(RESULT):])
    if "error" in out:
        raise SystemExit(f"the app run failed: {out['error']}")
    return out


def figures(r: dict) -> dict:
    st = r["stats"]
    ranked = sorted((st.get("decisions") or {}).items(), key=lambda kv: -kv[1])
    f = {"tok_s": st["tokens_per_second"], "generated": st["generated"], "drafted": st["drafted"],
         "accepted": st["accepted"], "steps": st["steps"], "decisions": dict(ranked), "text": r["text"]}
    steps = max(1, st["steps"])
    # where a step's time went: llama.cpp's compute (both contexts) and the rest (Python,
    # and in the app whatever else holds the GIL or the cores), in ms per step
    f["native_ms_step"] = 1e3 * st.get("native_seconds", 0.0) / steps
    f["python_ms_step"] = 1e3 * (st["decode_seconds"] - st.get("native_seconds", 0.0)) / steps
    if r.get("qt_cpu_s") is not None and st["decode_seconds"]:
        f["qt_cpu_share"] = r["qt_cpu_s"] / st["decode_seconds"]
    if r.get("x_cpu_s") is not None and st["decode_seconds"]:
        f["x_cpu_share"] = r["x_cpu_s"] / st["decode_seconds"]
    if r.get("estimate"):
        f["estimate"] = r["estimate"]
    if r.get("threads"):
        f["threads"] = r["threads"]
    return f


def thread_line(f: dict) -> str:
    """What the app's threads did during the answer, per thread name, busiest first:
    CPU seconds per second of decode, voluntary/involuntary context switches per step."""
    decode, steps = f["tok_s"] and f["generated"] / f["tok_s"], max(1, f["steps"])
    groups = sorted((f.get("threads") or {}).items(), key=lambda kv: -kv[1]["cpu_s"])
    return "; ".join(f"{name}×{g['threads']} cpu {g['cpu_s'] / decode:.2f}/s, switches/step {g['voluntary'] / steps:.1f}"
                     f" vol {g['involuntary'] / steps:.1f} invol" for name, g in groups if g["cpu_s"] >= 0.05)


def spread(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def ratios(rows: dict, prompt: str, repeats: int, configs: list[str]) -> dict[str, list[float]]:
    """Per repeat, the ratios of decode tokens/s within that repeat: each configuration
    in the app against the CLI's, and against target alone in each front end."""
    def r(a, b):
        return [rows[(prompt, a, i)]["tok_s"] / rows[(prompt, b, i)]["tok_s"] for i in range(repeats)
                if (prompt, a, i) in rows and (prompt, b, i) in rows]

    out = {}
    for c in configs:
        out[f"app {c} / CLI {c}"] = r(("app", c), ("cli", c))
    for c in configs:
        if c != "none":
            out[f"app {c} / app none"] = r(("app", c), ("app", "none"))
            out[f"CLI {c} / CLI none"] = r(("cli", c), ("cli", "none"))
    for c in configs:  # the change itself, where the code before it ran too
        if c + "@before" in configs:
            out[f"app {c} / app {c}@before"] = r(("app", c), ("app", c + "@before"))
            out[f"CLI {c} / CLI {c}@before"] = r(("cli", c), ("cli", c + "@before"))
    return {k: v for k, v in out.items() if v}


def interval(ps) -> str:
    """A paired speedup as the geometric mean and its 95% interval."""
    if ps.speedup is None:
        return "-"
    if ps.ci is None:
        return f"mean {ps.speedup:.3f}"
    return f"mean {ps.speedup:.3f} ({ps.ci[0]:.3f}-{ps.ci[1]:.3f})"


def report(rows: dict, prompts: list[str], repeats: int, configs: list[str]) -> dict:
    """Per prompt, each ratio's median over the repeats [min-max] and its geometric mean
    with a 95% interval; then each ratio pooled over the prompts (the interval the
    Compare tab computes, from the repeats' spread within each prompt)."""
    from specdesk.bench.stats import paired_speedup

    print(f"\nratios of decode tokens/s over {repeats} repeats: median [min-max], geometric mean (95% interval); "
          f"load {load_now()}:")
    summary = {}
    for prompt in prompts:
        rs = ratios(rows, prompt, repeats, configs)
        summary[prompt] = rs
        print(f"  {prompt}:")
        for name, xs in rs.items():
            print(f"    {name:<34} {spread(xs)}  {interval(paired_speedup({prompt: xs}))}")
    names = dict.fromkeys(name for rs in summary.values() for name in rs)
    print("  pooled over the prompts:")
    for name in names:
        ps = paired_speedup({p: summary[p][name] for p in prompts if summary[p].get(name)})
        print(f"    {name:<34} {interval(ps)}, {ps.pairs} pairs")
    return summary


def combine(files: list[Path]) -> int:
    """The report over the runs of earlier ``--json`` files, as one run: each file's
    repeats stay apart (a ratio pairs runs of one repeat of one file)."""
    rows: dict = {}
    prompts: list[str] = []
    configs: list[str] = []
    offset = 0
    for f in files:
        try:
            runs = json.loads(f.read_text())["runs"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"{f}: not a file this tool wrote with --json ({e})") from None
        n = 0
        for r in runs:
            rows[(r["prompt"], (r["front"], r["config"]), offset + r["repeat"])] = r
            prompts.append(r["prompt"])
            configs.append(r["config"])
            n = max(n, r["repeat"] + 1)
        offset += n
    print(f"{len(rows)} runs from {len(files)} file(s)")
    report(rows, list(dict.fromkeys(prompts)), offset, list(dict.fromkeys(configs)))
    return 0


def load_now() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flow", choices=("user", "window"), default="user",
                    help="user: the installed entry point, the prompt typed (default); window: this tool builds the window")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--screens", default=None, help="WxH,...: the virtual screen(s) (user: 1920x1080,1366x768; window: 1366x768)")
    ap.add_argument("--tokens", type=int, default=512, help="window flow only: the user's flow answers a fresh user's 512")
    ap.add_argument("--prompts", default=None, help=f"some of {', '.join(PROMPTS)} (user: code; window: all)")
    ap.add_argument("--configs", default="auto,none",
                    help="window flow: auto (draft:auto), none (target alone), or PROPOSER:auto / PROPOSER:k=N")
    ap.add_argument("--fronts", default="cli,app", help="some of: cli, app")
    ap.add_argument("--p-min", type=float, default=0.75, help="window flow only")
    ap.add_argument("--threads", type=int, default=None, help="window flow only")
    ap.add_argument("--target", type=Path, help="window flow only (the user's flow loads the default pair)")
    ap.add_argument("--draft", type=Path, help="window flow only")
    ap.add_argument("--app-env", action="append", default=[], metavar="K=V", help="an environment variable for the app's runs")
    ap.add_argument("--cli-env", action="append", default=[], metavar="K=V", help="an environment variable for the CLI's runs")
    ap.add_argument("--source", type=Path, help="another copy of the package to run: a folder holding app/ (e.g. `git archive REV app` unpacked) "
                         "or app/ itself (default: this checkout's app/)")
    ap.add_argument("--before", type=Path,
                    help="window flow: another copy of the package, as --source, for the configurations named NAME@before")
    ap.add_argument("--shared-cache", action="store_true", help="one cache, config and HOME for all runs")
    ap.add_argument("--offscreen", action="store_true", help="window flow: Qt's offscreen platform instead of xvfb-run")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    ap.add_argument("--combine", type=Path, nargs="+", metavar="JSON",
                    help="instead of running: the report over the runs of earlier --json files together")
    args = ap.parse_args()
    user = args.flow == "user"
    args.prompts = [p for p in (args.prompts or ("code" if user else ",".join(PROMPTS))).split(",") if p]
    args.screens = [x for x in (args.screens or ("1920x1080,1366x768" if user else "1366x768")).split(",") if x]
    args.fronts = [f for f in args.fronts.split(",") if f]
    args.app_env, args.cli_env = (dict(kv.split("=", 1) for kv in kvs) for kvs in (args.app_env, args.cli_env))
    if user:  # a fresh user's defaults; the configurations are the screens
        if args.tokens != 512 or args.before or args.offscreen or args.target or args.draft or args.threads:
            raise SystemExit("the user's flow runs a fresh user's defaults: --tokens, --threads, --target, --draft, "
                             "--before and --offscreen are for --flow window")
        args.configs = [f"user@{x}" for x in args.screens]
    else:
        args.configs = [c for c in args.configs.split(",") if c]
        if len(args.screens) != 1:
            raise SystemExit("the window flow runs at one screen size")
        for c in args.configs:
            parse_config(c)
            if c.endswith("@before") and args.before is None:
                raise SystemExit(f"{c} needs --before DIR")
    bad = [p for p in args.prompts if p not in PROMPTS]
    if bad or not set(args.fronts) <= {"cli", "app"} or not all(re.fullmatch(r"\d+x\d+", x) for x in args.screens):
        raise SystemExit(f"unknown prompt, front end or screen: {', '.join(bad) or args.fronts or args.screens}")
    needs = ["xvfb-run"] * ("app" in args.fronts and not args.offscreen) + ["xdotool"] * (user and "app" in args.fronts)
    for tool in needs:
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is missing: apt-get install xvfb xdotool")
    return args


def one_run(args, front: str, prompt: str, name: str, env: dict) -> dict:
    if args.flow == "user":
        if front == "cli":
            return run_cli_user(PROMPTS[prompt], args.tokens, dict(env, **args.cli_env), args.timeout)
        return run_user_flow(PROMPTS[prompt], name.split("@", 1)[1], env, args.timeout, args.app_env)
    proposer, k = parse_config(name)
    if front == "cli":
        return run_cli(args, PROMPTS[prompt], proposer, k, env)
    return run_app(args, PROMPTS[prompt], proposer, k, env, args.screens[0])


def header(args, shared) -> str:
    if args.flow == "user":
        return (f"the user's flow: the installed entry point ({sys.executable.rsplit('/', 1)[0]}/specdesk), a fresh user's "
                f"defaults, the default pair, the prompt typed, screens {', '.join(args.screens)}; the CLI with its defaults; "
                f"app env {args.app_env or '-'}, CLI env {args.cli_env or '-'}; source {args.source or 'this checkout'}, "
                f"load {load_now()}")
    return (f"the built window (this tool applies the settings): {args.target.name} + {args.draft.name}, {args.tokens} "
            f"tokens, p-min {args.p_min}, threads {args.threads or 'default'}, "
            f"{'offscreen' if args.offscreen else 'xvfb ' + args.screens[0]}, "
            f"{'one shared cache' if shared else 'fresh folders every run'}, source {args.source or 'this checkout'}"
            f"{', before ' + str(package_root(args.before)) if args.before else ''}, load {load_now()}")


def run_line(i: int, prompt: str, front: str, name: str, f: dict) -> str:
    why = ", ".join(f"{key} ×{n}" for key, n in list(f["decisions"].items())[:3])
    extra = f"; Qt thread CPU {100 * f['qt_cpu_share']:.1f}% of decode" if "qt_cpu_share" in f else ""
    extra += f", X server {100 * f['x_cpu_share']:.1f}%" if "x_cpu_share" in f else ""
    extra += f"; per step: compute {f['native_ms_step']:.2f} ms, the rest {f['python_ms_step']:.2f} ms"
    threads = f"\n      threads: {thread_line(f)}" if f.get("threads") else ""
    return (f"repeat {i + 1} {prompt:<8} {front} {name:<4}: {f['tok_s']:.2f} tok/s, {f['generated']} tokens, "
            f"drafted {f['drafted']} / accepted {f['accepted']}; {why}{extra} (load {load_now()}){threads}")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--app-worker":
        return window_worker(json.loads(sys.argv[2]))
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still closes its apps and folders
    if args.combine:
        return combine(args.combine)
    if args.flow == "window" and (args.target is None or args.draft is None):
        sys.path.insert(0, str(REPO / "app"))
        from specdesk.library.defaults import default_models

        args.target = args.target or default_models(["target"])[0].path
        args.draft = args.draft or default_models(["draft"])[0].path

    root = Path(scratch_dir("specdesk-appvscli-"))
    shared = new_folders(root) if args.shared_cache else None
    check = new_folders(root)
    check_imports(fresh_env(args, check), package_root(args.source) if args.source else REPO / "app")
    if args.before is not None:
        check_imports(fresh_env(args, check, before=True), package_root(args.before))
    print(header(args, shared), flush=True)
    rows: dict = {}
    texts: dict = {}
    for i in range(args.repeats):
        for prompt in args.prompts:
            for n, name in enumerate(args.configs):
                for front in (args.fronts if (i + n) % 2 == 0 else args.fronts[::-1]):
                    env = fresh_env(args, shared or new_folders(root), before=name.endswith("@before"))
                    f = figures(one_run(args, front, prompt, name, env))
                    rows[(prompt, (front, name), i)] = f
                    texts.setdefault((prompt, name), {}).setdefault(front, set()).add(f.pop("text"))
                    print(run_line(i, prompt, front, name, f), flush=True)
    for (prompt, name), by_front in texts.items():
        if len({t for ts in by_front.values() for t in ts}) > 1:
            print(f"note: {prompt} {name}: the answers differed between runs or front ends")
    print(f"\n{'the user' + chr(39) + 's flow (installed entry point, prompt typed)' if args.flow == 'user' else 'the built window'}:")
    summary = report(rows, args.prompts, args.repeats, args.configs)
    if args.json:
        from specdesk.files import write_json_atomic

        write_json_atomic(args.json, {
            "flow": args.flow,
            "args": {k: str(v) for k, v in vars(args).items()},
            "runs": [{"prompt": p, "front": fc[0], "config": fc[1], "repeat": i, **f} for (p, fc, i), f in rows.items()],
            "load_end": load_now(),
            "ratios": summary,
        }, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
