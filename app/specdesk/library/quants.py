"""What a model's file would weigh in another quantization, and which higher one a
given amount of memory would buy instead ("skip the draft, spend its memory on a
better quant of the target").

Sizes scale with llama.cpp's bits per weight for each quantization type (the figures
llama.cpp's quantize tool lists for a 7-8B model); a model's own file fixes the
scale, so embeddings and the output layer kept at a higher precision are counted."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from ..fmt import format_bytes
from .gguf import inspect_gguf

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
