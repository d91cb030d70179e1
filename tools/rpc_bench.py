#!/usr/bin/env python3
"""What a network round trip does to speculation: the target on an RPC server behind
a latency proxy, the draft local.

    .venv/bin/python tools/rpc_bench.py [--delays 0,2,10] [--target T --draft D] [--max-tokens 64]
        [--prompts 2] [--server-threads 1] [--threads 1]

It starts `specdesk rpc-server` on 127.0.0.1, puts specdesk.bench.latency_proxy in
front of it with the added delay each way, loads the target's layers on the server and
the draft here, and for each delay measures target alone, draft:auto and ngram:auto
(tok/s, median over the prompts, each run from empty contexts, T=0) and what the
advisor predicts from its own calibration over the same link. It prints a markdown
table of ratios against target alone at the same delay.

Default models: SmolLM2-135M as target and draft (a quick run). A tool, not a test:
its figures hold only on a quiet machine, and on one machine the server shares the
client's cores.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
from pathlib import Path

from specdesk.bench.advisor import advise, calibrate
from specdesk.bench.latency_proxy import LatencyProxy
from specdesk.session import GenerationConfig, ModelSpec, Session

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome, with a docstring and tests.",
    "Rewrite this sentence in the passive voice, then repeat the original: The cat chased the mouse across the yard.",
    "List the planets of the solar system with one fact about each.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(threads: int) -> tuple[subprocess.Popen, int]:
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "specdesk", "rpc-server", "--port", str(port), "--threads", str(threads)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in p.stdout:
        if line.startswith("ready:"):
            break
    else:
        raise SystemExit("rpc_bench: error: the RPC server did not start")
    import threading

    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    return p, port


def tok_s(session: Session, cfg: GenerationConfig, prompts: list[list[int]]) -> float:
    rates = []
    for p in prompts:
        session.reset()
        g = session.run(p, cfg)
        rates.append(g.stats.tokens_per_second or 0.0)
    return statistics.median(rates)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    smol = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    ap.add_argument("--delays", default="0,2,10", help="added delay each way, ms, comma-separated")
    ap.add_argument("--target", type=Path, default=smol)
    ap.add_argument("--draft", type=Path, default=smol)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="client threads")
    ap.add_argument("--server-threads", type=int, default=1)
    a = ap.parse_args(argv)
    delays = [float(x) for x in a.delays.split(",") if x.strip()]
    server, port = start_server(a.server_threads)
    rows = []
    try:
        for ms in delays:
            with LatencyProxy(("127.0.0.1", port), ms / 1000) as proxy:
                t = ModelSpec(a.target, n_ctx=1024, threads=a.threads, rpc=(proxy.endpoint,))
                d = ModelSpec(a.draft, n_ctx=1024, threads=a.threads)
                with Session.load(t, d, remember_costs=False) as s:
                    prompts = [s.chat_prompt([{"role": "user", "content": p}]) for p in PROMPTS[: a.prompts]]
                    s.warm_up()
                    base = tok_s(s, GenerationConfig(proposer="none", max_tokens=a.max_tokens), prompts)
                    dr = tok_s(s, GenerationConfig(proposer="draft", k="auto", max_tokens=a.max_tokens), prompts)
                    ng = tok_s(s, GenerationConfig(proposer="ngram", k="auto", max_tokens=a.max_tokens), prompts)
                    with s.lease():
                        cal = calibrate(s, drift=False, acceptance_tokens=32, loop=False)  # the component costs over the network
                    adv = advise(cal)
                    best_draft = max(adv.table, key=lambda r: r["predicted_speedup"]) if adv.table else None
                rows.append((ms, base, dr, ng, cal, adv, best_draft))
                print(f"delay {ms:g} ms: none {base:.1f} tok/s, draft:auto {dr:.1f}, ngram:auto {ng:.1f}", file=sys.stderr)
    finally:
        server.kill()
        server.wait()
    print(f"target {a.target.name} on an RPC server (127.0.0.1, {a.server_threads} thread) behind the latency proxy; "
          f"draft {a.draft.name} local ({a.threads} thread); T=0, {a.max_tokens} tokens, median of {a.prompts} prompts\n")
    print("| added delay each way | target step | verify b=4, per token | draft:auto / none | ngram:auto / none "
          "| advisor: best draft k (predicted) | advisor recommends |")
    print("|---|---|---|---|---|---|---|")
    base0 = rows[0][1] if rows else 0
    for ms, base, dr, ng, cal, adv, best in rows:
        step_ratio = f"{base0 / base:.2f}× the 0 ms step" if base else "-"
        pred = f"{best['config']} ({best['predicted_speedup']:.2f}×)" if best else "-"
        rec = "none" if adv.best == "none" else f"{adv.best} ({adv.best_speedup:.2f}×)"
        print(f"| {ms:g} ms | {step_ratio} | {cal.verify_per_token(4):.2f} step | {dr / base:.2f}× | {ng / base:.2f}× "
              f"| {pred} | {rec} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
