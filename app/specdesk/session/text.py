"""SpecDesk's results in words: one module for the sentences the CLI, the app and the
reports show, over the typed results of the algorithm (which holds none).

- proposers: the label each proposer of the registry is offered under;
- kernel drift (:class:`~specdesk.speculative.drift.Drift`): its summary and what
  "the same output" means on this machine (:func:`claim_text`);
- divergences at T=0 (``Divergence.to_dict()``): near-tie or mismatch, in a sentence;
- an answer slower than target alone: why, from its own statistics.
"""

from __future__ import annotations

from ..chat.sandbox import HINT as TEMPLATE_HINT
from ..speculative.drift import NEAR_TIE_LOGITS, Drift
from ..speculative.proposers import registry
from ..speculative.stats import Stats

#: The label of every proposer of the registry, as the app offers them.
PROPOSER_LABELS = {
    "draft": "Draft model",
    "translated": "Draft model, translated (another vocabulary)",
    "ngram": "N-gram lookup (no draft model)",
    "ngram+history": "N-gram lookup, earlier turns too (no draft model)",
    "hybrid": "Hybrid (n-gram or earlier turns, else draft model)",
    "none": "None (target alone)",
}
assert set(PROPOSER_LABELS) == set(registry.NAMES), "every proposer needs a label"


def for_the_app(message: str) -> str:
    """An error line as the app shows it: the chat template's advice names what a
    window user can do (the CLI's --raw is not in the window)."""
    return message.replace(TEMPLATE_HINT, "load another model, or run it from the command line with --raw")


def without_draft_text(asked: str, runs: str) -> str:
    """Why an answer runs ``runs`` when its chat asks for ``asked``, which needs a draft
    model that is not loaded."""
    return f"no draft model loaded: {runs} instead of {asked}"


def share_text(x: float) -> str:
    """A share as a percentage with the digits a small share needs: 0.40%, 5.3%, 0%."""
    if x == 0:
        return "0%"
    if x < 0.001:
        return f"{100 * x:.3f}%"
    return f"{100 * x:.2f}%" if x < 0.1 else f"{100 * x:.1f}%"


def claim_text(drift: dict | None, temperature: float | None = None) -> str:
    """What "the same output" means, stated exactly, with the measured drift
    (``Drift.to_dict()``) when there is one; at ``temperature`` > 0 also what exactness
    means for a sampled run."""
    text = (
        "The output follows the target's distribution as llama.cpp computes it in a verify batch: "
        "at T=0 each token is the argmax of the target's batched logits, at T>0 rejection sampling "
        "draws each token from the target's batched distribution."
    )
    if drift and drift.get("positions"):
        worst = drift.get("worst_batch")
        s = drift.get("sampling") or {}
        at = f"T={s.get('temperature', 1.0):g}"
        text += (
            f" On this machine that is {share_text(drift['tv_mean'])} in total variation from target alone's "
            f"single-token steps on average at {at}, {share_text(drift['tv_max'])} at worst"
            + (f" (a batch of {worst})" if worst else "")
            + "."
        )
        if drift.get("flips"):
            text += (
                f" At T=0 the difference shows only at near-ties: the argmax flipped at "
                f"{share_text(drift['flip_share'])} of positions, each within {drift['flip_margin_max']:.3f} logits."
            )
        else:
            text += (
                f" At T=0 the difference shows only at near-ties (top two logits within "
                f"{drift.get('near_tie_logits', NEAR_TIE_LOGITS):g}, {share_text(drift.get('near_tie_share', 0.0))} "
                f"of positions here); no argmax flipped in {drift['positions']} positions measured."
            )
    else:
        text += (
            " Single-token steps run other kernels, so at T=0 the output can differ from target alone's "
            "where the two best tokens nearly tie; the drift was not measured here."
        )
    if temperature is not None and temperature > 0:
        text += (
            f" At T={temperature:g} runs are not compared token for token (target alone with another seed "
            "differs too): exact means each token is drawn from the target's batched distribution, which "
            "a chi-square test on real models checks."
        )
    return text


