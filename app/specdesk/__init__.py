"""SpecDesk: speculative decoding on local GGUF models, made visible and measurable."""

__version__ = "0.1.0"
