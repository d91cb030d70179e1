"""The window's pair: which models it offers and has loaded, loading a pair, and
fetching the default one.

- Loading goes through ``loader.PairLoader`` (checked, then loaded, one load at a
  time, the newest request wins); a load first stops the answer or comparison on the
  old pair. A loaded session is installed once nothing uses the old one: a pair that
  loads while an answer is being stopped waits until that answer is stored
  (:meth:`PairController.install_deferred`), and the old session is closed only
  through ``Session.close``, which waits for the last worker using it.
- The model bar's and the empty state's lists come from ``model_catalog.ModelCatalog``,
  with the draft candidates that pair with the chosen target.
- Fetching the default pair downloads it, then loads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from ..errors import Cancelled, SpecDeskError
from ..library.defaults import default_models, pair_present
from ..library.defaults import fetch as fetch_models
from ..session import Session, devices, supports_gpu_offload
from ..session.source_table import alone_text
from .empty_state import EmptyState
from .library_tab import LibraryTab
from .loader import LoadRequest, PairLoader
from .model_bar import ModelBar
from .model_catalog import ModelCatalog
from .settings import ChatSettings
from .stats_panel import StatsPanel
from .tasks import Task

GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"
FETCH_TASK = "fetch default pair"


class PairHost(Protocol):
    """What the pair's flow needs from the window."""

    settings: ChatSettings

    @property
    def closing(self) -> bool: ...

    @property
    def generating(self) -> bool:
        """An answer runs (or is being stored)."""

    def stop_work(self) -> None:
        """Cancel the comparison and stop the answer: a new pair is coming."""

    def show_chat(self) -> None: ...

    def show_error(self, text: str) -> None: ...

    def clear_error(self) -> None: ...

    def show_busy(self, text: str, fraction: float | None = None) -> None: ...

    def show_idle(self, text: str = "") -> None: ...

    def show_reference(self) -> None: ...

    def update_state(self) -> None: ...

    def focus_input(self) -> None: ...


