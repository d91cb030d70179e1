"""Benchmark configurations: ``none,draft:k=2,draft:k=4,draft:auto,ngram,hybrid``.

Each item is ``proposer[:option]...`` with options ``k=N``, ``auto`` (= ``k=auto``)
and ``p_min=X``. Without ``k`` a proposer drafts with ``auto``. Benchmarks use
``p_min=0`` unless told otherwise, so that ``k=4`` means four tokens every step.
``none`` (target alone) is the baseline of every comparison and always runs first.

Two names exist only here:

- ``translated`` is the draft model drafting through translation (a draft with
  another vocabulary, re-tokenized for the target). On such a pair ``draft``
  configurations are named ``translated`` (see :func:`resolve_configs`), and on a
  same-vocabulary pair ``translated`` is refused.
- ``ngram+history`` (or ``ngram:history``) is the n-gram lookup that also looks up
  the earlier turns of the chat, without a draft model; ``hybrid`` always does.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecDeskError
from ..session import PROPOSERS, GenerationConfig
from ..speculative.sampling import SamplingParams

DEFAULT_CONFIGS = "none,draft:k=2,draft:k=4,draft:auto,ngram,hybrid"
#: Proposer names only the benchmark knows, on top of the session's PROPOSERS.
TRANSLATED = "translated"
HISTORY_SUFFIX = "+history"


class ConfigError(SpecDeskError):
    pass


@dataclass(frozen=True)
class BenchConfig:
    proposer: str  # one of the session's PROPOSERS, or "translated"
    k: int | str = "auto"
    p_min: float = 0.0
    history: bool = False  # ngram only: also look up the earlier turns

    @property
    def name(self) -> str:
        if self.proposer == "none":
            return "none"
        p = self.proposer + (HISTORY_SUFFIX if self.history else "")
        s = f"{p}:k={self.k}" if self.k != "auto" else f"{p}:auto"
        if self.p_min:
            s += f":p_min={self.p_min:g}"
        return s

    @property
    def needs_draft(self) -> bool:
        return self.proposer in ("draft", "hybrid", TRANSLATED)

    @property
    def session_proposer(self) -> str:
        """The session's proposer that runs this configuration."""
        return "draft" if self.proposer == TRANSLATED else self.proposer

    def generation(self, sampling: SamplingParams, max_tokens: int, seed: int) -> GenerationConfig:
        return GenerationConfig(
            proposer=self.session_proposer,
            k=self.k if self.proposer != "none" else "auto",
            p_min=self.p_min,
            sampling=sampling,
            seed=seed,
            max_tokens=max_tokens,
            history=self.history,
        )


def parse_config(item: str) -> BenchConfig:
    parts = [p.strip() for p in item.strip().split(":") if p.strip()]
    if not parts:
        raise ConfigError("empty configuration in --configs")
    proposer = parts[0]
    history = proposer.endswith(HISTORY_SUFFIX)
    if history:
        proposer = proposer[: -len(HISTORY_SUFFIX)]
    if proposer not in (*PROPOSERS, TRANSLATED):
        known = ", ".join((*PROPOSERS, TRANSLATED, "ngram" + HISTORY_SUFFIX))
        raise ConfigError(f"unknown config {item!r}: the proposer must be one of {known}")
    k: int | str = "auto"
    p_min = 0.0
    for opt in parts[1:]:
        if opt == "history":
            history = True
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
    if proposer == "none" and (k != "auto" or p_min or history):
        raise ConfigError(f"unknown config {item!r}: none takes no options")
    if history and proposer != "ngram":
        raise ConfigError(
            f"unknown config {item!r}: only ngram takes history (hybrid always looks up the earlier turns)"
        )
    return BenchConfig(proposer, k, p_min, history)


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


def resolve_configs(configs: list[BenchConfig], translated: bool) -> list[BenchConfig]:
    """The configurations as they run on the loaded pair. With a draft of another
    vocabulary (``translated``), ``draft`` runs translated and is named so; with a
    same-vocabulary draft, ``translated`` is refused."""
    if translated:
        out = [BenchConfig(TRANSLATED, c.k, c.p_min) if c.proposer == "draft" else c for c in configs]
        names = [c.name for c in out]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup:
            raise ConfigError(f"config {dup!r} is listed twice in --configs (a draft with another vocabulary "
                              f"drafts translated: draft and translated are the same here)")
        return out
    bad = [c.name for c in configs if c.proposer == TRANSLATED]
    if bad:
        raise ConfigError(f"{', '.join(bad)} need a draft with another vocabulary than the target's "
                          f"(e.g. SmolLM2-135M for Qwen2.5); this draft shares it: use draft instead")
    return list(configs)
