"""The conversation: the chat list on the left, and in the middle the answer view,
the provenance legend, the message box and the row of actions under it."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPainter, QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from .chat_view import ChatView, Legend


class ChatInput(QPlainTextEdit):
    """The message box: Enter or Ctrl+Enter sends, Shift+Enter starts a new line."""

    submitted = Signal()

    def keyPressEvent(self, e) -> None:  # noqa: N802 - Qt API
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (e.modifiers() & Qt.KeyboardModifier.ShiftModifier):
            self.submitted.emit()
            return
        super().keyPressEvent(e)


class ElidedLabel(QLabel):
    """One line that ends in "…" where its space is too short (a plain label was cut
    mid-word at the window's right edge), with the whole text as its tooltip there."""

    _tip = ""  # the tooltip this label set itself (a tooltip set from outside stays)

    def paintEvent(self, _e) -> None:  # noqa: N802 - Qt API
        rect = self.contentsRect()
        full = self.text()
        shown = self.fontMetrics().elidedText(full, Qt.TextElideMode.ElideRight, rect.width())
        tip = full if shown != full else ""
        if self.toolTip() in ("", self._tip) and tip != self._tip:
            self.setToolTip(tip)
            self._tip = tip
        painter = QPainter(self)
        self.style().drawItemText(painter, rect, int(self.alignment() | Qt.AlignmentFlag.AlignVCenter), self.palette(),
                                  self.isEnabled(), shown, QPalette.ColorRole.WindowText)


class ChatSidebar(QWidget):
    """The list of chats, newest first, with New and Delete."""

    chat_chosen = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatSidebar")
        ll = QVBoxLayout(self)
        ll.setContentsMargins(6, 6, 6, 6)
        self.new_chat_btn = QPushButton("+ New chat")
        self.new_chat_btn.setToolTip("Start a new chat (Ctrl+N)")
        ll.addWidget(self.new_chat_btn)
        self.chat_list = QListWidget()
        self.chat_list.setObjectName("chatList")
        self.chat_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.chat_list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.chat_list.currentItemChanged.connect(self._selected)
        ll.addWidget(self.chat_list, 1)
        self.delete_chat_btn = QPushButton("Delete chat")
        ll.addWidget(self.delete_chat_btn)
        self.setMinimumWidth(140)

    def show_chats(self, chats, current: int | None) -> None:
        self.chat_list.blockSignals(True)
        self.chat_list.clear()
        for c in chats:
            it = QListWidgetItem(c.title)
            it.setData(Qt.ItemDataRole.UserRole, c.id)
            it.setToolTip(time.strftime("%Y-%m-%d %H:%M", time.localtime(c.updated)))
            self.chat_list.addItem(it)
            if c.id == current:
                self.chat_list.setCurrentItem(it)
        self.chat_list.blockSignals(False)

    def _selected(self, item: QListWidgetItem | None, _prev=None) -> None:
        if item is not None:
            self.chat_chosen.emit(int(item.data(Qt.ItemDataRole.UserRole)))

    def set_busy(self, busy: bool) -> None:
        for w in (self.new_chat_btn, self.delete_chat_btn, self.chat_list):
            w.setEnabled(not busy)


class ChatPanel(QWidget):
    """The answer view, the legend, the message box and Send / Stop / Regenerate / Clear / Copy."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        cl = QVBoxLayout(self)
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
        self.input.setPlaceholderText("Message the target model…  (Enter sends, Shift+Enter for a new line, Esc stops)")
        self.input.setMaximumHeight(90)
        self.input.setMinimumHeight(44)
        cl.addWidget(self.input)
        row = QHBoxLayout()
        self.send_btn = QPushButton("Send")
        self.send_btn.setObjectName("sendButton")
        self.send_btn.setDefault(True)
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.setObjectName("stopButton")
        self.stop_btn.setToolTip("Stop the answer (Esc)")
        self.regen_btn = QPushButton("Regenerate")
        self.regen_btn.setObjectName("regenerateButton")
        self.clear_btn = QPushButton("Clear")
        self.clear_btn.setObjectName("clearButton")
        self.copy_btn = QPushButton("Copy answer")
        self.copy_btn.setObjectName("copyButton")
        for b in (self.send_btn, self.stop_btn, self.regen_btn, self.clear_btn, self.copy_btn):
            row.addWidget(b)
        row.addStretch(1)
        self.run_info = ElidedLabel("")
        self.run_info.setObjectName("runInfo")
        self.run_info.setStyleSheet("color:#868e96;")
        self.run_info.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        row.addWidget(self.run_info, 1)
        cl.addLayout(row)

    def _toggle_provenance(self, on: bool) -> None:
        self.chat_view.set_provenance(on)
        self.legend.setEnabled(on)

    def has_answer(self) -> bool:
        return any(r == "assistant" for r, _, _ in self.chat_view.messages())
