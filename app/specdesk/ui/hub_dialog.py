"""Download a GGUF model from the Hugging Face Hub into the HF cache: list a repo's
quantizations with their sizes, pick one, download with progress, cancel, resume."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..fmt import format_bytes
from ..library.hub import download, list_gguf
from .tasks import Task


class HubDialog(QDialog):
    downloaded = Signal(object)  # Path of the (first part of the) model
    error = Signal(str)

    def __init__(self, parent: QWidget | None = None, repo: str | None = None, file: str | None = None) -> None:
        """With ``repo`` (and ``file``) the dialog opens on that repo's listing with the
        file selected, ready to download (the advisor's "better quant" offer)."""
        super().__init__(parent)
        self._want = file
        self.setObjectName("hubDialog")
        self.setWindowTitle("Download a GGUF model from Hugging Face")
        self.resize(720, 440)
        self.files = []
        self._task: Task | None = None
        lay = QVBoxLayout(self)
        row = QHBoxLayout()
        row.addWidget(QLabel("Repository"))
        self.repo = QLineEdit()
        self.repo.setObjectName("hubRepo")
        self.repo.setPlaceholderText("e.g. Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF")
        self.repo.returnPressed.connect(self.list_files)
        row.addWidget(self.repo, 1)
        self.list_btn = QPushButton("List files")
        self.list_btn.setObjectName("hubListButton")
        self.list_btn.clicked.connect(self.list_files)
        row.addWidget(self.list_btn)
        lay.addLayout(row)
        self.table = QTableWidget(0, 4)
        self.table.setObjectName("hubFiles")
        self.table.setHorizontalHeaderLabels(["quant", "size", "parts", "file"])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(self._update)
        lay.addWidget(self.table, 1)
        self.status = QLabel("Downloads go to the Hugging Face cache; an interrupted download resumes next time.")
        self.status.setObjectName("hubStatus")
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        self.progress = QProgressBar()
        self.progress.setObjectName("hubProgress")
        self.progress.setRange(0, 1000)
        self.progress.setVisible(False)
        lay.addWidget(self.progress)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.download_btn = QPushButton("Download")
        self.download_btn.setObjectName("hubDownloadButton")
        self.download_btn.clicked.connect(self.download)
        self.cancel_btn = QPushButton("Cancel download")
        self.cancel_btn.setObjectName("hubCancelButton")
        self.cancel_btn.clicked.connect(self.cancel)
        self.close_btn = QPushButton("Close")
        self.close_btn.clicked.connect(self.close)
        for b in (self.download_btn, self.cancel_btn, self.close_btn):
            buttons.addWidget(b)
        lay.addLayout(buttons)
        self._update()
        if repo:
            self.repo.setText(repo)
            self.list_files()

    @property
    def busy(self) -> bool:
        return self._task is not None and self._task.isRunning()

    def _update(self) -> None:
        self.download_btn.setEnabled(not self.busy and bool(self.table.selectionModel().selectedRows()))
        self.cancel_btn.setEnabled(self.busy)
        self.list_btn.setEnabled(not self.busy)

    def list_files(self) -> None:
        repo = self.repo.text().strip()
        if not repo or self.busy:
            return

        def work(task: Task):
            return list_gguf(repo)

        self._start(work, "listing", self._listed)
        self.status.setText(f"asking the Hub for the GGUF files of {repo}…")

    def _listed(self, files) -> None:
        if files is None:
            return
        self.files = list(files)
        self.table.setRowCount(len(self.files))
        for i, f in enumerate(self.files):
            cells = [f.quant or "?", format_bytes(f.total_size) if f.total_size else "?", str(f.n_parts), f.name]
            for j, t in enumerate(cells):
                it = QTableWidgetItem(t)
                if j == 3:
                    it.setToolTip("\n".join(x.filename for x in f.files))
                self.table.setItem(i, j, it)
        self.status.setText(f"{len(self.files)} GGUF model(s) in {self.repo.text().strip()}" if self.files else "no GGUF files in this repository")
        if self.files:
            want = [i for i, f in enumerate(self.files) if self._want and f.name == self._want]
            self.table.selectRow(want[0] if want else 0)

    def download(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if not rows or self.busy:
            return
        mf = self.files[rows[0].row()]
        repo = self.repo.text().strip()

        def work(task: Task):
            return download(repo, mf, progress=lambda done, total: task.report(f"{format_bytes(done)} of {format_bytes(total)}", done / total if total else 0.0), cancel=task.is_cancelled)

        self.progress.setVisible(True)
        self.progress.setValue(0)
        self.status.setText(f"downloading {mf.name}…")
        self._start(work, "download", self._downloaded)

    def _downloaded(self, path) -> None:
        if path is None:
            return
        self.progress.setValue(1000)
        self.status.setText(f"downloaded and verified: {path}")
        self.downloaded.emit(Path(path))

    def _start(self, fn, name: str, on_success) -> None:
        task = Task(fn, name)
        self._task = task
        task.progress.connect(lambda m, f: (self.status.setText(m), self.progress.setValue(int(1000 * f))))
        task.succeeded.connect(on_success)
        task.failed.connect(lambda msg: (self.status.setText(f"⚠ {msg}"), self.error.emit(msg)))
        task.was_cancelled.connect(lambda: self.status.setText("cancelled: run the download again to resume it"))
        task.finished.connect(self._update)
        task.start()
        self._update()

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt API
        if self._task is not None and self._task.isRunning():
            self._task.stop_and_wait()
        super().closeEvent(event)
