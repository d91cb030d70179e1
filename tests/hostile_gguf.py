"""Hostile GGUF files, crafted from real models, and the CLI run on them as a user would.

* :func:`craft` rewrites a GGUF: metadata edits, tensor edits and/or a byte-level edit.
  With metadata edits only it re-encodes the header and streams the tensor data across
  unchanged, so a rewrite of the real SmolLM2 (100 MB) costs a file copy, not memory.
  ``craft(base, dst)`` with no edit is the control: the same rewrite, nothing hostile.
* :func:`with_vocab` gives a tiny model another vocabulary (tokens, types, tokenizer
  model; token_embd follows the new size), for the tokenizers that need a small or
  special vocabulary to be hostile (WPM, UGM, RWKV).
* :data:`BASES` names the files cases start from; :class:`Case` is one hostile file.
  tests/integration/test_hostile_gguf.py runs ``specdesk generate`` on every case of
  its table; adding a case is one ``Case(...)`` entry there.
* :func:`run_cli` runs a command in a fresh child with its own folders, a timeout
  and its peak RSS (``os.wait4``'s rusage of exactly that child).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import struct
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import GGUFValueType as VT

from synth.tiny_llama import TinySpec, encode_gguf, rebuild_gguf, write_tiny_llama  # noqa: E402

from specdesk.library.gguf import StringArray, read_gguf  # noqa: E402

KV = dict  # key -> (value type, value), or None to delete the key (rebuild_gguf's set_kv)


# --------------------------------------------------------------------------------------
# Rewriting a GGUF
# --------------------------------------------------------------------------------------


def metadata(path: str | Path) -> dict:
    """Every metadata value of ``path``, string arrays as StringArrays, numbers as numpy."""
    lazy = read_gguf(path, lazy_arrays=True)
    return dict(read_gguf(path, load=list(lazy.value_types)).metadata)


def _plain(value):
    if isinstance(value, StringArray):
        return list(value.iter_raw())
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def _stream_rewrite(src: Path, dst: Path, kv: KV) -> Path:
    """``src`` with metadata edits: a new header, the tensor data copied as it is."""
    g = read_gguf(src, load=[k for k, (_, et) in read_gguf(src, lazy_arrays=True).value_types.items() if et == VT.STRING])
    if "general.alignment" in kv:
        raise ValueError("an alignment edit moves the tensor data: use tensors=... (rebuild_gguf)")
    edits = dict(kv)
    kvs = []
    for key, value in g.metadata.items():
        vtype, etype = g.value_types[key]
        if key in edits:
            new = edits.pop(key)
            if new is not None:
                kvs.append((key, *new))
            continue
        loaded = value
        if vtype == VT.ARRAY and not isinstance(value, (list, StringArray, np.ndarray)):
            from specdesk.library.gguf import load_array

            loaded = load_array(g, key)
        kvs.append((key, vtype, (etype, _plain(loaded)) if vtype == VT.ARRAY else value))
    kvs += [(key, *new) for key, new in edits.items() if new is not None]
    tensors = [(t.name, t.shape, t.ggml_type, t.offset - g.data_offset) for t in g.tensors]
    head = encode_gguf(kvs, tensors, version=g.version, alignment=g.alignment)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fout.write(head)
        fin.seek(g.data_offset)
        shutil.copyfileobj(fin, fout, 1 << 22)
    return dst


def craft(src: str | Path, dst: str | Path, *, kv: KV | None = None, tensors: Callable | None = None,
          extra_tensors: list | None = None, raw: Callable[[bytes], bytes] | None = None) -> Path:
    """Rewrite ``src`` into ``dst``: ``kv`` edits the metadata (key -> (type, value) or
    None to delete), ``tensors`` maps each TensorInfo to (name, dims, type) or None
    (rebuild_gguf's tensor_map), ``raw`` edits the resulting bytes (tiny files only)."""
    src, dst = Path(src), Path(dst)
    kv = dict(kv or {})
    if tensors is None and not extra_tensors and "general.alignment" not in kv:
        _stream_rewrite(src, dst, kv)
    else:
        rebuild_gguf(src, dst, set_kv=kv, tensor_map=tensors, extra_tensors=extra_tensors or [])
    if raw is not None:
        dst.write_bytes(raw(dst.read_bytes()))
    return dst


def strings(items) -> tuple:
    return (VT.ARRAY, (VT.STRING, list(items)))


def int32s(items) -> tuple:
    return (VT.ARRAY, (VT.INT32, [int(x) for x in items]))


def with_vocab(src: str | Path, dst: str | Path, tokens: list, types: list[int], *, model: str,
               scores: list[float] | None = None, kv: KV | None = None) -> Path:
    """A copy of the tiny model ``src`` with this vocabulary; every special-token key of
    ``src`` is dropped (``kv`` sets the ones wanted) and token_embd gets one row per token."""
    n = len(tokens)
    md = metadata(src)
    edits: KV = {key: None for key in md if key.startswith("tokenizer.ggml.")}
    edits.update({
        "tokenizer.ggml.model": (VT.STRING, model),
        "tokenizer.ggml.tokens": strings(tokens),
        "tokenizer.ggml.token_type": int32s(types),
        "tokenizer.ggml.scores": (VT.ARRAY, (VT.FLOAT32, [float(s) for s in (scores or [0.0] * n)])),
        f"{md['general.architecture']}.vocab_size": (VT.UINT32, n),
    })
    edits.update(kv or {})

    def embd(t):
        return (t.name, (t.shape[0], n) if t.name in ("token_embd.weight", "output.weight") else t.shape, t.ggml_type)

    return rebuild_gguf(src, dst, set_kv=edits, tensor_map=embd)


# --------------------------------------------------------------------------------------
# The files cases start from
# --------------------------------------------------------------------------------------

NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


def wpm_vocab() -> tuple[list[str], list[int]]:
    """A small WordPiece vocabulary (59 tokens: under the default CLS/SEP ids 101/102):
    [PAD] [UNK] [CLS] [SEP] [MASK], letters, '##' letters, two words."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    types = [CONTROL, UNKNOWN, CONTROL, CONTROL, CONTROL]
    letters = "abcdefghijklmnopqrstuvwxyz"
    tokens += ["\u2581" + c for c in letters] + ["##" + c for c in letters] + ["\u2581hi", "\u2581hello"]
    types += [NORMAL] * (len(tokens) - len(types))
    return tokens, types


def ugm_vocab() -> tuple[list[str], list[int], list[float]]:
    """A small unigram (T5-style) vocabulary: <pad> </s> <unk>, pieces with log-probabilities."""
    tokens = ["<pad>", "</s>", "<unk>"]
    types = [CONTROL, CONTROL, UNKNOWN]
    pieces = ["\u2581", "\u2581hi", "\u2581hello"] + list("abcdefghijklmnopqrstuvwxyz<>|_")
    tokens += pieces
    types += [NORMAL] * len(pieces)
    scores = [0.0, 0.0, 0.0] + [-1.0 - i * 0.1 for i in range(len(pieces))]
    return tokens, types, scores


def rwkv_vocab(skip: int | None = None) -> list[bytes]:
    """An RWKV-world style vocabulary: every byte (escaped as the world tokenizer's file
    does: \\xNN), then a few words; ``skip`` leaves one byte out."""
    tokens = [b"\\x%02x" % b for b in range(256) if b != skip]
    return tokens + [b"hi", b"hello", b"<|im_start|>", b"<|im_end|>"]


def xcda_blob(units: dict[int, int], n_units: int, replacements: bytes) -> bytes:
    """A precompiled charsmap in sentencepiece's format: the u32 size of the XOR-compressed
    double array, its ``n_units`` u32 nodes (``units``: index -> value, others 0), then
    the NUL-terminated replacement strings."""
    arr = np.zeros(n_units, dtype="<u4")
    for i, v in units.items():
        arr[i] = v
    return struct.pack("<I", arr.nbytes) + arr.tobytes() + replacements


def xcda_leaf(c: int, value_node: int) -> int:
    """A node for input byte ``c`` (its LCHECK) that ends a match (LEAF), whose BASE
    leads to ``value_node`` (which holds the replacement's offset, with bit 31 set)."""
    return ((c ^ value_node) << 10) | (1 << 8) | c


def _proto_field(message: bytes, number: int) -> bytes:
    """The first length-delimited field ``number`` of a protobuf message (wire format)."""
    i = 0

    def varint() -> int:
        nonlocal i
        value = shift = 0
        while True:
            b = message[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    while i < len(message):
        key = varint()
        wire = key & 7
        if wire == 0:
            varint()
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        elif wire == 2:
            n = varint()
            if key >> 3 == number:
                return message[i : i + n]
            i += n
        else:
            raise ValueError(f"protobuf wire type {wire}")
    raise KeyError(number)


def sentencepiece_charsmap(rule: str = "nmt_nfkc") -> bytes:
    """The precompiled charsmap a real sentencepiece model carries (T5's is nmt_nfkc):
    a tiny unigram model is trained with ``rule`` and its normalizer spec read back
    (ModelProto field 3, NormalizerSpec field 2)."""
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    text = ["hello world, this is the tokenizer", "caf\u00e9 na\u00efve \u2460 \uff21\uff22 \ufb01"] * 20
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_writer=model, vocab_size=40,
                                   model_type="unigram", normalization_rule_name=rule, hard_vocab_limit=False,
                                   minloglevel=2)
    return _proto_field(_proto_field(model.getvalue(), 3), 2)


def charsmap_kv(blob: bytes) -> tuple:
    return (VT.ARRAY, (VT.UINT8, list(blob)))


@dataclass(frozen=True)
class Base:
    """How to make a case's starting file in ``tmp`` (``smol``: the real SmolLM2)."""

    make: Callable[[Path, Path], Path]
    about: str


def _tiny(spec: TinySpec) -> Callable[[Path, Path], Path]:
    return lambda tmp, smol: write_tiny_llama(tmp / f"tiny-{spec.tokenizer}-{spec.seed}.gguf", spec)


def _tiny_wpm(tmp: Path, smol: Path) -> Path:
    tokens, types = wpm_vocab()
    src = write_tiny_llama(tmp / "tiny-wpm-src.gguf", TinySpec(tokenizer="spm", seed=2))
    ids = {"bos_token_id": 2, "seperator_token_id": 3, "unknown_token_id": 1, "padding_token_id": 0}
    return with_vocab(src, tmp / "tiny-wpm.gguf", tokens, types, model="bert",
                      kv={f"tokenizer.ggml.{k}": (VT.UINT32, v) for k, v in ids.items()})


def _tiny_ugm(tmp: Path, smol: Path) -> Path:
    tokens, types, scores = ugm_vocab()
    src = write_tiny_llama(tmp / "tiny-ugm-src.gguf", TinySpec(tokenizer="spm", seed=3))
    ids = {"eos_token_id": 1, "unknown_token_id": 2, "padding_token_id": 0}
    kv = {f"tokenizer.ggml.{k}": (VT.UINT32, v) for k, v in ids.items()}
    kv["tokenizer.ggml.precompiled_charsmap"] = charsmap_kv(sentencepiece_charsmap())
    return with_vocab(src, tmp / "tiny-ugm.gguf", tokens, types, model="t5", scores=scores, kv=kv)


def _tiny_rwkv(tmp: Path, smol: Path) -> Path:
    tokens = rwkv_vocab()
    src = write_tiny_llama(tmp / "tiny-rwkv-src.gguf", TinySpec(tokenizer="spm", seed=4))
    return with_vocab(src, tmp / "tiny-rwkv.gguf", tokens, [NORMAL] * len(tokens), model="rwkv")


BASES: dict[str, Base] = {
    "smol": Base(lambda tmp, smol: smol, "the real SmolLM2-135M (BPE, 49,152 tokens)"),
    "tiny-spm": Base(_tiny(TinySpec(tokenizer="spm")), "a tiny llama with a SentencePiece vocabulary"),
    "tiny-bpe": Base(_tiny(TinySpec(tokenizer="bpe", seed=1)), "a tiny llama with a byte-level BPE vocabulary"),
    "tiny-wpm": Base(_tiny_wpm, "a tiny llama with a 59-token WordPiece (bert) vocabulary"),
    "tiny-ugm": Base(_tiny_ugm, "a tiny llama with a unigram (t5) vocabulary and sentencepiece's nmt_nfkc charsmap"),
    "tiny-rwkv": Base(_tiny_rwkv, "a tiny llama with an RWKV-world vocabulary"),
}


@dataclass(frozen=True)
class Case:
    """One hostile file: ``base`` rewritten with ``kv`` (a dict, or a function of the
    base's metadata returning one), ``tensors`` and/or ``raw`` (see :func:`craft`).
    ``expect`` is a fragment of the one line the CLI must print. ``llama`` says what
    this project's llama.cpp does with the file when nothing guards it: "abort" (the
    process dies), "hang", "refuses" (the load fails) or "" (not probed)."""

    name: str
    base: str
    expect: str
    kv: KV | Callable[[dict], KV] = field(default_factory=dict)
    tensors: Callable | None = None
    raw: Callable[[bytes], bytes] | None = None
    llama: str = ""

    def build(self, base_path: Path, dst: Path) -> Path:
        kv = self.kv(metadata(base_path)) if callable(self.kv) else self.kv
        return craft(base_path, dst, kv=kv, tensors=self.tensors, raw=self.raw)


# --------------------------------------------------------------------------------------
# Running a command as a user would, bounded and measured
# --------------------------------------------------------------------------------------


def isolated_env(root: Path) -> dict[str, str]:
    """The environment for an app or CLI child: its own data, cache, home and XDG folders
    under ``root`` (never the user's), the rest of this process's environment."""
    env = dict(os.environ)
    for var in ("SPECDESK_DATA_DIR", "SPECDESK_CACHE_DIR", "HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
                "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"):
        path = root / var.lower()
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        env[var] = str(path)
    env["XDG_CONFIG_DIRS"] = env["XDG_DATA_DIRS"] = str(root / "xdg-none")
    env["GGML_NO_BACKTRACE"] = "1"  # an abort would otherwise attach gdb to print a trace
    return env


@dataclass
class Result:
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    peak_rss: int  # bytes, of this child alone

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def _limit_address_space(limit: int) -> Callable[[], None]:
    def apply() -> None:  # in the child: a safety net, so a runaway loop cannot take the machine
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def run_cli(args: list[str], env: dict[str, str], *, timeout: float, address_space: int = 8 << 30) -> Result:
    """Run ``args``; kill its process group at ``timeout`` seconds. The peak RSS comes
    from ``os.wait4`` on this child, so other children of the test do not count."""
    out_path = Path(env["HOME"]) / "cli.stdout"
    err_path = Path(env["HOME"]) / "cli.stderr"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                             start_new_session=True, preexec_fn=_limit_address_space(address_space))
        waited: list = []
        reaper = threading.Thread(target=lambda: waited.append(os.wait4(p.pid, 0)), daemon=True)
        reaper.start()
        reaper.join(timeout)
        timed_out = reaper.is_alive()
        if timed_out:
            os.killpg(p.pid, signal.SIGKILL)
            reaper.join()
        _, status, usage = waited[0]
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return Result(None if timed_out else p.returncode, out_path.read_text(errors="replace"),
                  err_path.read_text(errors="replace"), usage.ru_maxrss * 1024)
