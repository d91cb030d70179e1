"""libllama's C++-only calls (the vendored src/llama-ext.h, a "staging header"): bound
by their Itanium-mangled names, as ``nm -D libllama.so`` lists them, with one line of
error where a build lacks one (what the caller could then not run, and that
llama-cpp-python 0.3.36 has them)."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

from ..errors import SpecDeskError

#: name -> (mangled symbol, argument types, result type)
Symbols = dict[str, tuple[str, list, object]]


def bind(lib: ctypes.CDLL, symbols: Symbols, cannot: str) -> SimpleNamespace:
    """The calls of ``symbols``, typed; SpecDeskError naming the first one missing and
    what it means (``cannot``: "it cannot run a model's MTP heads")."""
    api = SimpleNamespace()
    for name, (symbol, args, res) in symbols.items():
        try:
            fn = getattr(lib, symbol)
        except AttributeError:
            where = getattr(lib, "_name", "libllama")
            raise SpecDeskError(f"this llama.cpp ({where}) does not export {name} (C++ symbol {symbol}): "
                                f"{cannot}; llama-cpp-python 0.3.36 does") from None
        fn.argtypes, fn.restype = args, res
        setattr(api, name, fn)
    return api
