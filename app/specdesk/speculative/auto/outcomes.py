"""What auto measured, and how it weighs it: the arms' keys (a source, an n-gram match
bucket, a band of draft lengths), outcomes added with a clip, their staleness, and the
ratio of an outcome to target alone's cost with its standard error."""

from __future__ import annotations

import math

from ..costmodel import Outcome
from ..proposers.base import Source

NGRAM_BUCKETS = (1, 2, 3, 4, 6, 9, 16, 32)
#: Draft lengths judged together: a loss at short k does not condemn long drafts,
#: which cost less per token where verifying is cheap (a GPU).
K_BANDS = (1, 4, 8, 16)


def ngram_bucket(match_length: int) -> int:
    b = NGRAM_BUCKETS[0]
    for x in NGRAM_BUCKETS:
        if match_length >= x:
            b = x
    return b


def source_key(source: str, match_length: int | None) -> str:
    """The arm a step of ``source`` counts under: lookups per match-length bucket."""
    if Source.of(source).is_lookup:
        return f"{source}:{ngram_bucket(match_length or 1)}"
    return source


def band(k: int, source: Source | None = None) -> int:
    """The band of draft lengths ``k`` is judged in (0: 1-3, 1: 4-7, 2: 8-15, 3: 16 and
    more). Lookups are judged whole (band 0): their drafts cost nothing to make, so a
    long one is no cheaper per token than a short one, only likelier to be cut."""
    if source is not None and source.is_lookup:
        return 0
    b = 0
    for i, lo in enumerate(K_BANDS):
        if k >= lo:
            b = i
    return b


def judge_key(arm: str, k: int) -> str:
    """The judge of ``arm``'s drafts of length ``k``: the arm itself for the shortest
    band (as saved before bands), ``arm#b`` for band b."""
    b = band(k, source_of(arm))
    return arm if b == 0 else f"{arm}#{b}"


def arm_of(key: str) -> str:
    return key.partition("#")[0]


def source_of(key: str) -> Source:
    return Source.of(arm_of(key).split(":")[0])


def staleness(now: int, o: Outcome, stale_steps: float) -> float:
    """An outcome measured ``stale_steps`` steps ago counts with twice the variance."""
    return math.sqrt(1.0 + (now - o.t) / stale_steps)


def add_clipped(o: Outcome, x: float, y: float, decay: float, t: int, clip: float) -> None:
    """One step into an outcome; a step dearer than ``clip`` times the outcome's mean
    (another process took the cores for a moment) counts as that much."""
    if o.w >= 3.0 and o.x > 0:
        y = min(y, clip * o.y / o.x * x)
    o.add(x, y, decay, t)


def ratio(o: Outcome | None, t: tuple[float, float] | None, now: int, floor_cv: float,
          stale_steps: float) -> tuple[float, float, float] | None:
    """``o``'s cost per token as a share of target alone's ``t`` (mean, se): (ratio,
    its standard error, the share of its variance that target alone's uncertainty
    brings)."""
    if o is None or o.x <= 0 or t is None or t[0] <= 0:
        return None
    r = o.y / o.x / t[0]
    se = o.se(floor_cv) * staleness(now, o, stale_steps) / t[0]
    rel0 = t[1] / t[0]
    v0 = r * r * rel0 * rel0
    var = se * se + v0
    return r, math.sqrt(var), (v0 / var if var > 0 else 0.0)
