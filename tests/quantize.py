"""Requantize a GGUF with llama.cpp, to make a compatible but different draft for the tests
(test-only: the app never quantizes)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp

from specdesk.errors import SpecDeskError
from specdesk.engine.model import ensure_backend

FTYPES = {
    "Q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0,
    "Q5_1": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_1,
    "Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
}


def quantize(src: str | Path, dst: str | Path, ftype: str = "Q4_0", threads: int = 0) -> Path:
    ensure_backend()
    if ftype not in FTYPES:
        raise SpecDeskError(f"unknown quantization {ftype!r}: choose one of {', '.join(FTYPES)}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = threads
    params.ftype = FTYPES[ftype]
    params.allow_requantize = True
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise SpecDeskError(f"quantizing {Path(src).name} to {ftype} failed (code {rc})")
    return Path(dst)
