"""The bar across the top: which target and draft, Load, and Settings."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from PySide6.QtCore import QPoint, QRect, Qt, Signal
from PySide6.QtWidgets import QComboBox, QLabel, QPushButton, QSizePolicy, QToolBar, QWidget

from ..library.gguf.split import canonical
from .stored_paths import path_from_value, path_value

#: A combo shows about this many characters of a model's name; the rest is elided
#: (the whole name and path are in its tooltip), so the bar fits a laptop screen.
NAME_CHARS = 20


def _combo(name: str) -> QComboBox:
    c = QComboBox()
    c.setObjectName(name)
    c.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    c.setMinimumContentsLength(NAME_CHARS)
    c.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
    c.view().setTextElideMode(Qt.TextElideMode.ElideMiddle)
    return c


class ModelBar(QToolBar):
    open_requested = Signal(str)  # "target" | "draft"
    load_requested = Signal()
    target_picked = Signal(object)  # Path | None: chosen in the combo, not loaded yet
    settings_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Models", parent)
        self.setObjectName("modelBar")
        self.setMovable(False)
        self.addWidget(QLabel(" Target "))
        self.target_combo = _combo("targetCombo")
        self.target_combo.currentIndexChanged.connect(lambda _i: self.target_picked.emit(self.path_of(self.target_combo)))
        self.addWidget(self.target_combo)
        self.open_target_btn = QPushButton("Open…")
        self.open_target_btn.setToolTip("Open a target GGUF file")
        self.open_target_btn.clicked.connect(lambda: self.open_requested.emit("target"))
        self.addWidget(self.open_target_btn)
        self.addSeparator()
        self.addWidget(QLabel(" Draft "))
        self.draft_combo = _combo("draftCombo")
        self.addWidget(self.draft_combo)
        self.open_draft_btn = QPushButton("Open…")
        self.open_draft_btn.setToolTip("Open a draft GGUF file (it must share the target's vocabulary)")
        self.open_draft_btn.clicked.connect(lambda: self.open_requested.emit("draft"))
        self.addWidget(self.open_draft_btn)
        self.load_btn = QPushButton("Load")
        self.load_btn.setObjectName("loadButton")
        self.load_btn.setToolTip("Check the pair, estimate its memory, and load it")
        self.load_btn.clicked.connect(self.load_requested)
        self.addWidget(self.load_btn)
        self.model_info = QLabel("")
        self.model_info.setObjectName("modelInfo")
        self.model_info.setStyleSheet("color:#495057; padding-left:8px;")
        self.model_info.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        # room for "● loaded" whatever the screen (the rest is in its tooltip)
        self.model_info.setMinimumWidth(self.model_info.fontMetrics().horizontalAdvance("● loaded") + 12)
        self.addWidget(self.model_info)
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.addWidget(spacer)
        self.settings_btn = QPushButton("Settings…")
        self.settings_btn.setObjectName("settingsButton")
        self.settings_btn.setToolTip("Generation and loading settings (Ctrl+,)")
        self.settings_btn.clicked.connect(self.settings_requested)
        self.addWidget(self.settings_btn)

    # -- drops (``ui.drop``): a GGUF dropped on a picker loads in that role

    def drop_role_at(self, pos: QPoint) -> str | None:
        """"target" or "draft" when ``pos`` (in the bar's coordinates) is on that picker
        (its combo or its Open… button), else None."""
        for role in ("target", "draft"):
            if self.drop_rect(role).adjusted(-3, -4, 3, 4).contains(pos):
                return role
        return None

    def show_drop_role(self, role: str | None, ok: bool = True) -> None:
        """Mark the picker a drag would land on (green, or red when it is refused); None: neither."""
        colour = ("#2f9e44", "#ebfbee") if ok else ("#e03131", "#fff5f5")
        for r, combo in (("target", self.target_combo), ("draft", self.draft_combo)):
            combo.setStyleSheet(f"QComboBox {{ border: 3px solid {colour[0]}; border-radius: 4px; background: {colour[1]}; }}"
                                if r == role else "")

    def drop_rect(self, role: str) -> QRect:
        """The picker's area, in the bar's coordinates."""
        combo, btn = (self.target_combo, self.open_target_btn) if role == "target" else (self.draft_combo, self.open_draft_btn)
        return combo.geometry().united(btn.geometry())

    @staticmethod
    def path_of(combo: QComboBox) -> Path | None:
        return path_from_value(combo.currentData())

    def set_info(self, text: str, tooltip: str = "") -> None:
        self.model_info.setText(text)
        self.model_info.setToolTip(tooltip or text)

    def populate(self, models: Sequence[Path], name_of: Callable[[Path], str], target: Path | None,
                 draft: Path | None, picked: Path | None, pairing: Sequence, alone: str | None = None) -> None:
        """Fill both combos. The target combo lists every usable model; the draft combo
        lists compatible drafts first (smallest first), then the models not checked yet,
        then the smaller models that draft translated (another vocabulary), then the
        ones that cannot draft, greyed out with the reason. ``alone``: what the target
        drafts with when no draft file is chosen (its own heads), in a few words."""
        combo = self.target_combo
        combo.blockSignals(True)
        combo.clear()
        for p in models:
            combo.addItem(name_of(p), path_value(p))
            combo.setItemData(combo.count() - 1, str(p), Qt.ItemDataRole.ToolTipRole)
        if target is not None:
            i = combo.findData(path_value(canonical(target)))
            if i < 0:
                combo.addItem(target.name, path_value(canonical(target)))
                i = combo.count() - 1
            combo.setCurrentIndex(i)
        i = combo.findData(path_value(picked)) if picked is not None else -1
        if i >= 0:
            combo.setCurrentIndex(i)
        combo.blockSignals(False)

        combo = self.draft_combo
        combo.blockSignals(True)
        combo.clear()
        if alone:
            combo.addItem(f"(no draft: {alone})", None)
            combo.setItemData(0, f"the target drafts with {alone}; n-gram lookups and target alone "
                              "need no draft either", Qt.ItemDataRole.ToolTipRole)
        else:
            combo.addItem("(no draft: n-gram or target alone)", None)
        checked = {canonical(c.path) for c in pairing}
        ordered = [canonical(c.path) for c in pairing if c.compatible]
        ordered += [p for p in models if p not in ordered and p not in checked]
        # a model does not draft for itself: neither the loaded target nor the one shown
        chosen = {canonical(x) for x in (target, picked, self.path_of(self.target_combo)) if x is not None}
        heads = {canonical(c.path): c for c in pairing if c.head}  # what each head is, and the target it reads
        for p in ordered:
            if p in chosen:
                continue
            head = heads.get(p)
            combo.addItem(f"{name_of(p)} — {head.head_label}" if head else name_of(p), path_value(p))
            tip = head.head if head else "compatible: shares the target's vocabulary" if pairing else str(p)
            combo.setItemData(combo.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        for c in pairing:
            if not c.translated:
                continue
            cost = f", a step ≈ {c.cost_ratio:.2f} of the target's by size" if c.cost_ratio else ""
            combo.addItem(f"{name_of(c.path)} — translated", path_value(canonical(c.path)))
            combo.setItemData(combo.count() - 1, f"drafts translated: {c.reason}; its text is re-tokenized for the "
                              f"target, which verifies every token (exact all the same){cost}",
                              Qt.ItemDataRole.ToolTipRole)
        model = combo.model()
        for c in pairing:
            if c.usable:
                continue
            short = c.reason if len(c.reason) < 70 else c.reason[:67] + "…"
            combo.addItem(f"{name_of(c.path)} — {short}", path_value(canonical(c.path)))
            idx = combo.count() - 1
            combo.setItemData(idx, f"cannot draft for this target: {c.reason}", Qt.ItemDataRole.ToolTipRole)
            item = model.item(idx)
            if item is not None:
                item.setEnabled(False)
        if draft is not None:
            i = combo.findData(path_value(canonical(draft)))
            if i < 0:
                combo.addItem(draft.name, path_value(canonical(draft)))
                i = combo.count() - 1
            combo.setCurrentIndex(i)
        combo.blockSignals(False)
