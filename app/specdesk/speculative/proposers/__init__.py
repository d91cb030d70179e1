"""Proposers: where draft tokens come from. One small interface, one file each."""

from .base import EMPTY_DRAFT, LOOKUP_SOURCES, MODEL_SOURCES, Budget, Draft, Proposer, Source
from .draft_model import DraftModelProposer
from .history import HistoryIndex, HistoryProposer
from .hybrid import HybridProposer
from .mtp import MtpBackend, MtpProposer
from .ngram import NgramMatch, NgramProposer, find_ngram
from .none import NoProposer
from .translated import Tokenizer, TranslatedDraftProposer

__all__ = [
    "EMPTY_DRAFT",
    "LOOKUP_SOURCES",
    "MODEL_SOURCES",
    "Source",
    "HistoryIndex",
    "HistoryProposer",
    "Tokenizer",
    "TranslatedDraftProposer",
    "Budget",
    "Draft",
    "DraftModelProposer",
    "HybridProposer",
    "MtpBackend",
    "MtpProposer",
    "NgramMatch",
    "NgramProposer",
    "NoProposer",
    "Proposer",
    "find_ngram",
]
