"""A configuration's row of a benchmark summary, typed: what the runner aggregates
over some runs (all of them, one suite's, one turn's) and what the comparison, the
advisor, the app and the CLI read. ``to_dict`` is the row in a result's JSON (the
report's ``summary``), made at the edge; ``from_dict`` reads one back, from a result
in memory or from a report written earlier."""

from __future__ import annotations

from dataclasses import dataclass

from ..speculative.proposers.registry import BASELINE
from .stats import PairedSpeedup


@dataclass(frozen=True)
class ConfigRow:
    config: str
    paired: PairedSpeedup  # against target alone, paired per (prompt, repeat)
    prompts: int = 0
    runs: int = 0
    median_tps: float | None = None  # the median over prompts of each prompt's median tokens/s
    acceptance: float | None = None
    mean_accepted_length: float | None = None  # tokens per target step, the bonus included
    overhead_share: float | None = None  # Python's share of decode time
    identical: int = 0  # runs whose output equals target alone's (at T=0)
    near_ties: int = 0
    mismatches: int = 0
    compared: int = 0  # runs compared with target alone's
    suite: str | None = None  # a suite's row; None over all suites
    turn: int | None = None  # a turn's row (multi-turn suites)

    @property
    def baseline(self) -> bool:
        return self.config == BASELINE

    # the paired speedup's figures, as the sentences of session.text read them
    @property
    def speedup(self) -> float | None:
        return self.paired.speedup

    @property
    def ci(self) -> tuple[float, float] | None:
        return self.paired.ci

    @property
    def pairs(self) -> int:
        return self.paired.pairs

    @property
    def verdict(self) -> str | None:
        return self.paired.verdict

    @property
    def detectable(self) -> float | None:
        return self.paired.detectable

    def to_dict(self) -> dict:
        out: dict = {}
        if self.suite is not None:
            out["suite"] = self.suite
        if self.turn is not None:
            out["turn"] = self.turn
        out.update({
            "config": self.config,
            "prompts": self.prompts,
            "runs": self.runs,
            "median_tps": self.median_tps,
            **self.paired.to_dict(),
            "acceptance": self.acceptance,
            "mean_accepted_length": self.mean_accepted_length,
            "overhead_share": self.overhead_share,
            "identical": self.identical,
            "near_ties": self.near_ties,
            "mismatches": self.mismatches,
            "compared": self.compared,
        })
        return out

    @classmethod
    def from_dict(cls, d: dict) -> ConfigRow:
        """Back from :meth:`to_dict`; a field an older report lacks takes its default."""
        return cls(
            config=d.get("config") or "",
            paired=PairedSpeedup.from_dict(d),
            prompts=d.get("prompts") or 0,
            runs=d.get("runs") or 0,
            median_tps=d.get("median_tps"),
            acceptance=d.get("acceptance"),
            mean_accepted_length=d.get("mean_accepted_length"),
            overhead_share=d.get("overhead_share"),
            identical=d.get("identical") or 0,
            near_ties=d.get("near_ties") or 0,
            mismatches=d.get("mismatches") or 0,
            compared=d.get("compared") or 0,
            suite=d.get("suite"),
            turn=d.get("turn"),
        )


def rows_of(summary_rows: list[dict] | None) -> list[ConfigRow]:
    """A summary's rows (``summary["overall"]``, ``["per_suite"]``, ``["per_turn"]``), typed;
    anything that is not a row is left out."""
    return [ConfigRow.from_dict(r) for r in summary_rows or [] if isinstance(r, dict)]
