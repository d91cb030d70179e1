"""One proposer registry: every front end offers exactly its names, and each builds."""

import pytest

from fake_mtp import FakeHeads
from fakes import FakeBackend, FakeModel
from specdesk.bench.configs import ConfigError, parse_config, parse_configs, proposer_of, resolve_configs, split_name
from specdesk.cli import build_parser
from specdesk.session import GenerationConfig
from specdesk.speculative.proposers import DraftModelProposer, HistoryProposer, MtpProposer, registry


def _cli_choices(command: str) -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    action = next(a for a in sub.choices[command]._actions if a.dest == "proposer")
    return list(action.choices)


def test_the_cli_offers_every_proposer_of_the_registry():
    for command in ("generate", "compare"):
        assert _cli_choices(command) == list(registry.NAMES)


def test_the_bench_parses_every_proposer_and_names_it_as_the_registry_does():
    for name in registry.NAMES:
        c = parse_config(name)
        assert c.proposer == name
        assert c.needs_draft == registry.kind(name).needs_draft == GenerationConfig(proposer=name).needs_draft
        assert c.generation(GenerationConfig().sampling, 8, 0).proposer == name
    with pytest.raises(ConfigError, match="one of draft, translated, ngram, ngram\\+history, hybrid, mtp, none"):
        parse_config("medusa")


def test_the_app_offers_every_proposer_in_settings_and_compare():
    from specdesk.ui.compare_tab import DEFAULT_ON, PRESET_CONFIGS
    from specdesk.ui.settings import PROPOSER_LABELS

    assert all(k.label for k in registry.KINDS)
    assert PROPOSER_LABELS == {n: registry.kind(n).label for n in registry.CHOICES}
    assert PRESET_CONFIGS == list(registry.PRESETS) and DEFAULT_ON <= set(PRESET_CONFIGS)
    # every proposer a user chooses has a preset on the Compare tab (none is the baseline;
    # translated is what draft presets run as on a pair of two vocabularies)
    offered = {c.split(":")[0] for c in PRESET_CONFIGS}
    assert offered == set(registry.CHOICES) - {"none"}


def test_each_row_builds_a_proposer_that_drafts_from_its_sources():
    t = FakeBackend(FakeModel(n_vocab=8))
    d = FakeBackend(FakeModel(n_vocab=8, seed=1))
    parts = registry.Parts(draft_model=lambda: DraftModelProposer(d, 8), history=HistoryProposer(),
                           mtp=lambda: MtpProposer(FakeHeads(FakeModel(n_vocab=8)), 8))
    for k in registry.KINDS:
        p = k.build(parts)
        assert p.drafts == bool(k.sources), k.name
        assert k.looks_up_history == (k.name in ("ngram+history", "hybrid"))
    no_draft = registry.Parts(draft_model=None, history=HistoryProposer())
    for name in registry.WITHOUT_DRAFT:
        registry.kind(name).build(no_draft)  # needs nothing else
    assert t.n_vocab == 8


def test_draft_is_translated_on_a_pair_of_two_vocabularies_and_translated_needs_one():
    assert registry.resolve("draft", translated_pair=True) == "translated"
    assert registry.resolve("hybrid", translated_pair=True) == "hybrid"
    assert registry.resolve("draft", translated_pair=False) == "draft"
    with pytest.raises(registry.PairMismatch):
        registry.resolve("translated", translated_pair=False)
    assert [c.name for c in resolve_configs([parse_config("draft:k=2")], True)] == ["translated:k=2"]


def test_the_chat_settings_offer_every_choice_and_say_when_a_draft_is_missing():
    from specdesk.ui.settings import PROPOSER_LABELS as CHAT_LABELS, ChatSettings

    assert list(CHAT_LABELS) == list(registry.CHOICES)
    for name in registry.CHOICES:
        runs, why = ChatSettings(proposer=name).proposer_for(has_draft=False)
        if registry.kind(name).needs_draft:
            # never silently: the answer's line says what runs instead, and why
            assert runs == "ngram" and why == f"no draft model loaded: ngram instead of {name}"
            # a target with MTP heads that can draft drafts with them instead
            assert ChatSettings(proposer=name).proposer_for(has_draft=False, mtp_refusal=None)[0] == "mtp"
        elif registry.kind(name).needs_mtp:
            # heads not known to draft (nothing said, or the target's refusal): n-gram lookups, said
            assert runs == "ngram" and "MTP heads" in why
            assert ChatSettings(proposer=name).proposer_for(has_draft=False, mtp_refusal=None) == (name, "")
        else:
            assert (runs, why) == (name, "")
        assert ChatSettings(proposer=name).proposer_for(has_draft=True, mtp_refusal=None) == (name, "")
        assert ChatSettings(proposer=name).generation_config(has_draft=False).proposer == runs


def test_one_baseline_one_fallback_one_default_and_every_config_name_reads_back():
    assert [k.name for k in registry.KINDS if k.baseline] == [registry.BASELINE]
    assert [k.name for k in registry.KINDS if k.fallback] == [registry.FALLBACK]
    assert [k.name for k in registry.KINDS if k.default] == [registry.DEFAULT]
    assert not registry.kind(registry.FALLBACK).needs_draft  # it runs where a draft model is missing
    configs = parse_configs(",".join(registry.PRESETS))
    assert configs[0].name == registry.BASELINE and configs[0].baseline and GenerationConfig(proposer=registry.BASELINE).baseline
    for c in configs:
        assert proposer_of(c.name) == c.proposer and parse_config(c.name) == c
    assert split_name("draft:k=2:p_min=0.5") == ("draft", "k=2:p_min=0.5") and split_name("none") == ("none", "")
