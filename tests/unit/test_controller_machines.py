"""auto on scripted machines: the real loop (speculate) over fake backends whose costs a
FakeClock replays, so every figure is a ratio of simulated seconds, exact and
repeatable. Each machine is one a user has: a CPU where no draft model pays, a GPU
where it pays a lot, and machines where the timed calls say drafting pays but the
loop as a whole does not."""

import numpy as np
import pytest
from fakes import FakeBackend, FakeClock, FakeModel, ScriptedModel, edited, linear_cost
from specdesk.speculative.controller import CHEAPER, FixedK
from specdesk.speculative.auto import AutoK
from specdesk.speculative.decoder import speculate
from specdesk.speculative.proposers import DraftModelProposer, NgramProposer, NoProposer
from specdesk.speculative.sampling import SamplingParams

# Seconds per eval call of n tokens, in units of one target step.
# This kind of machine (2 CPU cores, the default pair): a verify batch of 4 costs 3.3
# steps, a draft step 0.61 of one, and the draft catches up at 0.12 of a step a token.
CPU = (linear_cost(1.0, 0.767), linear_cost(0.61, 0.12))
# A GPU: a verify batch costs about one step, a draft step a tenth of one.
GPU = (linear_cost(1.0, 0.05), linear_cost(0.1, 0.01))
# Cheap batches and a cheap draft: by the timed calls alone, drafting pays about 2x.
CHEAP = (linear_cost(1.0, 0.15), linear_cost(0.15, 0.02))
LONG_PROMPT = [1, 2, 3, 4, 5, 6, 7, 8] * 4


def simulate(profile, controller, proposer="draft", answers=1, max_tokens=200, noise=0.3, rollback_cost=0.0,
             switch_cost=0.0, seed=0):
    """Tokens per simulated second over ``answers`` answers (prompt and decode), every
    answer's steps, and the draft backend; ``seed`` draws the text (the target) and the
    draft's errors."""
    clock = FakeClock()
    tm = FakeModel(n_vocab=32, seed=seed)
    t = FakeBackend(tm, clock=clock, cost=profile[0], rollback_cost=rollback_cost, switch_cost=switch_cost)
    d = FakeBackend(FakeModel(base=tm, seed=seed + 1, noise=noise), clock=clock, cost=profile[1],
                    switch_cost=switch_cost)
    generated, seconds, answers_steps = 0, 0.0, []
    for i in range(answers):
        t.rollback(0)
        if proposer == "none":
            prop = NoProposer()
        elif proposer == "ngram":
            prop = NgramProposer()
        else:
            prop = DraftModelProposer(d, t.n_vocab, p_min=0.0)
        steps = list(speculate(t, prop, controller, [i + 1] + LONG_PROMPT, params=SamplingParams(),
                               max_tokens=max_tokens, rng=np.random.default_rng(i), clock=clock))
        generated += steps[-1].stats.generated
        seconds += steps[-1].stats.decode_seconds + steps[-1].stats.prompt_seconds
        answers_steps.append(steps)
    return generated / seconds, answers_steps, d


def last_drafting_step(steps) -> int:
    return max((i for i, s in enumerate(steps) if s.drafted), default=-1)


def test_where_no_draft_pays_auto_keeps_pace_with_target_alone():
    """A cold start on this machine's costs: one short probe and the measured costs say
    no draft can pay; the session's later answers never touch the draft model."""
    base, _, _ = simulate(CPU, AutoK(), proposer="none", answers=3)
    auto = AutoK()
    rate, answers, draft = simulate(CPU, auto, answers=3)
    assert rate >= 0.98 * base
    first, later = answers[0], answers[1:]
    assert last_drafting_step(first) < 10
    assert all(sum(s.drafted for s in a) == 0 for a in later)
    assert draft.evaluated < 60  # the prompt's prefill and one draft, no more


def test_lookups_keep_paying_where_no_draft_model_can():
    """On the same machine, n-gram lookups (free to propose) still pay where the text
    repeats: what stops the draft model does not stop them."""
    base, _, _ = simulate(CPU, AutoK(), proposer="none", max_tokens=300)
    rate, answers, _ = simulate(CPU, AutoK(), proposer="ngram", max_tokens=300)
    assert rate > 1.1 * base  # near the 1.21x a perfect lookup could reach at these costs
    assert any(k.startswith("ngram") and CHEAPER in k for k in answers[-1][-1].stats.decisions)


def test_where_drafting_pays_auto_reaches_the_best_fixed_k():
    rates = {k: simulate(GPU, FixedK(k), answers=3)[0] for k in range(1, 9)}
    best_k = max(rates, key=rates.get)
    base, _, _ = simulate(GPU, AutoK(), proposer="none", answers=3)
    auto, answers, _ = simulate(GPU, AutoK(), answers=3)
    assert rates[best_k] > 2 * base  # drafting pays a lot on this machine
    assert auto >= 0.9 * rates[best_k], (auto, rates)
    steps = answers[-1]
    assert steps[-1].stats.decisions.get("draft: measured cheaper", 0) > 0.8 * len(steps)


