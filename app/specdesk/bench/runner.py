"""The benchmark runner, shared by ``specdesk bench`` and the app's Compare tab.

For every prompt and repeat it runs every configuration once, rotating their order
from one repeat to the next (A B C, B C A, C A B, …) so that drift on a shared,
noisy machine hits all of them alike. Each run starts from empty contexts, so every
configuration pays for its own prompt and runs can be replayed exactly. Speedups
are paired: each configuration's tokens/s over target alone's in the same
(prompt, repeat) round, then the median per prompt and the median per suite.
At temperature 0 every output is checked against target alone's and a difference
is explained (near-tie or mismatch) by replaying both runs.

Multi-turn tasks are replayed as the app's chat would hold them: turn n's prompt is
the whole chat so far (the earlier user messages and the answers given to them,
through the target's chat template, the oldest turns left out when it does not fit),
and the session's history index holds the earlier turns, as it would after the app
had answered them. Every configuration gets the same chat: the answers replayed are
target alone's from the same repeat (at T=0 every configuration writes them too, up
to reported near-ties), so paired speedups compare the same prompts. Each run starts
from an empty history plus those turns, so no run copies from another run's answer
to the same prompt (single prompts run with an empty history). Each turn is
reported on its own (``turn``, ``task``; ``prompt_id`` is ``<task>/turn<n>``), and
the summary has a row per turn (``per_turn``).
"""

from __future__ import annotations

import datetime
import statistics
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from .. import __version__
from ..errors import Cancelled, SpecDeskError
from ..session import Generation, GenerationConfig
from ..session.core import HISTORY_PROMPT_TAIL
from ..speculative.divergence import explain
from ..speculative.sampling import SamplingParams
from ..session.fit import fit_chat
from ..session.runtime import machine
from .configs import BenchConfig, resolve_configs
from .suites import Prompt, Suite

Progress = Callable[[int, int, str], None]  # (done, total, what is running)


class BenchTarget(Protocol):
    """What the runner needs from a loaded pair (a Session, or a fake in tests)."""

    has_draft: bool

    def prompt_tokens(self, text: str) -> list[int]: ...

    # Optional (the runner falls back without them): the tokens of a whole chat,
    # fitted to the context with ``max_tokens`` more, and how many messages were left
    # out; the earlier turns history lookups may copy from, as (prompt, answer)
    # tokens; whether the draft drafts translated (another vocabulary).
    #   def chat_tokens(self, messages: list[dict], max_tokens: int) -> tuple[list[int], int]: ...
    #   def set_history(self, turns: list[tuple[list[int], list[int]]]) -> None: ...
    #   translated: bool

    def run(self, prompt: list[int], config: GenerationConfig) -> Generation: ...

    def reset(self) -> None: ...

    def warm_up(self) -> None: ...

    def explain(self, prompt: list[int], base: Generation, other: Generation) -> dict | None: ...

    def describe(self) -> dict: ...

    def memory(self) -> dict: ...


@dataclass(frozen=True)
class BenchOptions:
    repeats: int = 3
    max_tokens: int = 128
    temperature: float = 0.0
    seed: int = 0
    warmup: bool = True


class SessionTarget:
    """A Session as a benchmark target."""

    def __init__(self, session) -> None:
        self.session = session
        self.has_draft = session.draft is not None
        self.translated = bool(session.translated)

    def prompt_tokens(self, text: str) -> list[int]:
        return self.session.chat_prompt([{"role": "user", "content": text}])

    def chat_tokens(self, messages: list[dict], max_tokens: int) -> tuple[list[int], int]:
        return fit_chat(self.session, messages, max_tokens)

    def set_history(self, turns: list[tuple[list[int], list[int]]]) -> None:
        """The session's history index holds exactly these earlier turns, kept as the
        session keeps a turn it answered (the prompt's tail, then the answer)."""
        self.session.history.index.clear()
        for prompt, answer in turns:
            self.session.history.remember(list(prompt[-HISTORY_PROMPT_TAIL:]) + list(answer))

    def run(self, prompt, config):
        self.session.check_fits(prompt, config.max_tokens)
        return self.session.run(prompt, config)

    def reset(self) -> None:
        self.session.reset()

    def warm_up(self) -> None:
        self.session.warm_up()

    def explain(self, prompt, base, other):
        d = explain(self.session.target.ctx, prompt, base.steps, other.steps)
        self.session.reset()
        return None if d is None else d.to_dict()

    def describe(self) -> dict:
        s = self.session
        return {
            "target": str(s.target.spec.path),
            "draft": str(s.draft.spec.path) if s.draft else None,
            "n_ctx": s.target.ctx.n_ctx,
            "threads": s.target.ctx.threads,
            "target_gpu_layers": s.target.spec.n_gpu_layers,
            "draft_gpu_layers": s.draft.spec.n_gpu_layers if s.draft else None,
        }

    def memory(self) -> dict:
        rep = self.session.memory()
        t, d = rep.model("target"), rep.model("draft")
        out = {"target_bytes": t.total_bytes, "draft_bytes": d.total_bytes if d else 0}
        extra_vram = 0
        if d is not None and d.n_gpu_layers > 0:
            n_layer = max(1, self.session.draft.model.shape.n_layer)
            extra_vram = int(d.total_bytes * min(1.0, d.n_gpu_layers / n_layer))
        out["extra_vram_bytes"] = extra_vram
        out["extra_ram_bytes"] = (d.total_bytes if d else 0) - extra_vram
        out["rss_bytes"] = rep.rss_bytes
        return out


