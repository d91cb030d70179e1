#!/usr/bin/env python3
"""What rendering a chat template in the bounded helper process costs per message.

    .venv/bin/python tools/template_cost.py [--repeats 41] [--sizes 1,11,101] [--model PATH ...]

For the chat templates of the real models (SmolLM2 and the Qwen target by default),
on chats of 1, 11 and 101 messages, it renders each chat in turn, interleaved in one
run: in this process (the sandbox alone, compiled template reused), in this process
compiling the template every time (as every render did before the helper), and in
the helper process (chat.worker: the sandbox inside a process that the OS
bounds). Each answer the app or the CLI sends renders once (fit_chat renders again
only to leave out turns), so the paired difference helper - in-process is the added
cost per message. Printed: medians with their spread (p10-p90), the paired added
cost and the ratio helper / in-process, and once, what starting the helper costs
(paid when a model loads, while the model loads).

A tool, not a test: its figures hold only on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from specdesk.chat import sandbox as chat
from specdesk.chat.worker import TemplateRenderer
from specdesk.library.defaults import default_models
from specdesk.library.gguf.reader import read_gguf


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _spread(xs: list[float], unit: float = 1e3) -> str:
    return f"{statistics.median(xs) * unit:8.3f} ({_quantile(xs, 0.1) * unit:.3f}-{_quantile(xs, 0.9) * unit:.3f})"


def _chat(n: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a careful assistant. Answer briefly."}]
    for i in range(n - 1):
        role = "user" if i % 2 == 0 else "assistant"
        body = f"Question {i}: how does this function handle an empty list? " if role == "user" else \
            f"Answer {i}: it returns early with None; the loop below never runs. " * 3
        msgs.append({"role": role, "content": body})
    if msgs[-1]["role"] != "user":
        msgs.append({"role": "user", "content": "And with one item?"})
    return msgs[:max(1, n)]


def _timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def measure(templates: dict[str, str], sizes: list[int], repeats: int) -> None:
    renderer = TemplateRenderer()
    t0 = time.perf_counter()
    renderer.start()
    renderer.render(None, _chat(1))
    started = time.perf_counter() - t0
    print(f"helper start to first render: {started * 1e3:.0f} ms (once per process; bounded by {renderer.bounded_by})")

    cases = [(name, n) for name in templates for n in sizes]
    runs: dict[tuple, dict[str, list[float]]] = {c: {"in": [], "fresh": [], "helper": []} for c in cases}
    for name, n in cases:  # warm: every template compiled in both processes
        msgs = _chat(n)
        assert renderer.render(templates[name], msgs) == chat.render_chat(templates[name], msgs)
    for _ in range(repeats):
        for case in cases:
            tpl, msgs = templates[case[0]], _chat(case[1])
            r = runs[case]
            chat._compiled.clear()  # noqa: SLF001 - the render as it was before: compiled every time
            r["fresh"].append(_timed(chat.render_chat, tpl, msgs))
            r["in"].append(_timed(chat.render_chat, tpl, msgs))  # compiled by the render before
            r["helper"].append(_timed(renderer.render, tpl, msgs))
    renderer.close()

    print(f"\n{repeats} renders each, interleaved; milliseconds, median (p10-p90)")
    print(f"{'template':<12}{'msgs':>5}  {'in-process':>22}  {'compiled each time':>22}  {'helper process':>22}"
          f"  {'added per message':>22}  {'helper / in-process':>20}")
    for case in cases:
        r = runs[case]
        added = [h - i for h, i in zip(r["helper"], r["in"])]
        ratio = [h / i for h, i in zip(r["helper"], r["in"])]
        print(f"{case[0]:<12}{case[1]:>5}  {_spread(r['in']):>22}  {_spread(r['fresh']):>22}  {_spread(r['helper']):>22}"
              f"  {_spread(added):>22}  {_spread(ratio, 1):>20}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=41)
    ap.add_argument("--sizes", default="1,11,101", help="chat lengths in messages, comma-separated")
    ap.add_argument("--model", type=Path, action="append", help="GGUF files whose templates to measure "
                    "(default: SmolLM2 and the Qwen target)")
    a = ap.parse_args(argv)
    paths = a.model or [m.path for m in default_models(["test", "target"])]
    templates = {}
    for p in paths:
        tpl = read_gguf(p).metadata.get("tokenizer.chat_template")
        if not tpl:
            print(f"{p.name}: no chat template", file=sys.stderr)
            return 2
        templates[p.name.split("-")[0].split(".")[0][:12]] = tpl
    measure(templates, [int(s) for s in a.sizes.split(",")], a.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
