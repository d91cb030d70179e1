"""Target alone against speculation on the same prompt, each from an empty context."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

from ..errors import Cancelled
from ..speculative.divergence import Divergence, explain
from .config import GenerationConfig
from .core import Generation, Session


@dataclass
class Comparison:
    prompt_tokens: int
    baseline: Generation
    speculative: Generation
    divergence: Divergence | None  # only at temperature 0, when the outputs differ
    greedy: bool
    baseline_memory: dict
    speculative_memory: dict

    @property
    def speedup(self) -> float | None:
        bt, st = self.baseline.stats.tokens_per_second, self.speculative.stats.tokens_per_second
        return (st / bt) if bt and st else None

    @property
    def identical(self) -> bool | None:
        """At T=0, whether both runs wrote the same tokens; None at T>0."""
        return self.divergence is None if self.greedy else None

    def to_dict(self) -> dict:
        out = {
            "prompt_tokens": self.prompt_tokens,
            "baseline": {**self.baseline.to_dict(), "memory": self.baseline_memory},
            "speculative": {**self.speculative.to_dict(), "memory": self.speculative_memory},
            "speedup": self.speedup,
        }
        if self.greedy:
            out["identical"] = self.identical
            if self.divergence is not None:
                out["divergence"] = self.divergence.to_dict()
        return out


def compare(session: Session, prompt: Sequence[int], config: GenerationConfig,
            cancel: Callable[[], bool] | None = None) -> Comparison:
    """Run target alone, then ``config``, on ``prompt``; at T=0 explain any divergence."""
    prompt = list(prompt)
    with session.lease():
        session.check_fits(prompt, config.max_tokens)
        session.warm_up()
        session.reset()
        base = session.run(prompt, replace(config, proposer="none"), cancel)
        base_mem = session.memory(("target",)).to_dict()
        if cancel is not None and cancel():
            raise Cancelled("the comparison was stopped")
        session.reset()
        spec = session.run(prompt, config, cancel)
        if cancel is not None and cancel():
            raise Cancelled("the comparison was stopped")
        spec_mem = session.memory().to_dict()
        greedy = config.sampling.greedy
        div = explain(session.target.ctx, prompt, base.steps, spec.steps) if greedy else None
    return Comparison(len(prompt), base, spec, div, greedy, base_mem, spec_mem)
