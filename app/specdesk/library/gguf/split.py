"""Split GGUF models as llama.cpp names and loads them: ``name-00001-of-00003.gguf`` and its parts.

llama.cpp's ``gguf-split`` writes a model as N files named by ``llama_split_path``
(``%s-%05d-of-%05d.gguf``), and its loader opens the first one and finds the others
beside it by the same rule. A user can name the model by any of its parts; SpecDesk
shows it as one entry and always hands llama.cpp the first part.

Names: :func:`parse_split_name`, :func:`split_parts`, :func:`first_part`,
:func:`missing_parts`, and :func:`canonical` (a path that names a part without losing
the name llama.cpp needs). Headers: :func:`read_model` reads every part of the model a
path names and checks the set as llama.cpp's loader (``llama_model_loader``, 0.3.36)
does; :func:`merged` is the model as one header, every part's tensors in order.

What llama.cpp requires of a split set, and where (``src/llama-model-loader.cpp``):

* ``split.count`` is a uint16 (``get_key``, a throw); 0 or 1 means a single file,
  whatever the name;
* the first part's name ends in exactly ``-00001-of-<split.count>.gguf``, lower-case
  (``llama_split_prefix``: "invalid split file name"), and the others are found beside
  it by that name ("failed to load GGUF split");
* the first part's ``split.no`` is a uint16 and 0 ("illegal split file idx ... must be
  loaded with the first split"); every later part has ``split.no`` equal to its index,
  read with ``gguf_get_val_u16``, which *asserts* the type: a ``split.no`` of another
  type aborts the process;
* no tensor name appears in two parts ("tensor ... is duplicated"), and the first
  part's ``split.tensors.count`` (an int32) is the number of tensors in all parts
  ("corrupted model: N tensors expected but M found");
* each part is a GGUF file of its own (``gguf_init_from_file``), its tensors inside it
  ("not within the file bounds"): :func:`~.reader.read_gguf` checks each.

The metadata (architecture, vocabulary, ...) is read from the first part only.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from ...errors import ModelFileError
from .header import GGUFFile
from .reader import read_gguf
from .spec import VT, type_name
from .stream import Cancel
from .text import label as _label
from .text import n as _n

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


def canonical(path: Path) -> Path:
    """One absolute path per model, wherever it was reached from, for comparing and
    remembering models: symlinks resolved -- except for a split model, named by its
    first part (when that is there) in a resolved folder, without resolving the file
    itself, since llama.cpp finds the other parts by that name (in the Hugging Face
    cache each part is a link to a blob named by its hash)."""
    path = Path(path)
    if parse_split_name(path.name) is None:
        return path.resolve()
    first = first_part(path)
    return Path(os.path.realpath(path.parent)) / (first.name if first.is_file() else path.name)


def model_size(path: Path) -> int:
    """The bytes of the model ``path`` names: every part of a split model that is there."""
    total = 0
    for p in split_parts(path):
        try:
            total += p.stat().st_size
        except OSError:
            pass
    return total


# -- the set as llama.cpp's loader reads it -------------------------------------------------

def split_count(g: GGUFFile) -> int:
    """``split.count`` (0 when absent), refusing a type llama.cpp cannot read."""
    return _u16(g, "split.count", required=False) or 0


def _u16(g: GGUFFile, key: str, required: bool, why: str = "") -> int | None:
    if key not in g.metadata:
        if required:
            raise ModelFileError(f"{_label(g.path)}: missing metadata key '{key}'{why}")
        return None
    vtype, etype = g.value_types[key]
    if vtype != VT.UINT16:
        raise ModelFileError(f"{_label(g.path)}: metadata key '{key}' is {type_name(vtype, etype)}; llama.cpp "
                             "needs a uint16 (and aborts on another type in a later part)")
    return int(g.metadata[key])  # type: ignore[call-overload]


def _i32(g: GGUFFile, key: str) -> int:
    if key not in g.metadata:
        raise ModelFileError(f"{_label(g.path)}: missing metadata key '{key}' (llama.cpp needs it to load a split model)")
    vtype, etype = g.value_types[key]
    if vtype != VT.INT32:
        raise ModelFileError(f"{_label(g.path)}: metadata key '{key}' is {type_name(vtype, etype)}; llama.cpp needs an int32")
    return int(g.metadata[key])  # type: ignore[call-overload]


def read_model(path: str | os.PathLike[str], *, load: Collection[str] = (), cancel: Cancel | None = None,
               lazy_arrays: bool = True) -> list[GGUFFile]:
    """The headers of the model ``path`` names, each read with :func:`~.reader.read_gguf`:
    ``[its own]`` for a single file; for a split model (``split.count`` > 1) every part
    in order, whichever part was named, after the checks llama.cpp's loader makes of
    the set (see the module docstring). A missing part, a part of another set or a
    name llama.cpp cannot follow raises :class:`ModelFileError` with one line.
    ``load``: keys read in full in the first part (as ``read_gguf``'s)."""
    path = Path(path)
    named = read_gguf(path, lazy_arrays=lazy_arrays, load=load, cancel=cancel)
    count = split_count(named)
    if count <= 1:
        return [named]
    name = parse_split_name(path.name)
    if name is None or name.count != count or name.suffix != ".gguf":
        raise ModelFileError(
            f"{_label(path)}: is one part of a model split into {count} files, but its name does not end in "
            f"-0000N-of-{count:05d}.gguf, which llama.cpp needs to find the other parts; give the parts "
            "the names gguf-split wrote")
    parts = split_parts(path)
    headers: list[GGUFFile] = []
    for i, p in enumerate(parts):
        if p == path:
            g = named
        elif not p.is_file():
            raise ModelFileError(f"{name.display}: part {i + 1} of {count} ({_label(p)}) is missing from {p.parent}; "
                                 "a split model needs all its parts in one folder")
        else:
            g = read_gguf(p, lazy_arrays=lazy_arrays, load=load if i == 0 else (), cancel=cancel)
        _check_part(g, i, count, parts[0])
        headers.append(g)
    _check_tensors(headers, name.display)
    return headers


def _check_part(g: GGUFFile, i: int, count: int, first: Path) -> None:
    """Part ``i`` (0-based) of a set of ``count``: its split.no, and its split.count if it has one."""
    no = _u16(g, "split.no", required=True, why=f" (part {i + 1} of a split model)")
    if no != i:
        raise ModelFileError(f"{_label(g.path)}: split.no is {no}, but its name makes it part {i + 1} of {count} "
                             f"(split.no {i}); it belongs to another set or was renamed")
    if i:
        own = _u16(g, "split.count", required=False)
        if own is not None and own != count:
            raise ModelFileError(f"{_label(g.path)}: split.count is {own}, but {_label(first)} says the model has "
                                 f"{count} parts; it belongs to another set")


def _check_tensors(headers: list[GGUFFile], display: str) -> None:
    want = _i32(headers[0], "split.tensors.count")
    where: dict[str, int] = {}
    for i, g in enumerate(headers):
        for t in g.tensors:
            if t.name in where:
                raise ModelFileError(f"{display}: tensor '{t.name[:80]}' is in part {where[t.name] + 1} and part "
                                     f"{i + 1}; llama.cpp refuses a duplicated tensor")
            where[t.name] = i
    if len(where) != want:
        raise ModelFileError(f"{display}: split.tensors.count is {_n(want)} but the {len(headers)} parts hold "
                             f"{_n(len(where))} tensors (a part of another set, or one cut short?)")


def merged(headers: list[GGUFFile]) -> GGUFFile:
    """The model as one header: the first part's (its path, metadata and file size, which
    :func:`~.reader.load_array` checks) with every part's tensors, in part order. A
    tensor's ``offset`` is within its own part."""
    if len(headers) == 1:
        return headers[0]
    return dataclasses.replace(headers[0], tensors=[t for g in headers for t in g.tensors])
