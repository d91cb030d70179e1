"""The chat's verdict needs target alone's speed before any comparison: it is
estimated from the single target steps the session timed (1 / their mean cost). Held here against target alone measured on the same prompt.

Both figures come from the same run (target alone's run re-teaches a fresh
controller, and the estimate is read right after it), so what is checked is the
estimate's arithmetic, that the time outside the target's steps is small, and not
how busy the machine was between two runs."""

from __future__ import annotations

from specdesk.session import GenerationConfig, ModelSpec, Session
from specdesk.speculative.auto import AutoK

PROMPT = "List five rivers of Europe, one per line, with their length."


def test_the_estimated_reference_is_within_15_percent_of_a_measured_comparison(smol_path):
    with Session.load(ModelSpec(smol_path, n_ctx=1024), remember_costs=False) as s:
        prompt = s.chat_prompt([{"role": "user", "content": PROMPT}])
        # an ordinary answer first: before any comparison, its steps give an estimate
        s.run(prompt, GenerationConfig(proposer="ngram", max_tokens=64))
        assert s.auto.costs.reference_step
        s.auto = AutoK()  # what target alone's run below times, and nothing else
        # as a comparison runs target alone: warmed up, from an empty context
        s.warm_up()
        s.reset()
        base = s.run(prompt, GenerationConfig(proposer="none", max_tokens=64))
        estimate = 1.0 / s.auto.costs.reference_step
        measured = base.stats.tokens_per_second
        print(f"estimate {estimate:.1f} tok/s, measured {measured:.1f} tok/s, ratio {estimate / measured:.3f}")
        assert measured and abs(estimate / measured - 1.0) <= 0.15, (estimate, measured)
