"""Proposers: where draft tokens come from. One small interface, one file each."""

from .base import EMPTY_DRAFT, Budget, Draft, Proposer, Source, lookup_sources, model_sources, register_source
from .dflash import DFlashBackend, DFlashProposer
from .draft_model import DraftModelProposer
from .eagle3 import Eagle3Proposer
from .gemma4_assistant import AssistantBackend, Gemma4AssistantProposer
from .history import HistoryIndex, HistoryProposer
from .hybrid import HybridProposer
from .mtp import MtpBackend, MtpProposer
from .ngram import NgramMatch, NgramProposer, find_ngram
from .none import NoProposer
from .translated import Tokenizer, TranslatedDraftProposer

__all__ = [
    "EMPTY_DRAFT",
    "lookup_sources",
    "model_sources",
    "register_source",
    "Source",
    "HistoryIndex",
    "HistoryProposer",
    "Tokenizer",
    "TranslatedDraftProposer",
    "Budget",
    "DFlashBackend",
    "DFlashProposer",
    "Eagle3Proposer",
    "Draft",
    "DraftModelProposer",
    "AssistantBackend",
    "Gemma4AssistantProposer",
    "HybridProposer",
    "MtpBackend",
    "MtpProposer",
    "NgramMatch",
    "NgramProposer",
    "NoProposer",
    "Proposer",
    "find_ngram",
]
