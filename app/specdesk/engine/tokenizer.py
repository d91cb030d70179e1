"""A loaded model's tokenizer as the speculative core's Tokenizer protocol (plain text,
special tokens parsed, no BOS), for drafts that speak another vocabulary."""

from __future__ import annotations

from .model import Model


class ModelTokenizer:
    def __init__(self, model: Model) -> None:
        self.model = model

    def tokenize(self, text: str) -> list[int]:
        return self.model.tokenize(text, add_special=False, parse_special=True)

    def token_bytes(self, token: int) -> bytes:
        return self.model.token_bytes(token)