def schedule(
    suites: Sequence[Suite], configs: Sequence[BenchConfig], repeats: int
) -> list[tuple[Suite, Prompt, int, int, BenchConfig]]:
    """Every (suite, prompt, repeat, turn index, config), turns in order within a
    repeat (a turn replays the ones before it), configs rotated from one repeat (and
    turn) to the next."""
    out = []
    n = len(configs)
    for suite in suites:
        for prompt in suite.prompts:
            for r in range(repeats):
                for t in range(len(prompt.messages)):
                    for j in range(n):
                        out.append((suite, prompt, r, t, configs[(j + r + t) % n]))
    return out


def turn_id(prompt: Prompt, t: int) -> str:
    """A run's ``prompt_id``: the prompt's id, or ``<task>/turn<n>`` in a multi-turn task."""
    return prompt.id if len(prompt.messages) == 1 else f"{prompt.id}/turn{t + 1}"


def chat_messages(prompt: Prompt, t: int, answers: Sequence[str]) -> list[dict]:
    """Turn ``t``'s chat: the user's earlier messages with ``answers`` to them, then turn t's."""
    msgs: list[dict] = []
    for j in range(t):
        msgs.append({"role": "user", "content": prompt.messages[j]})
        msgs.append({"role": "assistant", "content": answers[j]})
    msgs.append({"role": "user", "content": prompt.messages[t]})
    return msgs


