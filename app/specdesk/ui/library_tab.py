"""The model library: every GGUF file on this computer, what it is, and whether it
can be loaded — plus downloads from the Hugging Face Hub."""

from __future__ import annotations

import html
import logging
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QInputDialog,
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from ..errors import SpecDeskError
from ..fmt import format_bytes, format_params
from ..library.discovery import scan
from ..library.folders import add_folder, remove_folder, user_folders
from ..session import ModelSpec
from ..session.preflight import estimate
from ..session.source_table import file_rows
from ..session.text import role_rows
from .hub_dialog import HubDialog
from .tasks import Task

log = logging.getLogger(__name__)

COLUMNS = ["name", "role", "found in", "quant", "parameters", "size", "status", "path"]


def _size_text(e) -> str:
    """The entry's size; a split model's says in how many files."""
    if not e.size:
        return "–"
    return format_bytes(e.size) + (f" in {e.parts} parts" if e.parts > 1 else "")


class LibraryTab(QWidget):
    use_as_target = Signal(object)  # Path
    use_as_draft = Signal(object)  # Path
    scanned = Signal(object)  # list[LibraryEntry]
    error = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("libraryTab")
        self.entries = []
        self.notes: list[str] = []
        self._task: Task | None = None
        self._estimate_task: Task | None = None

        lay = QVBoxLayout(self)
        bar = QHBoxLayout()
        self.rescan_btn = QPushButton("Rescan")
        self.rescan_btn.setObjectName("rescanButton")
        self.rescan_btn.clicked.connect(lambda: self.rescan(use_cache=False))
        self.add_btn = QPushButton("Add folder…")
        self.add_btn.setObjectName("addFolderButton")
        self.add_btn.clicked.connect(self.add_folder_dialog)
        self.remove_btn = QPushButton("Remove folder…")
        self.remove_btn.clicked.connect(self.remove_folder_dialog)
        self.download_btn = QPushButton("Download from Hugging Face…")
        self.download_btn.setObjectName("downloadButton")
        self.download_btn.clicked.connect(lambda: self.open_download_dialog())
        for b in (self.rescan_btn, self.add_btn, self.remove_btn, self.download_btn):
            bar.addWidget(b)
        bar.addStretch(1)
        self.summary = QLabel("")
        self.summary.setObjectName("librarySummary")
        bar.addWidget(self.summary)
        lay.addLayout(bar)

        split = QSplitter(Qt.Orientation.Vertical)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("libraryTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setSortingEnabled(False)
        hh = self.table.horizontalHeader()
        hh.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        hh.setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(self._selected)
        self.table.itemDoubleClicked.connect(lambda _it: self._use("target"))
        split.addWidget(self.table)

        bottom = QWidget()
        bl = QVBoxLayout(bottom)
        bl.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        self.target_btn = QPushButton("Use as target")
        self.target_btn.setObjectName("useTargetButton")
        self.target_btn.clicked.connect(lambda: self._use("target"))
        self.draft_btn = QPushButton("Use as draft")
        self.draft_btn.setObjectName("useDraftButton")
        self.draft_btn.clicked.connect(lambda: self._use("draft"))
        row.addWidget(self.target_btn)
        row.addWidget(self.draft_btn)
        row.addStretch(1)
        bl.addLayout(row)
        self.details = QTextBrowser()
        self.details.setObjectName("libraryDetails")
        bl.addWidget(self.details, 1)
        self.notes_label = QLabel("")
        self.notes_label.setObjectName("libraryNotes")
        self.notes_label.setWordWrap(True)
        self.notes_label.setStyleSheet("color:#868e96;")
        bl.addWidget(self.notes_label)
        split.addWidget(bottom)
        split.setSizes([380, 260])
        lay.addWidget(split, 1)
        self._selected()

    # -- scanning -------------------------------------------------------------------------------

    @property
    def scanning(self) -> bool:
        return self._task is not None and self._task.isRunning()

    def rescan(self, use_cache: bool = True) -> None:
        if self.scanning:
            return

        def work(task: Task):
            return scan(cancel=task.is_cancelled, progress=lambda m: task.report(m, 0.0), use_cache=use_cache)

        task = Task(work, "library scan")
        self._task = task
        task.progress.connect(lambda m, f: self.summary.setText(m[-80:]))
        task.succeeded.connect(self._scanned)
        task.failed.connect(self.error.emit)
        self.summary.setText("scanning…")
        self.rescan_btn.setEnabled(False)
        task.finished.connect(lambda: self.rescan_btn.setEnabled(True))
        task.start()

    def _scanned(self, result) -> None:
        if result is None:
            return
        self.entries = list(result.entries)
        self.notes = list(result.notes)
        self._fill()
        usable = sum(1 for e in self.entries if e.valid)
        self.summary.setText(f"{len(self.entries)} files, {usable} usable")
        self.notes_label.setText(("Skipped: " + "; ".join(self.notes[:6]) + (" …" if len(self.notes) > 6 else "")) if self.notes else "")
        self.scanned.emit(self.entries)

    def _fill(self) -> None:
        self.table.setRowCount(len(self.entries))
        for i, e in enumerate(self.entries):
            info = e.info or {}
            status = "ok" if e.valid else ("not downloaded" if not e.present else f"unusable: {e.error}")
            cells = [
                e.name,
                e.role or "",
                ", ".join(e.sources),
                info.get("quant") or "",
                format_params(info.get("parameters")),
                _size_text(e),
                status,
                str(e.path),
            ]
            for j, text in enumerate(cells):
                it = QTableWidgetItem(text)
                it.setData(Qt.ItemDataRole.UserRole, i)
                if not e.valid:
                    it.setForeground(QColor("#adb5bd") if not e.present else QColor("#c92a2a"))
                if j == 6 and e.error:
                    it.setToolTip(e.error)
                if j == 7:
                    it.setToolTip(str(e.path))
                self.table.setItem(i, j, it)

    # -- selection ------------------------------------------------------------------------------

    def selected_entry(self):
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        if not rows:
            return None
        return self.entries[rows[0].row()]

    def select_path(self, path: Path) -> bool:
        for i, e in enumerate(self.entries):
            if Path(e.path).resolve() == Path(path).resolve():
                self.table.selectRow(i)
                return True
        return False

    def _selected(self) -> None:
        """Show what the selected model is. Every value comes from the file, so it is
        escaped, never rendered as HTML; the memory estimate is computed off the UI
        thread and filled in when it is ready."""
        e = self.selected_entry()
        ok = e is not None and e.valid
        self.target_btn.setEnabled(ok)
        self.draft_btn.setEnabled(ok)
        if self._estimate_task is not None:
            self._estimate_task.cancel()
            self._estimate_task = None
        if e is None:
            self.details.setHtml("<p style='color:#868e96'>Select a model to see what it is and what it needs.</p>")
            return
        info = e.info or {}
        esc = html.escape
        lines = [f"<h3>{esc(e.name)}</h3>", f"<p><code>{esc(str(e.path))}</code></p>"]
        if e.error:
            lines.append(f"<p style='color:#c92a2a'><b>Not usable:</b> {esc(e.error)}</p>")
        rows = [
            ("architecture", info.get("architecture")),
            ("parameters", format_params(info.get("parameters"))),
            ("quantisation", info.get("quant") or info.get("file_type")),
            ("layers", info.get("layers")),
            ("embedding size", info.get("embedding_length")),
            ("context length (trained)", info.get("context_length")),
            ("vocabulary", info.get("vocab_size")),
            ("chat template", "yes" if info.get("has_chat_template") else "no"),
            *role_rows(info, e.error),
            *file_rows(info),
            ("file size", _size_text(e)),
            ("found in", ", ".join(e.sources) + (f" ({e.repo_id})" if e.repo_id else "") + (f" ({e.ollama_tag})" if e.ollama_tag else "")),
        ]
        lines.append("<table cellpadding=3>" + "".join(
            f"<tr><td style='color:#868e96'>{k}</td><td>{esc(str(v)) if v is not None else '–'}</td></tr>" for k, v in rows)
            + "</table>")
        head = "".join(lines)
        self.details.setHtml(head + ("<p style='color:#868e96'>estimating memory…</p>" if e.valid else ""))
        if not e.valid:
            return
        task = Task(lambda t: estimate(ModelSpec(e.path, n_ctx=4096)), "memory estimate")
        self._estimate_task = task

        def shown(m: dict) -> None:
            if self._estimate_task is task:
                self.details.setHtml(head + (
                    f"<p>Estimated memory at a 4096-token context: weights {format_bytes(m['weights_bytes'])}, "
                    f"KV cache {format_bytes(m['kv_bytes'])}, compute {format_bytes(m['compute_bytes'])}"
                    + (f", recurrent state with its rollback snapshots {format_bytes(m['state_bytes'])}"
                       if m.get("state_bytes") else "") + ".</p>"))

        task.succeeded.connect(lambda m: shown(m) if m else None)
        task.failed.connect(lambda err: self.details.setHtml(head + f"<p style='color:#c92a2a'>{esc(err)}</p>")
                            if self._estimate_task is task else None)
        task.start()

    def _use(self, role: str) -> None:
        e = self.selected_entry()
        if e is None or not e.valid:
            return
        (self.use_as_target if role == "target" else self.use_as_draft).emit(Path(e.path))

    # -- folders and downloads --------------------------------------------------------------------

    def add_folder_dialog(self) -> None:
        d = QFileDialog.getExistingDirectory(self, "Add a folder with GGUF models", str(Path.home()))
        if not d:
            return
        try:
            add_folder(Path(d))
        except SpecDeskError as e:
            self.error.emit(str(e))
            return
        self.rescan()

    def remove_folder_dialog(self) -> None:
        folders = [str(p) for p in user_folders()]
        if not folders:
            self.error.emit("No folders were added to the library.")
            return
        choice, ok = QInputDialog.getItem(self, "Remove a folder", "Folder", folders, 0, False)
        if ok and choice:
            try:
                remove_folder(Path(choice))
            except SpecDeskError as e:
                self.error.emit(str(e))
                return
            self.rescan()

    def open_download_dialog(self, repo: str | None = None, file: str | None = None) -> HubDialog:
        dlg = HubDialog(self, repo, file)
        dlg.downloaded.connect(lambda p: (self.rescan(), self.summary.setText(f"downloaded {Path(p).name}")))
        dlg.error.connect(self.error.emit)
        dlg.show()
        return dlg

    def shutdown(self) -> None:
        if self._task is not None and self._task.isRunning():
            self._task.stop_and_wait()
