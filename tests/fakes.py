"""A scripted fake backend: a tiny deterministic "language model" over a small
vocabulary, implementing the same protocol as the llama.cpp contexts.

Logits at a position are a fixed function of the two previous tokens, so the
exact distribution of any continuation can be computed by hand in tests.

Costs can be scripted too: give the backends one FakeClock and a cost per eval call
of n tokens (a verify batch on the target; a draft step, or a prefill/catch-up of n
tokens, on the draft), pass the clock to ``speculate``, and a run replays a machine's
costs in simulated seconds, deterministically and without sleeping. Two costs the
timed calls do not show can be scripted as well: ``rollback_cost`` (per drafted token: the target's
rollback after a batch of b > 1 tokens takes b - 1 times it, outside the verify call's timer) and
``switch_cost`` (an eval call right after the other model's: the weights evicted from
the caches in between).

:class:`ScriptedModel` is a target whose greedy answer is fixed in advance (an edit of
its prompt, say), for n-gram lookups on text that repeats.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from specdesk.errors import Cancelled
from specdesk.speculative.backend import common_prefix_length
from specdesk.speculative.shapes import ShapeTimer
from specdesk.speculative.sampling import warp


class FakeModel:
    def __init__(self, n_vocab: int = 8, seed: int = 0, scale: float = 2.0, base: FakeModel | None = None, noise: float = 0.0):
        rng = np.random.default_rng(seed)
        if base is None:
            self.table = rng.normal(0.0, scale, size=(n_vocab, n_vocab, n_vocab)).astype(np.float32)
        else:
            # A "draft" model: the base model's logits plus noise (partial agreement).
            self.table = (base.table + rng.normal(0.0, noise, size=base.table.shape)).astype(np.float32)
        self.n_vocab = self.table.shape[-1]

    def logits(self, history: Sequence[int]) -> np.ndarray:
        a = history[-2] if len(history) >= 2 else 0
        b = history[-1] if len(history) >= 1 else 0
        return self.table[a, b]


class PositionalModel:
    """Logits that depend on the two previous tokens and on the position (modulo
    ``period``), so that a greedy answer does not fall into a short cycle: a draft of
    it (``base`` plus noise) agrees at a steady rate, as on real text, instead of
    always (or never) once the answer repeats itself."""

    def __init__(self, n_vocab: int = 32, seed: int = 0, scale: float = 2.0, period: int = 97,
                 base: PositionalModel | None = None, noise: float = 0.0) -> None:
        rng = np.random.default_rng(seed)
        if base is None:
            self.table = rng.normal(0.0, scale, size=(n_vocab, n_vocab, period, n_vocab)).astype(np.float32)
        else:
            self.table = (base.table + rng.normal(0.0, noise, size=base.table.shape)).astype(np.float32)
        self.n_vocab = self.table.shape[-1]
        self.period = self.table.shape[2]

    def logits(self, history: Sequence[int]) -> np.ndarray:
        a = history[-2] if len(history) >= 2 else 0
        b = history[-1] if len(history) >= 1 else 0
        return self.table[a, b, len(history) % self.period]


class ScriptedModel:
    """Logits that make ``answer`` the greedy continuation of ``prompt``: the token at
    answer position i leads by ``margin`` (any other history: the first token leads)."""

    def __init__(self, prompt: Sequence[int], answer: Sequence[int], n_vocab: int, margin: float = 4.0) -> None:
        self.n_prompt = len(prompt)
        self.answer = list(answer)
        self.n_vocab = n_vocab
        self.margin = margin

    def logits(self, history: Sequence[int]) -> np.ndarray:
        row = np.zeros(self.n_vocab, dtype=np.float32)
        i = len(history) - self.n_prompt
        row[self.answer[i] if 0 <= i < len(self.answer) else 0] = self.margin
        return row


def edited(text: Sequence[int], every: int, n_vocab: int, seed: int = 0) -> list[int]:
    """``text`` with a few tokens replaced every ``every`` tokens (an editing task's
    answer: mostly a copy of its prompt)."""
    rng = np.random.default_rng(seed)
    out = list(text)
    for start in range(every // 2, len(out), every):
        for j in range(start, min(start + 3, len(out))):
            out[j] = int(rng.integers(n_vocab))
    return out


class FakeClock:
    """Simulated seconds: advanced only by scripted costs."""

    def __init__(self) -> None:
        self.t = 0.0
        self.last: object = None  # the backend that evaluated last (for switch costs)

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def linear_cost(first: float, per_extra_token: float) -> Callable[[int], float]:
    """Seconds for an eval call of n tokens: ``first`` plus ``per_extra_token`` for each
    token after the first (a verify batch, a prefill)."""
    return lambda n: first + per_extra_token * (n - 1)


def table_cost(table: Mapping[int, float], per_extra_token: float) -> Callable[[int], float]:
    """Measured points (batch size -> seconds), linear in between and beyond."""
    pts = sorted(table.items())

    def cost(n: int) -> float:
        if n in table:
            return table[n]
        below = [(b, v) for b, v in pts if b < n]
        above = [(b, v) for b, v in pts if b > n]
        if below and above:
            (b0, v0), (b1, v1) = below[-1], above[0]
            return v0 + (v1 - v0) * (n - b0) / (b1 - b0)
        b, v = (below or above)[-1 if below else 0]
        return v + per_extra_token * (n - b)

    return cost


class FakeBackend:
    def __init__(
        self,
        model: FakeModel,
        n_ctx: int = 4096,
        eog: int | None = None,
        step_cost: float = 0.0,
        clock: FakeClock | None = None,
        cost: Callable[[int], float] | None = None,
        rollback_cost: float = 0.0,
        switch_cost: float = 0.0,
        setup_cost: float = 0.0,
        report_setup: bool = True,
    ):
        self.model = model
        self._n_ctx = n_ctx
        self.eog = eog
        self.history: list[int] = []
        self.native_seconds = 0.0
        self.logits_bytes_copied = 0  # bytes of rows returned as copies (calls without fn)
        self.last_prefill_evaluated = 0
        self.evaluated = 0  # every token ever evaluated
        self.batches: list[int] = []  # size of every eval call
        self.step_cost = step_cost  # fake seconds per eval call, added to native_seconds
        self.clock = clock  # scripted costs: each eval call of n tokens advances it by cost(n)
        self.cost = cost
        self.rollback_cost = rollback_cost  # seconds per token beyond the first a rollback after a batch takes
        self.switch_cost = switch_cost  # seconds more for an eval call after the other model's
        # seconds more for the first eval of each batch size (llama.cpp sets a size up on
        # its first decode), said in last_batch_first unless report_setup is off (a
        # backend that pays the one-off without saying so)
        self.setup_cost = setup_cost
        self.report_setup = report_setup
        self._sizes: set[int] = set()
        self.last_batch_first = False
        self._last_batch = 0
        self.last_shape_changed = False
        self.last_reshape_seconds = 0.0
        self._timer = ShapeTimer()

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def n_past(self) -> int:
        return len(self.history)

    def eval(self, tokens: Sequence[int], all_rows: bool = True, fn=None):
        """The rows (all, or the last) as a copy, or ``fn`` of a read-only view of them."""
        if not tokens:
            raise ValueError("empty batch")
        if len(self.history) + len(tokens) > self._n_ctx:
            raise RuntimeError("context overflow")
        rows = []
        for t in tokens:
            self.history.append(int(t))
            rows.append(self.model.logits(self.history))
        self.evaluated += len(tokens)
        self.batches.append(len(tokens))
        self.native_seconds += self.step_cost
        self._last_batch = len(tokens)
        if self.clock is not None and self.cost is not None:
            seconds = self.cost(len(tokens))
            if self.switch_cost and self.clock.last is not None and self.clock.last is not self:
                seconds += self.switch_cost
            first = self.setup_cost > 0 and len(tokens) not in self._sizes
            if first:
                self._sizes.add(len(tokens))
                seconds += self.setup_cost
            self.last_batch_first = first and self.report_setup
            self.clock.last = self
            self.clock.advance(seconds)
            self.native_seconds += seconds
            self._shape_timed((len(tokens), len(tokens) if all_rows else 1), seconds)
        out = np.stack(rows)
        out = out if all_rows else out[-1:]
        if fn is not None:
            out.flags.writeable = False  # as llama.cpp's buffer: read where it lies
            return fn(out)
        self.logits_bytes_copied += out.nbytes
        return out

    @property
    def reshape_cost(self) -> float:
        return self._timer.cost if self.report_setup else float("nan")

    @property
    def shape_changes(self) -> int:
        return self._timer.changes  # none recorded where the set-up is silent

    def _shape_timed(self, shape, seconds: float) -> None:
        """As the engine learns what its changes of batch shape cost (a scripted
        backend whose set-up is silent, ``report_setup`` off, hides them too)."""
        if not self.report_setup:
            return
        self.last_shape_changed, self.last_reshape_seconds = self._timer.record(shape, seconds)

    def prefill(self, tokens: Sequence[int], logits: bool = True, cancel=None, fn=None):
        if cancel is not None and cancel():
            raise Cancelled("stopped while reading the prompt")
        tokens = list(tokens)
        keep = common_prefix_length(self.history, tokens)
        if logits and keep == len(tokens) and keep > 0:
            keep -= 1
        self.rollback(keep)
        rest = tokens[keep:]
        self.last_prefill_evaluated = len(rest)
        if not rest:
            return None
        if not logits:
            self.eval(rest, all_rows=False, fn=lambda rows: None)  # no row wanted: none copied
            return None
        return self.eval(rest, all_rows=False, fn=fn) if fn is not None else self.eval(rest, all_rows=False)[-1]

    def rollback(self, n_past: int) -> None:
        if n_past < 0 or n_past > len(self.history):
            raise ValueError(f"cannot roll back to {n_past} with {len(self.history)} tokens")
        del self.history[n_past:]
        if self.rollback_cost and self._last_batch > 1 and self.clock is not None:
            self.clock.advance(self.rollback_cost * (self._last_batch - 1))
        self._last_batch = 0

    def is_eog(self, token: int) -> bool:
        return self.eog is not None and token == self.eog

    def token_bytes(self, token: int) -> bytes:
        return f"<{token}>".encode()


def exact_joint(model, params, prompt, n):
    """Exact probability of every n-token continuation under target-alone sampling."""
    v = model.n_vocab
    out = {}
    for combo in itertools.product(range(v), repeat=n):
        hist = list(prompt)
        pr = 1.0
        for tok in combo:
            pr *= warp(model.logits(hist), params)[tok]
            if pr == 0:
                break
            hist.append(tok)
        if pr > 0:
            out[combo] = pr
    return out


def pooled_chi_square(counts: dict, exact: dict, runs: int) -> tuple[float, float, int, float]:
    """Pearson's chi-square of ``counts`` (outcome -> draws of ``runs``) against the
    ``exact`` probabilities: one cell per outcome expected at least 5 times, the rest
    pooled. Returns (chi2, the Wilson-Hilferty 99.9% critical value, df, total variation)."""
    obs, exp = [], []
    po = pe = 0.0
    for c, p in exact.items():
        if p * runs >= 5:
            obs.append(counts[c])
            exp.append(p * runs)
        else:
            po += counts[c]
            pe += p * runs
    if pe > 0:
        obs.append(po)
        exp.append(pe)
    obs, exp = np.array(obs), np.array(exp)
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    df = len(obs) - 1
    crit = df * (1 - 2 / (9 * df) + 3.09 * np.sqrt(2 / (9 * df))) ** 3
    tv = 0.5 * float(np.abs(obs / runs - exp / runs).sum())
    return chi2, float(crit), df, tv


def _refusal(target, proposer: str) -> str | None:
    """A fake pair's answer to "can this configuration run?": what needs a draft file
    runs where it has one (``has_draft``), what needs nothing runs anywhere."""
    from specdesk.session.text import source_missing_text
    from specdesk.speculative.proposers import registry

    need = registry.kind(proposer).needs
    if need is None or (need.in_draft_file and target.has_draft):
        return None
    return source_missing_text(proposer, need.name, need.in_draft_file, registry.WITHOUT_DRAFT)


class FakePairTarget:
    """The parts of a benchmark target (``bench.runner``'s protocol) that every fake pair
    on two fake backends shares: a subclass sets ``self.t`` and ``self.d`` and writes ``run``."""

    has_draft = True

    def reset(self) -> None:
        self.t.rollback(0)
        self.d.rollback(0)

    def warm_up(self) -> None:
        pass

    def refusal(self, proposer: str) -> str | None:
        return _refusal(self, proposer)

    def explain(self, prompt, base, other):
        return {"verdict": "mismatch"}

    def describe(self) -> dict:
        return {"target": "fake-target", "draft": "fake-draft"}

    def memory(self) -> dict:
        return {"target_bytes": 100, "draft_bytes": 40, "extra_ram_bytes": 40, "extra_vram_bytes": 0}


class NoisyBenchTarget:
    """A benchmark target (the runner's BenchTarget) over fake backends whose runs cost
    scripted seconds on a shared FakeClock, with a shared machine's noise: each run
    has its own load (lognormal, ``run_noise``), each eval call its own jitter
    (``call_noise``), and now and then (``burst``) another process slows a whole run
    down by ``burst_factor``. Seeded: a trial replays exactly.

    ``same_as_none`` names configurations that run target alone's computation under
    their own name (a proposer that cannot draft), ``speed`` scripts a configuration
    whose every eval call is that many times faster (a real effect)."""

    has_draft = False

    def __init__(self, seed: int, step_seconds: float = 0.02, run_noise: float = 0.04, call_noise: float = 0.05,
                 burst: float = 0.05, burst_factor: float = 1.3, same_as_none: Sequence[str] = (),
                 speed: Mapping[str, float] | None = None) -> None:
        from specdesk.speculative.proposers import NoProposer

        self._none = NoProposer
        self.rng = np.random.default_rng(seed)
        self.clock = FakeClock()
        self.step_seconds, self.run_noise, self.call_noise = step_seconds, run_noise, call_noise
        self.burst, self.burst_factor = burst, burst_factor
        self.same_as_none = set(same_as_none)
        self.speed = dict(speed or {})
        self._factor = 1.0
        self.t = FakeBackend(FakeModel(n_vocab=12, seed=0), clock=self.clock, cost=self._cost)
        self.runs = 0

    def _cost(self, n: int) -> float:
        jitter = float(np.exp(self.rng.normal(0.0, self.call_noise)))
        return self.step_seconds * (1 + 0.9 * (n - 1)) * self._factor * jitter

    def prompt_tokens(self, text: str) -> list[int]:
        return [1 + (ord(ch) % 11) for ch in text][:20]

    def run(self, prompt, config):
        from specdesk.session import Generation
        from specdesk.speculative.controller import FixedK
        from specdesk.speculative.decoder import speculate
        from specdesk.speculative.proposers import NgramProposer

        name = config.describe() if hasattr(config, "describe") else str(config)
        self.runs += 1
        load = float(np.exp(self.rng.normal(0.0, self.run_noise)))
        if self.rng.random() < self.burst:
            load *= self.burst_factor
        self._factor = load / self.speed.get(name, 1.0)
        plain = config.proposer == "none" or name in self.same_as_none
        prop = self._none() if plain else NgramProposer()
        ctl = FixedK(2 if config.k == "auto" else int(config.k))
        steps = list(speculate(self.t, prop, ctl, prompt, params=config.sampling, max_tokens=config.max_tokens,
                               rng=np.random.default_rng(config.seed), clock=self.clock))
        return Generation(steps=steps, config=config, prompt=prompt)

    def reset(self) -> None:
        self.t.rollback(0)

    def warm_up(self) -> None:
        pass

    def refusal(self, proposer: str) -> str | None:
        return _refusal(self, proposer)

    def explain(self, prompt, base, other):
        return {"verdict": "mismatch"}

    def describe(self) -> dict:
        return {"target": "fake-target", "draft": None}

    def memory(self) -> dict:
        return {"target_bytes": 100, "draft_bytes": 0, "extra_ram_bytes": 0, "extra_vram_bytes": 0}


class _Role:
    """A loaded model as a Session holds one: the context (a FakeBackend), what the
    session asks of the model, its spec."""

    def __init__(self, ctx: FakeBackend, name: str, nbytes: int) -> None:
        from pathlib import Path
        from types import SimpleNamespace

        self.ctx = ctx
        ctx.threads = 2
        self.model = SimpleNamespace(n_vocab=ctx.n_vocab, kv_bytes_per_token=lambda: 28 * 1024.0)
        self.spec = SimpleNamespace(path=Path(f"/nonexistent/{name}.gguf"), rpc=(), n_gpu_layers=0, n_ctx=ctx.n_ctx)
        self.nbytes = nbytes
        self.name = self.spec.path.name

    def memory(self):
        from specdesk.system.memory import ModelMemory

        return ModelMemory(role="draft", path=str(self.spec.path), weights_bytes=self.nbytes, kv_bytes=0,
                           n_ctx=self.ctx.n_ctx, n_gpu_layers=0)

    def close(self) -> None:
        pass


class FakeSession:
    """A real :class:`specdesk.session.core.Session` over two fake backends whose eval
    calls cost scripted seconds on one FakeClock (``profile``: seconds per call of n
    tokens, for the target and for the draft, as in test_controller_machines), with a
    shared machine's noise (each run's load is lognormal, ``run_noise``) and the costs
    no isolated call shows (``rollback_cost``, ``switch_cost``, see FakeBackend). Its
    runs go through the real decode loop on the scripted clock; prompts are tokens of
    their text. Build it with :func:`fake_session`."""


def fake_session(profile, *, noise: float = 0.3, run_noise: float = 0.0, rollback_cost: float = 0.0,
                 switch_cost: float = 0.0, seed: int = 0, n_vocab: int = 16, draft: bool = True):
    from specdesk.session import Generation
    from specdesk.session.core import Session
    from specdesk.speculative.decoder import speculate

    clock = FakeClock()
    load = [1.0]
    tm = PositionalModel(n_vocab=n_vocab, seed=0)
    t = FakeBackend(tm, clock=clock, cost=lambda n: load[0] * profile[0](n), rollback_cost=rollback_cost,
                    switch_cost=switch_cost)
    d = None
    if draft:
        d = FakeBackend(PositionalModel(base=tm, seed=1, noise=noise), clock=clock, cost=lambda n: load[0] * profile[1](n),
                        switch_cost=switch_cost)
    rng = np.random.default_rng(seed)

    class _FakeSession(Session, FakeSession):
        def chat_prompt(self, messages, cancel=None):
            text = "\n".join(m["content"] for m in messages)
            return [1 + (ord(ch) * 7 + i) % (n_vocab - 1) for i, ch in enumerate(text)][-40:]

        def warm_up(self, n: int = 8) -> None:
            pass

        def memory(self, roles=("target", "draft")):
            from types import SimpleNamespace

            roles_ = {"target": self.target, "draft": self.draft}

            def model(role):
                lm = roles_.get(role)
                return None if lm is None else SimpleNamespace(total_bytes=lm.nbytes, n_gpu_layers=0)

            return SimpleNamespace(model=model, rss_bytes=0)

        def run(self, prompt, config, cancel=None):
            load[0] = float(np.exp(rng.normal(0.0, run_noise))) if run_noise else 1.0
            self.check_fits(prompt, config.max_tokens)
            steps = list(speculate(self.target.ctx, self.make_proposer(config), self.make_controller(config), list(prompt),
                                   params=config.sampling, max_tokens=config.max_tokens,
                                   rng=np.random.default_rng(config.seed), cancel=cancel, clock=clock))
            return Generation(steps=steps, config=config, prompt=list(prompt))

    s = _FakeSession(_Role(t, "target", 1 << 30), _Role(d, "draft", 400 << 20) if d is not None else None)
    s.clock = clock
    return s
