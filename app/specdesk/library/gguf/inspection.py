"""``specdesk models inspect``: a JSON-serialisable summary of a GGUF file for users.

Reads the header lazily and skips the semantic checks, so it also describes files
``validate_gguf`` refuses (a recurrent architecture, an unknown tokenizer, ...). A split
model, named by any part, is described whole: its parameters, sizes and memory from
every part.
"""

from __future__ import annotations

import os

import gguf

from .arrays import GGUFArray, StringArray
from ...errors import ModelFileError
from .estimate import estimate_memory, md_int
from .header import GGUFFile
from .heads import head_summary, head_what
from .hybrid import recurrent_shape
from .mtp import mtp_heads
from .split import merged, read_model
from .rules import HYBRID_ARCHITECTURES, RECURRENT_ARCHITECTURES, K
from ...rules.rollback import rollback_plan


def _file_type_name(value: object) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    try:
        return gguf.LlamaFileType(value).name
    except ValueError:
        return f"UNKNOWN_{value}"


def inspect_gguf(path: str | os.PathLike[str]) -> dict:
    """A JSON-serialisable report about a model file (structure checked, arrays lazy)."""
    parts = read_model(path)
    g = merged(parts)
    arch = g.architecture or ""
    T = K.Tokenizer

    def key(template: str) -> str:
        return template.format(arch=arch)

    def int_or_list(k: str) -> int | list[int] | None:
        v = g.metadata.get(k)
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v
        if isinstance(v, list) and all(isinstance(x, int) for x in v):
            return [int(x) for x in v]
        return None

    tensor_types: dict[str, int] = {}
    for t in g.tensors:
        tensor_types[t.type_name] = tensor_types.get(t.type_name, 0) + 1
    tokens = g.metadata.get(T.LIST)
    vocab_size = len(tokens) if isinstance(tokens, (list, StringArray, GGUFArray)) else md_int(g, key(K.LLM.VOCAB_SIZE))
    template = g.metadata.get(T.CHAT_TEMPLATE)
    name = g.metadata.get(K.General.NAME)
    vocab_type = g.metadata.get(T.MODEL)
    mtp = mtp_heads(g)
    return {
        "path": str(g.path),
        "file_size": sum(part.file_size for part in parts),
        "parts": len(parts),
        "version": g.version,
        "architecture": g.architecture,
        "name": name if isinstance(name, str) else None,
        "parameters": sum(t.n_elements for t in g.tensors),
        "file_type": _file_type_name(g.metadata.get(K.General.FILE_TYPE)),
        "tensor_types": dict(sorted(tensor_types.items())),
        "layers": md_int(g, key(K.LLM.BLOCK_COUNT)),
        "embedding_length": md_int(g, key(K.LLM.EMBEDDING_LENGTH)),
        "head_count": int_or_list(key(K.Attention.HEAD_COUNT)),
        "head_count_kv": int_or_list(key(K.Attention.HEAD_COUNT_KV)),
        "context_length": md_int(g, key(K.LLM.CONTEXT_LENGTH)),
        "vocab_type": vocab_type if isinstance(vocab_type, str) else None,
        "vocab_size": vocab_size,
        "has_chat_template": isinstance(template, str) and bool(template),
        "chat_template_chars": len(template) if isinstance(template, str) else 0,
        "bos_token_id": md_int(g, T.BOS_ID),
        "eos_token_id": md_int(g, T.EOS_ID),
        "memory": estimate_memory(g, 4096),
        # multi-token-prediction (NextN) heads, and why they cannot draft (specdesk.rules.mtp), if so
        "mtp_heads": mtp.heads,
        "mtp_problem": mtp.problem if mtp.heads else None,
        # how it rolls back as a target and as a draft (specdesk.rules.rollback), with its state's size
        "rollback": rollback_summary(g),
        # a head of another model (EAGLE-3, DFlash, a Gemma 4 assistant): what it is and which
        # target it drafts for, or why it cannot draft
        **_head(g),
    }


def _head(g: GGUFFile) -> dict:
    what = head_what(g)
    if what is None:
        return {"head": None, "head_problem": None}
    try:
        return {"head": head_summary(g), "head_problem": None}
    except ModelFileError as e:
        return {"head": what, "head_problem": str(e)}


def rollback_summary(g) -> dict:
    """How the model rolls back (``kv``, ``snapshots``, ``checkpoints``) as a target and as
    a draft, the recurrent state per sequence and the snapshots a target keeps, and its
    sliding window (0: none)."""
    arch = g.architecture or ""
    recurrent = arch in RECURRENT_ARCHITECTURES or arch in HYBRID_ARCHITECTURES
    shape = recurrent_shape(g) if recurrent else None
    target, draft = (rollback_plan(arch, recurrent, shape, role=r) for r in ("target", "draft"))
    return {"target": target.way, "draft": draft.way, "state_bytes": target.state_bytes,
            "snapshot_bytes": target.snapshot_bytes, "n_rs_seq": target.n_rs_seq,
            "sliding_window": md_int(g, f"{arch}.attention.sliding_window") or 0}
