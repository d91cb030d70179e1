"""The main window: chats on the left, the conversation in the middle, the
speculation made visible on the right."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from ..chatstore import ChatStore, Message
from ..engine.model import supports_gpu_offload
from ..errors import ContextOverflowError, SpecDeskError
from ..session import Generation, Session
from .chat_view import ChatView, Legend, Span
from .empty_state import EmptyState
from .latency import LatencyProbe
from .settings import ChatSettings, SettingsDialog, load_defaults, save_defaults
from .stats_panel import StatsPanel, fmt_bytes
from .tasks import Task, running_tasks

log = logging.getLogger(__name__)

GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"
MAX_RECENT = 12


class ChatInput(QPlainTextEdit):
    submitted = Signal()

    def keyPressEvent(self, e) -> None:  # noqa: N802 - Qt API
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (e.modifiers() & Qt.KeyboardModifier.ShiftModifier):
            self.submitted.emit()
            return
        super().keyPressEvent(e)


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
        self.resize(1400, 860)
        self.data_dir = Path(data_dir)
        self.store = ChatStore(self.data_dir / "chats.sqlite3")
        self.session: Session | None = None
        self.target_path: Path | None = None
        self.draft_path: Path | None = None
        self.chat_id: int | None = None
        self.settings = load_defaults()
        self._gen_task: Task | None = None
        self._load_task: Task | None = None
        self._aux_tasks: list[Task] = []
        self._draft_pairing: list = []
        self._pairing_target: Path | None = None
        self._pending_regenerate = False
        self._closing = False
        self._picked_target: Path | None = None
        self.latency = LatencyProbe(self)
        self._last_mem = 0.0

        self._build()
        self._refresh_chat_list()
        self._select_or_create_chat()
        self._refresh_model_lists()
        self._update_state()
        self.library.rescan()
        if autoload:
            QTimer.singleShot(0, self.autoload_default_pair)

    # =============================================================== construction

    def _build(self) -> None:
        # -- toolbar: models and settings
        tb = QToolBar("Models")
        tb.setObjectName("modelBar")
        tb.setMovable(False)
        self.addToolBar(tb)
        tb.addWidget(QLabel(" Target "))
        self.target_combo = QComboBox()
        self.target_combo.setObjectName("targetCombo")
        self.target_combo.setMinimumWidth(260)
        self.target_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.target_combo.currentIndexChanged.connect(self._target_combo_changed)
        tb.addWidget(self.target_combo)
        self.open_target_btn = QPushButton("Open…")
        self.open_target_btn.setToolTip("Open a target GGUF file")
        self.open_target_btn.clicked.connect(lambda: self.open_model_dialog("target"))
        tb.addWidget(self.open_target_btn)
        tb.addSeparator()
        tb.addWidget(QLabel(" Draft "))
        self.draft_combo = QComboBox()
        self.draft_combo.setObjectName("draftCombo")
        self.draft_combo.setMinimumWidth(260)
        self.draft_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        tb.addWidget(self.draft_combo)
        self.open_draft_btn = QPushButton("Open…")
        self.open_draft_btn.setToolTip("Open a draft GGUF file (it must share the target's vocabulary)")
        self.open_draft_btn.clicked.connect(lambda: self.open_model_dialog("draft"))
        tb.addWidget(self.open_draft_btn)
        self.load_btn = QPushButton("Load")
        self.load_btn.setObjectName("loadButton")
        self.load_btn.setToolTip("Check the pair, estimate its memory, and load it")
        self.load_btn.clicked.connect(self.load_selected)
        tb.addWidget(self.load_btn)
        self.model_info = QLabel("")
        self.model_info.setObjectName("modelInfo")
        self.model_info.setStyleSheet("color:#495057; padding-left:8px;")
        tb.addWidget(self.model_info)
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        tb.addWidget(spacer)
        self.settings_btn = QPushButton("Settings…")
        self.settings_btn.setObjectName("settingsButton")
        self.settings_btn.clicked.connect(self.open_settings)
        tb.addWidget(self.settings_btn)

        # -- left: chats
        left = QWidget()
        left.setObjectName("chatSidebar")
        ll = QVBoxLayout(left)
        ll.setContentsMargins(6, 6, 6, 6)
        self.new_chat_btn = QPushButton("+ New chat")
        self.new_chat_btn.clicked.connect(self.new_chat)
        ll.addWidget(self.new_chat_btn)
        self.chat_list = QListWidget()
        self.chat_list.setObjectName("chatList")
        self.chat_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.chat_list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.chat_list.currentItemChanged.connect(self._chat_selected)
        ll.addWidget(self.chat_list, 1)
        self.delete_chat_btn = QPushButton("Delete chat")
        self.delete_chat_btn.clicked.connect(self.delete_chat)
        ll.addWidget(self.delete_chat_btn)
        left.setMinimumWidth(170)

        # -- centre: chat page or empty state
        self.error_banner = QLabel("")
        self.error_banner.setObjectName("errorBanner")
        self.error_banner.setWordWrap(True)
        self.error_banner.setStyleSheet("background:#fff5f5; color:#c92a2a; border:1px solid #ffc9c9; border-radius:4px; padding:6px;")
        self.error_banner.setVisible(False)
        self.error_banner.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_banner.mousePressEvent = lambda e: self.error_banner.setVisible(False)  # click to dismiss

        chat_page = QWidget()
        cl = QVBoxLayout(chat_page)
        cl.setContentsMargins(0, 0, 0, 0)
        self.chat_view = ChatView()
        cl.addWidget(self.chat_view, 1)
        legend_row = QHBoxLayout()
        self.legend = Legend()
        legend_row.addWidget(self.legend, 1)
        self.provenance_box = QCheckBox("Colour by provenance")
        self.provenance_box.setObjectName("provenanceToggle")
        self.provenance_box.setChecked(True)
        self.provenance_box.toggled.connect(self._toggle_provenance)
        legend_row.addWidget(self.provenance_box)
        cl.addLayout(legend_row)
        self.input = ChatInput()
        self.input.setObjectName("chatInput")
        self.input.setPlaceholderText("Message the target model…  (Enter sends, Shift+Enter for a new line)")
        self.input.setMaximumHeight(90)
        self.input.submitted.connect(self.send_from_input)
        cl.addWidget(self.input)
        row = QHBoxLayout()
        self.send_btn = QPushButton("Send")
        self.send_btn.setObjectName("sendButton")
        self.send_btn.setDefault(True)
        self.send_btn.clicked.connect(self.send_from_input)
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.setObjectName("stopButton")
        self.stop_btn.clicked.connect(self.stop_generation)
        self.regen_btn = QPushButton("Regenerate")
        self.regen_btn.setObjectName("regenerateButton")
        self.regen_btn.clicked.connect(self.regenerate)
        self.clear_btn = QPushButton("Clear")
        self.clear_btn.setObjectName("clearButton")
        self.clear_btn.clicked.connect(self.clear_chat)
        self.copy_btn = QPushButton("Copy answer")
        self.copy_btn.setObjectName("copyButton")
        self.copy_btn.clicked.connect(self.copy_answer)
        for b in (self.send_btn, self.stop_btn, self.regen_btn, self.clear_btn, self.copy_btn):
            row.addWidget(b)
        row.addStretch(1)
        self.run_info = QLabel("")
        self.run_info.setObjectName("runInfo")
        self.run_info.setStyleSheet("color:#868e96;")
        row.addWidget(self.run_info)
        cl.addLayout(row)

        self.empty_state = EmptyState()
        self.empty_state.fetch_requested.connect(self.fetch_default_pair)
        self.empty_state.open_requested.connect(lambda: self.open_model_dialog("target"))
        self.empty_state.model_chosen.connect(self._empty_state_choice)

        self.pages = QStackedWidget()
        self.pages.addWidget(self.empty_state)
        self.pages.addWidget(chat_page)

        centre = QWidget()
        ctr = QVBoxLayout(centre)
        ctr.setContentsMargins(6, 6, 6, 6)
        ctr.addWidget(self.pages, 1)

        self.tabs = QTabWidget()
        self.tabs.setObjectName("mainTabs")
        self.tabs.addTab(centre, "Chat")
        from .compare_tab import CompareTab

        self.compare = CompareTab(lambda: self.session)
        self.compare.error.connect(self.show_error)
        self.compare.reference_measured.connect(self.set_reference)
        self.compare.stopped.connect(self._update_state)
        self.compare.run_btn.clicked.connect(self._update_state)
        self.tabs.addTab(self.compare, "Compare")
        from .library_tab import LibraryTab

        self.library = LibraryTab()
        self.library.error.connect(self.show_error)
        self.library.scanned.connect(self._library_scanned)
        self.library.use_as_target.connect(lambda p: self._use_from_library(p, "target"))
        self.library.use_as_draft.connect(lambda p: self._use_from_library(p, "draft"))
        self.tabs.addTab(self.library, "Library")

        # -- right: statistics
        self.stats = StatsPanel()
        scroll = QScrollArea()
        scroll.setWidget(self.stats)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setMinimumWidth(330)

        middle = QWidget()
        ml = QVBoxLayout(middle)
        ml.setContentsMargins(0, 4, 0, 0)
        ml.addWidget(self.error_banner)  # above the tabs: errors show whichever tab is open
        ml.addWidget(self.tabs, 1)

        split = QSplitter()
        split.addWidget(left)
        split.addWidget(middle)
        split.addWidget(scroll)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setStretchFactor(2, 0)
        split.setSizes([200, 820, 380])
        self.setCentralWidget(split)

        # -- status bar with a progress bar and cancel
        sb = self.statusBar()
        self.status_label = QLabel("")
        self.status_label.setObjectName("statusLabel")
        sb.addWidget(self.status_label, 1)
        self.progress = QProgressBar()
        self.progress.setObjectName("loadProgress")
        self.progress.setRange(0, 1000)
        self.progress.setMaximumWidth(260)
        self.progress.setVisible(False)
        sb.addPermanentWidget(self.progress)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.setObjectName("cancelButton")
        self.cancel_btn.setVisible(False)
        self.cancel_btn.clicked.connect(self.cancel_background)
        sb.addPermanentWidget(self.cancel_btn)

        quit_act = QAction("Quit", self)
        quit_act.setShortcut(QKeySequence.StandardKey.Quit)
        quit_act.triggered.connect(self.close)
        self.addAction(quit_act)

    # =============================================================== state

    @property
    def generating(self) -> bool:
        return self._gen_task is not None and self._gen_task.isRunning()

    @property
    def loading(self) -> bool:
        return self._load_task is not None and self._load_task.isRunning()

    def _update_state(self) -> None:
        loaded = self.session is not None
        comparing = self.compare.running
        busy = self.generating or comparing
        self.pages.setCurrentIndex(1 if loaded or self._has_messages() else 0)
        self.compare.set_enabled_for(loaded and not self.loading, self.generating)
        self.send_btn.setEnabled(loaded and not busy and not self.loading)
        self.input.setEnabled(True)
        self.stop_btn.setEnabled(busy)
        self.regen_btn.setEnabled(loaded and not busy and any(r == "assistant" for r, _, _ in self.chat_view.messages()))
        self.clear_btn.setEnabled(not busy)
        self.new_chat_btn.setEnabled(not busy)
        self.delete_chat_btn.setEnabled(not busy)
        self.chat_list.setEnabled(not busy)
        self.settings_btn.setEnabled(not self.loading and not comparing)
        self.load_btn.setEnabled(not self.loading and not comparing)
        if loaded:
            d = self.session.draft
            self.model_info.setText("● loaded" + ("" if d else " (no draft)"))
            self.model_info.setToolTip(f"{self.session.target.spec.path}\n{d.spec.path if d else 'no draft'}")
        elif not self.loading:
            self.model_info.setText("no models loaded")

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

    def _idle(self, text: str = "") -> None:
        self.status_label.setText(text)
        self.progress.setVisible(False)
        self.cancel_btn.setVisible(False)
        self.empty_state.set_progress(None, None)

    def cancel_background(self) -> None:
        for t in [self._load_task, *self._aux_tasks]:
            if t is not None and t.isRunning():
                t.cancel()

    # =============================================================== models

    def _recent(self) -> list[Path]:
        raw = QSettings().value("models/recent", [])
        if isinstance(raw, str):
            raw = [raw]
        return [Path(p) for p in (raw or []) if p]

    def _remember(self, path: Path) -> None:
        rec = [p for p in self._recent() if p != path]
        rec.insert(0, path)
        QSettings().setValue("models/recent", [str(p) for p in rec[:MAX_RECENT]])

    def known_models(self) -> list[Path]:
        """The library's usable models (models/, your folders, HF cache, LM Studio,
        Ollama) and recently opened files."""
        from ..paths import models_dir

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
        # target: every usable model
        combo = self.target_combo
        picked = self._picked_target  # chosen in the combo, not loaded yet: survives a refresh
        combo.blockSignals(True)
        combo.clear()
        for p in models:
            combo.addItem(self._model_name(p), str(p))
            combo.setItemData(combo.count() - 1, str(p), Qt.ItemDataRole.ToolTipRole)
        if self.target_path is not None:
            i = combo.findData(str(self.target_path.resolve()))
            if i < 0:
                combo.addItem(self.target_path.name, str(self.target_path.resolve()))
                i = combo.count() - 1
            combo.setCurrentIndex(i)
        i = combo.findData(str(picked)) if picked is not None else -1
        if i >= 0:
            combo.setCurrentIndex(i)
        combo.blockSignals(False)
        # draft: compatible drafts first (smallest first), the others greyed out with their reason
        combo = self.draft_combo
        combo.blockSignals(True)
        combo.clear()
        combo.addItem("(no draft: n-gram or target alone)", None)
        pairing = self._draft_pairing
        ordered = [c.path.resolve() for c in pairing if c.compatible] if pairing else []
        ordered += [p for p in models if p not in ordered and p not in {c.path.resolve() for c in pairing}]
        incompatible = [c for c in pairing if not c.compatible] if pairing else []
        model = combo.model()
        for p in ordered:
            if self.target_path is not None and p == self.target_path.resolve():
                continue
            combo.addItem(self._model_name(p), str(p))
            tip = "compatible: shares the target's vocabulary" if pairing else str(p)
            combo.setItemData(combo.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        for c in incompatible:
            short = c.reason if len(c.reason) < 70 else c.reason[:67] + "…"
            combo.addItem(f"{self._model_name(c.path)} — {short}", str(c.path.resolve()))
            idx = combo.count() - 1
            combo.setItemData(idx, f"cannot draft for this target: {c.reason}", Qt.ItemDataRole.ToolTipRole)
            item = model.item(idx)
            if item is not None:
                item.setEnabled(False)
        if self.draft_path is not None:
            i = combo.findData(str(self.draft_path.resolve()))
            if i < 0:
                combo.addItem(self.draft_path.name, str(self.draft_path.resolve()))
                i = combo.count() - 1
            combo.setCurrentIndex(i)
        combo.blockSignals(False)
        self.empty_state.set_models(models)

    def _library_scanned(self, entries) -> None:
        if self._closing:
            return  # a scan that finished while the window closed
        self._refresh_model_lists()
        target = self._combo_path(self.target_combo) or self.target_path
        if target is not None:
            self.check_drafts(target)

    def check_drafts(self, target: Path) -> None:
        """Pair every library model with the target, off the UI thread."""
        if self._closing:
            return
        cands = [(Path(p), self._model_name(Path(p))) for p in self.known_models()]

        def work(task: Task):
            from ..library.pairing import drafts_for

            return drafts_for(target, cands, cancel=task.is_cancelled)

        task = Task(work, "draft pairing")
        self._aux_tasks.append(task)

        def done(res) -> None:
            if res is None or self._closing:
                return
            current = self._combo_path(self.target_combo) or self.target_path
            if current is not None and current.resolve() != Path(target).resolve():
                return  # the target changed meanwhile
            self._draft_pairing = list(res)
            self._pairing_target = Path(target)
            self._refresh_model_lists()
            self.pairing_checked.emit((Path(target), self._draft_pairing))

        task.succeeded.connect(done)
        task.failed.connect(lambda msg: log.warning("pairing failed: %s", msg))
        task.finished.connect(lambda: self._aux_tasks.remove(task) if task in self._aux_tasks else None)
        task.start()

    def _target_combo_changed(self, _i: int) -> None:
        t = self._combo_path(self.target_combo)
        self._picked_target = t
        if t is not None:
            self._draft_pairing = []
            self.check_drafts(t)

    def _use_from_library(self, path: Path, role: str) -> None:
        self.tabs.setCurrentIndex(0)
        if role == "draft":
            target = self.target_path or self._combo_path(self.target_combo)
            if target is None:
                self.show_error("Choose a target first: a draft speculates for a target.")
                return
            self.load_models(target, path)
            return
        # a new target: keep the draft if it still pairs, else take the smallest compatible one
        from ..library.pairing import drafts_for

        def work(task: Task):
            return drafts_for(path, [(Path(p), Path(p).name) for p in self.known_models()], cancel=task.is_cancelled)

        task = Task(work, "draft pairing")
        self._aux_tasks.append(task)

        def done(res) -> None:
            if res is None or self._closing:
                return
            self._draft_pairing = list(res)
            ok = [c.path for c in res if c.compatible]
            draft = self.draft_path if self.draft_path is not None and self.draft_path.resolve() in {p.resolve() for p in ok} else (ok[0] if ok else None)
            self.target_path = path
            self.load_models(path, draft)

        task.succeeded.connect(done)
        task.failed.connect(self.show_error)
        task.finished.connect(lambda: self._aux_tasks.remove(task) if task in self._aux_tasks else None)
        task.start()

    def _combo_path(self, combo: QComboBox) -> Path | None:
        v = combo.currentData()
        return Path(v) if v else None

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

    def _empty_state_choice(self, path: str) -> None:
        self.load_models(Path(path), self.draft_path)

    def load_selected(self) -> None:
        t = self._combo_path(self.target_combo)
        d = self._combo_path(self.draft_combo)
        if t is None:
            self.show_error("Choose a target model first.")
            return
        self.load_models(t, d)

    def autoload_default_pair(self) -> None:
        """Load the default pair when it is in models/, else stay on the empty state."""
        from ..library.defaults import default_models, pair_present

        if self.session is not None or self.loading or not pair_present():
            self._update_state()
            return
        t, d = (m.path for m in default_models(["target", "draft"]))
        self.load_models(t, d, confirm_memory=False)

    def load_models(self, target: Path, draft: Path | None, confirm_memory: bool = True) -> None:
        """Check the pair and its memory off the UI thread, then load it off the UI thread."""
        if self.compare.running:
            self.compare.cancel()
            self.compare._task.wait()
        if self.loading:
            self._load_task.cancel()
            self._load_task.wait()
        self.stop_generation(wait=True)
        self.clear_error()
        s = self.settings
        tspec = s.model_spec(target, "target")
        dspec = s.model_spec(draft, "draft") if draft else None

        def preflight(task: Task):
            from ..engine.model import repack_types
            from ..library.gguf_file import estimate_memory, validate_gguf
            from ..library.pairing import check_pair

            task.report("checking the model files…", 0.0)
            est = estimate_memory(validate_gguf(tspec.path), n_ctx=tspec.n_ctx, n_gpu_layers=tspec.n_gpu_layers, repack_types=repack_types())
            compat = None
            if dspec is not None:
                de = estimate_memory(validate_gguf(dspec.path), n_ctx=dspec.n_ctx, n_gpu_layers=dspec.n_gpu_layers, repack_types=repack_types())
                for k in ("ram_bytes", "vram_bytes"):
                    est[k] = est[k] + de[k]
                task.report("checking that the draft shares the target's vocabulary…", 0.5)
                compat = check_pair(tspec.path, dspec.path)
            return est, compat

        task = Task(preflight, "model check")
        self._aux_tasks.append(task)
        task.progress.connect(lambda m, f: self._busy(m, None))
        task.failed.connect(lambda msg: (self._idle(), self.show_error(msg), self._update_state()))
        task.was_cancelled.connect(lambda: self._idle("cancelled"))
        task.succeeded.connect(lambda res: self._after_preflight(res, tspec, dspec, confirm_memory))
        task.finished.connect(lambda: self._aux_tasks.remove(task) if task in self._aux_tasks else None)
        task.start()

    def _after_preflight(self, res, tspec, dspec, confirm_memory: bool) -> None:
        if res is None or self._closing:
            return
        est, compat = res
        if compat is not None and not compat.ok:
            self._idle()
            self.show_error(f"{dspec.path.name} cannot draft for {tspec.path.name}: {compat.reason}")
            self.draft_combo.setItemData(self.draft_combo.currentIndex(), f"incompatible: {compat.reason}", Qt.ItemDataRole.ToolTipRole)
            self._update_state()
            return
        import psutil

        need = est["ram_bytes"]
        avail = psutil.virtual_memory().available
        msg = f"estimated memory: {fmt_bytes(need)} RAM" + (f", {fmt_bytes(est['vram_bytes'])} VRAM" if est["vram_bytes"] else "")
        self.model_info.setText(msg)
        short = []
        if need > avail:
            short.append(f"about {fmt_bytes(need)} of RAM but {fmt_bytes(avail)} is free")
        if est["vram_bytes"]:
            from ..engine.memory import gpu_memory

            gpus, status = gpu_memory()
            free_vram = sum(g.total_bytes - g.used_bytes for g in gpus)
            if not gpus:
                short.append(f"{fmt_bytes(est['vram_bytes'])} of VRAM but the GPU reads '{status}'")
            elif est["vram_bytes"] > free_vram:
                short.append(f"about {fmt_bytes(est['vram_bytes'])} of VRAM but {fmt_bytes(free_vram)} is free")
        if short:
            self.model_info.setText(msg + " — more than is free")
        if confirm_memory and short:
            ans = QMessageBox.warning(
                self,
                "Not enough free memory",
                f"Loading these models needs {' and '.join(short)}. Load anyway?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            )
            if ans != QMessageBox.StandardButton.Yes:
                self._idle()
                return
        self._start_load(tspec, dspec, msg)

    def _start_load(self, tspec, dspec, estimate_msg: str) -> None:
        old = self.session
        self.session = None
        if old is not None:
            old.close()

        def load(task: Task) -> Session:
            return Session.load(tspec, dspec, progress=task.report)

        task = Task(load, "model load")
        self._load_task = task
        task.progress.connect(lambda m, f: self._busy(f"{m}  ({estimate_msg})", f))
        task.succeeded.connect(self._loaded)
        task.failed.connect(self._load_failed)
        task.was_cancelled.connect(lambda: self._idle("loading cancelled"))
        task.finished.connect(self._update_state)
        self._busy(f"loading {tspec.path.name}…", 0.0)
        task.start()
        self._update_state()

    def _loaded(self, session: Session | None) -> None:
        if session is None:
            return
        if self._closing:
            session.close()
            return
        self.session = session
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
        self._idle(f"loaded {session.target.name}" + (f" and {session.draft.name}" if session.draft else ""))
        self.stats.set_memory(session.memory())
        self.stats.set_reference(self._reference_for(self.target_path))
        self._update_state()
        self.models_changed.emit(session)
        self.input.setFocus()

    def _load_failed(self, msg: str) -> None:
        self._idle()
        self.show_error(msg)
        self._update_state()
        self.models_changed.emit(None)

    def fetch_default_pair(self) -> None:
        def fetch(task: Task):
            from ..library.defaults import fetch as fetch_models

            def progress(msg: str, frac: float) -> None:
                if not task.report(msg, frac):
                    from ..errors import Cancelled

                    raise Cancelled("fetching the default pair was cancelled")

            return fetch_models(("target", "draft"), progress)

        task = Task(fetch, "fetch default pair")
        self._aux_tasks.append(task)
        task.progress.connect(lambda m, f: self._busy(m, f))
        task.failed.connect(lambda msg: (self._idle(), self.show_error(msg)))
        task.was_cancelled.connect(lambda: self._idle("download cancelled; it resumes from the cached wheels next time"))
        task.succeeded.connect(lambda paths: (self._idle("default pair ready"), self._refresh_model_lists(), self.autoload_default_pair()))
        task.finished.connect(lambda: self._aux_tasks.remove(task) if task in self._aux_tasks else None)
        self._busy("fetching the default pair…", 0.0)
        task.start()

    # =============================================================== reference speed

    def _reference_for(self, target: Path | None) -> float | None:
        if target is None:
            return None
        v = QSettings().value(f"reference/{target.resolve()}")
        try:
            return float(v) if v else None
        except (TypeError, ValueError):
            return None

    def set_reference(self, target: Path, tokens_per_second: float) -> None:
        QSettings().setValue(f"reference/{target.resolve()}", float(tokens_per_second))
        if self.target_path and target.resolve() == self.target_path.resolve():
            self.stats.set_reference(tokens_per_second)

    # =============================================================== chats

    def _refresh_chat_list(self) -> None:
        self.chat_list.blockSignals(True)
        self.chat_list.clear()
        for c in self.store.chats():
            it = QListWidgetItem(c.title)
            it.setData(Qt.ItemDataRole.UserRole, c.id)
            it.setToolTip(time.strftime("%Y-%m-%d %H:%M", time.localtime(c.updated)))
            self.chat_list.addItem(it)
            if c.id == self.chat_id:
                self.chat_list.setCurrentItem(it)
        self.chat_list.blockSignals(False)

    def _select_or_create_chat(self) -> None:
        chats = self.store.chats()
        if chats:
            self._open_chat(chats[0].id)
        else:
            self.new_chat()

    def new_chat(self) -> None:
        c = self.store.create_chat("New chat", self.settings.to_dict())
        self._open_chat(c.id)

    def delete_chat(self) -> None:
        if self.chat_id is None or self.generating:
            return
        self.store.delete_chat(self.chat_id)
        self.chat_id = None
        self._select_or_create_chat()

    def _chat_selected(self, item: QListWidgetItem | None, _prev=None) -> None:
        if item is None or self.generating:
            return
        cid = item.data(Qt.ItemDataRole.UserRole)
        if cid != self.chat_id:
            self._open_chat(cid)

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
            from ..speculative.stats import Stats

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

    def _toggle_provenance(self, on: bool) -> None:
        self.chat_view.set_provenance(on)
        self.legend.setEnabled(on)

    # =============================================================== generation

    def send_from_input(self) -> None:
        text = self.input.toPlainText().strip()
        if not text:
            return
        if self.send(text):
            self.input.clear()

    def send(self, text: str) -> bool:
        if self.session is None:
            self.show_error("Load a target model first (Open… or fetch the default pair).")
            return False
        if self.generating or self.compare.running:
            return False
        self.clear_error()
        self.store.add_message(self.chat_id, Message("user", text))
        self.chat_view.add_message("user", text)
        chat = self.store.chat(self.chat_id)
        if chat and chat.title == "New chat":
            self.store.rename_chat(self.chat_id, text.splitlines()[0][:48])
            self._refresh_chat_list()
        self._generate()
        return True

    def regenerate(self) -> None:
        if self.session is None or self.generating or self.chat_id is None:
            return
        msgs = self.store.messages(self.chat_id)
        if msgs and msgs[-1].role == "assistant":
            self.store.delete_message(msgs[-1].id)
            shown = self.chat_view.messages()
            if shown and shown[-1][0] == "assistant":
                self.chat_view.set_messages(shown[:-1])
        if not any(m.role == "user" for m in self.store.messages(self.chat_id)):
            return
        self._generate()

    def _history(self) -> list[dict]:
        return [{"role": m.role, "content": m.content} for m in self.store.messages(self.chat_id)]

    def _fit_prompt(self, messages: list[dict], max_tokens: int) -> tuple[list[int], int]:
        """Tokens of the chat, dropping the oldest turns when it does not fit."""
        s = self.session
        n_ctx = s.target.ctx.n_ctx
        dropped = 0
        while True:
            prompt = s.chat_prompt(messages)
            if len(prompt) + max_tokens <= n_ctx or len(messages) <= 1:
                return prompt, dropped
            messages = messages[1:]
            dropped += 1

    def _generate(self) -> None:
        s = self.session
        cfg = self.settings.generation_config(has_draft=s.draft is not None)
        try:
            prompt, dropped = self._fit_prompt(self._history(), cfg.max_tokens)
            s.check_fits(prompt, cfg.max_tokens)
        except ContextOverflowError as e:
            self.show_error(f"{e} (Settings → Context size / Max tokens)")
            return
        except SpecDeskError as e:
            self.show_error(str(e))
            return
        if dropped:
            self.status_label.setText(f"the chat is longer than the context: the oldest {dropped} message(s) were left out")

        def run(task: Task):
            steps = []
            for step in s.generate(prompt, cfg, cancel=task.is_cancelled):
                steps.append(step)
                task.emit_step(step)
            return Generation(steps=steps, config=cfg, prompt=prompt)

        task = Task(run, "generation")
        self._gen_task = task
        task.step.connect(self._on_step)
        task.succeeded.connect(self._on_generated)
        task.failed.connect(self._on_generation_failed)
        task.finished.connect(self._update_state)  # the thread has ended
        self.stats.reset()
        self.stats.set_reference(self._reference_for(self.target_path))
        self.chat_view.begin_answer()
        self.run_info.setText(f"{cfg.describe()} · T={cfg.sampling.temperature:g}")
        self.latency.start()
        task.start()
        self._update_state()

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

    def _on_generated(self, gen: Generation | None) -> None:
        self.latency.stop()
        if gen is None or self._closing:
            return
        text, spans = self.chat_view.end_answer()
        stats = gen.stats.to_dict() if gen.steps else None
        if gen.steps:
            stats["stop_reason"] = gen.stop_reason
            stats["config"] = gen.config.describe()
            self.stats.update_stats(gen.stats, live=False)
        if text:
            self.store.add_message(self.chat_id, Message("assistant", text, [sp.to_list() for sp in spans], stats))
        if gen.config.proposer == "none" and gen.steps and gen.stats.generated >= 16 and gen.stats.tokens_per_second:
            self.set_reference(self.target_path, gen.stats.tokens_per_second)
        if self.session is not None:
            self.stats.set_memory(self.session.memory())
        reason = {"eos": "finished", "max_tokens": "max tokens reached", "cancelled": "stopped", "context": "context full"}
        self.status_label.setText(f"{reason.get(gen.stop_reason, gen.stop_reason or '')} · event loop lag max {self.latency.max_ms:.0f} ms")
        self._refresh_chat_list()
        self._update_state()
        self.generation_finished.emit(gen)

    def _on_generation_failed(self, msg: str) -> None:
        self.latency.stop()
        self.chat_view.discard_answer()
        self.show_error(msg)
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
        self._closing = True
        self.latency.stop()
        for t in running_tasks():
            t.cancel()
        for t in running_tasks():
            t.wait(60000)
        for w in self.findChildren(QWidget):
            if w.isWindow() and w.isVisible() and w is not self:
                w.close()  # e.g. a download dialog
        if self.session is not None:
            self.session.close()
            self.session = None
        self.store.close()
        super().closeEvent(event)
