"""The benchmark runner, shared by ``specdesk bench`` and the app's Compare tab.

After a warm-up, it runs repeat after repeat (a *round*: every prompt with every
configuration once), rotating the configurations' order from one repeat to the next
(A B C, B C A, C A B, …) so that drift on a shared, noisy machine hits all of them
alike. Each run starts from empty contexts, so every configuration pays for its own
prompt and runs can be replayed exactly. Speedups are paired: each configuration's
tokens/s over target alone's in the same (prompt, repeat) round; the geometric mean
of those ratios, its 95% interval and the verdict (faster, slower, within noise)
come from :mod:`specdesk.bench.stats`, per suite and overall, with the machine's
noise floor from target alone's repeats. It runs a fixed number of repeats, or
*until sure*: round after round until every configuration's interval is within a
target half-width, or a repeat or time budget is spent (``stopping`` says which).
At temperature 0 every output is checked against target alone's and a difference
is explained (near-tie or mismatch) by replaying both runs. Every run records when
each of its tokens was produced (``timeline``), so its answer can be replayed at
its own speed.

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
import time
from dataclasses import asdict, dataclass
from typing import Callable, Protocol, Sequence

from .. import __version__
from ..errors import Cancelled, SpecDeskError
from ..session import Generation, GenerationConfig
from ..session.core import HISTORY_PROMPT_TAIL
from ..speculative.divergence import explain
from ..speculative.proposers.base import NO_SOURCE_CODE, Source
from ..speculative.proposers.registry import BASELINE
from ..speculative.sampling import SamplingParams
from ..session.fit import fit_chat
from ..session.runtime import machine
from ..session.text import until_sure_text
from . import stats
from .configs import BenchConfig, resolve_configs
from .rows import ConfigRow
from .suites import Prompt, Suite

Progress = Callable[[int, int, str], None]  # (done, total, what is running)


class BenchTarget(Protocol):
    """What the runner needs from a loaded pair (a Session, or a fake in tests)."""

    def refusal(self, proposer: str) -> str | None:
        """Why a configuration of ``proposer`` cannot run on this pair (None: it can)."""

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
class UntilSure:
    """Run until sure: repeat rounds until every configuration's interval is within
    +-``half_width`` (a fraction), and stop at ``max_repeats`` or after ``seconds``
    of runs (the next round is not started when it would not fit)."""

    half_width: float = 0.03
    min_repeats: int = 2
    max_repeats: int = 10
    seconds: float | None = None

    def __post_init__(self) -> None:
        if not 0 < self.half_width < 1:
            raise SpecDeskError(f"the target interval must be between 0 and 100%, got {100 * self.half_width:g}%")
        if not 2 <= self.min_repeats <= self.max_repeats:
            raise SpecDeskError("run until sure needs at least 2 repeats, and at most as many as its budget")
        if self.seconds is not None and self.seconds <= 0:
            raise SpecDeskError("the time budget must be positive")


@dataclass(frozen=True)
class BenchOptions:
    repeats: int = 3
    max_tokens: int = 128
    temperature: float = 0.0
    seed: int = 0
    warmup: bool = True
    # None: exactly ``repeats`` rounds; else add rounds until sure (``repeats`` is unused)
    until_sure: UntilSure | None = None
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0

    @property
    def max_repeats(self) -> int:
        return self.until_sure.max_repeats if self.until_sure is not None else self.repeats

    def sampling(self) -> SamplingParams:
        try:
            return SamplingParams(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p)
        except ValueError as e:
            raise SpecDeskError(str(e)) from None


class SessionTarget:
    """A Session as a benchmark target."""

    def __init__(self, session, raw: bool = False) -> None:
        self.session = session
        self.translated = bool(session.translated)
        self.raw = raw  # prompts as plain completions, without the chat template

    @property
    def n_ctx(self) -> int:
        return self.session.target.ctx.n_ctx

    def refusal(self, proposer: str) -> str | None:
        return self.session.refusal(GenerationConfig(proposer=proposer))

    def prompt_tokens(self, text: str) -> list[int]:
        if self.raw:
            return self.session.raw_prompt(text)
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


def schedule_round(
    suites: Sequence[Suite], configs: Sequence[BenchConfig], r: int
) -> list[tuple[Suite, Prompt, int, int, BenchConfig]]:
    """Repeat ``r``'s runs: every (suite, prompt, turn, config), turns in order (a turn
    replays the ones before it), configs rotated from one repeat (and turn) to the next."""
    out = []
    n = len(configs)
    for suite in suites:
        for prompt in suite.prompts:
            for t in range(len(prompt.messages)):
                for j in range(n):
                    out.append((suite, prompt, r, t, configs[(j + r + t) % n]))
    return out


def schedule(
    suites: Sequence[Suite], configs: Sequence[BenchConfig], repeats: int
) -> list[tuple[Suite, Prompt, int, int, BenchConfig]]:
    """Every (suite, prompt, repeat, turn index, config) of ``repeats`` rounds, in the
    order they run: round after round (so a prompt's repeats are spread over the whole
    run, and a slow drift of the machine shows in their spread)."""
    return [item for r in range(repeats) for item in schedule_round(suites, configs, r)]


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


#: A token's provenance in a run's timeline: one letter for its kind, one for its source.
KIND_CODES = {"target": "t", "accepted": "a", "correction": "c", "bonus": "b"}


def timeline(gen: Generation) -> dict:
    """When each token of a run was produced, for replaying the run at its own speed:
    ``t`` the decode seconds at the end of each step (the clock starts after the prompt,
    which took ``prompt_seconds``), ``n`` the tokens each step emitted, ``chars`` each
    token's length in the run's text, ``kind`` and ``source`` one letter per token
    (:data:`KIND_CODES`, and each source's own ``code``)."""
    ts, ns, chars, kinds, sources = [], [], [], [], []
    for step in gen.steps:
        if step.tokens:
            ts.append(round(step.stats.decode_seconds, 6))
            ns.append(len(step.tokens))
            for tok in step.tokens:
                chars.append(len(tok.text))
                kinds.append(KIND_CODES.get(tok.kind, "t"))
                sources.append(Source.of(tok.source).code if tok.source else NO_SOURCE_CODE)
        if step.tail and chars:
            chars[-1] += len(step.tail)
    return {"prompt_seconds": round(gen.stats.prompt_seconds, 6), "t": ts, "n": ns, "chars": chars,
            "kind": "".join(kinds), "source": "".join(sources)}


class _Bench:
    """One benchmark's runs, round by round: what the rounds share (the prompts'
    tokens, target alone's answers to replay, the baselines to compare with)."""

    def __init__(self, target: BenchTarget, suites: Sequence[Suite], configs: Sequence[BenchConfig],
                 options: BenchOptions, progress: Progress | None, cancel: Callable[[], bool] | None,
                 on_run: Callable[[dict], None] | None, keep: Callable[[dict, Generation], None] | None) -> None:
        self.target, self.suites, self.configs, self.options = target, suites, configs, options
        self.progress, self.cancel, self.on_run, self.keep = progress, cancel, on_run, keep
        self.sampling = options.sampling()
        per_round = len(schedule_round(suites, configs, 0))
        self.total = per_round * options.max_repeats + (len(configs) if options.warmup else 0)
        self.done = 0
        self.set_history = getattr(target, "set_history", None)
        self.chat_tokens = getattr(target, "chat_tokens", None)
        self.tokens_cache: dict[tuple, tuple[list[int], int]] = {}
        # (suite, task, repeat) -> target alone's answers so far: (prompt tokens, answer tokens, text)
        self.answers: dict[tuple[str, str, int], list[tuple[list[int], list[int], str]]] = {}
        self.runs: list[dict] = []
        self.baselines: dict[tuple[str, str, int], tuple[list[int], Generation]] = {}
        self.pending: dict[tuple[str, str, int], list[tuple[dict, Generation]]] = {}

    def tick(self, what: str) -> None:
        self.done += 1
        if self.progress:
            self.progress(self.done, self.total, what)

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel():
            raise Cancelled("the benchmark was cancelled")

    def tokens(self, suite: Suite, prompt: Prompt, r: int = 0, t: int = 0) -> tuple[list[int], int]:
        """Turn t's prompt tokens (the chat so far) and how many messages were left out."""
        if t == 0:
            key: tuple = (suite.name, prompt.id)
            if key not in self.tokens_cache:
                self.tokens_cache[key] = (self.target.prompt_tokens(prompt.text), 0)
            return self.tokens_cache[key]
        key = (suite.name, prompt.id, r, t)
        if key not in self.tokens_cache:
            earlier = self.answers.get((suite.name, prompt.id, r), [])
            if len(earlier) < t:
                raise SpecDeskError(f"{suite.name}/{prompt.id}: turn {t + 1} has no answer to turn {t} to replay")
            msgs = chat_messages(prompt, t, [a[2] for a in earlier])
            if self.chat_tokens is None:
                raise SpecDeskError("this benchmark target cannot replay a chat; run single prompts")
            self.tokens_cache[key] = self.chat_tokens(msgs, self.options.max_tokens)
        return self.tokens_cache[key]

    def history_for(self, suite: Suite, prompt: Prompt, r: int, t: int) -> list[tuple[list[int], list[int]]]:
        return [(p, a) for p, a, _ in self.answers.get((suite.name, prompt.id, r), [])[:t]]

    def warm_up(self) -> None:
        self.target.warm_up()
        first_suite, first_prompt = self.suites[0], self.suites[0].prompts[0]
        for c in self.configs:
            self.check_cancel()
            self.target.reset()
            if self.set_history is not None:
                self.set_history([])
            gen = c.generation(self.sampling, min(16, self.options.max_tokens), self.options.seed)
            self.target.run(self.tokens(first_suite, first_prompt)[0], gen)
            self.tick(f"warm-up {c.name}")

    def round(self, r: int) -> None:
        """Every prompt (and turn) with every configuration once: repeat ``r``."""
        for suite, prompt, _, t, c in schedule_round(self.suites, self.configs, r):
            self.check_cancel()
            self.one(suite, prompt, r, t, c)

    def one(self, suite: Suite, prompt: Prompt, r: int, t: int, c: BenchConfig) -> None:
        toks, dropped = self.tokens(suite, prompt, r, t)
        self.target.reset()
        if self.set_history is not None:
            self.set_history(self.history_for(suite, prompt, r, t))
        gen = self.target.run(toks, c.generation(self.sampling, self.options.max_tokens, self.options.seed + r))
        pid = turn_id(prompt, t)
        rec = {
            "suite": suite.name, "prompt_id": pid, "task": prompt.id, "turn": t + 1, "turns": len(prompt.messages),
            "repeat": r, "order": len(self.runs), "config": c.name, "prompt_tokens": len(toks),
            "messages_left_out": dropped, "stats": gen.stats.to_dict(), "stop_reason": gen.stop_reason,
            "text": gen.text, "timeline": timeline(gen), "identical": None, "divergence": None,
        }
        self.runs.append(rec)
        if c.baseline and t + 1 < len(prompt.messages):
            self.answers.setdefault((suite.name, prompt.id, r), []).append((list(toks), list(gen.tokens), gen.text))
        if self.options.temperature == 0.0:
            self.check_identity((suite.name, pid, r), c, toks, rec, gen)
        if self.keep is not None:
            self.keep(rec, gen)
        if self.on_run:
            self.on_run(rec)
        self.tick(f"{suite.name}/{pid} #{r + 1} {c.name}")

    def check_identity(self, key: tuple[str, str, int], c: BenchConfig, toks: list[int], rec: dict,
                       gen: Generation) -> None:
        if c.baseline:
            self.baselines[key] = (toks, gen)
            for other_rec, other_gen in self.pending.pop(key, []):
                _compare(self.target, toks, gen, other_rec, other_gen)
        elif key in self.baselines:
            _compare(self.target, self.baselines[key][0], self.baselines[key][1], rec, gen)
        else:
            self.pending.setdefault(key, []).append((rec, gen))

    def result(self, stopping: dict) -> dict:
        o = self.options
        names = [c.name for c in self.configs]
        return {
            "meta": {
                "created": datetime.datetime.now().isoformat(timespec="seconds"),
                "specdesk_version": __version__,
                "machine": machine(),
                **self.target.describe(),
                "settings": {
                    "max_tokens": o.max_tokens, "temperature": o.temperature, "top_k": o.top_k, "top_p": o.top_p,
                    "min_p": o.min_p, "repeats": stopping["repeats"], "seed": o.seed, "warmup": o.warmup,
                    "until_sure": asdict(o.until_sure) if o.until_sure is not None else None,
                    "suites": [s.name for s in self.suites], "configs": names,
                },
            },
            "configs": names,
            "runs": self.runs,
            "summary": summarize(self.runs, names),
            "stopping": stopping,
            "advisor": None,
            "memory": self.target.memory(),
        }


def runnable_configs(target: BenchTarget, configs: Sequence[BenchConfig]) -> list[BenchConfig]:
    """The configurations as they run on ``target``'s pair (a draft of another
    vocabulary drafts ``translated``); SpecDeskError in one line, before any work, for
    one the pair cannot run. Already resolved configurations come back as they are."""
    configs = resolve_configs(list(configs), bool(getattr(target, "translated", False)))
    refused = [(c.name, why) for c in configs if (why := target.refusal(c.proposer))]
    if refused:
        raise SpecDeskError(f"{', '.join(n for n, _ in refused)} cannot run on this pair ({refused[0][1]}): "
                            "load what they draft with, or drop them from --configs")
    return configs


def run_bench(
    target: BenchTarget,
    suites: Sequence[Suite],
    configs: Sequence[BenchConfig],
    options: BenchOptions,
    progress: Progress | None = None,
    cancel: Callable[[], bool] | None = None,
    on_run: Callable[[dict], None] | None = None,
    keep: Callable[[dict, Generation], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict:
    """Warm up, then run repeat after repeat of every prompt with every configuration
    (``options.repeats`` of them, or until sure), and summarize. ``on_run`` sees each
    run's record, ``keep`` also its Generation; ``clock`` times the rounds for the
    time budget."""
    if not configs[0].baseline:
        raise ValueError(f"the first config must be the baseline, {BASELINE}")
    configs = runnable_configs(target, configs)
    bench = _Bench(target, suites, configs, options, progress, cancel, on_run, keep)
    if options.warmup:
        bench.warm_up()
    if options.until_sure is None:
        for r in range(options.repeats):
            bench.round(r)
        stopping = {"mode": "fixed", "repeats": options.repeats, "reason": "repeats"}
    else:
        stopping = _until_sure(bench, options.until_sure, clock)
    return bench.result(stopping)


def _until_sure(bench: _Bench, rule: UntilSure, clock: Callable[[], float]) -> dict:
    """Rounds until every configuration's interval is within the target, or a budget
    is spent; the reason is ``sure``, ``repeats`` or ``time``."""
    start = clock()
    names = [c.name for c in bench.configs]
    r = 0
    while True:
        bench.round(r)
        r += 1
        rows = [row for row in overall(bench.runs, names) if not row.baseline]
        elapsed = clock() - start
        reason = None
        if r >= rule.min_repeats and stats.sure([row.paired for row in rows], rule.half_width):
            reason = "sure"
        elif r >= rule.max_repeats:
            reason = "repeats"
        elif rule.seconds is not None and elapsed + elapsed / r > rule.seconds:
            reason = "time"
        if bench.progress:
            bench.progress(bench.done, bench.total, until_sure_text(r, rule.max_repeats, rows, rule.half_width))
        if reason is not None:
            return {"mode": "until-sure", "repeats": r, "reason": reason, "half_width": rule.half_width,
                    "max_repeats": rule.max_repeats, "seconds_budget": rule.seconds, "seconds": elapsed}


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


def paired_ratios(runs: list[dict], config: str, baseline: str = BASELINE) -> dict[tuple[str, str], list[float]]:
    """(suite, prompt) -> [tps(config) / tps(baseline)] per repeat, paired by round."""
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


def _aggregate(rs: list[dict], ratios: dict[tuple[str, str], list[float]], config: str, baseline: bool = False,
               suite: str | None = None, turn: int | None = None) -> ConfigRow:
    per_prompt_tps: dict[tuple[str, str], list[float]] = {}
    for r in rs:
        per_prompt_tps.setdefault((r["suite"], r["prompt_id"]), []).append(r["stats"]["tokens_per_second"])
    paired = stats.baseline_row(len(rs)) if baseline else stats.paired_speedup(ratios)
    drafted = sum(r["stats"]["drafted"] for r in rs)
    accepted = sum(r["stats"]["accepted"] for r in rs)
    steps = sum(r["stats"]["steps"] for r in rs)
    decode = sum(r["stats"]["decode_seconds"] for r in rs)
    overhead = sum(r["stats"]["overhead_seconds"] for r in rs)
    compared = [r for r in rs if r["identical"] is not None]
    verdicts = [(r.get("divergence") or {}).get("verdict") for r in compared if r["identical"] is False]
    return ConfigRow(
        config, paired,
        prompts=len(per_prompt_tps),
        runs=len(rs),
        median_tps=_median([_median(v) for v in per_prompt_tps.values()]),
        acceptance=accepted / drafted if drafted else None,
        mean_accepted_length=(accepted + steps) / steps if steps else None,
        overhead_share=overhead / decode if decode else None,
        identical=sum(1 for r in compared if r["identical"]),
        near_ties=verdicts.count("near-tie"),
        mismatches=len(verdicts) - verdicts.count("near-tie"),
        compared=len(compared),
        suite=suite,
        turn=turn,
    )


def noise(runs: list[dict], baseline: str = BASELINE) -> dict:
    """The machine's noise floor: how far target alone's tokens/s moved from repeat to
    repeat of the same prompt."""
    tps: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        if r["config"] == baseline:
            tps.setdefault((r["suite"], r["prompt_id"]), []).append(r["stats"]["tokens_per_second"])
    return stats.noise_floor(tps).to_dict()


def overall(runs: list[dict], configs: list[str]) -> list[ConfigRow]:
    """Each configuration's row over every suite."""
    out = []
    for c in configs:
        rs = [r for r in runs if r["config"] == c]
        if rs:
            out.append(_aggregate(rs, paired_ratios(runs, c), c, c == BASELINE))
    return out


def per_suite(runs: list[dict], configs: list[str]) -> list[ConfigRow]:
    """One row per (config, suite)."""
    suites = list(dict.fromkeys(r["suite"] for r in runs))
    out = []
    for c in configs:
        ratios = paired_ratios(runs, c)
        for s in suites:
            rs = [r for r in runs if r["suite"] == s and r["config"] == c]
            if not rs:
                continue
            sub = {k: v for k, v in ratios.items() if k[0] == s}
            out.append(_aggregate(rs, sub, c, c == BASELINE, suite=s))
    return out


def summarize(runs: list[dict], configs: list[str], turns: bool = True) -> dict:
    """The summary of a result, as its JSON holds it (the rows' ``to_dict``)."""
    out = {"per_suite": [r.to_dict() for r in per_suite(runs, configs)],
           "overall": [r.to_dict() for r in overall(runs, configs)], "noise": noise(runs)}
    if turns:
        out["per_turn"] = per_turn(runs, configs)
        out["history"] = history_gain(runs, configs)
    return out


def history_gain(runs: list[dict], configs: list[str]) -> list[dict]:
    """History lookup on the turns that revise an earlier answer (2 and later): each
    ``ngram+history`` configuration against target alone, and against the same n-gram
    configuration without history (paired per run, then the geometric mean)."""
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
            "prompts": mine.prompts,
            "speedup": mine.speedup,
            "speedup_ci": _ci(mine),
            "verdict": mine.verdict,
            "acceptance": mine.acceptance,
            "speedup_without_history": theirs.speedup if theirs else None,
            "acceptance_without_history": theirs.acceptance if theirs else None,
            "speedup_over_without_history": vs.speedup if vs else None,
            "speedup_over_without_history_ci": _ci(vs) if vs else None,
            "verdict_over_without_history": vs.verdict if vs else None,
        })
    return out


def _ci(row: ConfigRow) -> list[float] | None:
    return list(row.ci) if row.ci is not None else None


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
                out.append(_aggregate(rs, sub, c, c == BASELINE, suite=s, turn=t).to_dict())
    return out


def later_turns(runs: list[dict], config: str, baseline: str = BASELINE, first: int = 2) -> ConfigRow | None:
    """``config`` against ``baseline`` (target alone) on turns ``first``.. of the
    multi-turn tasks, paired per run; None when no run is on such a turn."""
    later = {(r["suite"], r["prompt_id"]) for r in runs if r.get("turns", 1) > 1 and r.get("turn", 1) >= first}
    if not later:
        return None
    ratios = {k: v for k, v in paired_ratios(runs, config, baseline).items() if k in later}
    rs = [r for r in runs if r["config"] == config and (r["suite"], r["prompt_id"]) in later]
    if not rs:
        return None
    return _aggregate(rs, ratios, config, config == baseline)
