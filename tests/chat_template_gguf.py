"""A real model with another chat template: a copy of a GGUF whose
``tokenizer.chat_template`` is replaced, every other byte of the header and the
tensor data unchanged. Used by the hostile-template tests (CLI and app) on SmolLM2.

The copy splices the new key/value record into the header found by SpecDesk's own
bounded reader and copies the tensor data as is (the data section moves by the
change in length, padded to the file's alignment; tensor offsets are relative to
it), so a copy takes the time of copying the file."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from specdesk.library.gguf.reader import read_gguf

KEY = "tokenizer.chat_template"
_STRING = 8  # GGUFValueType.STRING


def chat_template_of(path: Path) -> str | None:
    return read_gguf(path).metadata.get(KEY)


def _record(key: str, value: str) -> bytes:
    k, v = key.encode(), value.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", _STRING, len(v)) + v


def with_chat_template(src: Path, dst: Path, template: str) -> Path:
    """Write ``src`` to ``dst`` with ``template`` as its chat template (``src`` must
    carry one: its record is replaced in place)."""
    g = read_gguf(src)
    old = g.metadata[KEY]
    start = g.kv_offsets[KEY]
    end = start + len(_record(KEY, old))
    with open(src, "rb") as f, open(dst, "wb") as out:
        head = f.read(g.header_end)
        new_head = head[:start] + _record(KEY, template) + head[end:]
        out.write(new_head + b"\0" * (-len(new_head) % g.alignment))
        f.seek(g.data_offset)
        shutil.copyfileobj(f, out, 1 << 20)
    return dst
