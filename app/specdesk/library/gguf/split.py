"""Split GGUF models as llama.cpp names them: ``name-00001-of-00003.gguf`` and its parts.

llama.cpp's ``gguf-split`` writes a model as N files named by ``llama_split_path``
(``%s-%05d-of-%05d.gguf``), and its loader opens the first one and finds the others
beside it by the same rule. A user can name the model by any of its parts; SpecDesk
shows it as one entry and always hands llama.cpp the first part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SPLIT_RE = re.compile(r"^(?P<base>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class SplitName:
    """The parts of a split file name: ``base``, its 1-based part number and the count."""

    base: str
    no: int
    count: int
    suffix: str = ".gguf"  # as written (a name may say .GGUF)

    def part(self, no: int) -> str:
        """The file name of part ``no`` (1-based), as llama_split_path writes it."""
        return f"{self.base}-{no:05d}-of-{self.count:05d}{self.suffix}"

    @property
    def display(self) -> str:
        """One name for the whole model: ``base.gguf``."""
        return f"{self.base}{self.suffix}"


def parse_split_name(name: str) -> SplitName | None:
    """The split name in a file name (a path's last component), or None when the name
    is not that of a part (including a part number of 0 or past the count)."""
    tail = name.replace("\\", "/").rsplit("/", 1)[-1]
    m = SPLIT_RE.match(tail)
    if m is None:
        return None
    no, count = int(m.group("no")), int(m.group("count"))
    if not 1 <= no <= count:
        return None
    return SplitName(m.group("base"), no, count, tail[-5:])


def split_parts(path: Path) -> list[Path]:
    """Every part of the model ``path`` belongs to, in order, in its folder (present or
    not); ``[path]`` for a file that is not part of a split model."""
    path = Path(path)
    s = parse_split_name(path.name)
    if s is None:
        return [path]
    return [path.with_name(s.part(i)) for i in range(1, s.count + 1)]


def first_part(path: Path) -> Path:
    """The file llama.cpp must be given to load the model ``path`` is part of."""
    return split_parts(path)[0]


def missing_parts(path: Path) -> list[Path]:
    """The parts of ``path``'s model that are not in its folder."""
    return [p for p in split_parts(path) if not p.is_file()]
