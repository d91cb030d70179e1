"""Which drafts can speculate for a target: llama.cpp's vocabulary rules, applied
to vocab-only loads (no weights), after each file passed GGUF validation.

The CLI's ``models check-pair``, the app's draft picker and the model library all
use this module.
"""

from __future__ import annotations

from pathlib import Path

from ..engine.model import Model
from ..engine.vocab import Compatibility, check_compatible
from .gguf_file import validate_gguf


def check_pair(target: str | Path, draft: str | Path) -> Compatibility:
    validate_gguf(target)
    validate_gguf(draft)
    t = Model(target, vocab_only=True)
    try:
        d = Model(draft, vocab_only=True)
        try:
            return check_compatible(t.vocab_info(), d.vocab_info())
        finally:
            d.close()
    finally:
        t.close()