def test_a_hidden_cost_outside_the_timed_calls_stops_drafting():
    """The verify and draft calls say drafting pays (about 2x at this acceptance), but the
    target's rollback after a batch takes 0.9 of a step per drafted token, outside the
    verify call's timer: every k loses. auto stops drafting within a few steps and keeps
    pace with target alone (the component-judged controller ran at 0.78x here)."""
    base, _, _ = simulate(CHEAP, AutoK(), proposer="none", rollback_cost=0.9)
    fixed = {k: simulate(CHEAP, FixedK(k), rollback_cost=0.9)[0] for k in (1, 2, 4, 8)}
    assert max(fixed.values()) < base  # drafting loses at every k
    auto = AutoK()
    rate, answers, _ = simulate(CHEAP, auto, rollback_cost=0.9)
    assert auto.costs.perfect_draft_bound(8) > 1.5  # what the timed calls alone predict
    assert last_drafting_step(answers[0]) < 12
    assert rate >= 0.97 * base


def test_a_catch_up_the_calibration_missed_stops_drafting():
    """A calibration timed each call on its own and predicts a gain (2.6x for a draft that
    is always right); in the loop every call after the other model's pays 3 steps more
    (its weights were evicted from the caches in between), so drafting loses at every k.
    Seeded with the calibration, auto stops drafting after a probe or two, and over the
    session's three answers keeps pace with target alone."""
    calibrated = AutoK()
    for b in range(1, 10):
        calibrated.costs.observe_verify(b, CHEAP[0](b))
    for k in range(1, 9):
        calibrated.costs.observe_draft(k, CHEAP[1](1) * k)
    assert calibrated.costs.perfect_draft_bound(8) > 2
    base, _, _ = simulate(CHEAP, AutoK(), proposer="none", switch_cost=3.0, answers=3)
    fixed = {k: simulate(CHEAP, FixedK(k), switch_cost=3.0, answers=3)[0] for k in (1, 2, 4, 8)}
    assert max(fixed.values()) < base
    auto = AutoK()
    auto.restore_costs(calibrated.saved_costs())
    rate, answers, _ = simulate(CHEAP, auto, switch_cost=3.0, answers=3)
    assert sum(1 for s in answers[0] if s.drafted) <= 2 and last_drafting_step(answers[0]) < 12
    assert all(sum(s.drafted for s in a) == 0 for a in answers[1:])
    assert rate >= 0.97 * base


def slowed_start(cost, steps: int, factor: float):
    """``cost``, but the target's first ``steps`` single-token steps take ``factor``
    times as long (the app's start-up work or another process took the cores)."""
    seen = {"n": 0}

    def run(n: int) -> float:
        if n == 1:
            seen["n"] += 1
            if seen["n"] <= steps:
                return cost(n) * factor
        return cost(n)

    return run


def test_a_slowed_start_does_not_make_a_losing_draft_look_cheap():
    """On this machine's costs no draft can pay; the first target steps of the answer
    run ten times slower. Judged by those, drafting looks cheap: the component-judged
    controller drafted every step from then on (0.81x target alone, as the app's auto
    did in the issue: 0.78x the CLI). Now it re-times target alone as soon as a verify
    batch seems to cost less than one step, and keeps pace."""
    for slowed in (1, 2, 4):
        profile = (slowed_start(CPU[0], slowed, 10.0), CPU[1])
        _, alone, _ = simulate(profile, AutoK(), proposer="none")
        profile = (slowed_start(CPU[0], slowed, 10.0), CPU[1])
        _, answers, _ = simulate(profile, AutoK())
        assert sum(s.drafted for s in answers[0]) <= 8, slowed
        # decoding (the draft's prompt prefill, the entry ticket, is prompt time)
        ratio = answers[0][-1].stats.tokens_per_second / alone[0][-1].stats.tokens_per_second
        assert ratio >= 0.97, (slowed, ratio)


def test_exploring_stays_under_its_budget():
    """Drafting loses here, and a calibration seeded an optimistic prior: every probe
    and exploration (and the draft's prompt prefill) is charged, and what auto lost to
    them over three answers stays under its budget, 2.5% of target alone's time."""
    optimistic = AutoK()
    for b in range(1, 10):
        optimistic.costs.observe_verify(b, CHEAP[0](b))
    for k in range(1, 9):
        optimistic.costs.observe_draft(k, CHEAP[1](1) * k)
    for seeded in (False, True):
        base, _, _ = simulate(CPU, AutoK(), proposer="none", answers=3)
        auto = AutoK()
        if seeded:
            auto.restore_costs(optimistic.saved_costs())
        rate, _, _ = simulate(CPU, auto, answers=3)
        assert base / rate - 1 <= auto.budget_share, (seeded, rate / base)
        assert auto.spent <= auto.allowance() + CPU[1](len(LONG_PROMPT))  # and one prefill, the entry ticket


