"""What a model's file would weigh in another quantization, and which higher one a
given amount of memory would buy instead ("skip the draft, spend its memory on a
better quant of the target").

Sizes scale with llama.cpp's bits per weight for each quantization type (the figures
llama.cpp's quantize tool lists for a 7-8B model); a model's own file fixes the
scale, so embeddings and the output layer kept at a higher precision are counted."""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import SpecDeskError
from ..fmt import format_bytes
from .defaults import default_models
from .gguf import inspect_gguf
from .hub import list_gguf

#: Bits per weight of llama.cpp's quantization types, lowest first.
BITS_PER_WEIGHT = {
    "Q2_K": 3.35, "Q3_K_S": 3.50, "Q3_K_M": 3.91, "Q3_K_L": 4.27, "IQ4_XS": 4.25, "Q4_0": 4.55,
    "Q4_K_S": 4.58, "IQ4_NL": 4.50, "Q4_1": 5.00, "Q4_K_M": 4.89, "Q5_0": 5.54, "Q5_K_S": 5.54,
    "Q5_1": 6.00, "Q5_K_M": 5.69, "Q6_K": 6.56, "Q8_0": 8.50, "BF16": 16.0, "F16": 16.0,
}
#: The quantizations people publish and pick between, in order of quality.
LADDER = ("Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "F16")


@dataclass(frozen=True)
class QuantUpgrade:
    current: str
    better: str
    current_bytes: int
    better_bytes: int

    @property
    def extra_bytes(self) -> int:
        return self.better_bytes - self.current_bytes

    def describe(self) -> str:
        return (f"{self.current} → {self.better}: about {format_bytes(self.better_bytes)} "
                f"(+{format_bytes(self.extra_bytes)})")

    def to_dict(self) -> dict:
        return {**asdict(self), "extra_bytes": self.extra_bytes}


def quant_of(path: Path) -> tuple[str | None, int]:
    """(quantization type name, file size) of a GGUF, from its metadata."""
    info = inspect_gguf(path)
    ft = info.get("file_type")
    quant = None
    if isinstance(ft, str) and ft:
        quant = ft.removeprefix("MOSTLY_").removeprefix("ALL_")
    return quant, int(info.get("file_size") or Path(path).stat().st_size)


def estimated_size(current: str, current_bytes: int, other: str) -> int | None:
    a, b = BITS_PER_WEIGHT.get(current), BITS_PER_WEIGHT.get(other)
    if not a or not b:
        return None
    return int(current_bytes * b / a)


def best_upgrade(current: str | None, current_bytes: int, budget_bytes: int) -> QuantUpgrade | None:
    """The highest quantization on LADDER above ``current`` whose file grows by at most
    ``budget_bytes``; None when none does or ``current`` is not a known type."""
    if not current or current not in BITS_PER_WEIGHT or budget_bytes <= 0:
        return None
    best = None
    for q in LADDER:
        if BITS_PER_WEIGHT[q] <= BITS_PER_WEIGHT[current]:
            continue
        size = estimated_size(current, current_bytes, q)
        if size is not None and size - current_bytes <= budget_bytes:
            best = QuantUpgrade(current, q, current_bytes, size)
    return best


def upgrade_for(target: Path, budget_bytes: int) -> QuantUpgrade | None:
    quant, size = quant_of(target)
    return best_upgrade(quant, size, budget_bytes)


# -- the same model, published ---------------------------------------------------------------


@dataclass(frozen=True)
class PublishedQuant:
    """A higher quantization of the target that its Hugging Face repo publishes."""

    repo: str
    file: str  # the model's name in the repo (a split model: its base.gguf name)
    quant: str
    size: int | None  # the bytes the Hub lists (all parts)
    current_bytes: int

    @property
    def command(self) -> str:
        return f"specdesk models download {self.repo} --file {self.file}"

    def describe(self) -> str:
        size = f", {format_bytes(self.size)}" if self.size else ""
        extra = f" (+{format_bytes(self.size - self.current_bytes)})" if self.size else ""
        return f"{self.repo} publishes {self.quant} as {self.file}{size}{extra}: `{self.command}`"

    def to_dict(self) -> dict:
        return {**asdict(self), "command": self.command}


def hub_repo_of(target: Path) -> str | None:
    """The Hugging Face repo a target came from: its place in the HF cache
    (``models--OWNER--NAME/snapshots/REV/...``), or the default pair's manifest for a
    file of that name. None when nothing tells."""
    for part in Path(target).absolute().parts:
        if part.startswith("models--") and "--" in part[len("models--"):]:
            return part[len("models--"):].replace("--", "/", 1)
    try:
        for m in default_models():
            if m.file == Path(target).name and (m.huggingface or {}).get("repo"):
                return str(m.huggingface["repo"])
    except (OSError, ValueError, SpecDeskError):  # no manifest: nothing tells
        return None
    return None


def published_upgrade(target: Path, budget_bytes: int, repo: str | None = None,
                      timeout: float = 15.0) -> PublishedQuant | None:
    """The highest quantization above the target's own that its repo publishes and whose
    listed size grows by at most ``budget_bytes``: the estimate's suggestion when the
    repo has it, else the best one the repo does have. None when the target's repo is
    unknown or has none that fits. Raises SpecDeskError (one line) when the Hub cannot
    be asked within ``timeout`` seconds or refuses."""
    repo = repo or hub_repo_of(target)
    current, current_bytes = quant_of(Path(target))
    if repo is None or not current or current not in BITS_PER_WEIGHT or budget_bytes <= 0:
        return None
    box: dict = {}

    def ask() -> None:
        try:
            box["files"] = list_gguf(repo)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=ask, name="hub-quants", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise SpecDeskError(f"the Hub did not list {repo} within {timeout:.0f} s")
    if "error" in box:
        e = box["error"]
        raise e if isinstance(e, SpecDeskError) else SpecDeskError(f"cannot list {repo}: {e}")
    best: PublishedQuant | None = None
    rank = {q: i for i, q in enumerate(LADDER)}
    for m in box["files"]:
        q = (m.quant or "").upper()
        if q not in rank or BITS_PER_WEIGHT[q] <= BITS_PER_WEIGHT[current] or not m.complete:
            continue
        size = m.total_size or estimated_size(current, current_bytes, q)
        if size is None or size - current_bytes > budget_bytes:
            continue
        if best is None or rank[q] > rank[best.quant]:
            best = PublishedQuant(repo, m.name, q, m.total_size, current_bytes)
    return best


def offer_upgrade(target: Path, estimate: QuantUpgrade | None, budget_bytes: int
                  ) -> tuple[PublishedQuant | None, str | None]:
    """(the higher quant the target's repo publishes within ``budget_bytes``, or a note
    why none is offered); asked only when the estimate found one. Never raises: the
    advice stands without it."""
    if estimate is None:
        return None, None
    repo = hub_repo_of(target)
    if repo is None:
        return None, "the target's Hugging Face repo is unknown (not from the HF cache or the default pair)"
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return None, f"HF_HUB_OFFLINE is set: {repo} was not asked which quantizations it publishes"
    try:
        found = published_upgrade(target, budget_bytes, repo=repo)
    except SpecDeskError as e:
        return None, f"could not check {repo}: {e}"
    return found, None if found else f"{repo} publishes no higher quantization within the draft's memory"
