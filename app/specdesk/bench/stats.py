"""Paired speed statistics: how much faster a configuration is than target alone, and
how sure a run can be of it (pure arithmetic: no numpy, no I/O).

A comparison runs every configuration once per (prompt, repeat) round, interleaved,
so each configuration's tokens/s over target alone's in the same round is a *paired
ratio*: whatever slowed the machine down during that round slowed both. The speedup
is the geometric mean of the paired ratios: the mean of their logarithms, taken back.

The interval is a Student t-interval on the log ratios, stratified by prompt:

- Each prompt has a true speedup of its own (n-gram lookup pays on an edit, not on a
  poem), so the estimate is the mean over prompts of each prompt's mean log ratio,
  and the noise is measured *within* prompts, from the repeats (the spread of one
  prompt's log ratios around their own mean, pooled over prompts). The interval is
  then about these prompts on this machine, and its width shrinks with every repeat.
- With one repeat per prompt there is no within-prompt spread to measure; the
  prompts' log ratios are then taken as a sample (their spread includes how much
  the prompts differ, so the interval is wider: conservative).
- One pair alone has no interval.

Why a t-interval and not a bootstrap: the runs here are few (2 to 10 repeats of a
handful of prompts), and a bootstrap's percentile interval undercovers badly at
such sizes (with 3 pairs it can never be wider than the pairs' range), while the t
quantile pays for the estimated spread exactly when the log ratios are near normal,
and is conservative under the occasional outlier a shared machine produces
(``tests/unit/test_stats.py`` checks its coverage by simulation, both ways). Logs
make ratios symmetric (1.25x and 0.8x are equally far from 1) and the geometric mean
the natural centre.

The verdict follows the interval: **faster** when all of it is above 1, **slower**
when all of it is below, **within noise** when it holds 1. ``detectable`` is the
interval's half-width as a fraction: differences smaller than that cannot be told
from noise with these pairs on this machine.

The machine's noise floor comes from target alone's own runs: the spread of one
prompt's tokens/s from repeat to repeat (pooled over prompts), as a fraction.

A single answer (the chat's) against a reference speed has no pairs; its ratio is
within noise unless it lies outside what the noise floor allows one run
(:func:`single_run_band`).

The t quantile is computed here from the t distribution's closed form for integer
degrees of freedom (Abramowitz and Stegun 26.7.3-4), by bisection: the pairs'
degrees of freedom are always whole numbers, and that keeps scipy out of the app.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

LEVEL = 0.95

FASTER = "faster"
SLOWER = "slower"
WITHIN_NOISE = "within-noise"
BASELINE = "baseline"
VERDICTS = (FASTER, SLOWER, WITHIN_NOISE)

# Run to run, when no comparison measured it: the spread seen on a shared 2-core
# machine (paired ratios of identical computations ranged 0.89-1.12 there).
ASSUMED_RUN_NOISE = 0.05


# -- the t distribution ----------------------------------------------------------------

def t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with ``df`` (a positive integer) degrees of freedom."""
    if df < 1 or int(df) != df:
        raise ValueError(f"df must be a positive integer, got {df}")
    if x == 0:
        return 0.5
    if math.isinf(x):
        return 1.0 if x > 0 else 0.0
    theta = math.atan(abs(x) / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    s = math.sin(theta)
    if df % 2 == 1:  # A(t|n) = 2/pi (theta + sin theta (cos theta + 2/3 cos^3 theta + ...))
        total = 0.0
        if df > 1:
            term = math.cos(theta)
            total = term
            for k in range(3, df - 1, 2):
                term *= c2 * (k - 1) / k
                total += term
        a = 2.0 / math.pi * (theta + s * total)
    else:  # A(t|n) = sin theta (1 + 1/2 cos^2 theta + 1.3/2.4 cos^4 theta + ...)
        term = 1.0
        total = 1.0
        for k in range(2, df - 1, 2):
            term *= c2 * (k - 1) / k
            total += term
        a = s * total
    a = min(1.0, max(0.0, a))  # P(|T| < |x|)
    return 0.5 + a / 2 if x > 0 else 0.5 - a / 2


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2


# -- paired speedups -----------------------------------------------------------------------

@dataclass(frozen=True)
class PairedSpeedup:
    """One configuration against target alone, from its paired ratios."""

    speedup: float | None  # geometric mean of the paired ratios
    ci: tuple[float, float] | None  # the 95% interval, None with fewer than two pairs
    pairs: int
    prompts: int
    df: int  # degrees of freedom of the spread (0: none measured)
    verdict: str | None  # faster | slower | within-noise; None without pairs
    detectable: float | None  # the interval's half-width, a fraction (0.04: +-4%)
    spread: str  # where the noise was measured: "repeats", "prompts" or "none"

    @classmethod
    def from_dict(cls, d: dict) -> PairedSpeedup:
        """Back from :meth:`to_dict` (a summary row holds its fields)."""
        ci = d.get("speedup_ci")
        return cls(d.get("speedup"), (ci[0], ci[1]) if ci else None, d.get("pairs") or 0, d.get("prompts") or 0,
                   d.get("spread_df") or 0, d.get("verdict"), d.get("detectable"), d.get("spread_from") or "none")

    def to_dict(self) -> dict:
        return {
            "speedup": self.speedup,
            "speedup_ci": list(self.ci) if self.ci is not None else None,
            "pairs": self.pairs,
            "verdict": self.verdict,
            "detectable": self.detectable,
            "spread_from": self.spread,
            "spread_df": self.df,
        }


def baseline_row(runs: int) -> PairedSpeedup:
    """Target alone against itself: 1x exactly, and no verdict to give."""
    return PairedSpeedup(1.0, (1.0, 1.0), runs, 0, 0, BASELINE, 0.0, "none")


def verdict_of(ci: tuple[float, float] | None) -> str:
    if ci is None:
        return WITHIN_NOISE
    low, high = ci
    if low > 1.0:
        return FASTER
    if high < 1.0:
        return SLOWER
    return WITHIN_NOISE


def _groups(ratios: Mapping[object, Sequence[float]] | Iterable[Sequence[float]]) -> list[list[float]]:
    values = ratios.values() if isinstance(ratios, Mapping) else ratios
    out = []
    for group in values:
        logs = [math.log(r) for r in group if r is not None and r > 0 and math.isfinite(r)]
        if logs:
            out.append(logs)
    return out


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def paired_speedup(ratios: Mapping[object, Sequence[float]] | Iterable[Sequence[float]],
                   level: float = LEVEL) -> PairedSpeedup:
    """The speedup, its interval and verdict from paired ratios grouped by prompt
    (``{prompt: [ratio per repeat]}``; see the module docstring)."""
    groups = _groups(ratios)
    n = sum(len(g) for g in groups)
    p = len(groups)
    if n == 0:
        return PairedSpeedup(None, None, 0, 0, 0, None, None, "none")
    means = [_mean(g) for g in groups]
    centre = _mean(means)
    df_within = n - p
    if df_within >= 1:
        ss = sum((x - m) ** 2 for g, m in zip(groups, means) for x in g)
        se = math.sqrt(ss / df_within * sum(1.0 / len(g) for g in groups)) / p
        df, spread = df_within, "repeats"
    elif p >= 2:
        ss = sum((m - centre) ** 2 for m in means)
        se = math.sqrt(ss / (p - 1) / p)
        df, spread = p - 1, "prompts"
    else:
        return PairedSpeedup(math.exp(centre), None, n, p, 0, WITHIN_NOISE, None, "none")
    h = t_quantile(0.5 + level / 2, df) * se
    ci = (math.exp(centre - h), math.exp(centre + h))
    return PairedSpeedup(math.exp(centre), ci, n, p, df, verdict_of(ci), math.exp(h) - 1.0, spread)


# -- the machine's noise -------------------------------------------------------------------

@dataclass(frozen=True)
class NoiseFloor:
    """How much one run's tokens/s moves from repeat to repeat on this machine."""

    run_to_run: float | None  # a fraction (0.04: one run is within about +-4% of the next)
    runs: int
    df: int

    def to_dict(self) -> dict:
        return {"run_to_run": self.run_to_run, "runs": self.runs, "df": self.df}


def noise_floor(tps: Mapping[object, Sequence[float]] | Iterable[Sequence[float]]) -> NoiseFloor:
    """The pooled within-prompt spread of log tokens/s (target alone's runs grouped
    by prompt), as a fraction; None with no prompt repeated."""
    groups = _groups(tps)
    n = sum(len(g) for g in groups)
    df = n - len(groups)
    if df < 1:
        return NoiseFloor(None, n, 0)
    ss = sum((x - _mean(g)) ** 2 for g in groups for x in g)
    return NoiseFloor(math.exp(math.sqrt(ss / df)) - 1.0, n, df)


def single_run_band(run_to_run: float | None, level: float = LEVEL) -> float:
    """How far one answer's speed over a reference may be from 1 by noise alone, a
    fraction: both the answer and the reference move by ``run_to_run`` (measured, or
    :data:`ASSUMED_RUN_NOISE`), so their ratio by about sqrt(2) times that."""
    sigma = math.log1p(run_to_run if run_to_run is not None and run_to_run > 0 else ASSUMED_RUN_NOISE)
    z = _normal_quantile(0.5 + level / 2)
    return math.exp(z * math.sqrt(2.0) * sigma) - 1.0


def single_run_verdict(ratio: float, band: float) -> str:
    """faster, slower or within-noise for one answer's speed over a reference."""
    if ratio > 1.0 + band:
        return FASTER
    if ratio < 1.0 / (1.0 + band):
        return SLOWER
    return WITHIN_NOISE


def _normal_quantile(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


# -- run until sure ----------------------------------------------------------------------

def sure(rows: Iterable[PairedSpeedup], target: float) -> bool:
    """Every configuration's interval is narrower than +-``target`` (a fraction).
    Stopping on the width, never on the verdict, keeps repeated looks from making a
    false verdict likelier: the width does not depend on where the estimate lies."""
    rows = list(rows)
    return bool(rows) and all(r.detectable is not None and r.detectable <= target for r in rows)
