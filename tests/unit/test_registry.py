"""One proposer registry: every front end offers exactly its names, and each builds."""

import pytest

import re

from fake_assistant import FakeAssistant
from fake_heads import FakeBlockHead
from fake_mtp import FakeHeads
from fakes import FakeBackend, FakeModel
from specdesk.bench.configs import ConfigError, parse_config, parse_configs, proposer_of, resolve_configs, split_name
from specdesk.cli import build_parser
from specdesk.session import GenerationConfig
from specdesk.speculative.proposers import (
    DFlashProposer,
    DraftModelProposer,
    Eagle3Proposer,
    Gemma4AssistantProposer,
    HistoryProposer,
    MtpProposer,
    registry,
)


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
    with pytest.raises(ConfigError, match="one of " + re.escape(", ".join(registry.NAMES))):
        parse_config("medusa")


def test_the_app_offers_every_proposer_in_settings_and_compare(qtbot):
    from specdesk.ui.compare_tab import CompareTab
    from specdesk.ui.settings import PROPOSER_LABELS

    tab = CompareTab(lambda: None)
    qtbot.addWidget(tab)
    PRESET_CONFIGS = list(tab.config_boxes)
    DEFAULT_ON = {name for name, box in tab.config_boxes.items() if box.isChecked()}
    assert all(k.label for k in registry.KINDS)
    assert PROPOSER_LABELS == {n: registry.kind(n).label for n in registry.CHOICES}
    assert PRESET_CONFIGS == list(registry.PRESETS) and DEFAULT_ON == set(registry.CHECKED)
    # every proposer a user chooses has a preset on the Compare tab (none is the baseline;
    # translated is what draft presets run as on a pair of two vocabularies)
    offered = {c.split(":")[0] for c in PRESET_CONFIGS}
    assert offered == set(registry.CHOICES) - {"none"}


def test_each_row_builds_a_proposer_that_drafts_from_its_sources():
    t = FakeBackend(FakeModel(n_vocab=8))
    d = FakeBackend(FakeModel(n_vocab=8, seed=1))
    made = {registry.DRAFT_MODEL: lambda: DraftModelProposer(d, 8),
            registry.MTP_HEADS: lambda: MtpProposer(FakeHeads(FakeModel(n_vocab=8)), 8),
            registry.GEMMA4_ASSISTANT: lambda: Gemma4AssistantProposer(FakeAssistant(FakeModel(n_vocab=8), t), 8),
            registry.EAGLE3_HEAD: lambda: Eagle3Proposer(FakeHeads(FakeModel(n_vocab=8)), 8),
            registry.DFLASH_HEAD: lambda: DFlashProposer(FakeBlockHead(FakeModel(n_vocab=8)), 8)}
    asked = []

    def sources(need):
        asked.append(need)
        return made[need]()

    parts = registry.Parts(sources=sources, history=HistoryProposer())
    for k in registry.KINDS:
        asked.clear()
        p = k.build(parts)
        assert p.drafts == bool(k.sources), k.name
        assert k.looks_up_history == (k.name in ("ngram+history", "hybrid"))
        assert asked == ([k.needs] if k.needs else []), k.name  # built from what the row says it needs

    def nothing(need):
        raise ValueError(f"no {need}")

    for name in registry.WITHOUT_DRAFT:
        registry.kind(name).build(registry.Parts(sources=nothing, history=HistoryProposer()))  # needs nothing else
    assert t.n_vocab == 8


def test_draft_is_translated_on_a_pair_of_two_vocabularies_and_translated_needs_one():
    assert registry.resolve("draft", translated_pair=True) == "translated"
    assert registry.resolve("hybrid", translated_pair=True) == "hybrid"
    assert registry.resolve("draft", translated_pair=False) == "draft"
    with pytest.raises(registry.PairMismatch):
        registry.resolve("translated", translated_pair=False)
    assert [c.name for c in resolve_configs([parse_config("draft:k=2")], True)] == ["translated:k=2"]


def test_the_chat_settings_offer_every_choice_as_the_registry_names_it():
    from specdesk.ui.settings import PROPOSER_LABELS as CHAT_LABELS, ChatSettings

    assert list(CHAT_LABELS) == list(registry.CHOICES)
    for name in registry.CHOICES:
        assert ChatSettings(proposer=name).generation_config().proposer == name


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
