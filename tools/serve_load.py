#!/usr/bin/env python3
"""Load a ``specdesk serve`` with M concurrent clients × R requests (the real ``openai``
client, streamed chat completions) and report what a user of the endpoint sees.

    .venv/bin/python tools/serve_load.py --clients 4 --requests 3 --max-tokens 32 \\
        -- --target models/SmolLM2-135M-Instruct.Q4_1.gguf --draft models/SmolLM2-135M-Instruct.Q4_1.gguf --k 3

Everything after ``--`` goes to ``specdesk serve`` (which this tool starts on a free
port, with temporary data, cache and home folders); or give ``--url`` (and
``--api-key``) to load a server that is already running. Reported, from one run:
throughput (completion tokens per wall second, requests per second), time to first
token p50/p95, the time requests waited in line (the server's ``timings.queue_ms``),
decode speed per request, 503s and other errors, and the server's RSS before and after
(``--url``: give ``--pid`` for RSS). The ratio of throughput to the median request's
decode speed shows what serving costs besides decoding (1.00: nothing; one generation
runs at a time, so concurrency cannot raise it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from scratch import scratch_dir  # tools/scratch.py: removed when the tool ends

import openai
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from serving import start_serve  # noqa: E402  (the tests' way to start a server: port 0, isolated folders)

PROMPTS = [
    "Write a Python function that reverses a string.",
    "List three uses of a hash map.",
    "Explain what a B-tree is in two sentences.",
    "Count from one to ten in words.",
]


@dataclass
class Result:
    client: int
    index: int
    status: str  # "ok" | "503" | "error: ..."
    seconds: float
    ttft: float | None = None
    completion_tokens: int = 0
    queue_ms: float | None = None
    decode_tps: float | None = None
    acceptance: float | None = None
    prompt_ms: float | None = None
    decode_ms: float | None = None


def one_request(c: openai.OpenAI, model: str, client: int, index: int, max_tokens: int, temperature: float) -> Result:
    t0 = time.perf_counter()
    ttft = None
    final = usage = None
    try:
        stream = c.chat.completions.create(
            model=model, messages=[{"role": "user", "content": PROMPTS[(client + index) % len(PROMPTS)]}],
            max_tokens=max_tokens, temperature=temperature, stream=True, stream_options={"include_usage": True})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content and ttft is None:
                ttft = time.perf_counter() - t0
            if chunk.choices and chunk.choices[0].finish_reason:
                final = chunk.model_extra
            if chunk.usage is not None:
                usage = chunk.usage
    except openai.APIStatusError as e:
        return Result(client, index, "503" if e.status_code == 503 else f"error: {e.status_code}", time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - counted and shown
        return Result(client, index, f"error: {type(e).__name__}", time.perf_counter() - t0)
    t = (final or {}).get("timings", {})
    s = (final or {}).get("speculation", {})
    return Result(client, index, "ok", time.perf_counter() - t0, ttft, usage.completion_tokens if usage else 0,
                  t.get("queue_ms"), t.get("predicted_per_second"), s.get("acceptance_rate"), t.get("prompt_ms"),
                  t.get("predicted_ms"))


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def rss(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return None


def run_load(c: openai.OpenAI, model: str, clients: int, requests: int, max_tokens: int, temperature: float,
             pause: float) -> tuple[list[Result], float]:
    results: list[Result] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def worker(i: int) -> None:
        barrier.wait()
        for r in range(requests):
            res = one_request(c, model, i, r, max_tokens, temperature)
            with lock:
                results.append(res)
            if res.status == "503" and pause:
                time.sleep(pause)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.perf_counter() - t0


def fmt(x: float | None, f: str = "{:.2f}") -> str:
    return "-" if x is None else f.format(x)


def report(results: list[Result], wall: float, before: int | None, after: int | None, args) -> dict:
    ok = [r for r in results if r.status == "ok"]
    ttft = [r.ttft for r in ok if r.ttft is not None]
    waits = [r.queue_ms / 1000 for r in ok if r.queue_ms is not None]
    speeds = [r.decode_tps for r in ok if r.decode_tps]
    tokens = sum(r.completion_tokens for r in ok)
    per_client = [sum(r.completion_tokens for r in ok if r.client == i) / wall for i in range(args.clients)]
    throughput = tokens / wall if wall > 0 else None
    median_speed = statistics.median(speeds) if speeds else None
    out = {
        "clients": args.clients, "requests_per_client": args.requests, "max_tokens": args.max_tokens,
        "wall_s": wall, "ok": len(ok), "rejected_503": sum(r.status == "503" for r in results),
        "errors": sorted({r.status for r in results if r.status.startswith("error")}),
        "error_count": sum(r.status.startswith("error") for r in results),
        "throughput_tokens_per_s": throughput, "requests_per_s": len(ok) / wall if wall > 0 else None,
        "per_client_tokens_per_s": {"min": min(per_client, default=None), "max": max(per_client, default=None)},
        "ttft_s": {"p50": pct(ttft, 0.5), "p95": pct(ttft, 0.95), "min": min(ttft, default=None), "max": max(ttft, default=None)},
        "queue_wait_s": {"p50": pct(waits, 0.5), "p95": pct(waits, 0.95), "max": max(waits, default=None)},
        "decode_tokens_per_s": {"p50": median_speed, "min": min(speeds, default=None), "max": max(speeds, default=None)},
        "throughput_over_median_decode": throughput / median_speed if throughput and median_speed else None,
        # how the wall time went: the pair evaluating prompts, decoding, or neither (HTTP, templates, hand-over)
        "busy_share": {"prompt": sum(r.prompt_ms or 0 for r in ok) / 1000 / wall if wall > 0 else None,
                       "decode": sum(r.decode_ms or 0 for r in ok) / 1000 / wall if wall > 0 else None},
        "acceptance": {"p50": pct([r.acceptance for r in ok if r.acceptance is not None], 0.5)},
        "server_rss_bytes": {"before": before, "after": after, "delta": after - before if before and after else None},
        "results": [asdict(r) for r in results],
    }
    return out


def print_report(o: dict) -> None:
    mib = 2 ** 20
    r = o["server_rss_bytes"]
    print(f"{o['clients']} clients x {o['requests_per_client']} requests, max_tokens {o['max_tokens']}: "
          f"{o['ok']} ok, {o['rejected_503']} refused (503), {o['error_count']} errors {o['errors'] or ''} in {o['wall_s']:.1f} s")
    pc = o["per_client_tokens_per_s"]
    print(f"throughput        {fmt(o['throughput_tokens_per_s'], '{:.1f}')} tokens/s, {fmt(o['requests_per_s'])} requests/s "
          f"(per client {fmt(pc['min'], '{:.1f}')}..{fmt(pc['max'], '{:.1f}')} tokens/s)")
    t = o["ttft_s"]
    print(f"first token       p50 {fmt(t['p50'])} s, p95 {fmt(t['p95'])} s (min {fmt(t['min'])}, max {fmt(t['max'])})")
    q = o["queue_wait_s"]
    print(f"waited in line    p50 {fmt(q['p50'])} s, p95 {fmt(q['p95'])} s (max {fmt(q['max'])})")
    d = o["decode_tokens_per_s"]
    print(f"decode per request p50 {fmt(d['p50'], '{:.1f}')} tokens/s (min {fmt(d['min'], '{:.1f}')}, max {fmt(d['max'], '{:.1f}')}); "
          f"throughput / median decode = {fmt(o['throughput_over_median_decode'])}")
    b = o["busy_share"]
    if b["prompt"] is not None:
        print(f"wall time         prompts {100 * b['prompt']:.0f}%, decoding {100 * b['decode']:.0f}%, "
              f"neither {100 * max(0.0, 1 - b['prompt'] - b['decode']):.0f}% (HTTP, chat templates, hand-over between requests); "
              f"acceptance p50 {fmt(o['acceptance']['p50'], '{:.2f}')}")
    if r["before"] is not None:
        print(f"server RSS        {r['before'] / mib:.0f} MiB before, {r['after'] / mib:.0f} MiB after "
              f"({(r['delta'] or 0) / mib:+.1f} MiB)")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    serve_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=4, help="concurrent clients (M)")
    p.add_argument("--requests", type=int, default=3, help="requests per client (R)")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--retry-pause", type=float, default=0.5, help="seconds a refused (503) client waits before its next request")
    p.add_argument("--url", help="a running server (e.g. http://127.0.0.1:8080) instead of starting one")
    p.add_argument("--api-key", default=os.environ.get("SPECDESK_API_KEY"))
    p.add_argument("--pid", type=int, help="with --url: the server's process id, for its RSS")
    p.add_argument("--json", type=Path, help="also write the report (and every request) as JSON here")
    args = p.parse_args(own)
    if args.clients < 1 or args.requests < 1:
        p.error("--clients and --requests must be at least 1")

    served = None
    if args.url:
        url, pid = args.url.rstrip("/"), args.pid
    else:
        served = start_serve(serve_args or ["--target", str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"),
                                            "--proposer", "none"], Path(scratch_dir("serve-load-")),
                             key=args.api_key)
        url, pid = served.url, served.proc.pid
        print(served.stdout[0], flush=True)
    try:
        c = openai.OpenAI(base_url=url + "/v1", api_key=args.api_key or "none", max_retries=0, timeout=600)
        model = c.models.list().data[0].id
        one_request(c, model, 0, 0, 4, 0.0)  # warm-up: pages the weights in; not counted
        before = rss(pid)
        results, wall = run_load(c, model, args.clients, args.requests, args.max_tokens, args.temperature, args.retry_pause)
        after = rss(pid)
    finally:
        if served is not None:
            served.stop()
    out = report(results, wall, before, after, args)
    print_report(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0 if out["error_count"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
