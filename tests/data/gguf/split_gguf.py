"""Test helper: split a real GGUF model into parts as llama.cpp's ``gguf-split`` does.

``split_gguf(src, dest, n_parts)`` copies every metadata key and tensor of ``src`` with
gguf-py's GGUFWriter in its sharding mode (``split_max_tensors``), which writes what
``gguf-split --split`` writes: ``<stem>-00001-of-0000N.gguf`` ... with all the metadata
in the first part, ``split.no`` / ``split.count`` (uint16) and ``split.tensors.count``
(int32) in every part, and the tensors in order, each part holding its share. The
tensor bytes are copied as they are (quantized blocks included), so the parts load in
llama.cpp and generate exactly what ``src`` generates.

``rewrite_part(path, change)`` rewrites one part with its metadata changed by
``change(fields) -> fields`` (a dict key -> (value, GGUFValueType, sub type)) and the
same tensors, for tests of damaged sets.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import gguf
from gguf import GGUFValueType as VT

_SKIP = ("GGUF.",)  # the reader's pseudo-fields (version, counts)
Fields = dict[str, tuple[object, VT, VT | None]]


def _fields(reader: gguf.GGUFReader) -> Fields:
    out: Fields = {}
    for key, field in reader.fields.items():
        if key.startswith(_SKIP):
            continue
        vtype = VT(field.types[0])
        sub = VT(field.types[1]) if vtype == VT.ARRAY and len(field.types) > 1 else None
        if vtype == VT.ARRAY and sub == VT.STRING:
            # raw bytes: a token that is not valid UTF-8 must stay byte for byte
            value: object = [bytes(field.parts[i]) for i in field.data]
        else:
            value = field.contents()
        out[key] = (value, vtype, sub)
    return out


def _write(path: Path, fields: Fields, tensors, split_max_tensors: int = 0) -> gguf.GGUFWriter:
    arch = fields.get("general.architecture")
    w = gguf.GGUFWriter(str(path), str(arch[0]) if arch else "", split_max_tensors=split_max_tensors)
    if arch is None:  # a later part has no architecture key: write none either
        w.kv_data[0].pop("general.architecture", None)
    for key, (value, vtype, sub) in fields.items():
        if key == "general.architecture":
            continue  # the writer adds it
        if key == "general.alignment":
            w.add_custom_alignment(int(value))  # type: ignore[call-overload]
            continue
        w.add_key_value(key, value, vtype, sub)
    for t in tensors:
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return w


def split_gguf(src: Path, dest: Path, n_parts: int) -> list[Path]:
    """Write ``src`` as ``n_parts`` parts named after ``dest`` (``dest`` is a ``.gguf``
    path; the parts are ``<dest stem>-0000i-of-0000N.gguf`` beside it). Returns them."""
    r = gguf.GGUFReader(str(src))
    fields = {k: v for k, v in _fields(r).items() if not k.startswith("split.")}
    per_part = math.ceil(len(r.tensors) / n_parts)
    dest.parent.mkdir(parents=True, exist_ok=True)
    w = _write(dest, fields, r.tensors, split_max_tensors=per_part)
    parts = w.format_shard_names(dest)
    assert len(parts) == n_parts, f"{src.name} has {len(r.tensors)} tensors: not {n_parts} parts of {per_part}"
    return parts


def rewrite_part(path: Path, change: Callable[[Fields], Fields]) -> Path:
    """Rewrite ``path`` (one part) with ``change(fields)`` as its metadata."""
    r = gguf.GGUFReader(str(path))
    tmp = path.with_name(path.name + ".rewrite")
    _write(tmp, change(_fields(r)), r.tensors)
    tmp.replace(path)
    return path
