"""auto's current view for a person: its last decision and the figures behind it."""

from __future__ import annotations

from ..controller import Decision, Estimate
from ..proposers.base import Source
from .explore import Exploration
from .judge import Judges
from .outcomes import band


def estimate(view: tuple[Decision, int] | None, t: tuple[float, float] | None, judges: Judges, now: int,
             explore: Exploration, last_band: dict[str, int], z_show: float) -> Estimate | None:
    """Drafting (the judge of the decision's band, or of the band its arm last drafted
    in) against target alone, each with an interval of ``z_show`` standard errors."""
    if view is None:
        return None
    d, room = view
    jk = ""
    if d.arm:
        b = band(d.k, Source.of(d.source)) if d.k else last_band.get(d.arm, 0)
        jk = d.arm if b == 0 else f"{d.arm}#{b}"
    o = judges.sources.get(jk) if jk else None
    judge = judges.ratio(jk, t, now) if o is not None else None
    steps = o.n if o is not None else 0.0
    spent, allowance = explore.spent, explore.allowance(None if t is None else t[0], room)
    ti = di = drafting = None
    if t is not None:
        ti = (t[0] - z_show * t[1], t[0] + z_show * t[1])
        if judge is not None:
            r, se, _ = judge
            drafting = r * t[0]
            di = ((r - z_show * se) * t[0], (r + z_show * se) * t[0])
    return Estimate(d, None if t is None else t[0], ti, d.arm, d.k, drafting, di,
                    steps if drafting is not None else 0.0, spent, allowance)
