"""The real decode loop and the real ``auto`` on a measured machine's costs
(:mod:`specdesk.speculative.replay`): the profiles in ``specdesk/data/replay`` (an
NVIDIA H200 with a 0.5B draft and with a one-layer draft, a 2-core CPU), or a JSON
file of the same form.

A profile gives, in milliseconds, the target's cost per batch size, the draft's, each
model's cost for a change of batch shape, and the draft's acceptance per token; and,
optionally per model, the one-offs a real device pays: ``first_call_ms`` (a context's
first decode costs that much more), ``first_shape_ms`` (a batch shape's first use),
and ``spike_share`` of the calls costing ``spike_times`` as much (a page fault, a GC
pause, another process). :func:`with_one_offs` adds them to a profile.
:func:`run_replay` runs each configuration on fresh backends for ``answers``
answers in a row (auto keeps what it learnt from one to the next, as a session
does), with or without the warm-up a session makes before anything is timed, and
reports every configuration's speed as a ratio to target alone's and to the best fixed
k's of the same run.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

import numpy as np

from ..errors import SpecDeskError
from ..speculative.controller import Controller, FixedK
from ..speculative.auto import AutoK
from ..speculative.decoder import speculate
from ..speculative.proposers import DraftModelProposer, NoProposer
from ..speculative.replay import ModelCosts, ReplayBackend, ReplayClock, ReplayText
from ..speculative.sampling import SamplingParams
from ..speculative.stats import Stats
from ..speculative.warmup import draft_shapes, target_shapes


@dataclass(frozen=True)
class Profile:
    name: str
    about: str
    target: ModelCosts
    draft: ModelCosts
    acceptance: float


def _costs(d: dict, where: str) -> ModelCosts:
    try:
        batch = {int(n): float(ms) / 1e3 for n, ms in d["batch_ms"].items()}
        return ModelCosts(batch, float(d.get("shape_change_ms", 0.0)) / 1e3,
                          first_call=float(d.get("first_call_ms", 0.0)) / 1e3,
                          first_shape=float(d.get("first_shape_ms", 0.0)) / 1e3,
                          spike_share=float(d.get("spike_share", 0.0)), spike_times=float(d.get("spike_times", 1.0)))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SpecDeskError(f"{where}: needs batch_ms (batch size -> ms, with 1) and shape_change_ms; "
                            f"first_call_ms, first_shape_ms >= 0, spike_share in [0, 1], spike_times >= 1 ({e})") from None


def scaled(profile: Profile, factor: float) -> Profile:
    """``profile`` on a device ``factor`` times slower (every batch and change of shape;
    not the one-offs, which :func:`with_one_offs` sets in milliseconds)."""
    def mul(c: ModelCosts) -> ModelCosts:
        return replace(c, batch={n: s * factor for n, s in c.batch.items()}, shape_change=c.shape_change * factor,
                       prefill_per_token=None if c.prefill_per_token is None else c.prefill_per_token * factor)

    name = profile.name if factor == 1 else f"{profile.name} x{factor:g}"
    return replace(profile, name=name, target=mul(profile.target), draft=mul(profile.draft))


def with_one_offs(profile: Profile, *, first_call_ms: float = 0.0, first_shape_ms: float = 0.0,
                  spike_share: float = 0.0, spike_times: float = 1.0) -> Profile:
    """``profile`` with these one-offs on both models (the name says which)."""
    def add(c: ModelCosts) -> ModelCosts:
        return replace(c, first_call=first_call_ms / 1e3, first_shape=first_shape_ms / 1e3, spike_share=spike_share,
                       spike_times=spike_times)

    what = [f"first call +{first_call_ms:g} ms" if first_call_ms else "",
            f"first shape +{first_shape_ms:g} ms" if first_shape_ms else "",
            f"{spike_share:.0%} of calls {spike_times:g}x" if spike_share and spike_times > 1 else ""]
    label = ", ".join(w for w in what if w)
    return replace(profile, name=f"{profile.name} ({label})" if label else profile.name,
                   target=add(profile.target), draft=add(profile.draft))


def profile_names() -> list[str]:
    return sorted(p.name.removesuffix(".json") for p in resources.files("specdesk.data.replay").iterdir()
                  if p.name.endswith(".json"))


def load_profile(name: str) -> Profile:
    """A built-in profile by name, or a JSON file."""
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
        text = path.read_text(encoding="utf-8")
    elif name in profile_names():
        text = resources.files("specdesk.data.replay").joinpath(f"{name}.json").read_text(encoding="utf-8")
    else:
        raise SpecDeskError(f"unknown replay profile {name!r}: choose one of {', '.join(profile_names())} or a .json file")
    try:
        d = json.loads(text)
        acc = float(d.get("acceptance", 0.9))
        if not 0.0 <= acc <= 1.0:
            raise ValueError("acceptance must be in [0, 1]")
        return Profile(str(d.get("name", name)), str(d.get("about", "")), _costs(d["target"], f"{name}: target"),
                       _costs(d["draft"], f"{name}: draft"), acc)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise SpecDeskError(f"{name}: not a replay profile ({e})") from None


def _controller(k: int | str) -> Controller:
    return AutoK() if k == "auto" else FixedK(int(k))


def run_answers(profile: Profile, k: int | str | None, *, answers: int = 3, tokens: int = 256, real: bool = False,
                seed: int = 0, n_vocab: int = 4096, controller: Controller | None = None,
                warm_up: bool = False) -> list[Stats]:
    """The statistics of each of ``answers`` answers (k None: target alone), on fresh
    backends, one controller throughout; with ``warm_up``, the contexts are warmed
    first with the shapes a session warms them with (the draft's only where it drafts)."""
    clock = ReplayClock(real=real)
    text = ReplayText(n_vocab, seed)
    target = ReplayBackend(text, profile.target, clock, seed=seed + 1000)  # its seed draws only its spikes
    draft = ReplayBackend(text, profile.draft, clock, acceptance=profile.acceptance, seed=seed + 1)
    proposer = NoProposer() if k is None else DraftModelProposer(draft, n_vocab, p_min=0.0)
    ctl = controller or _controller(k if k is not None else 1)
    if warm_up:
        target.warm_up(target_shapes(k, device=True))
        if k is not None:
            draft.warm_up(draft_shapes())
    rng = np.random.default_rng(seed)
    prompt_rng = np.random.default_rng((seed, 99))
    out = []
    seq: list[int] = []
    for _ in range(answers):
        seq = seq + [int(t) for t in prompt_rng.integers(1, n_vocab, 48)]
        last = None
        for step in speculate(target, proposer, ctl, seq, params=SamplingParams(), max_tokens=tokens, rng=rng,
                              clock=clock):
            seq.extend(t.token for t in step.tokens)
            last = step
        out.append(last.stats)
    return out


def run_config(profile: Profile, k: int | str | None, **kw) -> list[float]:
    """Tokens per second of each answer of :func:`run_answers`."""
    return [st.tokens_per_second or 0.0 for st in run_answers(profile, k, **kw)]


@dataclass
class ReplayResult:
    profile: Profile
    speeds: dict[str, list[float]]  # config -> tok/s per round

    def ratio(self, config: str, to: str = "none") -> list[float]:
        return [a / b for a, b in zip(self.speeds[config], self.speeds[to]) if b > 0]

    @property
    def best_fixed(self) -> str:
        fixed = [c for c in self.speeds if c.startswith("k=")]
        return max(fixed, key=lambda c: statistics.median(self.speeds[c]))

    def auto_vs_best(self) -> list[float]:
        return self.ratio("auto", self.best_fixed)


def run_replay(profile: Profile, ks: list[int], *, rounds: int = 3, answers: int = 3, tokens: int = 256,
               real: bool = False, n_vocab: int = 4096, warm_up: bool = False) -> ReplayResult:
    """Target alone, every fixed k and auto, interleaved round by round (a round's
    configurations all run on the same text)."""
    names = ["none"] + [f"k={k}" for k in ks] + ["auto"]
    speeds: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            k = None if name == "none" else ("auto" if name == "auto" else int(name[2:]))
            s = run_config(profile, k, answers=answers, tokens=tokens, real=real, seed=r, n_vocab=n_vocab,
                           warm_up=warm_up)
            speeds[name].append(statistics.mean(s))
    return ReplayResult(profile, speeds)


def report(res: ReplayResult) -> str:
    def med(xs: list[float]) -> str:
        if not xs:
            return "-"
        return f"{statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"

    lines = [f"{res.profile.name}: acceptance {res.profile.acceptance:g} a token; speed against target alone "
             "(median [min-max] over the rounds)"]
    best = res.best_fixed
    for name in res.speeds:
        if name == "none":
            continue
        mark = "  (the best fixed k)" if name == best else ""
        lines.append(f"  {name:<6} {med(res.ratio(name))}{mark}")
    a = res.auto_vs_best()
    lines.append(f"  auto against the best fixed k ({best}): {med(a)}")
    return "\n".join(lines)


def geometric_mean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")
