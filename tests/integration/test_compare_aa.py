"""An A/A comparison on a real model (SmolLM2): target alone against a configuration
that cannot draft, so both do the same computation and only the machine's noise
differs. Seeded trials (sampled answers, each trial its own seed) must come out
within noise, and all their pairs together must hold 1x.

A correct 95% interval is wrong 5% of the time by construction, and this machine's
noise cannot be seeded: the literal "95% of trials" is asserted on the fake backend's
seeded trials (tests/unit/test_until_sure.py). Here 20 real trials may give at most
3 false verdicts (with a correct interval more happen 1.6% of the time; a biased
pipeline, e.g. the second run of every pair favoured, fails it), and the pooled
99.9% interval over every pair must hold 1. Nothing here is timed against a bound:
only the verdicts the statistics give on the times measured.
"""

from __future__ import annotations

from dataclasses import replace

from specdesk.bench.configs import parse_configs
from specdesk.bench.runner import BenchOptions, SessionTarget, paired_ratios, run_bench
from specdesk.bench.stats import WITHIN_NOISE, paired_speedup
from specdesk.bench.suites import Prompt, Suite

TRIALS = 20
MAX_FALSE = 3


class CannotDraft(SessionTarget):
    """The session, with ``ngram`` as a proposer that cannot draft: it runs target
    alone's computation (proposer none) under its own name."""

    def run(self, prompt, config):
        if config.proposer == "ngram":
            config = replace(config, proposer="none")
        return super().run(prompt, config)


def test_a_real_a_a_comparison_is_within_noise(smol_session):
    suite = [Suite("aa", (Prompt("colours", "Name three colours and say why you like them.", "aa"),), None, "")]
    configs = parse_configs("none,ngram:k=1")
    verdicts, pooled = [], {}
    for seed in range(TRIALS):
        res = run_bench(CannotDraft(smol_session), suite, configs,
                        BenchOptions(repeats=3, max_tokens=12, temperature=0.7, seed=100 * seed))
        row = next(r for r in res["summary"]["overall"] if r["config"] == "ngram:k=1")
        assert row["pairs"] == 3 and row["acceptance"] is None  # the same computation: nothing drafted
        runs = {(r["repeat"], r["config"]): r["text"] for r in res["runs"]}
        assert all(runs[(k, "none")] == runs[(k, "ngram:k=1")] for k in range(3))  # the same tokens
        verdicts.append(row["verdict"])
        pooled[seed] = paired_ratios(res["runs"], "ngram:k=1")[("aa", "colours")]
    false = TRIALS - verdicts.count(WITHIN_NOISE)
    assert false <= MAX_FALSE, verdicts
    all_pairs = paired_speedup(pooled, level=0.999)
    lo, hi = all_pairs.ci
    assert lo <= 1.0 <= hi, (all_pairs, verdicts)
