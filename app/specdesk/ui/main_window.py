"""The main window: it builds the model bar, the Chat, Compare, Library and Serve tabs
and the statistics panel, one section per builder, and wires them to the parts that
do the work:
- ``pair_controller.PairController``: the models offered, loading a pair (one load at
  a time: ``loader.PairLoader``), fetching the default pair, and the Session;
- ``chat_controller.ChatController``: the chats, and answering in them (through the
  serve queue's route, which it is given);
- ``serve_controller.ServeController``: serving the pair, and the queue the chat shares;
- ``compare_tab.CompareTab``: comparisons.

Rules that keep it safe under any sequence of clicks:
- one load at a time: Load while a load (or its file check) runs cancels it and the
  newest request runs when it has ended; a cancelled load never installs its session;
- a session is closed only through ``Session.close``, which waits for the last
  generation or comparison using it (``Session.lease``), so no worker is ever inside
  llama.cpp when its memory is freed;
- a pair loaded while an answer is being stopped is installed once that answer is stored;
- what cannot run now is disabled (``update_state``), and every handler checks again.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QCoreApplication, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
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
from ..session import Session, supports_gpu_offload
from ..session.text import claim_text
from .chat_controller import ChatController
from ..session.chatstore import ChatStore
from .chat_panel import ChatPanel, ChatSidebar
from .compare_tab import CompareTab
from .drop import DropController
from .empty_state import EmptyState
from .latency import LatencyProbe
from .library_tab import LibraryTab
from .loader import PairLoader
from .model_bar import ModelBar
from .model_catalog import ModelCatalog
from .open_files import FileOpener
from .pair_controller import PairController
from .references import measured_reference, remember_reference
from .serve_controller import ServeController
from .serve_panel import ServeTab
from .settings import ChatSettings, SettingsDialog, load_defaults, save_defaults
from .stats_panel import StatsPanel
from .tasks import Task, running_tasks

log = logging.getLogger(__name__)

#: The window opens at this size, or smaller to fit the screen; it can shrink to MIN_SIZE.
DEFAULT_SIZE = (1400, 860)
MIN_SIZE = (1000, 620)


class ErrorBanner(QLabel):
    """The last error, above the tabs (it shows whichever tab is open); a click dismisses it."""

    def __init__(self) -> None:
        super().__init__("")
        self.setObjectName("errorBanner")
        self.setWordWrap(True)
        self.setStyleSheet("background:#fff5f5; color:#c92a2a; border:1px solid #ffc9c9; border-radius:4px; padding:6px;")
        self.setVisible(False)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

    def mousePressEvent(self, event) -> None:  # noqa: N802 - Qt API
        self.setVisible(False)


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
        self.settings = load_defaults()
        self._aux_tasks: list[Task] = []
        self._closing = False
        self.latency = LatencyProbe(self)

        self._build()
        self.pairs = PairController(self, self, self.model_bar, self.empty_state, self.library, self.stats,
                                    self._start_aux, self)
        # files from the command line, a second launch, the Finder, and drops (drop.py)
        self.opener = FileOpener(self)
        self.drops = DropController(self, self.opener)
        # serving: the requests and the chat answers share one queue over the pair, so
        # every chat answer's steps come from it
        self.serve = ServeController(self, self.serve_tab, self.stats, self.chat_panel, self)
        self.chats = ChatController(self.store, self.chat_panel, self.sidebar, self.stats, self.latency, self,
                                    steps_of=self.serve.chat_steps, parent=self)
        self._wire_models()
        self._wire_chats()
        self._wire_serving()
        self._fit_to_screen()
        self.chats.select_or_create()
        self.pairs.refresh_lists()
        self.update_state()
        if self.store.recovered:
            self.show_error(self.store.recovered)
        self.library.rescan()
        if autoload:
            QTimer.singleShot(0, self.pairs.autoload_default_pair)
        QTimer.singleShot(0, self.focus_input)

    # =============================================================== construction

    def _build(self) -> None:
        """The window's sections, each built by its own method, in the order they were
        always created (it is the keyboard's focus order)."""
        self._build_model_bar()
        self._build_chat()
        self._build_tabs()
        self._build_stats()
        self._build_layout()
        self._build_status_bar()
        self._build_shortcuts()

    def _build_model_bar(self) -> None:
        self.model_bar = ModelBar(self)
        self.addToolBar(self.model_bar)
        # the widgets tests and tools reach for, by their old names
        self.target_combo = self.model_bar.target_combo
        self.draft_combo = self.model_bar.draft_combo
        self.load_btn = self.model_bar.load_btn
        self.settings_btn = self.model_bar.settings_btn

    def _build_chat(self) -> None:
        """The chat list, the error banner, the Chat tab's panel and its empty state."""
        self.sidebar = ChatSidebar()
        self.sidebar.new_chat_btn.clicked.connect(self.new_chat)
        self.chat_list = self.sidebar.chat_list
        self.error_banner = ErrorBanner()
        self.chat_panel = cp = ChatPanel()
        cp.input.submitted.connect(self.send_from_input)
        cp.send_btn.clicked.connect(self.send_from_input)
        cp.stop_btn.clicked.connect(self.stop_generation)
        self.chat_view, self.legend, self.provenance_box, self.input = cp.chat_view, cp.legend, cp.provenance_box, cp.input
        self.send_btn, self.stop_btn, self.regen_btn = cp.send_btn, cp.stop_btn, cp.regen_btn
        self.clear_btn, self.copy_btn, self.run_info = cp.clear_btn, cp.copy_btn, cp.run_info
        self.empty_state = EmptyState()
        self.pages = QStackedWidget()
        self.pages.addWidget(self.empty_state)
        self.pages.addWidget(cp)

    def _build_tabs(self) -> None:
        """Chat, Compare, Library and Serve."""
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
        self.compare.stopped.connect(self.update_state)
        self.compare.run_btn.clicked.connect(self.update_state)
        self.tabs.addTab(self.compare, "Compare")
        self.library = LibraryTab()
        self.library.error.connect(self.show_error)
        self.tabs.addTab(self.library, "Library")
        self.compare.download_requested.connect(lambda repo, file: self.library.open_download_dialog(repo, file))
        self.serve_tab = ServeTab()
        self.tabs.addTab(self.serve_tab, "Serve")

    def _build_stats(self) -> None:
        """The statistics on the right, scrolling, with the model bar's toggle and About."""
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

    def _build_layout(self) -> None:
        """The chat list, the tabs under the error banner, and the statistics, side by side."""
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

    def _build_status_bar(self) -> None:
        """A status line, a progress bar and Cancel."""
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

    def _build_shortcuts(self) -> None:
        def shortcut(keys, slot) -> None:
            QShortcut(QKeySequence(keys), self, activated=slot, context=Qt.ShortcutContext.WindowShortcut)

        shortcut(QKeySequence.StandardKey.Quit, self.close)
        shortcut("Esc", self._escape)
        shortcut("Ctrl+N", self.new_chat)
        shortcut("Ctrl+L", self._focus_message_box)
        shortcut("Ctrl+,", self.open_settings)

    # =============================================================== wiring

    def _wire_models(self) -> None:
        """The model bar, the empty state and the Library tab to the pair's flow."""
        pairs = self.pairs
        self.model_bar.open_requested.connect(pairs.open_dialog)
        self.model_bar.load_requested.connect(pairs.load_selected)
        self.model_bar.target_picked.connect(pairs.target_picked)
        self.model_bar.settings_requested.connect(self.open_settings)
        self.empty_state.fetch_requested.connect(pairs.fetch_default_pair)
        self.empty_state.open_requested.connect(lambda: pairs.open_dialog("target"))
        self.empty_state.model_chosen.connect(lambda p: pairs.load(Path(p), pairs.draft_path))
        self.library.scanned.connect(pairs.library_scanned)
        self.library.use_as_target.connect(lambda p: pairs.use_from_library(p, "target"))
        self.library.use_as_draft.connect(lambda p: pairs.use_from_library(p, "draft"))
        pairs.pairing_checked.connect(self.pairing_checked)
        pairs.models_changed.connect(self.models_changed)

    def _wire_chats(self) -> None:
        chats = self.chats
        chats.generation_finished.connect(self.generation_finished)
        chats.delivered.connect(self._answer_delivered)
        chats.changed.connect(self.update_state)
        chats.settings_opened.connect(self._chat_settings)
        chats.ended.connect(self._generation_ended)
        self.sidebar.chat_chosen.connect(chats.chosen)
        self.sidebar.delete_chat_btn.clicked.connect(chats.delete_chat)
        self.chat_panel.regen_btn.clicked.connect(chats.regenerate)
        self.chat_panel.clear_btn.clicked.connect(chats.clear_chat)
        self.chat_panel.copy_btn.clicked.connect(chats.copy_answer)

    def _wire_serving(self) -> None:
        self.serve.changed.connect(self.update_state)
        self.models_changed.connect(self.serve.session_changed)
        self.model_bar.insertAction(self.stats_toggle, self.serve.toggle)

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
        return self.pairs.loading

    @property
    def closing(self) -> bool:
        return self._closing

    def update_state(self) -> None:
        """Enable what can run now, disable the rest."""
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

    def show_busy(self, text: str, fraction: float | None = None, cancellable: bool = True) -> None:
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

    def show_idle(self, text: str = "") -> None:
        self.status_label.setText(text)
        self.progress.setVisible(False)
        self.cancel_btn.setVisible(False)
        self.empty_state.set_progress(None, None)

    def cancel_background(self) -> None:
        self.pairs.loader.cancel()
        for t in self._aux_tasks:
            if t.isRunning():
                t.cancel()

    def _start_aux(self, task: Task) -> Task:
        """Run a side task (pairing, fetching) that the window cancels on close."""
        self._aux_tasks.append(task)
        task.finished.connect(lambda: self._aux_tasks.remove(task) if task in self._aux_tasks else None)
        task.start()
        return task

    # =============================================================== the pair (pair_controller)

    @property
    def session(self) -> Session | None:
        return self.pairs.session

    @property
    def target_path(self) -> Path | None:
        return self.pairs.target_path

    @property
    def loader(self) -> PairLoader:
        return self.pairs.loader

    @property
    def catalog(self) -> ModelCatalog:
        return self.pairs.catalog

    def load_models(self, target: Path, draft: Path | None, confirm_memory: bool = True) -> None:
        """Check the pair and its memory, then load it (see ``PairController.load``)."""
        self.pairs.load(target, draft, confirm_memory)

    def open_model_file(self, p: Path, role: str) -> None:
        """Load ``p`` as the target or the draft, as picked with Open…"""
        self.pairs.open_file(p, role)

    def stop_work(self) -> None:
        """A new pair is coming: the comparison and the answer on the old one stop."""
        if self.compare.running:
            self.compare.cancel()
        self.stop_generation()

    def show_chat(self) -> None:
        self.tabs.setCurrentIndex(0)

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
        self.stats.set_reference(self.session.estimated_reference() if self.session is not None else None, "estimated")

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
            self.pairs.reload()

    def _answer_delivered(self) -> None:
        """The answer is stored: a pair loaded meanwhile is installed now."""
        if self._closing:
            return
        self.pairs.install_deferred()
        self.update_state()
        self.focus_input()

    def _generation_ended(self) -> None:
        if self._closing:
            return
        self.update_state()
        self.focus_input()

    def rpc_lost(self, message: str) -> None:
        """An RPC server the target used died inside a step: the thread that waited on it
        is parked in llama.cpp for good. Its answer or comparison ends now as failed
        (what was shown is kept), the session is let go (its memory is never freed: that
        would ask the lost server, and llama.cpp aborts then), and a new load may start."""
        for t in (self.chats.task, self.compare.task):
            if t is not None:
                t.abandon(message)  # delivers the failure through the task's own handlers
        self.serve.forsake_running(message)  # the next answer or request does not wait for the parked one
        self.pairs.forsake()
        self.show_error(message)
        self.update_state()

    # =============================================================== settings

    def open_settings(self) -> None:
        if self.loading or self.compare.running:
            return
        dlg = SettingsDialog(self.settings, has_gpu=supports_gpu_offload(), parent=self,
                             refusals=self.session.cannot_run() if self.session is not None else None)
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
            self.pairs.reload()

    # =============================================================== shutdown

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt API
        """Stop every task, wait for each to end (each honours Stop between steps,
        prompt chunks and load stages), then free the session and the database."""
        self._closing = True
        self.pairs.close()
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
        self.pairs.release()
        self.store.close()
        super().closeEvent(event)

