"""What auto carries over to the next session on the same pair: the component costs
and the outcomes, as shares of target alone's cost (they hold under another load),
each counted as a few steps at most so that the new session's own soon outweigh them.
Not the acceptance (it follows the text), nor target alone's seconds (they follow the
machine's load)."""

from __future__ import annotations

import math

from ..costmodel import CostModel, Outcome, RunningCost
from .judge import Judges
from .outcomes import source_of


def saved_outcomes(judges: Judges, c0: float | None, pending: dict[str, list[float]]) -> dict:
    """Every judge's and every arm's k's outcome: [ratio, tokens per step, sd as a
    share, steps]; outcomes restored but never applied are kept as they came."""
    out = dict(pending)
    if c0 is not None:
        for key, o in judges.sources.items():
            if o.x > 0:
                out[key] = [o.mean / c0, o.x_mean, o.sd() / c0, o.n]
        for key, arms in judges.arms.items():
            for k, o in enumerate(arms):
                if o is not None and o.x > 0:
                    out[f"{key}|{k}"] = [o.mean / c0, o.x_mean, o.sd() / c0, o.n]
    return out


def restored_catch_up(state: dict, weight: int) -> RunningCost | None:
    cu = state.get("catch_up")
    if isinstance(cu, (list, tuple)) and len(cu) == 2:
        try:
            value, n = float(cu[0]), int(cu[1])
        except (TypeError, ValueError):
            return None
        if value >= 0 and n > 0:
            return RunningCost.seeded(value, min(n, weight))
    return None


def restored_outcomes(state: dict, weight: int, k_max: int) -> dict[str, list[float]]:
    """The saved outcomes that can be used, each counted as ``weight`` steps at most."""
    out: dict[str, list[float]] = {}
    outcomes = state.get("outcomes")
    if isinstance(outcomes, dict):
        for name, row in outcomes.items():
            row = _restored(name, row, weight, k_max)
            if row is not None:
                out[name] = row
    return out


def _restored(name: object, row: object, weight: int, k_max: int) -> list[float] | None:
    if not isinstance(name, str) or not isinstance(row, (list, tuple)) or len(row) != 4:
        return None
    try:
        ratio, x_mean, sd, n = (float(v) for v in row)
    except (TypeError, ValueError):
        return None
    if not all(math.isfinite(v) for v in (ratio, x_mean, sd, n)) or min(ratio, x_mean, n) <= 0 or sd < 0:
        return None
    key, bar, ks = name.rpartition("|")
    source = source_of(key if bar else name)
    if not (source.is_model or source.is_lookup):
        return None
    if bar and not (ks.isdigit() and 1 <= int(ks) <= k_max):
        return None
    return [ratio, x_mean, sd, min(n, float(weight))]


def apply_restored(judges: Judges, pending: dict[str, list[float]], c0: float, k_max: int) -> None:
    """The restored outcomes, in seconds at this session's target-alone cost."""
    for name, (r, x_mean, sd, n) in pending.items():
        o = Outcome.seeded(r * c0, x_mean, sd * c0, n)
        key, bar, ks = name.rpartition("|")
        if not bar:
            judges.sources.setdefault(name, o)
            continue
        arms = judges.arms.setdefault(key, [None] * (k_max + 1))
        if int(ks) < len(arms) and arms[int(ks)] is None:
            arms[int(ks)] = o
    pending.clear()


def restored_costs(state: dict, weight: int) -> CostModel:
    return CostModel.from_dict(state, weight=weight)


def save(auto) -> dict:
    """``auto``'s (an :class:`~.policy.AutoK`) costs and outcomes, to carry over."""
    d = auto.costs.to_dict()
    if auto.catch_up.n:
        d["catch_up"] = [auto.catch_up.value, auto.catch_up.n]
    t = auto.target_alone()
    out = saved_outcomes(auto.judges, None if t is None else t[0], auto._pending)
    if out:
        d["outcomes"] = out
    return d


def restore(auto, state: dict, weight: int) -> None:
    """Start ``auto`` from what :func:`save` saved; the outcomes wait (``_pending``) for
    target alone's first timing, which turns their shares back into seconds."""
    auto.costs = restored_costs(state, weight)
    auto.prior.clear()
    cu = restored_catch_up(state, weight)
    if cu is not None:
        auto.catch_up = cu
    auto._pending = restored_outcomes(state, weight, max(auto.k_max, auto.k_max_ngram))