def drift_settings_text(drift: Drift) -> str:
    """The sampling settings the drift was measured at: "T=1, top-k 5"."""
    s = f"T={drift.temperature:g}"
    if drift.top_k:
        s += f", top-k {drift.top_k}"
    if drift.top_p < 1.0:
        s += f", top-p {drift.top_p:g}"
    if drift.min_p > 0.0:
        s += f", min-p {drift.min_p:g}"
    return s


def drift_summary(drift: Drift) -> str:
    """One or two plain sentences, for the advisor, reports and the Compare tab."""
    if not drift.batches:
        return "Kernel drift was not measured."
    lo, hi = min(b.batch for b in drift.batches), max(b.batch for b in drift.batches)
    sizes = f"{lo}" if lo == hi else f"{lo}–{hi}"
    text = (
        f"On this machine a verify batch ({sizes} tokens) moves the target's {drift_settings_text(drift)} "
        f"distribution by {share_text(drift.tv_mean)} in total variation on average, {share_text(drift.tv_max)} at worst "
        f"(the logits by up to {drift.logit_diff_max:.3f}), measured at {drift.positions} positions."
    )
    if drift.flips:
        text += (
            f" At T=0 it flipped the argmax at {share_text(drift.flip_share)} of positions, all within a margin of "
            f"{drift.flip_margin_max:.3f} logits; {share_text(drift.near_tie_share)} of positions are near-ties "
            f"(top two within {drift.near_tie_logits:g})."
        )
    else:
        text += (
            f" At T=0 no argmax flipped; {share_text(drift.near_tie_share)} of positions are near-ties "
            f"(top two within {drift.near_tie_logits:g}), where a flip can happen."
        )
    return text


def verdict_text(divergence: dict, drift: dict | None = None) -> str:
    """A divergence (``Divergence.to_dict()``) in one sentence, pointing to the measured
    drift (``Drift.to_dict()``) for a near-tie, e.g. "near-tie at token 9: ' the' led
    ' a' by 0.050 logits in target alone; the batched verify moved the margin by 0.110
    and ' a' won by 0.060. This machine's drift flips 0.40% of positions (...)"."""
    d = divergence
    i = d.get("index")
    a, b = d.get("baseline_text", ""), d.get("speculative_text", "")
    m, mb = d.get("margin"), d.get("margin_batched")
    if d.get("verdict") != "near-tie":
        if not isinstance(m, (int, float)) or not isinstance(mb, (int, float)) or m != m or mb != mb:
            return f"mismatch at token {i}: {a!r} vs {b!r}, not explained by a replay; worth reporting"
        return (
            f"mismatch at token {i}: {a!r} vs {b!r} (margins {m:.3f} and {mb:.3f} logits), "
            f"more than kernel drift explains; worth reporting"
        )
    if isinstance(m, (int, float)) and isinstance(mb, (int, float)) and m == m and mb == mb:
        text = (
            f"near-tie at token {i}: {a!r} led {b!r} by {m:.3f} logits in target alone; the batched verify "
            f"moved the margin by {m + mb:.3f} and {b!r} won by {mb:.3f}"
        )
    else:
        text = f"near-tie at token {i}: {a!r} and {b!r} within {NEAR_TIE_LOGITS:g} logits; the batched verify flipped them"
    if drift:
        share = drift.get("flip_share")
        pos = drift.get("positions")
        limit = drift.get("logit_diff_max")
        if share is not None and pos:
            text += (
                f". This machine's kernel drift flips the argmax at {share_text(share)} of positions "
                f"(measured at {pos}; logits move by up to {limit:.3f})"
            )
    return text + "."


def slower_reason(st: Stats) -> str:
    """Why an answer ran slower than target alone, from its own statistics."""
    if not st.drafted or st.drafted < 0.1 * max(1, st.steps):
        return (f"though little was drafted ({st.drafted} tokens in {st.steps} steps): "
                "the machine was busier than when the reference was taken")
    if st.decode_seconds and st.draft_seconds / st.decode_seconds > 0.25:
        return f"draft cost: the draft model took {100 * st.draft_seconds / st.decode_seconds:.0f}% of the time"
    if st.acceptance_rate is not None and st.acceptance_rate < 0.5:
        return f"acceptance: only {100 * st.acceptance_rate:.0f}% of drafted tokens were kept"
    return "verify cost: checking a batch of drafted tokens costs nearly as much as generating them one by one here"
