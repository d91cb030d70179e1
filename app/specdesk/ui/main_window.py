"""The main window: it wires the model bar, the chats, the Compare and Library tabs and
the statistics panel to one Session, and runs every long job as a Task.

Rules that keep it safe under any sequence of clicks:
- one load at a time: Load while a load (or its file check) runs cancels it and the
  newest request runs when it has ended; a cancelled load never installs its session;
- a session is closed only through ``Session.close``, which waits for the last
  generation or comparison using it (``Session.lease``), so no worker is ever inside
  llama.cpp when its memory is freed;
- what cannot run now is disabled (``_update_state``), and every handler checks again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ..session.chatstore import ChatStore, Message
from .. import __version__
from ..errors import Cancelled, SpecDeskError
from ..library.defaults import default_models, pair_present
from ..library.defaults import fetch as fetch_models
from ..library.pairing import drafts_for
from ..paths import models_dir
from ..session import Generation, ModelSpec, Session, devices, supports_gpu_offload
from ..session.fit import fit_chat
from ..session.preflight import Preflight, preflight
from ..speculative.drift import claim_text
from ..speculative.stats import Stats
from .chat_panel import ChatPanel, ChatSidebar
from .chat_view import Span
from .compare_tab import CompareTab
from .empty_state import EmptyState
from .latency import LatencyProbe
from .library_tab import LibraryTab
from .model_bar import ModelBar
from .references import measured_reference, remember_reference
from .settings import ChatSettings, SettingsDialog, load_defaults, save_defaults
from .stats_panel import StatsPanel
from .tasks import Task, running_tasks

log = logging.getLogger(__name__)

GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"
MAX_RECENT = 12
#: The window opens at this size, or smaller to fit the screen; it can shrink to MIN_SIZE.
DEFAULT_SIZE = (1400, 860)
MIN_SIZE = (1000, 620)


@dataclass(frozen=True)
class _LoadRequest:
    target: ModelSpec
    draft: ModelSpec | None
    confirm_memory: bool


class MainWindow(QMainWindow):
    # Emitted when an answer is complete (or stopped): the Generation.
    generation_finished = Signal(object)
    # Emitted after a pair loaded (the Session) or failed to (None).
    models_changed = Signal(object)
    # Emitted with the text of every error shown to the user.
    error_shown = Signal(str)
    # Emitted with (target, [DraftCandidate]) when the draft picker knows what pairs with the target.
    pairing_checked = Signal(object)

    def __init__(self, data_dir: Path, autoload: bool = True) -> None:
        super().__init__()
        self.setObjectName("mainWindow")
        self.setWindowTitle("SpecDesk")
        self.data_dir = Path(data_dir)
        self.store = ChatStore(self.data_dir / "chats.sqlite3")
        self.session: Session | None = None
        self.target_path: Path | None = None
        self.draft_path: Path | None = None
        self.chat_id: int | None = None
        self.settings = load_defaults()
        self._gen_task: Task | None = None
        self._load_task: Task | None = None  # the file check, then the load
        self._pending_load: _LoadRequest | None = None
        self._deferred_session: Session | None = None  # loaded while the last answer was being stopped
        self._aux_tasks: list[Task] = []
        self._draft_pairing: list = []
        self._pairing_target: Path | None = None
        self._closing = False
        self._picked_target: Path | None = None
        self.latency = LatencyProbe(self)
        self._last_mem = 0.0

        self._build()
        self._fit_to_screen()
        self._refresh_chat_list()
        self._select_or_create_chat()
        self._refresh_model_lists()
        self._update_state()
        if self.store.recovered:
            self.show_error(self.store.recovered)
        self.library.rescan()
        if autoload:
            QTimer.singleShot(0, self.autoload_default_pair)
        QTimer.singleShot(0, self.focus_input)

    # =============================================================== construction

    def _build(self) -> None:
        self.model_bar = ModelBar(self)
        self.addToolBar(self.model_bar)
        self.model_bar.open_requested.connect(self.open_model_dialog)
        self.model_bar.load_requested.connect(self.load_selected)
        self.model_bar.target_picked.connect(self._target_picked)
        self.model_bar.settings_requested.connect(self.open_settings)
        # the widgets tests and tools reach for, by their old names
        self.target_combo = self.model_bar.target_combo
        self.draft_combo = self.model_bar.draft_combo
        self.load_btn = self.model_bar.load_btn
        self.settings_btn = self.model_bar.settings_btn

        self.sidebar = ChatSidebar()
        self.sidebar.new_chat_btn.clicked.connect(self.new_chat)
        self.sidebar.delete_chat_btn.clicked.connect(self.delete_chat)
        self.sidebar.chat_chosen.connect(self._chat_selected)
        self.chat_list = self.sidebar.chat_list

        self.error_banner = QLabel("")
        self.error_banner.setObjectName("errorBanner")
        self.error_banner.setWordWrap(True)
        self.error_banner.setStyleSheet("background:#fff5f5; color:#c92a2a; border:1px solid #ffc9c9; border-radius:4px; padding:6px;")
        self.error_banner.setVisible(False)
        self.error_banner.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_banner.mousePressEvent = lambda e: self.error_banner.setVisible(False)  # click to dismiss

        self.chat_panel = cp = ChatPanel()
        cp.input.submitted.connect(self.send_from_input)
        cp.send_btn.clicked.connect(self.send_from_input)
        cp.stop_btn.clicked.connect(self.stop_generation)
        cp.regen_btn.clicked.connect(self.regenerate)
        cp.clear_btn.clicked.connect(self.clear_chat)
        cp.copy_btn.clicked.connect(self.copy_answer)
        self.chat_view, self.legend, self.provenance_box, self.input = cp.chat_view, cp.legend, cp.provenance_box, cp.input
        self.send_btn, self.stop_btn, self.regen_btn = cp.send_btn, cp.stop_btn, cp.regen_btn
        self.clear_btn, self.copy_btn, self.run_info = cp.clear_btn, cp.copy_btn, cp.run_info

        self.empty_state = EmptyState()
        self.empty_state.fetch_requested.connect(self.fetch_default_pair)
        self.empty_state.open_requested.connect(lambda: self.open_model_dialog("target"))
        self.empty_state.model_chosen.connect(lambda p: self.load_models(Path(p), self.draft_path))

        self.pages = QStackedWidget()
        self.pages.addWidget(self.empty_state)
        self.pages.addWidget(cp)
        centre = QWidget()
        ctr = QVBoxLayout(centre)
        ctr.setContentsMargins(6, 6, 6, 6)
        ctr.addWidget(self.pages, 1)

        self.tabs = QTabWidget()
        self.tabs.setObjectName("mainTabs")
        self.tabs.addTab(centre, "Chat")
        self.compare = CompareTab(lambda: self.session)
        self.compare.error.connect(self.show_error)
        self.compare.reference_measured.connect(self.set_reference)
        self.compare.stopped.connect(self._update_state)
        self.compare.download_requested.connect(lambda repo, file: self.library.open_download_dialog(repo, file))
        self.compare.run_btn.clicked.connect(self._update_state)
        self.tabs.addTab(self.compare, "Compare")
        self.library = LibraryTab()
        self.library.error.connect(self.show_error)
        self.library.scanned.connect(self._library_scanned)
        self.library.use_as_target.connect(lambda p: self._use_from_library(p, "target"))
        self.library.use_as_draft.connect(lambda p: self._use_from_library(p, "draft"))
        self.tabs.addTab(self.library, "Library")

        # -- right: statistics, scrolling, and hidden with the model bar's toggle
        self.stats = StatsPanel()
        self.stats_scroll = QScrollArea()
        self.stats_scroll.setObjectName("statsScroll")
        self.stats_scroll.setWidget(self.stats)
        self.stats_scroll.setWidgetResizable(True)
        self.stats_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.stats_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # a steady viewport width: the panel is laid out once for it, not again when a scroll bar appears
        self.stats_scroll.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn)
        self.stats_scroll.setMinimumWidth(280)
        self.stats_toggle = QAction("Statistics", self)
        self.stats_toggle.setObjectName("statsToggle")
        self.stats_toggle.setCheckable(True)
        self.stats_toggle.setChecked(True)
        self.stats_toggle.setToolTip("Show or hide the statistics panel (Ctrl+I)")
        self.stats_toggle.setShortcut(QKeySequence("Ctrl+I"))
        self.stats_toggle.toggled.connect(lambda _on: self._show_side_panels())
        self.model_bar.addAction(self.stats_toggle)
        about = QAction("About", self)
        about.setObjectName("aboutAction")
        about.triggered.connect(self.show_about)
        self.model_bar.addAction(about)

        middle = QWidget()
        ml = QVBoxLayout(middle)
        ml.setContentsMargins(0, 4, 0, 0)
        ml.addWidget(self.error_banner)  # above the tabs: errors show whichever tab is open
        ml.addWidget(self.tabs, 1)

        self.splitter = split = QSplitter()
        split.addWidget(self.sidebar)
        split.addWidget(middle)
        split.addWidget(self.stats_scroll)
        split.setChildrenCollapsible(False)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setStretchFactor(2, 0)
        split.setSizes([180, 820, 360])
        self.setCentralWidget(split)
        # the chat list and the statistics belong to the chat: the Compare and Library
        # tabs get the whole width (their tables and answer columns need it at 1280x720)
        self.tabs.currentChanged.connect(lambda _i: self._show_side_panels())

        # -- status bar with a progress bar and cancel
        sb = self.statusBar()
        self.status_label = QLabel("")
        self.status_label.setObjectName("statusLabel")
        sb.addWidget(self.status_label, 1)
        self.progress = QProgressBar()
        self.progress.setObjectName("loadProgress")
        self.progress.setRange(0, 1000)
        self.progress.setMaximumWidth(220)
        self.progress.setVisible(False)
        sb.addPermanentWidget(self.progress)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.setObjectName("cancelButton")
        self.cancel_btn.setVisible(False)
        self.cancel_btn.clicked.connect(self.cancel_background)
        sb.addPermanentWidget(self.cancel_btn)

        def shortcut(keys, slot) -> None:
            QShortcut(QKeySequence(keys), self, activated=slot, context=Qt.ShortcutContext.WindowShortcut)

        shortcut(QKeySequence.StandardKey.Quit, self.close)
        shortcut("Esc", self._escape)
        shortcut("Ctrl+N", self.new_chat)
        shortcut("Ctrl+L", self._focus_message_box)
        shortcut("Ctrl+,", self.open_settings)

    def _fit_to_screen(self) -> None:
        """Open at DEFAULT_SIZE or the available screen, whichever is smaller, inside it."""
        self.setMinimumSize(*MIN_SIZE)
        screen = self.screen() or QGuiApplication.primaryScreen()
        if screen is None:
            self.resize(*DEFAULT_SIZE)
            return
        avail = screen.availableGeometry()
        # leave room for the window frame the window manager adds
        w = min(DEFAULT_SIZE[0], avail.width() - 16)
        h = min(DEFAULT_SIZE[1], avail.height() - 40)
        self.setMinimumSize(min(MIN_SIZE[0], w), min(MIN_SIZE[1], h))
        self.resize(max(w, self.minimumWidth()), max(h, self.minimumHeight()))
        self.move(avail.x() + max(0, (avail.width() - self.width()) // 2),
                  avail.y() + max(0, (avail.height() - self.height() - 30) // 2))
        if avail.width() < 1200:
            self.splitter.setSizes([150, max(400, avail.width() - 150 - 300), 300])

    def focus_input(self) -> None:
        if not self._closing:
            self.input.setFocus(Qt.FocusReason.OtherFocusReason)

    def _focus_message_box(self) -> None:
        self.tabs.setCurrentIndex(0)
        self.focus_input()

    def _escape(self) -> None:
        if self.generating:
            self.stop_generation()
        elif self.compare.running:
            self.compare.cancel()
        elif self.loading:
            self.cancel_background()
        else:
            self.clear_error()

    def about_text(self) -> str:
        """What SpecDesk claims, no more than the tests show."""
        return (f"SpecDesk {__version__}: speculative decoding on local GGUF models, made visible and measurable.\n\n"
                + claim_text(None) + " Compare measures the drift on your model and machine.")

    def show_about(self) -> None:
        QMessageBox.about(self, "About SpecDesk", self.about_text())

    # =============================================================== state

    # Both states last until the task's outcome has been handled on this thread, not
    # while its thread runs: a thread ends a moment before its queued result arrives,
    # and work started in that moment would meet a result meant for the old request.
    @property
    def generating(self) -> bool:
        """From Send until the answer is stored (``_answer_delivered``)."""
        return self._gen_task is not None

    @property
    def loading(self) -> bool:
        """From Load until the outcome of its check or load has been handled (``_finish_load``)."""
        return self._load_task is not None

    def _update_state(self) -> None:
        if self._closing:
            return
        loaded = self.session is not None
        comparing = self.compare.running
        loading = self.loading
        busy = self.generating or comparing
        ready = loaded and not busy and not loading
        self.pages.setCurrentIndex(1 if loaded or self._has_messages() else 0)
        self.compare.set_enabled_for(loaded and not loading, self.generating)
        self.send_btn.setEnabled(ready)
        self.input.setEnabled(True)
        self.stop_btn.setEnabled(busy)
        self.regen_btn.setEnabled(ready and self.chat_panel.has_answer())
        self.clear_btn.setEnabled(not busy)
        self.sidebar.set_busy(busy)
        self.settings_btn.setEnabled(not loading and not comparing)
        self.load_btn.setEnabled(not loading and not comparing)
        self.empty_state.setEnabled(not loading)
        if loaded:
            d = self.session.draft
            self.model_bar.set_info("● loaded" + ("" if d else " (no draft)"),
                                    f"{self.session.target.spec.path}\n{d.spec.path if d else 'no draft'}")
        elif not loading:
            self.model_bar.set_info("no models loaded")

    def _has_messages(self) -> bool:
        return bool(self.chat_view.messages())

    def show_error(self, text: str) -> None:
        log.warning("%s", text)
        self.error_banner.setText(f"⚠ {text}  (click to dismiss)")
        self.error_banner.setVisible(True)
        self.status_label.setText(text)
        self.error_shown.emit(text)

    def clear_error(self) -> None:
        self.error_banner.setVisible(False)

    def _busy(self, text: str, fraction: float | None = None, cancellable: bool = True) -> None:
        self.status_label.setText(text)
        self.progress.setVisible(True)
        if fraction is None:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * fraction))
        self.cancel_btn.setVisible(cancellable)
        self.empty_state.set_progress(text, fraction)

    def _show_side_panels(self) -> None:
        chat = self.tabs.currentIndex() == 0
        self.sidebar.setVisible(chat)
        self.stats_scroll.setVisible(chat and self.stats_toggle.isChecked())

    def _idle(self, text: str = "") -> None:
        self.status_label.setText(text)
        self.progress.setVisible(False)
        self.cancel_btn.setVisible(False)
        self.empty_state.set_progress(None, None)

    def cancel_background(self) -> None:
        self._pending_load = None
        for t in [self._load_task, *self._aux_tasks]:
            if t is not None and t.isRunning():
                t.cancel()

    def _start_aux(self, task: Task) -> Task:
        """Run a side task (pairing, fetching) that the window cancels on close."""
        self._aux_tasks.append(task)
        task.finished.connect(lambda: self._aux_tasks.remove(task) if task in self._aux_tasks else None)
        task.start()
        return task

    # =============================================================== models

    def _recent(self) -> list[Path]:
        raw = QSettings().value("models/recent", [])
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list):
            return []
        return [Path(p) for p in raw if isinstance(p, str) and p]

    def _remember(self, path: Path) -> None:
        rec = [p for p in self._recent() if p != path]
        rec.insert(0, path)
        QSettings().setValue("models/recent", [str(p) for p in rec[:MAX_RECENT]])

    def known_models(self) -> list[Path]:
        """The library's usable models (models/, your folders, HF cache, LM Studio,
        Ollama) and recently opened files."""
        seen: dict[Path, None] = {}
        for e in self.library.entries:
            if e.valid:
                seen[Path(e.path).resolve()] = None
        if not self.library.entries:  # before the first scan finishes
            d = models_dir()
            if d.is_dir():
                for p in sorted(d.glob("*.gguf")):
                    seen[p.resolve()] = None
        for p in self._recent():
            if p.is_file():
                seen[p.resolve()] = None
        return list(seen)

    def _model_name(self, path: Path) -> str:
        for e in self.library.entries:
            if Path(e.path).resolve() == path.resolve():
                return e.name if e.name != path.stem else path.name
        return path.name

    def _refresh_model_lists(self) -> None:
        models = self.known_models()
        self.model_bar.populate(models, self._model_name, self.target_path, self.draft_path,
                                self._picked_target, self._draft_pairing)
        self.empty_state.set_models(models)

    def _library_scanned(self, entries) -> None:
        if self._closing:
            return  # a scan that finished while the window closed
        self._refresh_model_lists()
        target = ModelBar.path_of(self.target_combo) or self.target_path
        if target is not None:
            self.check_drafts(target)

    def _pair(self, target: Path, on_done, on_error=None) -> None:
        """Pair every library model with ``target`` off the UI thread; ``on_done(candidates)``."""
        if self._closing:
            return
        cands = [(Path(p), self._model_name(Path(p))) for p in self.known_models()]
        task = Task(lambda t: drafts_for(target, cands, cancel=t.is_cancelled), "draft pairing")
        task.succeeded.connect(lambda res: None if res is None or self._closing else on_done(list(res)))
        task.failed.connect(on_error or (lambda msg: log.warning("pairing failed: %s", msg)))
        self._start_aux(task)

    def check_drafts(self, target: Path) -> None:
        """Refresh the draft picker for ``target``: compatible drafts first."""

        def done(res: list) -> None:
            current = ModelBar.path_of(self.target_combo) or self.target_path
            if current is not None and current.resolve() != Path(target).resolve():
                return  # the target changed meanwhile
            self._draft_pairing = res
            self._pairing_target = Path(target)
            self._refresh_model_lists()
            self.pairing_checked.emit((Path(target), self._draft_pairing))

        self._pair(target, done)

    def _target_picked(self, path: Path | None) -> None:
        self._picked_target = path
        if path is not None:
            self._draft_pairing = []
            self.check_drafts(path)

    def _use_from_library(self, path: Path, role: str) -> None:
        self.tabs.setCurrentIndex(0)
        if role == "draft":
            target = self.target_path or ModelBar.path_of(self.target_combo)
            if target is None:
                self.show_error("Choose a target first: a draft speculates for a target.")
                return
            self.load_models(target, path)
            return

        # a new target: keep the draft if it can still draft for it (translated or not),
        # else take the smallest one that shares its vocabulary
        def done(res: list) -> None:
            self._draft_pairing = res
            usable = {c.path.resolve() for c in res if c.usable}
            same = [c.path for c in res if c.compatible]
            keep = self.draft_path is not None and self.draft_path.resolve() in usable
            draft = self.draft_path if keep else next(iter(same), None)
            self.target_path = path
            self.load_models(path, draft)

        self._pair(path, done, self.show_error)

    def open_model_dialog(self, role: str) -> None:
        start = str(self.target_path.parent) if self.target_path else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, f"Open a {role} GGUF", start, GGUF_FILTER)
        if not path:
            return
        p = Path(path)
        self._remember(p)
        if role == "target":
            self.target_path = p
        else:
            self.draft_path = p
        self._refresh_model_lists()
        if role == "target" and self.draft_path is None:
            self.load_models(p, None)
        else:
            self.load_selected()

    def load_selected(self) -> None:
        t = ModelBar.path_of(self.target_combo)
        d = ModelBar.path_of(self.draft_combo)
        if t is None:
            self.show_error("Choose a target model first.")
            return
        self.load_models(t, d)

    def autoload_default_pair(self) -> None:
        """Load the default pair when it is in models/, else stay on the empty state."""
        if self._closing or self.session is not None or self.loading or not pair_present():
            self._update_state()
            return
        t, d = (m.path for m in default_models(["target", "draft"]))
        self.load_models(t, d, confirm_memory=False)

    def load_models(self, target: Path, draft: Path | None, confirm_memory: bool = True) -> None:
        """Check the pair and its memory, then load it, both off the UI thread.

        A generation or comparison on the old pair is stopped (the old session is
        freed when it has ended). While another load runs, it is cancelled and this
        request runs after it: one load at a time, the newest wins."""
        if self._closing:
            return
        s = self.settings
        try:
            req = _LoadRequest(s.model_spec(target, "target"), s.model_spec(draft, "draft") if draft else None,
                               confirm_memory)
        except SpecDeskError as e:
            self.show_error(str(e))
            return
        if self.compare.running:
            self.compare.cancel()
        self.stop_generation()
        self.clear_error()
        if self.loading:
            self._pending_load = req
            self._load_task.cancel()
            return
        self._start_preflight(req)

    def _start_preflight(self, req: _LoadRequest) -> None:
        task = Task(lambda t: preflight(req.target, req.draft, progress=t.report), "model check")
        self._load_task = task
        task.progress.connect(lambda m, f: self._busy(m, None))
        task.failed.connect(lambda msg: (self._finish_load(task), self._idle(), self.show_error(msg)))
        task.was_cancelled.connect(lambda: (self._finish_load(task), self._idle("cancelled")))
        task.succeeded.connect(lambda res: self._after_preflight(res, req, task))
        task.finished.connect(self._update_state)
        task.start()
        self._update_state()

    def _finish_load(self, task: Task) -> None:
        """The request ``task`` served has its outcome (loaded, failed, cancelled or
        declined): the next load may start, and the newest request that waited runs.
        Called from the outcome's handler, not from ``finished``: the window is ready
        when the outcome has been handled, whatever the thread still does."""
        if task is not self._load_task:
            return
        self._load_task = None
        if self._closing:
            return
        req, self._pending_load = self._pending_load, None
        if req is not None:
            self._start_preflight(req)
        self._update_state()

    def _after_preflight(self, pre: Preflight | None, req: _LoadRequest, check: Task) -> None:
        if self._closing:
            return
        if pre is None or self._pending_load is not None or self._load_task is not check:
            self._finish_load(check)  # a newer request runs next
            return
        msg = pre.summary()
        if pre.compat is not None and not pre.compat:
            # another vocabulary: the pair loads translated (Session.load(translate=True))
            msg += f" · translated draft: {pre.compat.reason}"
        self.model_bar.set_info(msg + ("" if pre.fits else " — more than is free"))
        if req.confirm_memory and not pre.fits:
            ans = QMessageBox.warning(
                self,
                "Not enough free memory",
                f"Loading these models needs {' and '.join(pre.shortfalls)}. Load anyway?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            )
            if self._closing:
                return
            if ans != QMessageBox.StandardButton.Yes or self._pending_load is not None:
                self._finish_load(check)  # declined, or asked again meanwhile: the newer request runs
                self._idle()
                return
        self._start_load(req, msg)  # the check's request goes on as this load

    def _start_load(self, req: _LoadRequest, estimate_msg: str) -> None:
        tspec, dspec = req.target, req.draft
        # a draft with another vocabulary drafts translated text (the picker marks it)
        task = Task(lambda t: Session.load(tspec, dspec, progress=t.report, translate=True), "model load")
        self._load_task = task
        task.progress.connect(lambda m, f: self._busy(f"{m}  ({estimate_msg})", f))
        task.succeeded.connect(lambda session: self._load_succeeded(task, session))
        task.failed.connect(lambda msg: (self._finish_load(task), self._load_failed(msg)))
        task.was_cancelled.connect(lambda: (self._finish_load(task), self._idle("loading cancelled")))
        task.finished.connect(self._update_state)
        self._busy(f"loading {tspec.path.name}…", 0.0)
        task.start()
        self._update_state()

    def _load_succeeded(self, task: Task, session: Session | None) -> None:
        if session is None:
            self._finish_load(task)
            return
        if self._closing or self._pending_load is not None or task is not self._load_task:
            session.close()  # the window closes, or a newer request replaces it at once
            self._finish_load(task)
            return
        self._load_task = None  # loaded: ready before models_changed is emitted
        self._loaded(session)

    def _install(self, session: Session | None) -> None:
        """Make ``session`` the window's; the old one is freed once nothing uses it."""
        old, self.session = self.session, session
        if old is not None and old is not session:
            old.close()

    def _loaded(self, session: Session | None) -> None:
        if session is None:
            return
        if self._closing or self._pending_load is not None:
            session.close()  # the window closes, or a newer request replaces it at once
            return
        if self._gen_task is not None:
            # The answer on the old pair was stopped when this load began; install the
            # new pair once that answer is stored (a step at most from now).
            if self._deferred_session is not None and self._deferred_session is not session:
                self._deferred_session.close()
            self._deferred_session = session
            return
        self._install(session)
        self.target_path = session.target.spec.path
        self._picked_target = None
        self.draft_path = session.draft.spec.path if session.draft else None
        self._remember(self.target_path)
        if self.draft_path:
            self._remember(self.draft_path)
        if self._pairing_target is None or self._pairing_target.resolve() != self.target_path.resolve():
            self._draft_pairing = []
            self.check_drafts(self.target_path)
        self._refresh_model_lists()
        loaded = f"loaded {session.target.name}" + (f" and {session.draft.name}" if session.draft else "")
        if session.translated:
            loaded += (" — the draft has another vocabulary, so its text is re-tokenized for the target "
                       "(translated; exact all the same)")
        self._idle(loaded)
        self.stats.set_memory(session.memory())
        self.stats.set_devices(devices(), supports_gpu_offload())
        self._show_reference()
        self._update_state()
        self.models_changed.emit(session)
        self.focus_input()

    def _load_failed(self, msg: str) -> None:
        self._idle()
        self.show_error(msg)
        self._update_state()
        self.models_changed.emit(None)

    def fetch_default_pair(self) -> None:
        if any(t.name == "fetch default pair" for t in self._aux_tasks):
            return

        def fetch(task: Task):
            def progress(msg: str, frac: float) -> None:
                if not task.report(msg, frac):
                    raise Cancelled("fetching the default pair was cancelled")

            return fetch_models(("target", "draft"), progress)

        task = Task(fetch, "fetch default pair")
        task.progress.connect(lambda m, f: self._busy(m, f))
        task.failed.connect(lambda msg: (self._idle(), self.show_error(msg)))
        task.was_cancelled.connect(lambda: self._idle("download cancelled; it resumes from the cached wheels next time"))
        task.succeeded.connect(lambda paths: (self._idle("default pair ready"), self._refresh_model_lists(), self.autoload_default_pair()))
        self._busy("fetching the default pair…", 0.0)
        self._start_aux(task)

    # =============================================================== reference speed

    def set_reference(self, target: Path, tokens_per_second: float) -> None:
        remember_reference(target, tokens_per_second)
        if self.target_path and target.resolve() == self.target_path.resolve():
            self.stats.set_reference(tokens_per_second, "measured")

    def _show_reference(self) -> None:
        """Target alone's speed for the verdict: measured when a comparison or a plain
        answer measured it, else estimated from the single target steps this session
        has timed (what every verify of one token costs)."""
        measured = measured_reference(self.target_path)
        if measured:
            self.stats.set_reference(measured, "measured")
            return
        step = self.session.auto.costs.reference_step if self.session is not None else None
        self.stats.set_reference(1.0 / step if step else None, "estimated")

    # =============================================================== chats

    def _refresh_chat_list(self) -> None:
        self.sidebar.show_chats(self.store.chats(), self.chat_id)

    def _select_or_create_chat(self) -> None:
        chats = self.store.chats()
        if chats:
            self._open_chat(chats[0].id)
        else:
            self.new_chat()

    def new_chat(self) -> None:
        if self.generating:
            return
        c = self.store.create_chat("New chat", self.settings.to_dict())
        self._open_chat(c.id)
        self.focus_input()

    def delete_chat(self) -> None:
        if self.chat_id is None or self.generating:
            return
        self.store.delete_chat(self.chat_id)
        self.chat_id = None
        self._select_or_create_chat()

    def _chat_selected(self, chat_id: int) -> None:
        if self.generating:
            self._refresh_chat_list()  # the list stays on the chat being answered
            return
        if chat_id != self.chat_id:
            self._open_chat(chat_id)

    def _open_chat(self, chat_id: int) -> None:
        chat = self.store.chat(chat_id)
        if chat is None:
            return
        self.chat_id = chat_id
        new_settings = ChatSettings.from_dict(chat.settings) if chat.settings else self.settings
        reload = self.session is not None and new_settings.needs_reload(self.settings)
        self.settings = new_settings
        msgs = []
        last_stats = None
        for m in self.store.messages(chat_id):
            spans = [Span.from_list(x) for x in m.spans] if m.spans else None
            msgs.append((m.role, m.content, spans))
            if m.stats:
                last_stats = m.stats
        self.chat_view.set_messages(msgs)
        if last_stats:
            self.stats.update_stats(Stats.from_dict(last_stats), live=False)
        self._refresh_chat_list()
        self._update_state()
        if reload and self.target_path:
            self.load_models(self.target_path, self.draft_path, confirm_memory=False)

    def clear_chat(self) -> None:
        if self.chat_id is None or self.generating:
            return
        self.store.clear_messages(self.chat_id)
        self.chat_view.set_messages([])
        self._update_state()

    def copy_answer(self) -> None:
        text = self.chat_view.last_answer() or self.chat_view.transcript()
        QGuiApplication.clipboard().setText(text)
        self.status_label.setText("copied the last answer" if self.chat_view.last_answer() else "copied the chat")

    # =============================================================== generation

    def send_from_input(self) -> None:
        text = self.input.toPlainText().strip()
        if not text:
            return
        if self.send(text):
            self.input.clear()

    def send(self, text: str) -> bool:
        """Answer ``text`` in the current chat. The message is stored only once the
        answer starts (it fits the context); returns False when nothing was started."""
        if self.session is None:
            self.show_error("Load a target model first (Open… or fetch the default pair).")
            return False
        if self.generating or self.compare.running or self.loading or self.chat_id is None:
            return False
        self.clear_error()
        history = self._history() + [{"role": "user", "content": text}]
        return self._generate(history, new_user_text=text)

    def regenerate(self) -> None:
        """Answer the last question again; the old answer stays until the new one exists."""
        if self.session is None or self.generating or self.compare.running or self.loading or self.chat_id is None:
            return
        msgs = self.store.messages(self.chat_id)
        replaces = None
        if msgs and msgs[-1].role == "assistant":
            replaces = msgs[-1].id
            msgs = msgs[:-1]
        if not any(m.role == "user" for m in msgs):
            return
        self._generate([{"role": m.role, "content": m.content} for m in msgs], replaces=replaces)

    def _history(self) -> list[dict]:
        return [{"role": m.role, "content": m.content} for m in self.store.messages(self.chat_id)]

    def _generate(self, history: list[dict], new_user_text: str | None = None, replaces: int | None = None) -> bool:
        s = self.session
        cfg = self.settings.generation_config(has_draft=s.draft is not None)
        chat_id = self.chat_id

        def run(task: Task) -> Generation:
            # The chat template runs here, off the UI thread (it came with the file).
            prompt, dropped = fit_chat(s, history, cfg.max_tokens)
            s.check_fits(prompt, cfg.max_tokens)
            task.report("started", float(dropped))
            steps = []
            for step in s.generate(prompt, cfg, cancel=task.is_cancelled):
                steps.append(step)
                task.emit_step(step)
            return Generation(steps=steps, config=cfg, prompt=prompt)

        task = Task(run, "generation", keep_result_on_cancel=True)
        self._gen_task = task
        state = {"started": False}

        def started(_msg: str, dropped: float) -> None:
            state["started"] = True
            if self._closing:
                return
            if new_user_text is not None:
                self.store.add_message(chat_id, Message("user", new_user_text))
                chat = self.store.chat(chat_id)
                if chat and chat.title == "New chat":
                    self.store.rename_chat(chat_id, new_user_text.splitlines()[0][:48])
                    self._refresh_chat_list()
            if dropped:
                self.status_label.setText(f"the chat is longer than the context: the oldest {int(dropped)} message(s) were left out")

        task.progress.connect(started)
        task.step.connect(self._on_step)
        task.succeeded.connect(lambda gen: self._on_generated(gen, chat_id, replaces))
        task.failed.connect(lambda msg: self._on_generation_failed(msg, chat_id, replaces, new_user_text, state["started"]))
        task.was_cancelled.connect(lambda: self._on_generation_failed("", chat_id, replaces, new_user_text, state["started"]))
        task.finished.connect(self._generation_ended)
        if new_user_text is not None:
            self.chat_view.add_message("user", new_user_text)
        self.stats.reset()
        self._show_reference()
        self.chat_view.begin_answer()
        self.run_info.setText(f"{cfg.describe()} · T={cfg.sampling.temperature:g}")
        self.latency.start()
        task.start()
        self._update_state()
        return True

    def _on_step(self, step) -> None:
        if self._closing:
            return
        if step.tokens:
            self.chat_view.append_tokens(step.tokens)
        self.stats.update_stats(step.stats)
        now = time.monotonic()
        if self.session is not None and now - self._last_mem > 1.0:
            self._last_mem = now
            self.stats.set_memory(self.session.memory())

    def _on_generated(self, gen: Generation | None, chat_id: int, replaces: int | None) -> None:
        self.latency.stop()
        if self._closing:
            return
        if gen is None:
            self._answer_delivered()
            return
        if self.chat_view.live_text:
            text, spans = self.chat_view.end_answer()
        else:
            # stopped before its first token: nothing is stored, so nothing is shown
            # (an empty answer in the view would enable Regenerate and Copy on nothing)
            self.chat_view.discard_answer()
            text, spans = "", []
        stats = gen.stats.to_dict() if gen.steps else None
        if gen.steps:
            stats["stop_reason"] = gen.stop_reason
            stats["config"] = gen.config.describe()
            self.stats.update_stats(gen.stats, live=False)
        if text:
            self.store.replace_answer(chat_id, Message("assistant", text, [sp.to_list() for sp in spans], stats), replaces)
        if replaces is not None and chat_id == self.chat_id:
            self._open_chat(chat_id)  # shows the new answer in place of the old one
        if gen.config.proposer == "none" and gen.steps and gen.stats.generated >= 16 and gen.stats.tokens_per_second:
            self.set_reference(self.target_path, gen.stats.tokens_per_second)
        self._show_reference()  # the estimate follows the target steps this answer timed
        if self.session is not None:
            self.stats.set_memory(self.session.memory())
        reason = {"eos": "finished", "max_tokens": "max tokens reached", "cancelled": "stopped", "context": "context full"}
        self.status_label.setText(f"{reason.get(gen.stop_reason, gen.stop_reason or '')} · event loop lag max {self.latency.max_ms:.0f} ms")
        self._refresh_chat_list()
        self._answer_delivered()
        self.generation_finished.emit(gen)

    def _on_generation_failed(self, msg: str, chat_id: int, replaces: int | None, new_user_text: str | None,
                              started: bool) -> None:
        """The answer failed (``msg``) or was stopped before its first step (no ``msg``)."""
        self.latency.stop()
        if self._closing:
            return
        text, spans = self.chat_view.end_answer()
        if started and text and replaces is None:
            # keep what was written before the failure
            self.store.add_message(chat_id, Message("assistant", text, [sp.to_list() for sp in spans],
                                                    {"stop_reason": "error", "error": msg}))
        if not started and new_user_text is not None and not self.input.toPlainText().strip():
            self.input.setPlainText(new_user_text)  # nothing was sent: the message is back in the box
        if chat_id == self.chat_id:
            self._open_chat(chat_id)
        if msg:
            self.show_error(msg)
        else:
            self.status_label.setText("stopped")
        self._answer_delivered()

    def _answer_delivered(self) -> None:
        """The answer is stored: the window is ready for the next one (the worker
        thread may take a moment more to end; closeEvent still waits for it)."""
        self._gen_task = None
        deferred, self._deferred_session = self._deferred_session, None
        if deferred is not None:
            self._loaded(deferred)
        self._update_state()
        self.focus_input()

    def _generation_ended(self) -> None:
        self._update_state()
        self.focus_input()

    def rpc_lost(self, message: str) -> None:
        """An RPC server the target used died inside a step: the thread that waited on it
        is parked in llama.cpp for good. Its answer or comparison ends now as failed
        (what was shown is kept), the session is let go (its memory is never freed: that
        would ask the lost server, and llama.cpp aborts then), and a new load may start."""
        for t in (self._gen_task, self.compare._task):
            if t is not None:
                t.abandon(message)  # delivers the failure through the task's own handlers
        if self.session is not None:
            self._install(None)
            self._refresh_model_lists()
        self.show_error(message)
        self._update_state()

    def stop_generation(self, wait: bool = False) -> None:
        t = self._gen_task
        if t is not None and t.isRunning():
            t.cancel()
            if wait:
                t.wait()
                QGuiApplication.processEvents()

    # =============================================================== settings

    def open_settings(self) -> None:
        if self.loading or self.compare.running:
            return
        dlg = SettingsDialog(self.settings, has_gpu=supports_gpu_offload(), parent=self)
        if dlg.exec() != SettingsDialog.DialogCode.Accepted:
            return
        self.apply_settings(dlg.value())

    def apply_settings(self, new: ChatSettings) -> None:
        reload = self.session is not None and new.needs_reload(self.settings)
        self.settings = new
        save_defaults(new)
        if self.chat_id is not None:
            self.store.save_settings(self.chat_id, new.to_dict())
        if reload:
            self.status_label.setText("settings changed: reloading the models…")
            self.load_models(self.target_path, self.draft_path, confirm_memory=False)

    # =============================================================== shutdown

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt API
        """Stop every task, wait for each to end (each honours Stop between steps,
        prompt chunks and load stages), then free the session and the database."""
        self._closing = True
        self._pending_load = None
        self.latency.stop()
        self.hide()
        for t in running_tasks():
            t.cancel()
        for t in running_tasks():
            while not t.wait(100):
                QGuiApplication.processEvents()  # keep queued signals (and the OS) answered
        # Deliver what the tasks sent just before they ended: a load that finished as
        # Close was pressed brings a session, which its handler frees (we are closing).
        QCoreApplication.sendPostedEvents()
        for w in self.findChildren(QWidget):
            if w.isWindow() and w.isVisible() and w is not self:
                w.close()  # e.g. a download dialog
        if self._deferred_session is not None:
            self._deferred_session.close()
            self._deferred_session = None
        self._install(None)
        self.store.close()
        super().closeEvent(event)

