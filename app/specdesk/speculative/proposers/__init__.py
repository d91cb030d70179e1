"""Proposers: where draft tokens come from. One small interface, one file each."""

from .base import EMPTY_DRAFT, Budget, Draft, Proposer
from .draft_model import DraftModelProposer
from .hybrid import HybridProposer
from .ngram import NgramMatch, NgramProposer, find_ngram
from .none import NoProposer

__all__ = [
    "EMPTY_DRAFT",
    "Budget",
    "Draft",
    "DraftModelProposer",
    "HybridProposer",
    "NgramMatch",
    "NgramProposer",
    "NoProposer",
    "Proposer",
    "find_ngram",
]