class PairController(QObject):
    #: a pair loaded (the Session) or failed to (None)
    models_changed = Signal(object)
    #: (target, [DraftCandidate]) when the draft picker knows what pairs with the target
    pairing_checked = Signal(object)

    def __init__(self, host: PairHost, window: QWidget, model_bar: ModelBar, empty_state: EmptyState,
                 library: LibraryTab, stats: StatsPanel, start_task: Callable[[Task], Task],
                 parent: QObject | None = None) -> None:
        """``window`` parents the dialogs; ``start_task`` runs a side task (pairing,
        fetching) that the window cancels on close."""
        super().__init__(parent)
        self.host = host
        self.window = window
        self.model_bar = model_bar
        self.empty_state = empty_state
        self.stats = stats
        self._start_task = start_task
        self.session: Session | None = None
        self.target_path: Path | None = None
        self.draft_path: Path | None = None
        self.picked_target: Path | None = None  # chosen in the target list, not loaded yet
        self.deferred: Session | None = None  # loaded while the last answer was being stopped
        self._fetch: Task | None = None
        self.loader = PairLoader(self._confirm_memory, self)
        self.loader.busy.connect(host.show_busy)
        self.loader.idle.connect(host.show_idle)
        self.loader.check_failed.connect(host.show_error)
        self.loader.load_failed.connect(self._load_failed)
        self.loader.loaded.connect(self._loaded)
        self.loader.changed.connect(host.update_state)
        self.loader.checked.connect(model_bar.set_info)
        self.catalog = ModelCatalog(library, start_task, self)
        self.catalog.pairing_checked.connect(self._pairing_checked)

    @property
    def loading(self) -> bool:
        """From Load until the outcome of its check or load has been handled."""
        return self.loader.loading

    # -- the lists ----------------------------------------------------------------------

    def refresh_lists(self) -> None:
        models = self.catalog.known()
        shown = self.picked_target or self.target_path
        info = self.catalog.info_of(shown) if shown is not None else {}
        self.model_bar.populate(models, self.catalog.name_of, self.target_path, self.draft_path,
                                self.picked_target, self.catalog.pairing, alone=alone_text(info))
        self.empty_state.set_models(models)

    def library_scanned(self, entries) -> None:
        if self.host.closing:
            return  # a scan that finished while the window closed
        self.refresh_lists()
        target = ModelBar.path_of(self.model_bar.target_combo) or self.target_path
        if target is not None:
            self.check_drafts(target)

    def check_drafts(self, target: Path) -> None:
        """Refresh the draft picker for ``target``: compatible drafts first."""
        self.catalog.check_drafts(target, lambda: ModelBar.path_of(self.model_bar.target_combo) or self.target_path)

    def _pairing_checked(self, result) -> None:
        self.refresh_lists()
        self.pairing_checked.emit(result)

    def target_picked(self, path: Path | None) -> None:
        self.picked_target = path
        if path is not None:
            self.catalog.pairing = []
            self.check_drafts(path)

    # -- what to load ---------------------------------------------------------------------

    def use_from_library(self, path: Path, role: str) -> None:
        self.host.show_chat()
        if role == "draft":
            target = self.target_path or ModelBar.path_of(self.model_bar.target_combo)
            if target is None:
                self.host.show_error("Choose a target first: a draft speculates for a target.")
                return
            self.load(target, path)
            return

        # a new target: keep the draft if it can still draft for it (translated or not),
        # else take the smallest one that shares its vocabulary
        def done(res: list) -> None:
            self.catalog.pairing = res
            usable = {c.path.resolve() for c in res if c.usable}
            same = [c.path for c in res if c.compatible]
            keep = self.draft_path is not None and self.draft_path.resolve() in usable
            draft = self.draft_path if keep else next(iter(same), None)
            self.target_path = path
            self.load(path, draft)

        self.catalog.pair(path, done, self.host.show_error)

    def open_dialog(self, role: str) -> None:
        start = str(self.target_path.parent) if self.target_path else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self.window, f"Open a {role} GGUF", start, GGUF_FILTER)
        if path:
            self.open_file(Path(path), role)

    def open_file(self, p: Path, role: str) -> None:
        """Load ``p`` as the target or the draft, as picked with Open…"""
        self.catalog.remember(p)
        if role == "target":
            self.target_path = p
            self.picked_target = None  # the file opened wins over a target chosen in the list
        else:
            self.draft_path = p
        self.refresh_lists()
        if role == "target" and self.draft_path is None:
            self.load(p, None)
        else:
            self.load_selected()

    def load_selected(self) -> None:
        t = ModelBar.path_of(self.model_bar.target_combo)
        d = ModelBar.path_of(self.model_bar.draft_combo)
        if t is None:
            self.host.show_error("Choose a target model first.")
            return
        self.load(t, d)

    def autoload_default_pair(self) -> None:
        """Load the default pair when it is in models/, else stay on the empty state."""
        if self.host.closing or self.session is not None or self.loading or not pair_present():
            self.host.update_state()
            return
        t, d = (m.path for m in default_models(["target", "draft"]))
        self.load(t, d, confirm_memory=False)

    def reload(self) -> None:
        """The same pair again, with the window's settings (after a change that needs it)."""
        self.load(self.target_path, self.draft_path, confirm_memory=False)

    # -- loading ----------------------------------------------------------------------------

    def load(self, target: Path, draft: Path | None, confirm_memory: bool = True) -> None:
        """Check the pair and its memory, then load it, both off the UI thread.

        A generation or comparison on the old pair is stopped (the old session is
        freed when it has ended). While another load runs, it is cancelled and this
        request runs after it: one load at a time, the newest wins (``PairLoader``)."""
        if self.host.closing:
            return
        s = self.host.settings
        try:
            req = LoadRequest(s.model_spec(target, "target"), s.model_spec(draft, "draft") if draft else None,
                              confirm_memory)
        except SpecDeskError as e:
            self.host.show_error(str(e))
            return
        self.host.stop_work()
        self.host.clear_error()
        self.loader.request(req)

    def _confirm_memory(self, shortfalls: list[str]) -> bool:
        ans = QMessageBox.warning(
            self.window,
            "Not enough free memory",
            f"Loading these models needs {' and '.join(shortfalls)}. Load anyway?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
        )
        return ans == QMessageBox.StandardButton.Yes

    def install(self, session: Session | None) -> None:
        """Make ``session`` the window's; the old one is freed once nothing uses it."""
        old, self.session = self.session, session
        if old is not None and old is not session:
            old.close()

    def _loaded(self, session: Session | None) -> None:
        if session is None:
            return
        if self.host.closing or self.loader.pending is not None:
            session.close()  # the window closes, or a newer request replaces it at once
            return
        if self.host.generating:
            # The answer on the old pair was stopped when this load began; install the
            # new pair once that answer is stored (a step at most from now).
            if self.deferred is not None and self.deferred is not session:
                self.deferred.close()
            self.deferred = session
            return
        self.install(session)
        self.target_path = session.target.spec.path
        self.picked_target = None
        self.draft_path = session.draft.spec.path if session.draft else None
        self.catalog.remember(self.target_path)
        if self.draft_path:
            self.catalog.remember(self.draft_path)
        if self.catalog.needs_pairing(self.target_path):
            self.catalog.pairing = []
            self.check_drafts(self.target_path)
        self.refresh_lists()
        loaded = f"loaded {session.target.name}" + (f" and {session.draft.name}" if session.draft else "")
        if session.translated:
            loaded += (" — the draft has another vocabulary, so its text is re-tokenized for the target "
                       "(translated; exact all the same)")
        self.host.show_idle(loaded)
        self.stats.set_memory(session.memory())
        self.stats.set_devices(devices(), supports_gpu_offload())
        self.host.show_reference()
        self.host.update_state()
        self.models_changed.emit(session)
        self.host.focus_input()

    def _load_failed(self, msg: str) -> None:
        self.host.show_idle()
        self.host.show_error(msg)
        self.host.update_state()
        self.models_changed.emit(None)

    def install_deferred(self) -> None:
        """The answer is stored: a pair loaded meanwhile is installed now."""
        deferred, self.deferred = self.deferred, None
        if deferred is not None:
            self._loaded(deferred)

    def forsake(self) -> None:
        """Let the session go without freeing it (an RPC server it used is lost)."""
        if self.session is not None:
            self.install(None)
            self.refresh_lists()

    # -- fetching the default pair --------------------------------------------------------

    def fetch_default_pair(self) -> None:
        if self._fetch is not None:
            return

        def fetch(task: Task):
            def progress(msg: str, frac: float) -> None:
                if not task.report(msg, frac):
                    raise Cancelled("fetching the default pair was cancelled")

            return fetch_models(("target", "draft"), progress)

        task = Task(fetch, FETCH_TASK)
        task.progress.connect(lambda m, f: self.host.show_busy(m, f))
        task.failed.connect(lambda msg: (self.host.show_idle(), self.host.show_error(msg)))
        task.was_cancelled.connect(lambda: self.host.show_idle("download cancelled; it resumes from the cached wheels next time"))
        task.succeeded.connect(lambda paths: (self.host.show_idle("default pair ready"), self.refresh_lists(),
                                              self.autoload_default_pair()))
        task.finished.connect(self._fetch_ended)
        self._fetch = task
        self.host.show_busy("fetching the default pair…", 0.0)
        self._start_task(task)

    def _fetch_ended(self) -> None:
        self._fetch = None

    # -- closing --------------------------------------------------------------------------

    def close(self) -> None:
        """The window closes: no new load or pairing starts."""
        self.loader.close()
        self.catalog.close()

    def release(self) -> None:
        """Once every task has ended: free the sessions (the installed one and one
        that waited for an answer)."""
        if self.deferred is not None:
            self.deferred.close()
            self.deferred = None
        self.install(None)
