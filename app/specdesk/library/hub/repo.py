"""What a Hugging Face repo holds: its GGUF models, named by file and quantization.

``list_gguf``
    The GGUF models of a repo (``HfApi.model_info(files_metadata=True)``), one
    ``HubModelFile`` per model: a split GGUF (``name-00001-of-00003.gguf``, ...) is one
    entry with its parts in order. Sizes come from the API, the quantization type from
    the file name.
``pick``
    One entry by file name or quantization, with a one-line error that lists what the
    repo has when nothing (or more than one thing) matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ..gguf.split import SPLIT_RE
from .errors import DownloadError, _map_error
from .location import _endpoint_now

# --------------------------------------------------------------------------------------
# File names
# --------------------------------------------------------------------------------------

# Q4_K_M, Q8_0, Q4_0_4_4, Q6_K, IQ4_XS, IQ2_XXS, TQ1_0, F16, BF16, F32, MXFP4, ...
_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])(I?Q[1-8](?:_[0-9])*(?:_K)?(?:_(?:XXS|XS|NL|S|M|L|XL))?|TQ[12]_0|MXFP4|BF16|FP16|FP32|F16|F32)"
    r"(?![A-Za-z0-9])",
    re.IGNORECASE,
)


def parse_quant(filename: str) -> str | None:
    """The quantization type named in a GGUF file name (the last one), upper case:
    ``"model.Q4_K_M.gguf"`` -> ``"Q4_K_M"``, ``"x-IQ4_XS-00001-of-00002.gguf"`` ->
    ``"IQ4_XS"``; None if the name has none."""
    name = filename.rsplit("/", 1)[-1]
    m = SPLIT_RE.match(name)
    stem = m.group("base") if m else re.sub(r"\.gguf$", "", name, flags=re.IGNORECASE)
    found = _QUANT_RE.findall(stem)
    if not found:
        return None
    q = found[-1].upper()
    return {"FP16": "F16", "FP32": "F32"}.get(q, q)


def _is_projector(filename: str) -> bool:
    # Vision projectors (mmproj-*.gguf) are not language models: llama.cpp refuses them as one.
    return filename.rsplit("/", 1)[-1].lower().startswith("mmproj")


# --------------------------------------------------------------------------------------
# Listing
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HubFile:
    """One file of a repo."""

    filename: str  # the path in the repo
    size: int | None
    quant: str | None
    sha256: str | None = None  # the LFS sha256, when the Hub gives it


@dataclass(frozen=True)
class HubModelFile:
    """One model of a repo: a single GGUF, or all the parts of a split GGUF in order."""

    quant: str | None
    files: tuple[HubFile, ...]

    @property
    def primary(self) -> HubFile:
        """The file llama.cpp opens: the only one, or part 1."""
        return self.files[0]

    @property
    def total_size(self) -> int | None:
        sizes = [f.size for f in self.files]
        return None if any(s is None for s in sizes) else sum(sizes)  # type: ignore[arg-type]

    @property
    def is_split(self) -> bool:
        return SPLIT_RE.match(self.primary.filename.rsplit("/", 1)[-1]) is not None

    @property
    def n_parts(self) -> int:
        """How many parts the model has (from the file names); 1 if it is not split."""
        m = SPLIT_RE.match(self.primary.filename.rsplit("/", 1)[-1])
        return int(m.group("count")) if m else 1

    @property
    def complete(self) -> bool:
        """All parts are there (always true for a single file)."""
        if not self.is_split:
            return True
        matches = [SPLIT_RE.match(f.filename.rsplit("/", 1)[-1]) for f in self.files]
        nos = [int(m.group("no")) if m else 0 for m in matches]
        return nos == list(range(1, self.n_parts + 1))

    @property
    def name(self) -> str:
        """A display name: the file name, or for a split model ``base.gguf``."""
        head, _, tail = self.primary.filename.rpartition("/")
        m = SPLIT_RE.match(tail)
        if m is None:
            return self.primary.filename
        return f"{head}/{m.group('base')}.gguf" if head else f"{m.group('base')}.gguf"


def group_gguf(files: Iterable[HubFile]) -> list[HubModelFile]:
    """Group GGUF files into models: split parts together in part order; vision
    projectors (mmproj-*) and non-GGUF files are left out. Sorted by name."""
    singles: list[HubModelFile] = []
    splits: dict[tuple[str, str], list[tuple[int, HubFile]]] = {}
    for f in files:
        if not f.filename.lower().endswith(".gguf") or _is_projector(f.filename):
            continue
        head, _, tail = f.filename.rpartition("/")
        m = SPLIT_RE.match(tail)
        if m is None:
            singles.append(HubModelFile(f.quant, (f,)))
        else:
            key = (f"{head}/{m.group('base')}" if head else m.group("base"), m.group("count"))
            splits.setdefault(key, []).append((int(m.group("no")), f))
    models = list(singles)
    for parts in splits.values():
        parts.sort(key=lambda p: p[0])
        ordered = tuple(p[1] for p in parts)
        models.append(HubModelFile(ordered[0].quant, ordered))
    models.sort(key=lambda m: m.name.lower())
    return models


def list_gguf(repo_id: str, revision: str | None = None, token: str | None = None, *,
              endpoint: str | None = None) -> list[HubModelFile]:
    """The GGUF models of ``repo_id`` at ``revision`` (default: main), with sizes."""
    from huggingface_hub import HfApi

    ep = (endpoint or _endpoint_now()).rstrip("/")
    try:
        info = HfApi(endpoint=ep).model_info(repo_id, revision=revision, files_metadata=True, token=token)
    except Exception as e:  # noqa: BLE001 - mapped to one-line errors, others re-raised
        raise _map_error(e, repo_id=repo_id, revision=revision, endpoint=ep, token=token) from e
    files = []
    for s in info.siblings or []:
        size = s.lfs.size if s.lfs is not None else s.size
        sha = s.lfs.sha256 if s.lfs is not None else None
        files.append(HubFile(s.rfilename, size, parse_quant(s.rfilename), sha))
    return group_gguf(files)


def _describe(m: HubModelFile) -> str:
    parts = f", {len(m.files)} parts" if m.is_split else ""
    return f"{m.quant or '?'} ({m.name}{parts})"


def pick(files: list[HubModelFile], filename: str | None = None, quant: str | None = None) -> HubModelFile:
    """The one model matching ``filename`` (the file name or path in the repo, any part
    of a split model, or its ``base.gguf`` name) and/or ``quant`` (case-insensitive).
    With neither, the repo must have exactly one model. Raises ``DownloadError``
    listing what is available when nothing or several match."""
    if not files:
        raise DownloadError("the repo has no GGUF files")
    candidates = list(files)
    if filename is not None:
        want = filename.strip().lower()

        def matches(m: HubModelFile) -> bool:
            names = {m.name.lower(), m.name.rsplit("/", 1)[-1].lower()}
            for f in m.files:
                names.add(f.filename.lower())
                names.add(f.filename.rsplit("/", 1)[-1].lower())
            return want in names

        candidates = [m for m in candidates if matches(m)]
        if not candidates:
            available = ", ".join(m.name for m in files)
            raise DownloadError(f"no GGUF file named '{filename}' in the repo; available: {available}")
    if quant is not None:
        want_q = quant.strip().upper()
        by_quant = [m for m in candidates if (m.quant or "").upper() == want_q]
        if not by_quant:
            quants = sorted({m.quant for m in candidates if m.quant})
            have = ", ".join(quants) if quants else "none named in the file names"
            where = f" named '{filename}'" if filename is not None else ""
            raise DownloadError(f"no {want_q} file{where} in the repo; available quants: {have}")
        candidates = by_quant
    if len(candidates) == 1:
        return candidates[0]
    listing = "; ".join(_describe(m) for m in candidates)
    if quant is not None:
        raise DownloadError(f"{len(candidates)} files have quant {quant.strip().upper()}: {listing}; "
                            "choose one with --file")
    raise DownloadError(f"the repo has {len(candidates)} GGUF models, choose one with --quant or --file: {listing}")
