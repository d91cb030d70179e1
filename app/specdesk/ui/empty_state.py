"""What the window shows before any model is loaded: fetch the default pair, open
GGUF files, or pick one of the models already on this computer."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QProgressBar, QPushButton, QVBoxLayout, QWidget

from .stored_paths import path_from_value, path_value


class EmptyState(QWidget):
    fetch_requested = Signal()
    open_requested = Signal()
    model_chosen = Signal(object)  # the Path (a str through Qt would lose a name's non-UTF-8 bytes)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("emptyState")
        outer = QVBoxLayout(self)
        outer.addStretch(1)
        box = QWidget()
        box.setMaximumWidth(620)
        lay = QVBoxLayout(box)
        title = QLabel("No models loaded yet")
        title.setStyleSheet("font-size: 22px; font-weight: 600;")
        lay.addWidget(title)
        sub = QLabel(
            "SpecDesk runs a small <b>draft</b> model and a large <b>target</b> model together: the draft proposes "
            "tokens, the target checks them all in one pass, and you see what that buys on this machine."
        )
        sub.setWordWrap(True)
        sub.setStyleSheet("color:#495057;")
        lay.addWidget(sub)

        row = QHBoxLayout()
        self.fetch_btn = QPushButton("Fetch the default pair (1.6 GB)")
        self.fetch_btn.setObjectName("fetchDefaultButton")
        self.fetch_btn.setToolTip("Qwen2.5-Coder-1.5B-Instruct (target) + 0.5B (draft), Q4_K_M, verified by sha256")
        self.fetch_btn.clicked.connect(self.fetch_requested)
        self.open_btn = QPushButton("Open GGUF files…")
        self.open_btn.setObjectName("openGgufButton")
        self.open_btn.clicked.connect(self.open_requested)
        row.addWidget(self.fetch_btn)
        row.addWidget(self.open_btn)
        row.addStretch(1)
        lay.addLayout(row)

        self.progress_label = QLabel("")
        self.progress_label.setObjectName("emptyProgressLabel")
        self.progress_label.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setObjectName("emptyProgress")
        self.progress.setRange(0, 1000)
        lay.addWidget(self.progress_label)
        lay.addWidget(self.progress)
        self.set_progress(None, None)

        lay.addSpacing(12)
        self.models_title = QLabel("Models on this computer (double-click to load as the target)")
        self.models_title.setStyleSheet("font-weight: 600;")
        lay.addWidget(self.models_title)
        self.models = QListWidget()
        self.models.setObjectName("emptyModelList")
        self.models.setMinimumHeight(120)
        self.models.itemDoubleClicked.connect(lambda it: self.model_chosen.emit(path_from_value(it.data(Qt.ItemDataRole.UserRole))))
        lay.addWidget(self.models)
        self.no_models = QLabel("None found in models/ or among recent files.")
        self.no_models.setStyleSheet("color:#868e96;")
        lay.addWidget(self.no_models)

        h = QHBoxLayout()
        h.addStretch(1)
        h.addWidget(box, 3)
        h.addStretch(1)
        outer.addLayout(h)
        outer.addStretch(2)

    def set_models(self, paths: list[Path]) -> None:
        self.models.clear()
        for p in paths:
            size = p.stat().st_size / 2**30 if p.exists() else 0
            it = QListWidgetItem(f"{p.name}    ({size:.2f} GiB)")
            it.setData(Qt.ItemDataRole.UserRole, path_value(p))
            it.setToolTip(str(p))
            self.models.addItem(it)
        self.models.setVisible(bool(paths))
        self.no_models.setVisible(not paths)

    def set_progress(self, text: str | None, fraction: float | None) -> None:
        busy = text is not None
        self.progress_label.setVisible(busy)
        self.progress.setVisible(busy)
        self.fetch_btn.setEnabled(not busy)
        if busy:
            self.progress_label.setText(text)
            if fraction is None:
                self.progress.setRange(0, 0)
            else:
                self.progress.setRange(0, 1000)
                self.progress.setValue(int(1000 * fraction))