def test_ngram_auto_on_an_editing_task_beats_every_fixed_k():
    """An editing task: the answer is its prompt with a few tokens changed every 40. A
    one-token match is often wrong, a long one right: auto drafts long on long matches
    and not at all on short ones, which no fixed k can (the issue measured ngram:auto at
    1.27x target alone on an unseen editing prompt, above every fixed k)."""
    v, n = 64, 300
    rng = np.random.default_rng(0)
    text = [int(x) for x in rng.integers(1, v, size=n)]
    prompt = text + [0]
    answer = edited(text, 40, v)

    def rate(controller, proposer):
        clock = FakeClock()
        t = FakeBackend(ScriptedModel(prompt, answer, v), clock=clock, cost=CPU[0])
        steps = list(speculate(t, proposer, controller, prompt, params=SamplingParams(), max_tokens=n,
                               rng=np.random.default_rng(0), clock=clock))
        assert [x.token for s in steps for x in s.tokens] == answer  # the same answer, faster or not
        return steps[-1].stats.generated / steps[-1].stats.decode_seconds

    base = rate(AutoK(), NoProposer())
    fixed = {k: rate(FixedK(k), NgramProposer()) for k in (1, 2, 3, 4, 6, 8, 12, 16)}
    auto = rate(AutoK(), NgramProposer())
    assert auto > max(fixed.values()), (auto / base, {k: r / base for k, r in fixed.items()})
    assert auto > 1.05 * base


def test_a_batch_sizes_one_off_set_up_is_not_taken_for_its_cost():
    """llama.cpp sets up each batch size on its first decode, at 1.2-1.8x the size's
    later cost on this machine. Timed as what the size costs, one such batch made a
    3-token verify look like 3.8 target steps instead of 2.2, and n-gram auto concluded
    after one probe that even a perfect draft could not pay (``bound<1``). The backend
    says which batch paid the one-off, and auto's cost for each size is that of its
    later batches, exactly; a backend that pays it without saying so (the control)
    leaves the sizes auto tried once inflated, as before."""
    v, n = 64, 300
    rng = np.random.default_rng(0)
    text = [int(x) for x in rng.integers(1, v, size=n)]
    prompt = text + [0]
    answer = edited(text, 40, v)

    def learnt(report_setup):
        clock = FakeClock()
        t = FakeBackend(ScriptedModel(prompt, answer, v), clock=clock, cost=CPU[0], setup_cost=0.5,
                        report_setup=report_setup)
        auto = AutoK()
        steps = list(speculate(t, NgramProposer(), auto, prompt, params=SamplingParams(), max_tokens=n,
                               rng=np.random.default_rng(0), clock=clock))
        assert [x.token for s in steps for x in s.tokens] == answer
        return {b: rc.value for b, rc in auto.costs.verify.items()}, t.batches

    costs, batches = learnt(True)
    assert len(costs) >= 3  # target steps and at least two verify sizes were timed
    for b, value in costs.items():
        assert value == pytest.approx(CPU[0](b)), b  # the batches' own cost, no one-off in it
    assert all(batches.count(b) >= 2 for b in costs)  # a size timed once (its one-off) has no cost yet
    silent, _ = learnt(False)
    assert any(value > 1.05 * CPU[0](b) for b, value in silent.items()), silent


def test_the_drafts_prompt_prefill_measures_its_catch_up_cost():
    clock = FakeClock()
    tm = FakeModel(n_vocab=16, seed=0)
    t = FakeBackend(tm, clock=clock, cost=GPU[0])
    d = FakeBackend(FakeModel(base=tm, seed=1, noise=0.3), clock=clock, cost=linear_cost(0.1, 0.01))
    auto = AutoK()
    steps = list(speculate(t, DraftModelProposer(d, t.n_vocab, p_min=0.0), auto, LONG_PROMPT, params=SamplingParams(),
                           max_tokens=12, rng=np.random.default_rng(0), clock=clock))
    assert d.batches[0] == len(LONG_PROMPT) - 1  # a draft never tried evaluates the prompt up front
    assert sum(s.drafted for s in steps) > 0
    # its price a token, confirmed by the first draft's decodes (no one-off: 0.1 s + 0.01 a token beyond one)
    assert auto.catch_up.n >= 1 and auto.catch_up.value == pytest.approx((0.1 + 0.01 * 30) / 31)
    # a draft measured dearer stays lazy: it does not evaluate the prompt
    auto = AutoK()
    simulate(CPU, auto)
    _, answers, draft = simulate(CPU, auto)
    assert draft.evaluated == 0


if __name__ == "__main__":
    # auto against the best fixed k on the scripted GPU over many texts (not a test: a
    # figure for a change to auto, since one text's path is chaotic):
    #     PYTHONPATH=tests QT_QPA_PLATFORM=offscreen .venv/bin/python tests/unit/test_controller_machines.py
    import statistics

    ratios = []
    for seed in range(0, 48, 2):
        best = max(simulate(GPU, FixedK(k), answers=3, seed=seed)[0] for k in (3, 4, 5, 6, 7, 8, 10, 12, 16))
        ratios.append(simulate(GPU, AutoK(), answers=3, seed=seed)[0] / best)
    print(" ".join(f"{r:.2f}" for r in ratios))
    print(f"auto against the best fixed k over {len(ratios)} texts: median {statistics.median(ratios):.3f}, "
          f"geometric mean {statistics.geometric_mean(ratios):.3f}")
