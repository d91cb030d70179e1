"""Benchmark configurations: ``none,draft:k=2,draft:k=4,draft:auto,ngram,hybrid``.

Each item is ``proposer[:option]...`` with options ``k=N``, ``auto`` (= ``k=auto``)
and ``p_min=X``; the proposer is any name of the proposer registry
(:mod:`specdesk.speculative.proposers.registry`), ``ngram:history`` being another
spelling of ``ngram+history``. Without ``k`` a proposer drafts with ``auto``.
Benchmarks use ``p_min=0`` unless told otherwise, so that ``k=4`` means four tokens
every step. ``none`` (target alone) is the baseline of every comparison and always
runs first. On a pair of two vocabularies ``draft`` configurations run (and are
named) ``translated`` (see :func:`resolve_configs`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecDeskError
from ..session import GenerationConfig, translated_refusal
from ..speculative.proposers import registry
from ..speculative.proposers.base import HISTORY
from ..speculative.sampling import SamplingParams

#: ``none,draft:k=2,draft:k=4,draft:auto,ngram,hybrid``: the registry's bench presets
DEFAULT_CONFIGS = ",".join(registry.BENCH_DEFAULT)


#: A kind and its spelling with ``:history``: ``ngram:history`` is ``ngram+history``.
_WITH_HISTORY = {k.name: h for k in registry.KINDS if (h := registry.with_history(k.name)) is not None}


class ConfigError(SpecDeskError):
    pass


@dataclass(frozen=True)
class BenchConfig:
    proposer: str  # a name of the proposer registry
    k: int | str = "auto"
    p_min: float = 0.0

    @property
    def name(self) -> str:
        if self.baseline:
            return self.proposer
        s = f"{self.proposer}:k={self.k}" if self.k != "auto" else f"{self.proposer}:auto"
        if self.p_min:
            s += f":p_min={self.p_min:g}"
        return s

    @property
    def needs_draft(self) -> bool:
        return registry.kind(self.proposer).needs_draft

    @property
    def drafts_with_target(self) -> bool:
        """It drafts with a source of the target's own file (its MTP heads)."""
        need = registry.kind(self.proposer).needs
        return need is not None and not need.in_draft_file

    @property
    def baseline(self) -> bool:
        """Target alone: the first configuration of every benchmark."""
        return registry.kind(self.proposer).baseline

    def generation(self, sampling: SamplingParams, max_tokens: int, seed: int) -> GenerationConfig:
        return GenerationConfig(
            proposer=self.proposer,
            k="auto" if self.baseline else self.k,
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
    if proposer.endswith("+history") and proposer not in registry.REGISTRY:
        raise ConfigError(_history_refusal(item))
    if proposer not in registry.REGISTRY:
        raise ConfigError(f"unknown config {item!r}: the proposer must be one of {', '.join(registry.NAMES)}")
    k: int | str = "auto"
    p_min = 0.0
    seen: dict[str, str] = {}  # option -> as written: one given twice (k=2:k=3) would keep the last silently
    for opt in parts[1:]:
        key = "k" if opt == "auto" or opt.startswith("k=") else ("p_min" if opt.startswith(("p_min=", "p-min=")) else opt)
        if key in seen:
            raise ConfigError(f"config {item!r} gives {key} twice ({seen[key]} and {opt}): keep one")
        seen[key] = opt
        if opt == HISTORY:  # ngram:history, the kind that also looks up earlier turns
            if proposer in _WITH_HISTORY:
                proposer = _WITH_HISTORY[proposer]
            elif proposer not in _WITH_HISTORY.values():
                raise ConfigError(_history_refusal(item))
        elif opt == "auto":
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
            raise ConfigError(f"unknown config {item!r}: options are k=N, auto, p_min=X and history (ngram)")
    if registry.kind(proposer).baseline and (k != "auto" or p_min):
        raise ConfigError(f"unknown config {item!r}: {proposer} takes no options")
    return BenchConfig(proposer, k, p_min)


def _history_refusal(item: str) -> str:
    takes = list(_WITH_HISTORY)
    always = [k.name for k in registry.KINDS if k.looks_up_history and k.needs_draft]
    return (f"unknown config {item!r}: only {' and '.join(takes)} takes history "
            f"({' and '.join(always)} always looks up the earlier turns)")


def split_name(config: str) -> tuple[str, str]:
    """A configuration's name taken apart: ``draft:k=2`` is ("draft", "k=2"), ``none``
    is ("none", ""). The one place a name (as :attr:`BenchConfig.name` writes it, in
    results and reports) is read back."""
    proposer, _, options = config.partition(":")
    return proposer, options


def proposer_of(config: str) -> str:
    """The proposer of a configuration's name: ``draft:k=2`` -> ``draft``."""
    return split_name(config)[0]


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
    configs = [c for c in configs if c.baseline] + [c for c in configs if not c.baseline]
    if not configs[0].baseline:
        configs.insert(0, BenchConfig(registry.BASELINE))
    return configs


def resolve_configs(configs: list[BenchConfig], translated: bool) -> list[BenchConfig]:
    """The configurations as they run on the loaded pair (the registry's resolve):
    with a draft of another vocabulary, ``draft`` runs translated and is named so;
    with a same-vocabulary draft, ``translated`` is refused."""
    out, bad = [], []
    for c in configs:
        try:
            out.append(BenchConfig(registry.resolve(c.proposer, translated), c.k, c.p_min))
        except registry.PairMismatch:
            bad.append(c.name)
    if bad:
        raise ConfigError(translated_refusal(", ".join(bad)))
    names = [c.name for c in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise ConfigError(f"config {dup!r} is listed twice in --configs (a draft with another vocabulary "
                          f"drafts translated: draft and translated are the same here)")
    return out
