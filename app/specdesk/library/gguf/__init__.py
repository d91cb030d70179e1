"""Safe reading, validation and inspection of GGUF model files.

GGUF files come from the internet and are untrusted, and llama.cpp's loader has had
crashes on malformed files. Every model goes through this package before it reaches
llama.cpp. One job per module:

``reader``      :func:`read_gguf`, the bounded header parser, and :func:`load_array`
                (over ``stream``, the length-checking reader, into ``header``'s GGUFFile;
                ``records`` is its fast path for runs of well-formed records).
``validate``    :func:`validate_gguf`: the checks llama.cpp's loader makes, memoised.
``vocab_rules`` the rules llama.cpp's vocabulary loader and tokenizers assume (a table of
                rule -> llama.cpp source line -> check -> test); validate applies them.
``vocab``       the vocabulary as llama.cpp builds it (duplicates, special tokens,
                VocabInfo from metadata, vectorised token scans).
``hybrid``      what llama.cpp needs of the hybrid files SpecDesk accepts (qwen35).
``estimate``    :func:`estimate_memory`: RAM/VRAM from the header (rules.kv's formula).
``inspection``  :func:`inspect_gguf`: a JSON summary for users.
``arrays``, ``spec``, ``rules``, ``text``: compact arrays, format constants, llama.cpp's
tables, one-line messages.

The parser is pure Python + numpy. The ``gguf`` package is used only for constants
(value types, quantization block sizes, key names, architecture names).
"""

from .arrays import GGUFArray, StringArray
from .estimate import estimate_memory
from .header import GGUFFile, TensorInfo
from .inspection import inspect_gguf
from .reader import load_array, read_gguf
from .rules import (
    BPE_PRE_TOKENIZERS,
    REFUSED_RECURRENT_ARCHITECTURES,
    SUPPORTED_ARCHITECTURES,
    TOKENIZER_MODELS,
)
from .spec import GGML_TYPES, LAZY_ARRAY_MIN
from .validate import check_rollback, clear_memo, validate_gguf
from .vocab import find_duplicate_token, llama_token_text, vocab_from_gguf, vocab_info_from_gguf

__all__ = [
    "BPE_PRE_TOKENIZERS",
    "GGML_TYPES",
    "GGUFArray",
    "GGUFFile",
    "LAZY_ARRAY_MIN",
    "REFUSED_RECURRENT_ARCHITECTURES",
    "SUPPORTED_ARCHITECTURES",
    "StringArray",
    "TOKENIZER_MODELS",
    "TensorInfo",
    "check_rollback",
    "clear_memo",
    "estimate_memory",
    "find_duplicate_token",
    "inspect_gguf",
    "llama_token_text",
    "load_array",
    "read_gguf",
    "validate_gguf",
    "vocab_from_gguf",
    "vocab_info_from_gguf",
]
