"""The main window: it builds the model bar, the Chat, Compare and Library tabs and
the statistics panel, and wires them to one Session. The jobs behind them live apart:
- ``loader.PairLoader``: checking and loading a pair, one load at a time;
- ``model_catalog.ModelCatalog``: the models offered, and which can draft for a target;
- ``chat_controller.ChatController``: the chats, and answering in them;
- ``compare_tab.CompareTab``: comparisons.

Rules that keep it safe under any sequence of clicks:
- one load at a time: Load while a load (or its file check) runs cancels it and the
  newest request runs when it has ended; a cancelled load never installs its session;
- a session is closed only through ``Session.close``, which waits for the last
  generation or comparison using it (``Session.lease``), so no worker is ever inside
  llama.cpp when its memory is freed;
- a pair loaded while an answer is being stopped is installed once that answer is stored;
- what cannot run now is disabled (``_update_state``), and every handler checks again.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QCoreApplication, Qt, QTimer, Signal
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

from .. import __version__
from ..errors import Cancelled, SpecDeskError
from ..library.defaults import default_models, pair_present
from ..library.defaults import fetch as fetch_models
from ..session import Session, devices, supports_gpu_offload
from ..session.text import claim_text
from .chat_controller import ChatController
from .chatstore import ChatStore
from .chat_panel import ChatPanel, ChatSidebar
from .compare_tab import CompareTab
from .drop import DropController
from .empty_state import EmptyState
from .latency import LatencyProbe
from .library_tab import LibraryTab
from .loader import LoadRequest, PairLoader
from .model_bar import ModelBar
from .model_catalog import ModelCatalog
from .open_files import FileOpener
from .references import measured_reference, remember_reference
from .serve_controller import ServeController
from .serve_panel import ServeTab
from .settings import ChatSettings, SettingsDialog, load_defaults, save_defaults
from .stats_panel import StatsPanel
from .tasks import Task, running_tasks

log = logging.getLogger(__name__)

GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"
#: The window opens at this size, or smaller to fit the screen; it can shrink to MIN_SIZE.
DEFAULT_SIZE = (1400, 860)
MIN_SIZE = (1000, 620)


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
        self.settings = load_defaults()
        self._deferred_session: Session | None = None  # loaded while the last answer was being stopped
        self._aux_tasks: list[Task] = []
        self._closing = False
        self.loader = PairLoader(self._confirm_memory, self)
        self.loader.busy.connect(self._busy)
        self.loader.idle.connect(self._idle)
        self.loader.check_failed.connect(self.show_error)
        self.loader.load_failed.connect(self._load_failed)
        self.loader.loaded.connect(self._loaded)
        self.loader.changed.connect(self._update_state)
        self._picked_target: Path | None = None
        self.latency = LatencyProbe(self)

        self._build()
        self.catalog = ModelCatalog(self.library, self._start_aux, self)
        self.catalog.pairing_checked.connect(self._pairing_checked)
        # files from the command line, a second launch, the Finder, and drops (drop.py)
        self.opener = FileOpener(self)
        self.drops = DropController(self, self.opener)
        # serving: the requests and the chat answers share one queue over the pair, so
        # every chat answer's steps come from it
        self.serve = ServeController(self, self.serve_tab, self.stats, self.chat_panel, self)
        self.chats = ChatController(self.store, self.chat_panel, self.sidebar, self.stats, self.latency, self,
                                    steps_of=self.serve.chat_steps, parent=self)
        self.chats.generation_finished.connect(self.generation_finished)
        self.chats.delivered.connect(self._answer_delivered)
        self.chats.changed.connect(self._update_state)
        self.chats.settings_opened.connect(self._chat_settings)
        self.chats.ended.connect(self._generation_ended)
        self.sidebar.chat_chosen.connect(self.chats.chosen)
        self.sidebar.delete_chat_btn.clicked.connect(self.chats.delete_chat)
        self.chat_panel.regen_btn.clicked.connect(self.chats.regenerate)
        self.chat_panel.clear_btn.clicked.connect(self.chats.clear_chat)
        self.chat_panel.copy_btn.clicked.connect(self.chats.copy_answer)
        self.loader.checked.connect(self.model_bar.set_info)
        self.serve.changed.connect(self._update_state)
        self.models_changed.connect(self.serve.session_changed)
        self.model_bar.insertAction(self.stats_toggle, self.serve.toggle)
        self._fit_to_screen()
        self.chats.select_or_create()
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
        self.serve_tab = ServeTab()
        self.tabs.addTab(self.serve_tab, "Serve")

        # -- right: statistics, scrolling, and hidden with the model bar's toggle
        self.stats = StatsPanel()
        self.compare.noise_measured.connect(self.stats.set_noise)  # the chat's verdict respects the machine's noise
        self.stats_scroll = QScrollArea()
        self.stats_scroll.setObjectName("statsScroll")
        self.stats_scroll.setWidget(self.stats)
        self.stats_scroll.setWidgetResizable(True)
        self.stats_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.stats_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # a steady viewport width: the panel is laid out once for it, not again when a scroll bar appears
        self.stats_scroll.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn)
        # no narrower than the panel and its scroll bar: with no sideways scrolling, a
        # narrower pane cut the panel's right edge off (its texts and charts ended mid-word)
        self.stats_scroll.setMinimumWidth(self.stats.minimumWidth() + self.stats_scroll.verticalScrollBar().sizeHint().width())
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
    def loading(self) -> bool:
        """From Load until the outcome of its check or load has been handled."""
        return self.loader.loading

    def _update_state(self) -> None:
        if self._closing:
            return
        loaded = self.session is not None
        comparing = self.compare.running
        loading = self.loading
        busy = self.generating or comparing
        ready = loaded and not busy and not loading
        self.pages.setCurrentIndex(1 if loaded or self._has_messages() else 0)
        self.compare.set_enabled_for(loaded and not loading, self.generating or self.serve.serving)
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
        live = chat or self.tabs.currentWidget() is self.serve_tab  # a served request's statistics show there too
        self.stats_scroll.setVisible(live and self.stats_toggle.isChecked())

    def _idle(self, text: str = "") -> None:
        self.status_label.setText(text)
        self.progress.setVisible(False)
        self.cancel_btn.setVisible(False)
        self.empty_state.set_progress(None, None)

    def cancel_background(self) -> None:
        self.loader.cancel()
        for t in self._aux_tasks:
            if t.isRunning():
                t.cancel()

    def _start_aux(self, task: Task) -> Task:
        """Run a side task (pairing, fetching) that the window cancels on close."""
        self._aux_tasks.append(task)
        task.finished.connect(lambda: self._aux_tasks.remove(task) if task in self._aux_tasks else None)
        task.start()
        return task

    # =============================================================== models

    def _refresh_model_lists(self) -> None:
        models = self.catalog.known()
        self.model_bar.populate(models, self.catalog.name_of, self.target_path, self.draft_path,
                                self._picked_target, self.catalog.pairing)
        self.empty_state.set_models(models)

    def _library_scanned(self, entries) -> None:
        if self._closing:
            return  # a scan that finished while the window closed
        self._refresh_model_lists()
        target = ModelBar.path_of(self.target_combo) or self.target_path
        if target is not None:
            self.check_drafts(target)

    def check_drafts(self, target: Path) -> None:
        """Refresh the draft picker for ``target``: compatible drafts first."""
        self.catalog.check_drafts(target, lambda: ModelBar.path_of(self.target_combo) or self.target_path)

    def _pairing_checked(self, result) -> None:
        self._refresh_model_lists()
        self.pairing_checked.emit(result)

    def _target_picked(self, path: Path | None) -> None:
        self._picked_target = path
        if path is not None:
            self.catalog.pairing = []
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
            self.catalog.pairing = res
            usable = {c.path.resolve() for c in res if c.usable}
            same = [c.path for c in res if c.compatible]
            keep = self.draft_path is not None and self.draft_path.resolve() in usable
            draft = self.draft_path if keep else next(iter(same), None)
            self.target_path = path
            self.load_models(path, draft)

        self.catalog.pair(path, done, self.show_error)

    def open_model_dialog(self, role: str) -> None:
        start = str(self.target_path.parent) if self.target_path else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, f"Open a {role} GGUF", start, GGUF_FILTER)
        if path:
            self.open_model_file(Path(path), role)

    def open_model_file(self, p: Path, role: str) -> None:
        """Load ``p`` as the target or the draft, as picked with Open…"""
        self.catalog.remember(p)
        if role == "target":
            self.target_path = p
            self._picked_target = None  # the file opened wins over a target chosen in the list
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
        request runs after it: one load at a time, the newest wins (``PairLoader``)."""
        if self._closing:
            return
        s = self.settings
        try:
            req = LoadRequest(s.model_spec(target, "target"), s.model_spec(draft, "draft") if draft else None,
                              confirm_memory)
        except SpecDeskError as e:
            self.show_error(str(e))
            return
        if self.compare.running:
            self.compare.cancel()
        self.stop_generation()
        self.clear_error()
        self.loader.request(req)

    def _confirm_memory(self, shortfalls: list[str]) -> bool:
        ans = QMessageBox.warning(
            self,
            "Not enough free memory",
            f"Loading these models needs {' and '.join(shortfalls)}. Load anyway?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
        )
        return ans == QMessageBox.StandardButton.Yes

    def _install(self, session: Session | None) -> None:
        """Make ``session`` the window's; the old one is freed once nothing uses it."""
        old, self.session = self.session, session
        if old is not None and old is not session:
            old.close()

    def _loaded(self, session: Session | None) -> None:
        if session is None:
            return
        if self._closing or self.loader.pending is not None:
            session.close()  # the window closes, or a newer request replaces it at once
            return
        if self.chats.generating:
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
        self.catalog.remember(self.target_path)
        if self.draft_path:
            self.catalog.remember(self.draft_path)
        if self.catalog.needs_pairing(self.target_path):
            self.catalog.pairing = []
            self.check_drafts(self.target_path)
        self._refresh_model_lists()
        loaded = f"loaded {session.target.name}" + (f" and {session.draft.name}" if session.draft else "")
        if session.translated:
            loaded += (" — the draft has another vocabulary, so its text is re-tokenized for the target "
                       "(translated; exact all the same)")
        self._idle(loaded)
        self.stats.set_memory(session.memory())
        self.stats.set_devices(devices(), supports_gpu_offload())
        self.show_reference()
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

    def show_reference(self) -> None:
        """Target alone's speed for the verdict: measured when a comparison or a plain
        answer measured it, else estimated from the single target steps this session
        has timed (what every verify of one token costs)."""
        measured = measured_reference(self.target_path)
        if measured:
            self.stats.set_reference(measured, "measured")
            return
        step = self.session.auto.costs.reference_step if self.session is not None else None
        self.stats.set_reference(1.0 / step if step else None, "estimated")

    # =============================================================== chats and answers

    @property
    def chat_id(self) -> int | None:
        return self.chats.chat_id

    @property
    def generating(self) -> bool:
        """From Send until the answer is stored."""
        return self.chats.generating

    def new_chat(self) -> None:
        if self.chats.new_chat():
            self.focus_input()

    def send_from_input(self) -> None:
        text = self.input.toPlainText().strip()
        if not text:
            return
        if self.send(text):
            self.input.clear()

    def send(self, text: str) -> bool:
        """Answer ``text`` in the current chat (see ``ChatController.send``)."""
        return self.chats.send(text)

    def stop_generation(self, wait: bool = False) -> None:
        self.chats.stop(wait)

    def busy_elsewhere(self) -> bool:
        return self.compare.running or self.loading

    def can_serve(self) -> str | None:
        """Why the Serve switch cannot start now (the pair is shared with Compare)."""
        if self.compare.running:
            return "Stop the comparison first: it needs the pair to itself."
        return "Wait for the models to load." if self.loading else None

    def set_status(self, text: str) -> None:
        self.status_label.setText(text)

    def measured_speed(self, tokens_per_second: float) -> None:
        if self.target_path is not None:
            self.set_reference(self.target_path, tokens_per_second)

    def _chat_settings(self, new: ChatSettings) -> None:
        """A chat was opened: its settings become the window's (a reload if they need one)."""
        reload = self.session is not None and new.needs_reload(self.settings)
        self.settings = new
        if reload and self.target_path and not self._closing:
            self.load_models(self.target_path, self.draft_path, confirm_memory=False)

    def _answer_delivered(self) -> None:
        """The answer is stored: a pair loaded meanwhile is installed now."""
        if self._closing:
            return
        deferred, self._deferred_session = self._deferred_session, None
        if deferred is not None:
            self._loaded(deferred)
        self._update_state()
        self.focus_input()

    def _generation_ended(self) -> None:
        if self._closing:
            return
        self._update_state()
        self.focus_input()

    def rpc_lost(self, message: str) -> None:
        """An RPC server the target used died inside a step: the thread that waited on it
        is parked in llama.cpp for good. Its answer or comparison ends now as failed
        (what was shown is kept), the session is let go (its memory is never freed: that
        would ask the lost server, and llama.cpp aborts then), and a new load may start."""
        for t in (self.chats.task, self.compare._task):
            if t is not None:
                t.abandon(message)  # delivers the failure through the task's own handlers
        self.serve.forsake_running(message)  # the next answer or request does not wait for the parked one
        if self.session is not None:
            self._install(None)
            self._refresh_model_lists()
        self.show_error(message)
        self._update_state()

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
        self.chats.save_settings(new)
        if reload:
            self.status_label.setText("settings changed: reloading the models…")
            self.load_models(self.target_path, self.draft_path, confirm_memory=False)

    # =============================================================== shutdown

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt API
        """Stop every task, wait for each to end (each honours Stop between steps,
        prompt chunks and load stages), then free the session and the database."""
        self._closing = True
        self.loader.close()
        self.catalog.close()
        self.chats.closing = True
        self.serve.close()
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