def run_bench(
    target: BenchTarget,
    suites: Sequence[Suite],
    configs: Sequence[BenchConfig],
    options: BenchOptions,
    progress: Progress | None = None,
    cancel: Callable[[], bool] | None = None,
    on_run: Callable[[dict], None] | None = None,
) -> dict:
    if configs[0].proposer != "none":
        raise ValueError("the first config must be the baseline, none")
    configs = resolve_configs(list(configs), bool(getattr(target, "translated", False)))
    if not target.has_draft:
        missing = [c.name for c in configs if c.needs_draft]
        if missing:
            raise SpecDeskError(f"{', '.join(missing)} need a draft model; load one or drop them from --configs")
    sampling = SamplingParams(temperature=options.temperature)
    plan = schedule(suites, configs, options.repeats)
    total = len(plan) + (len(configs) if options.warmup else 0)
    done = 0

    def tick(what: str) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total, what)

    def check_cancel() -> None:
        if cancel is not None and cancel():
            raise Cancelled("the benchmark was cancelled")

    set_history = getattr(target, "set_history", None)
    chat_tokens = getattr(target, "chat_tokens", None)
    tokens_cache: dict[tuple, tuple[list[int], int]] = {}
    # (suite, task, repeat) -> target alone's answers so far: (prompt tokens, answer tokens, text)
    answers: dict[tuple[str, str, int], list[tuple[list[int], list[int], str]]] = {}

    def tokens(suite: Suite, prompt: Prompt, r: int = 0, t: int = 0) -> tuple[list[int], int]:
        """Turn t's prompt tokens (the chat so far) and how many messages were left out."""
        if t == 0:
            key: tuple = (suite.name, prompt.id)
            if key not in tokens_cache:
                tokens_cache[key] = (target.prompt_tokens(prompt.text), 0)
            return tokens_cache[key]
        key = (suite.name, prompt.id, r, t)
        if key not in tokens_cache:
            earlier = answers.get((suite.name, prompt.id, r), [])
            if len(earlier) < t:
                raise SpecDeskError(f"{suite.name}/{prompt.id}: turn {t + 1} has no answer to turn {t} to replay")
            msgs = chat_messages(prompt, t, [a[2] for a in earlier])
            if chat_tokens is None:
                raise SpecDeskError("this benchmark target cannot replay a chat; run single prompts")
            tokens_cache[key] = chat_tokens(msgs, options.max_tokens)
        return tokens_cache[key]

    def history_for(suite: Suite, prompt: Prompt, r: int, t: int) -> list[tuple[list[int], list[int]]]:
        return [(p, a) for p, a, _ in answers.get((suite.name, prompt.id, r), [])[:t]]

    if options.warmup:
        target.warm_up()
        first_suite, first_prompt = suites[0], suites[0].prompts[0]
        for c in configs:
            check_cancel()
            target.reset()
            if set_history is not None:
                set_history([])
            target.run(tokens(first_suite, first_prompt)[0], c.generation(sampling, min(16, options.max_tokens), options.seed))
            tick(f"warm-up {c.name}")

    runs: list[dict] = []
    baselines: dict[tuple[str, str, int], tuple[list[int], Generation]] = {}
    pending: dict[tuple[str, str, int], list[tuple[dict, Generation]]] = {}
    for order, (suite, prompt, r, t, c) in enumerate(plan):
        check_cancel()
        toks, dropped = tokens(suite, prompt, r, t)
        seed = options.seed + r
        target.reset()
        if set_history is not None:
            set_history(history_for(suite, prompt, r, t))
        gen = target.run(toks, c.generation(sampling, options.max_tokens, seed))
        pid = turn_id(prompt, t)
        rec = {
            "suite": suite.name,
            "prompt_id": pid,
            "task": prompt.id,
            "turn": t + 1,
            "turns": len(prompt.messages),
            "repeat": r,
            "order": order,
            "config": c.name,
            "prompt_tokens": len(toks),
            "messages_left_out": dropped,
            "stats": gen.stats.to_dict(),
            "stop_reason": gen.stop_reason,
            "text": gen.text,
            "identical": None,
            "divergence": None,
        }
        runs.append(rec)
        if c.proposer == "none" and t + 1 < len(prompt.messages):
            answers.setdefault((suite.name, prompt.id, r), []).append((list(toks), list(gen.tokens), gen.text))
        key = (suite.name, pid, r)
        if options.temperature == 0.0:
            if c.proposer == "none":
                baselines[key] = (toks, gen)
                for other_rec, other_gen in pending.pop(key, []):
                    _compare(target, toks, gen, other_rec, other_gen)
            elif key in baselines:
                _compare(target, baselines[key][0], baselines[key][1], rec, gen)
            else:
                pending.setdefault(key, []).append((rec, gen))
        if on_run:
            on_run(rec)
        tick(f"{suite.name}/{pid} #{r + 1} {c.name}")

    result = {
        "meta": {
            "created": datetime.datetime.now().isoformat(timespec="seconds"),
            "specdesk_version": __version__,
            "machine": machine(),
            **target.describe(),
            "settings": {
                "max_tokens": options.max_tokens,
                "temperature": options.temperature,
                "repeats": options.repeats,
                "seed": options.seed,
                "suites": [s.name for s in suites],
                "configs": [c.name for c in configs],
            },
        },
        "configs": [c.name for c in configs],
        "runs": runs,
        "summary": summarize(runs, [c.name for c in configs]),
        "advisor": None,
        "memory": target.memory(),
    }
    return result


def _compare(target: BenchTarget, prompt: list[int], base: Generation, rec: dict, gen: Generation) -> None:
    if base.tokens == gen.tokens:
        rec["identical"] = True
        return
    rec["identical"] = False
    rec["divergence"] = target.explain(prompt, base, gen)


# -- aggregation (pure) -------------------------------------------------------------------

def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def paired_ratios(runs: list[dict], config: str, baseline: str = "none") -> dict[tuple[str, str], list[float]]:
    """(suite, prompt) -> [tps(config) / tps(baseline)] per repeat."""
    base = {
        (r["suite"], r["prompt_id"], r["repeat"]): r["stats"]["tokens_per_second"]
        for r in runs
        if r["config"] == baseline
    }
    out: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        if r["config"] != config:
            continue
        b = base.get((r["suite"], r["prompt_id"], r["repeat"]))
        t = r["stats"]["tokens_per_second"]
        if b and t:
            out.setdefault((r["suite"], r["prompt_id"]), []).append(t / b)
    return out


