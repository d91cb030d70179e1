"""The session's one answer to "can this configuration run here, and if not, why?"
(``Session.refusal``/``runnable``), what an answer runs instead (``choose``), and the
draft-source interface every source answers, on a real Session over fake backends."""

from __future__ import annotations

import pytest

from fake_mtp import FakeHeads
from fakes import FakeModel, fake_session, linear_cost
from specdesk.errors import SpecDeskError
from specdesk.session import GenerationConfig
from specdesk.session.sources import Missing
from specdesk.speculative.proposers import MtpProposer, registry
from specdesk.speculative.proposers.base import DRAFT, MTP
from specdesk.system.memory import ModelMemory

PROFILE = (linear_cost(0.02, 0.004), linear_cost(0.005, 0.002))


class Heads:
    """A target's own heads as a draft source (the interface's every member), scripted."""

    need = registry.MTP_HEADS
    source = MTP

    def __init__(self, why: str | None = None) -> None:
        self.why = why
        self.calls: list[str] = []
        self.heads = FakeHeads(FakeModel(n_vocab=16))

    def refusal(self):
        return self.why

    def proposer(self, config):
        self.calls.append("proposer")
        return MtpProposer(self.heads, 16, p_min=config.p_min)

    def use(self):
        self.calls.append("use")

    def idle(self):
        self.calls.append("idle")

    def rewind(self, n_seq, k):
        self.calls.append(f"rewind {n_seq} {k}")

    def holds(self):
        return tuple(self.heads.history)

    def reset(self):
        self.calls.append("reset")

    def warm_up(self):
        self.calls.append("warm_up")

    def memory(self):
        return ModelMemory(role="draft", path="heads", weights_bytes=0, kv_bytes=1 << 20, n_ctx=512, n_gpu_layers=0)

    def close(self):
        self.calls.append("close")


def _session(draft: bool, heads: Heads | None = None):
    s = fake_session(PROFILE, draft=draft)
    if heads is not None:
        s.sources[heads.need] = heads
    return s


def test_every_choice_is_answered_by_the_session_from_what_it_has():
    s = _session(draft=False)
    for name in registry.CHOICES:
        need = registry.kind(name).needs
        why = s.refusal(GenerationConfig(proposer=name))
        proposer, why2 = s.runnable(GenerationConfig(proposer=name))
        assert why == why2 and (proposer is None) == (why is not None)
        if need is None:
            assert why is None, name
        elif need.in_draft_file:
            article = "an" if str(need)[0] in "AEIOUaeiou" else "a"  # an EAGLE-3 head, a draft model
            assert why == f"the {name} proposer needs {article} {need}; load one or use ngram or ngram+history or none"
        else:
            assert "target's own" in why and name in why
    with pytest.raises(SpecDeskError, match="needs a draft model"):
        s.make_proposer(GenerationConfig(proposer="draft"))


def test_what_runs_instead_and_why_is_said():
    # no draft file, no heads: lookups, said
    s = _session(draft=False)
    cfg, why = s.choose(GenerationConfig(proposer="draft", k=2))
    assert (cfg.proposer, cfg.k) == (registry.FALLBACK, 2) and why == f"no draft model that can draft here: {registry.FALLBACK} instead of draft"
    # no draft file, heads that can draft: the heads
    s = _session(draft=False, heads=Heads())
    assert s.choose(GenerationConfig(proposer="hybrid"))[0].proposer == registry.drafting_with(registry.MTP_HEADS)
    # heads asked for, but they cannot draft: another loaded source, else lookups
    refused = Heads("it carries no MTP heads")
    s = _session(draft=True, heads=refused)
    assert s.choose(GenerationConfig(proposer="mtp"))[0].proposer == "draft"
    assert s.cannot_run() == {"mtp": "it carries no MTP heads"}
    s = _session(draft=False, heads=Heads("it carries no MTP heads"))
    assert s.choose(GenerationConfig(proposer="mtp")) == (GenerationConfig(proposer=registry.FALLBACK),
                                                            f"no MTP heads that can draft here: {registry.FALLBACK} instead of mtp")
    # what can run, runs as asked (every choice drafting with what this session has: one draft file holds
    # a draft model or a head, not both)
    s = _session(draft=True, heads=Heads())
    for name in [n for n in registry.CHOICES if registry.kind(n).needs in (None, *s.sources)]:
        assert s.choose(GenerationConfig(proposer=name)) == (GenerationConfig(proposer=name), "")
    assert s.cannot_run() == {}


def test_a_generation_switches_on_its_source_and_off_the_others():
    heads = Heads()
    s = _session(draft=True, heads=heads)
    g = s.run(list(range(1, 9)), GenerationConfig(proposer="mtp", k=2, max_tokens=6))
    assert g.stats.drafted > 0 and {st.source for st in g.steps if st.draft_tokens} == {MTP}
    assert heads.calls[:2] == ["proposer", "use"]
    s.run(list(range(1, 9)), GenerationConfig(proposer="draft", k=2, max_tokens=6))
    assert heads.calls[-1] == "idle"
    # what drafting adds to memory: the draft file's first, else the source drafting
    assert s.memory().model("draft") is not None
    s.reset()
    assert heads.calls[-1] == "reset"
    s.close()
    assert heads.calls[-1] == "close" and not s.sources


def test_the_calibration_measures_the_draft_file_first_then_the_target_s_own():
    assert _session(draft=True, heads=Heads()).drafting_need() == registry.DRAFT_MODEL
    assert _session(draft=False, heads=Heads()).drafting_need() == registry.MTP_HEADS
    assert _session(draft=False, heads=Heads("none")).drafting_need() is None
    assert _session(draft=True).source(registry.DRAFT_MODEL).source == DRAFT


def test_a_missing_source_only_says_why():
    m = Missing(registry.DRAFT_MODEL)
    assert m.refusal() == "no draft model is loaded" and m.memory() is None and m.holds() is None
    with pytest.raises(ValueError):
        m.proposer(GenerationConfig())
