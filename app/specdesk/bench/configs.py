"""Benchmark configurations: ``none,draft:k=2,draft:k=4,draft:auto,ngram,hybrid``.

Each item is ``proposer[:option]...`` with options ``k=N``, ``auto`` (= ``k=auto``)
and ``p_min=X``. Without ``k`` a proposer drafts with ``auto``. Benchmarks use
``p_min=0`` unless told otherwise, so that ``k=4`` means four tokens every step.
``none`` (target alone) is the baseline of every comparison and always runs first.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecDeskError
from ..session import PROPOSERS, GenerationConfig
from ..speculative.sampling import SamplingParams

DEFAULT_CONFIGS = "none,draft:k=2,draft:k=4,draft:auto,ngram,hybrid"


class ConfigError(SpecDeskError):
    pass


@dataclass(frozen=True)
class BenchConfig:
    proposer: str
    k: int | str = "auto"
    p_min: float = 0.0

    @property
    def name(self) -> str:
        if self.proposer == "none":
            return "none"
        s = f"{self.proposer}:k={self.k}" if self.k != "auto" else f"{self.proposer}:auto"
        if self.p_min:
            s += f":p_min={self.p_min:g}"
        return s

    @property
    def needs_draft(self) -> bool:
        return self.proposer in ("draft", "hybrid")

    def generation(self, sampling: SamplingParams, max_tokens: int, seed: int) -> GenerationConfig:
        return GenerationConfig(
            proposer=self.proposer,
            k=self.k if self.proposer != "none" else "auto",
            p_min=self.p_min,
            sampling=sampling,
            seed=seed,
            max_tokens=max_tokens,
        )


def parse_config(item: str) -> BenchConfig:
    parts = [p.strip() for p in item.strip().split(":") if p.strip()]
    if not parts:
        raise ConfigError("empty configuration in --configs")
    proposer = parts[0]
    if proposer not in PROPOSERS:
        raise ConfigError(f"unknown config {item!r}: the proposer must be one of {', '.join(PROPOSERS)}")
    k: int | str = "auto"
    p_min = 0.0
    for opt in parts[1:]:
        if opt == "auto":
            k = "auto"
        elif opt.startswith("k="):
            v = opt[2:]
            if v == "auto":
                k = "auto"
            else:
                try:
                    k = int(v)
                except ValueError:
                    raise ConfigError(f"unknown config {item!r}: k must be a positive integer or auto") from None
                if k <= 0:
                    raise ConfigError(f"unknown config {item!r}: k must be a positive integer or auto")
        elif opt.startswith("p_min=") or opt.startswith("p-min="):
            try:
                p_min = float(opt.split("=", 1)[1])
            except ValueError:
                raise ConfigError(f"unknown config {item!r}: p_min must be a number in [0, 1)") from None
            if not 0.0 <= p_min < 1.0:
                raise ConfigError(f"unknown config {item!r}: p_min must be in [0, 1)")
        else:
            raise ConfigError(f"unknown config {item!r}: options are k=N, auto and p_min=X")
    if proposer == "none" and (k != "auto" or p_min):
        raise ConfigError(f"unknown config {item!r}: none takes no options")
    return BenchConfig(proposer, k, p_min)


def parse_configs(spec: str) -> list[BenchConfig]:
    items = [x for x in spec.split(",") if x.strip()]
    if not items:
        raise ConfigError("--configs is empty")
    configs = [parse_config(x) for x in items]
    names = [c.name for c in configs]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise ConfigError(f"config {dup!r} is listed twice in --configs")
    # the baseline first, always
    configs = [c for c in configs if c.proposer == "none"] + [c for c in configs if c.proposer != "none"]
    if configs[0].proposer != "none":
        configs.insert(0, BenchConfig("none"))
    return configs