def _aggregate(rs: list[dict], ratios: dict[tuple[str, str], list[float]]) -> dict:
    per_prompt_ratio = [_median(v) for v in ratios.values()]
    per_prompt_tps: dict[tuple[str, str], list[float]] = {}
    for r in rs:
        per_prompt_tps.setdefault((r["suite"], r["prompt_id"]), []).append(r["stats"]["tokens_per_second"])
    drafted = sum(r["stats"]["drafted"] for r in rs)
    accepted = sum(r["stats"]["accepted"] for r in rs)
    steps = sum(r["stats"]["steps"] for r in rs)
    decode = sum(r["stats"]["decode_seconds"] for r in rs)
    overhead = sum(r["stats"]["overhead_seconds"] for r in rs)
    compared = [r for r in rs if r["identical"] is not None]
    verdicts = [(r.get("divergence") or {}).get("verdict") for r in compared if r["identical"] is False]
    return {
        "prompts": len(per_prompt_tps),
        "runs": len(rs),
        "median_tps": _median([_median(v) for v in per_prompt_tps.values()]),
        "speedup": _median(per_prompt_ratio),
        "speedup_min": min(per_prompt_ratio) if per_prompt_ratio else None,
        "speedup_max": max(per_prompt_ratio) if per_prompt_ratio else None,
        "acceptance": accepted / drafted if drafted else None,
        "mean_accepted_length": (accepted + steps) / steps if steps else None,
        "overhead_share": overhead / decode if decode else None,
        "identical": sum(1 for r in compared if r["identical"]),
        "near_ties": verdicts.count("near-tie"),
        "mismatches": len(verdicts) - verdicts.count("near-tie"),
        "compared": len(compared),
    }


def summarize(runs: list[dict], configs: list[str]) -> dict:
    suites = list(dict.fromkeys(r["suite"] for r in runs))
    per_suite = []
    overall = []
    for c in configs:
        ratios = paired_ratios(runs, c)
        for s in suites:
            rs = [r for r in runs if r["suite"] == s and r["config"] == c]
            if not rs:
                continue
            sub = {k: v for k, v in ratios.items() if k[0] == s}
            per_suite.append({"suite": s, "config": c, **_aggregate(rs, sub)})
        rs = [r for r in runs if r["config"] == c]
        if rs:
            overall.append({"config": c, **_aggregate(rs, ratios)})
    return {"per_suite": per_suite, "overall": overall, "per_turn": per_turn(runs, configs),
            "history": history_gain(runs, configs)}


def history_gain(runs: list[dict], configs: list[str]) -> list[dict]:
    """History lookup on the turns that revise an earlier answer (2 and later): each
    ``ngram+history`` configuration against target alone, and against the same n-gram
    configuration without history (paired per run, median per prompt, then overall)."""
    out = []
    for c in configs:
        if "+history" not in c:
            continue
        plain = c.replace("+history", "")
        mine = later_turns(runs, c)
        if mine is None:
            continue
        theirs = later_turns(runs, plain) if plain in configs else None
        vs = later_turns(runs, c, baseline=plain) if theirs is not None else None
        out.append({
            "config": c,
            "without_history": plain if theirs is not None else None,
            "turns_from": 2,
            "prompts": mine["prompts"],
            "speedup": mine["speedup"],
            "acceptance": mine["acceptance"],
            "speedup_without_history": theirs["speedup"] if theirs else None,
            "acceptance_without_history": theirs["acceptance"] if theirs else None,
            "speedup_over_without_history": vs["speedup"] if vs else None,
        })
    return out


def per_turn(runs: list[dict], configs: list[str]) -> list[dict]:
    """One row per (suite, turn, config) of the suites with multi-turn tasks: the
    same figures as per suite, over that turn's runs only."""
    suites = list(dict.fromkeys(r["suite"] for r in runs if r.get("turns", 1) > 1))
    out = []
    for c in configs:
        ratios = paired_ratios(runs, c)
        for s in suites:
            turns = sorted({r.get("turn", 1) for r in runs if r["suite"] == s})
            for t in turns:
                rs = [r for r in runs if r["suite"] == s and r["config"] == c and r.get("turn", 1) == t]
                if not rs:
                    continue
                ids = {r["prompt_id"] for r in rs}
                sub = {k: v for k, v in ratios.items() if k[0] == s and k[1] in ids}
                out.append({"suite": s, "turn": t, "config": c, **_aggregate(rs, sub)})
    return out


def later_turns(runs: list[dict], config: str, baseline: str = "none", first: int = 2) -> dict | None:
    """``config`` against target alone on turns ``first``.. of the multi-turn tasks:
    the median over those (task, turn) prompts of the paired speedup, and the
    acceptance; None when no run is on such a turn."""
    later = {(r["suite"], r["prompt_id"]) for r in runs if r.get("turns", 1) > 1 and r.get("turn", 1) >= first}
    if not later:
        return None
    ratios = {k: v for k, v in paired_ratios(runs, config, baseline).items() if k in later}
    rs = [r for r in runs if r["config"] == config and (r["suite"], r["prompt_id"]) in later]
    if not rs:
        return None
    return {"config": config, "turns_from": first, **_aggregate(rs, ratios)}
