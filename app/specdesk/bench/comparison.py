"""One comparison, the same for ``specdesk bench``, ``specdesk compare`` and the app's
Compare tab: prompts run with and without speculation on the loaded pair, and what
a user needs to judge the result.

:func:`run_comparison` does, in order:

1. with the advisor: calibrate the pair (step, verify and draft costs, the draft's
   acceptance, the kernel drift, then short runs of the real loop for the candidate
   configurations and the comparison's own fixed-k ones, which the predictions come
   from: :mod:`specdesk.bench.loop_calibration`) and start ``auto`` from the measured costs
   (:meth:`Session.seed_costs`); without it, measure (or read from the cache) the
   kernel drift alone, which says what "identical at T=0" means on this machine;
2. the benchmark runner: a warm-up, then interleaved repeats, a fixed number or until
   sure (:mod:`specdesk.bench.runner`), with paired speedups, their intervals and
   verdicts (:mod:`specdesk.bench.stats`);
3. the advisor's predictions next to what was measured, and, when the draft's memory
   would buy a better quantization of the target, whether the target's Hugging Face
   repo publishes it (the published-quant offer).

Progress is one ``(message, fraction)`` callback over the whole of it, and ``cancel``
is checked between runs (and between the calibration's measurements). The result is
typed (:class:`ComparisonResult`); ``to_dict`` is the report's JSON (what
``write_report`` writes), made at the edge.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..errors import Cancelled
from ..library.quants import PublishedQuant, offer_upgrade
from ..session import Generation
from ..session.drift import pair_drift
from ..speculative.drift import Drift
from .advisor import Calibration, advisor_section, calibrate
from .configs import BenchConfig
from ..speculative.proposers.registry import BASELINE
from .rows import ConfigRow, rows_of
from .runner import BenchOptions, SessionTarget, run_bench, runnable_configs
from .suites import Suite

Progress = Callable[[str, float], None]  # (what is running, 0..1)

# Shares of the progress bar: the calibration (or the drift alone), then the runs.
CALIBRATION_SHARE = 0.3
DRIFT_SHARE = 0.1


@dataclass(frozen=True)
class ComparisonOptions:
    bench: BenchOptions = field(default_factory=BenchOptions)
    advisor: bool = True  # calibrate first, seed auto with the costs, predict every configuration
    drift: bool = True  # measure (or read) the kernel drift, with the advisor or without it
    raw: bool = False  # prompts as plain completions, without the chat template
    # keep the Generation of every run of these repeats (compare --json shows repeat 0's)
    keep_repeats: tuple[int, ...] = ()


@dataclass
class ComparisonResult:
    bench: dict  # the runner's result: meta, configs, runs, summary, stopping, memory
    calibration: Calibration | None = None
    drift: Drift | None = None
    published_quant: PublishedQuant | None = None
    published_quant_note: str | None = None
    # (suite, prompt_id, repeat, config) -> the run's Generation, for the repeats kept
    generations: dict[tuple[str, str, int, str], Generation] = field(default_factory=dict)

    @property
    def configs(self) -> list[str]:
        return list(self.bench["configs"])

    @property
    def stopping(self) -> dict:
        return dict(self.bench.get("stopping") or {})

    def overall(self) -> dict[str, ConfigRow]:
        """Each configuration's row over all suites."""
        return {row.config: row for row in rows_of(self.bench["summary"]["overall"])}

    def baseline_tps(self) -> float | None:
        row = self.overall().get(BASELINE)
        return row.median_tps if row else None

    def to_dict(self) -> dict:
        out = dict(self.bench)
        out["advisor"] = advisor_section(self.calibration, self.bench) if self.calibration is not None else None
        drift = self.drift if self.drift is not None else (self.calibration.drift if self.calibration else None)
        out["drift"] = drift.to_dict() if drift is not None else None
        if self.calibration is not None:
            out["published_quant"] = self.published_quant.to_dict() if self.published_quant else None
            out["published_quant_note"] = self.published_quant_note
        return out


def run_comparison(
    session,
    suites: Sequence[Suite],
    configs: Sequence[BenchConfig],
    options: ComparisonOptions,
    progress: Progress | None = None,
    cancel: Callable[[], bool] | None = None,
) -> ComparisonResult:
    """Calibrate (or measure the drift), run the benchmark, predict, and look for the
    better quantization the draft's memory would buy (see the module docstring)."""
    configs = runnable_configs(SessionTarget(session, raw=options.raw), configs)  # one line, before any work
    use_advisor = options.advisor and session.drafting_need() is not None

    def report(msg: str, frac: float) -> None:
        if cancel is not None and cancel():
            raise Cancelled("the comparison was cancelled")
        if progress is not None:
            progress(msg, min(1.0, max(0.0, frac)))

    cal, drift, base = None, None, 0.0
    with session.lease():  # the session is freed only after this comparison ends
        if use_advisor:
            # the loop calibration tries the comparison's own fixed-k configurations too
            cal = calibrate(session, progress=lambda m, f: report(m, CALIBRATION_SHARE * f), cancel=cancel,
                            drift=options.drift, loop_configs=configs)
            session.seed_costs(cal.costs)  # auto starts from the measured costs
            base = CALIBRATION_SHARE
        elif options.drift:
            try:
                drift = pair_drift(session, progress=lambda f: report("measuring the kernel drift of verify batches",
                                                                      DRIFT_SHARE * f))
            except ValueError:  # a context too small for the probe text: compare without it, as calibrate does
                drift = None
            base = DRIFT_SHARE

        def runs_progress(done: int, total: int, what: str) -> None:
            report(what if what.startswith("repeat ") else f"{done}/{total}: {what}",
                   base + (1 - base) * done / max(1, total))

        kept: dict[tuple[str, str, int, str], Generation] = {}

        def keep(rec: dict, gen: Generation) -> None:
            if rec["repeat"] in options.keep_repeats:
                kept[(rec["suite"], rec["prompt_id"], rec["repeat"], rec["config"])] = gen

        res = run_bench(SessionTarget(session, raw=options.raw), suites, configs, options.bench,
                        progress=runs_progress, cancel=cancel, keep=keep if options.keep_repeats else None)
    pub, note = None, None
    if cal is not None:
        pub, note = offer_upgrade(session.target.spec.path, cal.quant_upgrade, cal.draft_bytes)
    if progress is not None:
        progress("done", 1.0)
    return ComparisonResult(res, cal, drift, pub, note, kept)
