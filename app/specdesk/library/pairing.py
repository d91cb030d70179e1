"""Which drafts can speculate for a target: llama.cpp's vocabulary rules, applied to
the vocabularies GGUF files describe, after each file passed GGUF validation.

The rules are ``rules.vocab``'s (llama.cpp's ``common_speculative_are_compatible``),
the same code the session applies to two loaded models. Here they run on the
:class:`~specdesk.rules.vocab.VocabInfo` that ``library.gguf`` derives from each
file's metadata the way llama.cpp's vocabulary loader does (tokens, tokenizer type,
BOS/EOS and add-BOS/EOS with llama.cpp's defaults). No model is ever loaded here, so
pairing a whole library is a header read per file, and a hostile file is at worst
refused by validation -- it never reaches llama.cpp.

The CLI's ``models check-pair`` and ``models drafts``, the app's draft picker and the
model library all use this module.

Pairing a target against a whole library would read every vocabulary each time, so
each file's vocabulary is summarised once in a *fingerprint*, cached by path + size +
mtime: the vocab type, the special tokens, the size, and hashes of the token texts
from id 5 up to every size within 128 of the file's own (the only sizes a compatible
partner can share with it). Two fingerprints decide every rule exactly; only to name
the first differing token of an incompatible pair are the two vocabularies read again.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable

from ..rules.vocab import (
    CHECK_START_TOKEN_ID,
    MAX_SIZE_DIFFERENCE,
    Compatibility,
    VocabHeader,
    VocabInfo,
    check_compatible,
    check_header,
)
from ..errors import Cancelled, SpecDeskError
from ..jsoncache import JsonCache
from .gguf import validate_gguf, vocab_info_from_gguf
from .gguf.heads import HEAD_FILES, head_problem, head_summary, head_what
from .gguf.split import model_size

log = logging.getLogger(__name__)
_cache_lock = threading.Lock()

Cancel = Callable[[], bool]

#: Version of the fingerprint cache; a file of another version is ignored.
CACHE_VERSION = 3  # 3: the shared cache format (entries/value)


def vocab_of(path: str | Path, cancel: Cancel | None = None) -> VocabInfo:
    """The vocabulary llama.cpp would build from the file (validated first)."""
    return vocab_info_from_gguf(validate_gguf(path, cancel=cancel), cancel)


def check_pair(target: str | Path, draft: str | Path, cancel: Cancel | None = None) -> Compatibility:
    """The exact check: both vocabularies read, every rule applied in llama.cpp's order;
    for a draft file that is a head of another model (library/gguf/heads.py), its fit to it too."""
    return head_fit(target, draft, check_compatible(vocab_of(target, cancel), vocab_of(draft, cancel)))


def head_fit(target: str | Path, draft: str | Path, res: Compatibility) -> Compatibility:
    """``res`` (the vocabularies' answer), and, where ``draft`` is a head of another model,
    whether it fits this target (a head never drafts translated: it reads the target's state)."""
    if not res.ok:
        return res
    why = head_problem(validate_gguf(target), validate_gguf(draft))
    return res if why is None else Compatibility(False, "head", why)


@dataclass(frozen=True)
class Fingerprint(VocabHeader):
    """A vocabulary's header and, instead of its texts, their hashes:
    sha256 of the token texts [5, m) for m in [n_tokens - 128, n_tokens]."""

    hashes: dict

    def hash_at(self, m: int) -> str | None:
        return self.hashes.get(str(m))


def fingerprint_of(vi: VocabInfo) -> Fingerprint:
    n = vi.n_tokens
    lo = max(CHECK_START_TOKEN_ID, n - MAX_SIZE_DIFFERENCE)
    h = hashlib.sha256()
    hashes = {}
    for i in range(CHECK_START_TOKEN_ID, n + 1):
        if i >= lo:
            hashes[str(i)] = h.hexdigest()
        if i < n:
            h.update(vi.text(i).encode("utf-8", "surrogatepass"))
            h.update(b"\0")
    return Fingerprint(vi.vocab_type, n, vi.bos, vi.eos, vi.add_bos, vi.add_eos, hashes)


def _clean(entry: object) -> dict | None:
    """A cache entry as written below, or None."""
    if not isinstance(entry, dict) or not isinstance(entry.get("stamp"), str) or not isinstance(entry.get("fp"), dict):
        return None
    try:
        fp = Fingerprint(**entry["fp"])
    except TypeError:
        return None
    ok = (all(isinstance(getattr(fp, k), int) for k in ("vocab_type", "n_tokens", "bos", "eos"))
          and isinstance(fp.hashes, dict))
    return {"stamp": entry["stamp"], "fp": fp} if ok else None


#: Fingerprints by file (real path), with the file's size and mtime: a changed file is read again.
CACHE = JsonCache("vocab-fingerprints.json", "vocabulary cache", version=CACHE_VERSION, max_entries=512, clean=_clean)


def _key(path: Path) -> tuple[str, str]:
    st = path.stat()
    real = str(path.resolve())
    return real, f"{st.st_size}:{st.st_mtime_ns}"


def fingerprint(path: str | Path, use_cache: bool = True, cancel: Cancel | None = None) -> Fingerprint:
    """The file's vocabulary fingerprint (validated, read from the metadata, cached)."""
    path = Path(path)
    real, stamp = _key(path)
    if use_cache:
        with _cache_lock:
            hit = CACHE.load(real)
        if hit is not None and hit["stamp"] == stamp:
            return hit["fp"]
    fp = fingerprint_of(vocab_of(path, cancel))
    with _cache_lock:
        CACHE.save(real, {"stamp": stamp, "fp": asdict(fp)})
    return fp


def compare(target: Fingerprint, draft: Fingerprint) -> Compatibility | None:
    """llama.cpp's rules on fingerprints; None when only the texts' first difference
    is unknown (the pair is then incompatible: read both to name the token)."""
    bad = check_header(target, draft)
    if bad is not None:
        return bad
    common = min(target.n_tokens, draft.n_tokens)
    if target.hash_at(common) == draft.hash_at(common) and target.hash_at(common) is not None:
        return Compatibility(True, n_common=common)
    return None


def check_pair_cached(target: str | Path, draft: str | Path) -> Compatibility:
    """Same answer as :func:`check_pair`, from cached fingerprints when possible."""
    res = compare(fingerprint(target), fingerprint(draft))
    return res if res is not None else check_pair(target, draft)


@dataclass(frozen=True)
class DraftCandidate:
    """A library model checked against a target.

    ``compatible``: it shares the target's vocabulary (llama.cpp's rules), so it
    drafts in the target's own tokens. ``translated``: it does not, but it is
    smaller than the target, so it can still draft text that is re-tokenized for the
    target (exact either way: the target verifies its own tokens). ``cost_ratio``
    estimates a draft step's cost in target steps from the file sizes (decoding reads
    every weight once per token, so the bytes set the pace on a CPU)."""

    path: Path
    name: str
    size: int
    compatible: bool
    reason: str
    rule: str = ""
    translated: bool = False
    cost_ratio: float | None = None
    #: a head of another model (EAGLE-3, DFlash, a Gemma 4 assistant): what it is and which
    #: target it drafts for, in a line ("" for a model of its own, or a head that does not fit)
    head: str = ""
    head_label: str = ""  # "EAGLE-3 head", "Gemma 4 assistant"

    @property
    def usable(self) -> bool:
        return self.compatible or self.translated

    @property
    def kind(self) -> str:
        return "same vocabulary" if self.compatible else "translated" if self.translated else "unusable"

    def to_dict(self) -> dict:
        return {"path": str(self.path), "name": self.name, "size": self.size, "compatible": self.compatible,
                "translated": self.translated, "kind": self.kind,
                "cost_ratio": None if self.cost_ratio is None else round(self.cost_ratio, 4),
                "reason": self.reason or None, "rule": self.rule or None, "head": self.head or None}


def drafts_for(
    target: str | Path,
    candidates: Iterable[tuple[Path, str]],
    cancel: Callable[[], bool] | None = None,
    progress: Callable[[str, float], None] | None = None,
) -> list[DraftCandidate]:
    """Every candidate (path, name) checked against the target: same-vocabulary drafts
    first, then the smaller models that can draft translated, each group smallest
    (cheapest to run) first; then the others with their reason."""
    tfp = fingerprint(target, cancel=cancel)
    treal = Path(target).resolve()
    tsize = model_size(Path(target))  # a split model's: all its parts
    items = [(Path(p), n) for p, n in candidates if Path(p).resolve() != treal]
    out: list[DraftCandidate] = []
    for i, (p, name) in enumerate(items):
        if cancel is not None and cancel():
            raise Cancelled("pairing was cancelled")
        if progress:
            progress(f"checking {name}", i / max(1, len(items)))
        try:
            size = model_size(p)
            res = compare(tfp, fingerprint(p, cancel=cancel))
            if res is None:
                res = check_pair(target, p, cancel)
        except Cancelled:
            raise
        except SpecDeskError as e:
            out.append(DraftCandidate(p, name, 0, False, str(e), "unreadable"))
            continue
        except OSError as e:
            out.append(DraftCandidate(p, name, 0, False, f"{p.name}: {e.strerror or e}", "unreadable"))
            continue
        ratio = size / tsize if tsize else None
        d = validate_gguf(p)
        if head_what(d) is not None:  # a head fits its own target only, in its vocabulary: never translated
            res = head_fit(target, p, res)
            out.append(DraftCandidate(p, name, size, res.ok, "" if res.ok else res.reason, res.rule, cost_ratio=ratio,
                                      head=head_summary(d) if res.ok else "", head_label=HEAD_FILES[d.architecture or ""][1]))
            continue
        reason = res.reason
        translated = False
        if not res.ok:
            translated = size < tsize
            reason = f"another vocabulary ({res.reason})" if translated else \
                f"{res.reason}; as a translated draft it would not be smaller than the target"
        out.append(DraftCandidate(p, name, size, res.ok, reason, res.rule, translated, ratio))
    rank = {"same vocabulary": 0, "translated": 1, "unusable": 2}
    out.sort(key=lambda c: (rank[c.kind], c.size if c.usable else 0, c.name.lower()))
    return out
