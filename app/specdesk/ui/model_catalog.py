"""The models the app offers, and which of them can draft for a target.

The model bar's lists come from the library's scan (models/, your folders, the HF
cache, LM Studio, Ollama), the files opened recently (kept in QSettings), and, before
the first scan ends, the GGUFs in models/. Pairing every one of them with a target
(``library.pairing.drafts_for``) reads their vocabularies, so it runs off the UI
thread; the newest target's result is kept for the draft picker.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, QSettings, Signal

from ..library.gguf.split import canonical
from ..library.pairing import drafts_for
from ..paths import models_dir
from .stored_paths import path_from_value, path_value
from .tasks import Task

log = logging.getLogger(__name__)

MAX_RECENT = 12


class ModelCatalog(QObject):
    #: (target, [DraftCandidate]) when the draft picker knows what pairs with the target
    pairing_checked = Signal(object)

    def __init__(self, library, start_task: Callable[[Task], Task], parent: QObject | None = None) -> None:
        """``library``: the Library tab (its ``entries`` are the scan's result);
        ``start_task`` runs a side task the window cancels on close."""
        super().__init__(parent)
        self.library = library
        self._start_task = start_task
        #: the draft candidates for ``pairing_target``, compatible first
        self.pairing: list = []
        self.pairing_target: Path | None = None
        self._closing = False

    def close(self) -> None:
        self._closing = True

    # -- the lists -----------------------------------------------------------------

    def recent(self) -> list[Path]:
        raw = QSettings().value("models/recent", [])
        if not isinstance(raw, list):
            raw = [raw]  # one entry comes back alone
        return [p for p in map(path_from_value, raw) if p is not None]

    def remember(self, path: Path) -> None:
        rec = [p for p in self.recent() if p != path]
        rec.insert(0, path)
        # each path as text, or as its bytes when it is not UTF-8 (see stored_paths)
        QSettings().setValue("models/recent", [path_value(p) for p in rec[:MAX_RECENT]])

    def known(self) -> list[Path]:
        """The library's usable models and the recently opened files (each once; a split
        model by its first part, named as llama.cpp needs it, see ``canonical``)."""
        seen: dict[Path, None] = {}
        for e in self.library.entries:
            if e.valid:
                seen[canonical(Path(e.path))] = None
        if not self.library.entries:  # before the first scan finishes
            d = models_dir()
            if d.is_dir():
                for p in sorted(d.glob("*.gguf")):
                    seen[canonical(p)] = None
        for p in self.recent():
            if p.is_file():
                seen[canonical(p)] = None
        return list(seen)

    def info_of(self, path: Path) -> dict:
        """The library's summary of ``path`` (architecture, MTP heads, ...); {} if unknown."""
        for e in self.library.entries:
            if Path(e.path).resolve() == path.resolve():
                return e.info or {}
        return {}

    def name_of(self, path: Path) -> str:
        for e in self.library.entries:
            if Path(e.path).resolve() == path.resolve():
                return e.name if e.name != path.stem else path.name
        return path.name

    # -- pairing -------------------------------------------------------------------

    def pair(self, target: Path, on_done: Callable[[list], None], on_error: Callable[[str], None] | None = None) -> None:
        """Pair every known model with ``target`` off the UI thread; ``on_done(candidates)``."""
        if self._closing:
            return
        cands = [(Path(p), self.name_of(Path(p))) for p in self.known()]
        task = Task(lambda t: drafts_for(target, cands, cancel=t.is_cancelled), "draft pairing")
        task.succeeded.connect(lambda res: None if res is None or self._closing else on_done(list(res)))
        task.failed.connect(on_error or (lambda msg: log.warning("pairing failed: %s", msg)))
        self._start_task(task)

    def check_drafts(self, target: Path, current_target: Callable[[], Path | None]) -> None:
        """Refresh the draft candidates for ``target``; a result for a target that is no
        longer ``current_target()`` is dropped."""

        def done(res: list) -> None:
            current = current_target()
            if current is not None and current.resolve() != Path(target).resolve():
                return  # the target changed meanwhile
            self.pairing = res
            self.pairing_target = Path(target)
            self.pairing_checked.emit((Path(target), self.pairing))

        self.pair(target, done)

    def needs_pairing(self, target: Path) -> bool:
        return self.pairing_target is None or self.pairing_target.resolve() != Path(target).resolve()
