"""Generation statistics: raw counters; every rate is derived when read."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .proposers.base import Source


def _grow(xs: list[int], n: int) -> None:
    if len(xs) < n:
        xs.extend([0] * (n - len(xs)))


@dataclass
class Stats:
    # Draft counters, in total and per draft position (index 0 = position 1).
    drafted: int = 0
    accepted: int = 0
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    # Verify passes (every pass emits exactly one target token: correction or bonus).
    steps: int = 0
    # Steps that carried at least one draft token.
    draft_steps: int = 0
    # Steps whose draft came from the draft model (not a lookup), by length:
    # index k-1 counts the steps where the model drafted k tokens. With hybrid
    # drafting only these cost draft-model time.
    model_draft_lengths: list[int] = field(default_factory=list)
    generated: int = 0
    # Prompt: its length, and how many of its tokens the target actually evaluated
    # (fewer when the prefix was reused from the previous turn).
    prompt_tokens: int = 0
    prompt_evaluated: int = 0
    prompt_seconds: float = 0.0
    # Wall time of the generation loop, and its parts.
    decode_seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    # Time inside llama_decode, both models (the "native" part; no logits are copied).
    native_seconds: float = 0.0
    # Why the controller drafted or did not: steps per kind of decision (e.g.
    # "draft: bound<1", "ngram: k>0 by cost model"), and the last one in full.
    decisions: dict[str, int] = field(default_factory=dict)
    last_decision: str = ""

    # -- recording ---------------------------------------------------------------

    def record_step(self, n_drafted: int, n_accepted: int, n_emitted: int, source: str = "") -> None:
        if not 0 <= n_accepted <= n_drafted:
            raise ValueError(f"accepted {n_accepted} of {n_drafted} drafted")
        self.steps += 1
        if n_drafted:
            self.draft_steps += 1
            if Source.of(source).is_model:
                _grow(self.model_draft_lengths, n_drafted)
                self.model_draft_lengths[n_drafted - 1] += 1
        self.drafted += n_drafted
        self.accepted += n_accepted
        _grow(self.drafted_per_position, n_drafted)
        _grow(self.accepted_per_position, n_drafted)
        for i in range(n_drafted):
            self.drafted_per_position[i] += 1
        for i in range(n_accepted):
            self.accepted_per_position[i] += 1
        self.generated += n_emitted

    def record_decision(self, key: str, text: str) -> None:
        self.decisions[key] = self.decisions.get(key, 0) + 1
        self.last_decision = text

    # -- derived -----------------------------------------------------------------

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens per verify pass, the bonus/correction token included (as vLLM reports)."""
        return (self.accepted + self.steps) / self.steps if self.steps else None

    @property
    def acceptance_per_position(self) -> list[float | None]:
        return [a / d if d else None for a, d in zip(self.accepted_per_position, self.drafted_per_position)]

    @property
    def tokens_per_second(self) -> float | None:
        return self.generated / self.decode_seconds if self.decode_seconds > 0 else None

    @property
    def prompt_tokens_per_second(self) -> float | None:
        return self.prompt_evaluated / self.prompt_seconds if self.prompt_seconds > 0 else None

    @property
    def overhead_seconds(self) -> float:
        """Decode time spent outside llama_decode (Python's own share, reading the rows included)."""
        return max(0.0, self.decode_seconds - self.native_seconds)

    @property
    def overhead_share(self) -> float | None:
        return self.overhead_seconds / self.decode_seconds if self.decode_seconds > 0 else None

    def copy(self) -> Stats:
        """A snapshot (every step carries one): the fields as they are, the lists and
        the dict copied; an attribute copy, as dataclasses.replace would re-run the
        constructor over every field."""
        new = object.__new__(Stats)
        d = new.__dict__
        d.update(self.__dict__)
        d["drafted_per_position"] = self.drafted_per_position.copy()
        d["accepted_per_position"] = self.accepted_per_position.copy()
        d["model_draft_lengths"] = self.model_draft_lengths.copy()
        d["decisions"] = self.decisions.copy()
        return new

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            acceptance_rate=self.acceptance_rate,
            mean_accepted_length=self.mean_accepted_length,
            acceptance_per_position=self.acceptance_per_position,
            tokens_per_second=self.tokens_per_second,
            prompt_tokens_per_second=self.prompt_tokens_per_second,
            overhead_seconds=self.overhead_seconds,
            overhead_share=self.overhead_share,
        )
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Stats:
        names = cls.__dataclass_fields__.keys()
        return cls(**{k: v for k, v in d.items() if k in names})
