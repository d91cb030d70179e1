"""The tables of the decode loop's timeline: per configuration, the median over the
answers with its spread (min-max), and ratios taken within one run."""

from __future__ import annotations

import statistics
import sys


def med(xs: list[float]) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def _col(rows: list[dict], key: str) -> list[float]:
    return [r[key] for r in rows if r.get(key) is not None]


def report(results: dict[str, list[dict]], out=sys.stdout) -> None:
    base = results.get("none")
    print("per step, median [min-max] over the answers (ms; tok/s, and the ratio to target alone in the same run)",
          file=out)
    for c, rows in results.items():
        line = [f"{col} {med(_col(rows, col))}"
                for col in ("tok_s", "launch_ms", "wait_ms", "host_ms", "host_cpu_ms", "host_ms_token")]
        if base and c != "none":
            line.append(f"vs none {med([r['tok_s'] / b['tok_s'] for r, b in zip(rows, base) if b['tok_s'] > 0])}")
        print(f"  {c:<22} " + ", ".join(line), file=out)
    print("batch shapes per context (distinct shapes; shape changes per step; decodes per step); logits bytes copied "
          "out of llama.cpp per step", file=out)
    for c, rows in results.items():
        parts = [f"{role}: {max(r[f'{role}_shapes'] for r in rows)} shapes, {med(_col(rows, f'{role}_changes_per_step'))} "
                 f"changes/step, {med(_col(rows, f'{role}_calls_per_step'))} decodes/step"
                 for role in ("target", "draft") if any(r.get(f"{role}_calls_per_step") for r in rows)]
        print(f"  {c:<22} " + "; ".join(parts) + f"; {med(_col(rows, 'bytes_per_step'))} bytes/step", file=out)
    print("Python overhead share: as the statistics report it, and as the timeline measures it", file=out)
    for c, rows in results.items():
        print(f"  {c:<22} reported {med(_col(rows, 'reported_overhead'))}, timeline {med(_col(rows, 'true_overhead'))}",
              file=out)
    drafting = {c: rows for c, rows in results.items() if any("drafted_cost" in r for r in rows)}
    if drafting:
        print("a drafted token's proposer time in the draft model's own steps (its median one-token decode in the same "
              "answer), of which its compute; draft decodes per drafted token; acceptance", file=out)
        for c, rows in drafting.items():
            print(f"  {c:<22} {med(_col(rows, 'drafted_cost'))} steps, compute {med(_col(rows, 'drafted_compute'))}; "
                  f"{med(_col(rows, 'draft_calls_per_drafted'))} decodes; a draft step "
                  f"{med(_col(rows, 'draft_step_ms'))} ms; acceptance "
                  f"{med([r['accepted'] / r['drafted'] for r in rows if r['drafted']])}", file=out)
    hot = [c for c in results if "@" in c and c.split("@")[0] in results]
    if hot:
        print("host sampling cost at T>0 against the same configuration at T=0, same run (ms)", file=out)
        for c in hot:
            cold = results[c.split("@")[0]]
            tok = [a["host_ms_token"] - b["host_ms_token"] for a, b in zip(results[c], cold)]
            row = [a["host_ms_row"] - b["host_ms_row"] for a, b in zip(results[c], cold)]
            print(f"  {c:<22} per token {med(tok)}, per verified row {med(row)}", file=out)


def compare(trees: dict[str, list[dict]], configs: list[str], out=sys.stdout) -> None:
    """Two checkouts' answers (each a list of one process's results): per configuration
    the host's ms and thread CPU ms per step on each side, and after / before."""
    before, after = list(trees)
    print(f"the host's time per step (the loop's wall time less llama.cpp's), {before} against {after}: "
          "median [min-max] over the answers of every process, and the ratio of the medians", file=out)
    for key, what in (("host_ms", "wall ms"), ("host_cpu_ms", "thread CPU ms"), ("tok_s", "tok/s")):
        print(f"  {what}", file=out)
        for c in configs:
            a = [x for res in trees[before] for x in _col(res[c], key)]
            b = [x for res in trees[after] for x in _col(res[c], key)]
            ratio = statistics.median(b) / statistics.median(a) if a and b and statistics.median(a) else None
            print(f"    {c:<22} {before} {med(a)}, {after} {med(b)}, {after} / {before} "
                  + (f"{ratio:.3f}" if ratio is not None else "-"), file=out)
