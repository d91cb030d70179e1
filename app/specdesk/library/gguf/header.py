"""The parsed header of a GGUF file: its tensor infos and metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .arrays import GGUFArray


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor's header entry. ``offset`` is absolute (from the start of the file)."""

    name: str
    shape: tuple[int, ...]  # ggml order: shape[0] is the row length (ne[0])
    ggml_type: int
    type_name: str
    offset: int
    n_bytes: int
    info_offset: int = -1  # where this tensor's info record starts in the header

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class GGUFFile:
    """The parsed header of a GGUF file. Treat it as read-only: ``validate_gguf``
    returns the same object for an unchanged file."""

    path: Path
    file_size: int
    version: int
    alignment: int
    data_offset: int
    metadata: dict[str, object]
    tensors: list[TensorInfo]
    #: key -> (GGUFValueType, element GGUFValueType for arrays else None)
    value_types: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    #: key -> byte offset where its key/value record starts
    kv_offsets: dict[str, int] = field(default_factory=dict)
    #: end of the tensor infos (the data section starts at the next aligned offset)
    header_end: int = 0
    #: the file's modification time when it was read (load_array checks it)
    mtime_ns: int = 0
    #: key -> where each top-level array longer than LAZY_ARRAY_MIN is (loaded or not)
    arrays: dict[str, GGUFArray] = field(default_factory=dict)

    def get(self, key: str, default: object = None) -> object:
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    def tensor(self, name: str) -> TensorInfo | None:
        for t in self.tensors:
            if t.name == name:
                return t
        return None

    def unloaded(self) -> "GGUFFile":
        """A copy whose long arrays are references again (what a lazy read gives)."""
        md = dict(self.metadata)
        md.update(self.arrays)
        return GGUFFile(self.path, self.file_size, self.version, self.alignment, self.data_offset, md,
                        self.tensors, self.value_types, self.kv_offsets, self.header_end, self.mtime_ns,
                        self.arrays)


