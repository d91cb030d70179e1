"""The Serve tab: the switch that exposes the loaded pair at an OpenAI-compatible
endpoint, its settings (port, other machines, API key, queue), and the list of
requests (time, client, tokens, speed, acceptance, time in line) as they arrive and run.
The serving itself is ``serve_controller.ServeController``'s.

Other machines are never served without an API key: the settings saved say whether
other machines may connect, while the key is kept only in the system's keyring
(``serve_key``). So when serving starts (from this tab or the model bar's switch) with
other machines allowed and no key (none typed, none kept, or no keyring on this
machine), a new key is made and shown here before anything listens."""

from __future__ import annotations

import time
from dataclasses import dataclass

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..fmt import format_num, format_pct
from ..server.keys import new_key, store_key, stored_key

DEFAULT_PORT = 8080
DEFAULT_QUEUE = 8
MAX_ROWS = 200
COLUMNS = ["time", "client", "kind", "state", "prompt", "tokens", "tok/s", "acceptance", "waited"]
STATE_WORDS = {"queued": "waiting", "running": "running", "done": "done", "cancelled": "stopped", "failed": "failed",
               "rejected": "refused (503)"}
QUEUE_NOTE = ("One generation at a time: requests wait in one line, first come first served, and your chat answers "
              "wait in the same line — Send while a request runs and the answer starts when the requests ahead of it "
              "end (Stop takes it out of the line). Beyond the queue a request gets 503 with Retry-After.")


@dataclass(frozen=True)
class ServeSettings:
    port: int = DEFAULT_PORT
    others: bool = False  # listen on every network, not only this machine
    api_key: str = ""
    queue: int = DEFAULT_QUEUE

    @property
    def host(self) -> str:
        return "0.0.0.0" if self.others else "127.0.0.1"


def load_serve_settings() -> ServeSettings:
    s = QSettings()

    def num(key: str, default: int, lo: int, hi: int) -> int:
        try:
            v = int(s.value(key, default))
        except (TypeError, ValueError):
            return default
        return v if lo <= v <= hi else default

    others = str(s.value("serve/others", "false")).lower() in ("true", "1")
    return ServeSettings(port=num("serve/port", DEFAULT_PORT, 1, 65535), others=others,
                         queue=num("serve/queue", DEFAULT_QUEUE, 0, 256))


def save_serve_settings(v: ServeSettings) -> None:
    s = QSettings()  # the API key is not written here (see serve_key)
    s.setValue("serve/port", v.port)
    s.setValue("serve/others", v.others)
    s.setValue("serve/queue", v.queue)


def _key_kept() -> bool:
    """An earlier session kept its API key in the keyring (then the keyring is asked)."""
    return str(QSettings().value("serve/key_kept", "false")).lower() in ("true", "1")


class ServeTab(QWidget):
    #: the switch was flipped (True: serve)
    switched = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("serveTab")
        self._rows: dict[int, int] = {}  # ticket id -> row
        self._waiting: dict[int, object] = {}  # tickets in line: their wait is shown growing
        self._tick = QTimer(self)
        self._tick.setInterval(1000)
        self._tick.timeout.connect(self._refresh_waiting)
        self._refused = 0
        lay = QVBoxLayout(self)

        box = QGroupBox("Serve the loaded pair (OpenAI-compatible API)")
        bl = QVBoxLayout(box)
        top = QHBoxLayout()
        self.switch = QPushButton("Serve")
        self.switch.setObjectName("serveSwitch")
        self.switch.setCheckable(True)
        self.switch.setMinimumWidth(130)
        self.switch.toggled.connect(self._flipped)
        top.addWidget(self.switch)
        self.endpoint = QLabel("not serving")
        self.endpoint.setObjectName("serveEndpoint")
        self.endpoint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.endpoint.setWordWrap(True)
        top.addWidget(self.endpoint, 1)
        self.copy_btn = QPushButton("Copy URL")
        self.copy_btn.setObjectName("serveCopy")
        self.copy_btn.setEnabled(False)
        self.copy_btn.clicked.connect(lambda: QGuiApplication.clipboard().setText(self._url))
        top.addWidget(self.copy_btn)
        bl.addLayout(top)

        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        s = load_serve_settings()
        self.port = QSpinBox()
        self.port.setObjectName("servePort")
        self.port.setRange(1, 65535)
        self.port.setValue(s.port)
        self.others = QCheckBox("Other machines may connect (listen on every network, not only 127.0.0.1)")
        self.others.setObjectName("serveOthers")
        self.others.setChecked(s.others)
        self.key = QLineEdit()
        self.key.setObjectName("serveKey")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setMinimumWidth(260)
        self.key_note = QLabel("")
        self.key_note.setObjectName("serveKeyNote")
        self.key_note.setWordWrap(True)
        self.key_note.setStyleSheet("color:#495057;")
        self.key_note.setVisible(False)
        self.queue = QSpinBox()
        self.queue.setObjectName("serveQueue")
        self.queue.setRange(0, 256)
        self.queue.setValue(s.queue)
        self.queue.setSuffix(" waiting at most")
        form.addRow("Port", self.port)
        form.addRow("", self.others)
        form.addRow("API key", self.key)
        form.addRow("Queue", self.queue)
        bl.addLayout(form)
        bl.addWidget(self.key_note)
        self.warning = QLabel("")
        self.warning.setObjectName("serveWarning")
        self.warning.setWordWrap(True)
        self.warning.setStyleSheet("color:#c92a2a;")
        bl.addWidget(self.warning)
        note = QLabel(QUEUE_NOTE)
        note.setObjectName("serveQueueNote")
        note.setWordWrap(True)
        note.setStyleSheet("color:#495057;")
        bl.addWidget(note)
        lay.addWidget(box)
        self.others.toggled.connect(self._warn)
        self.key.textChanged.connect(self._warn)
        self._warn()
        self._key_placeholder()

        head = QHBoxLayout()
        title = QLabel("Requests")
        title.setStyleSheet("font-weight: 600;")
        head.addWidget(title)
        self.summary = QLabel("none yet")
        self.summary.setObjectName("serveSummary")
        self.summary.setStyleSheet("color:#495057;")
        head.addWidget(self.summary, 1)
        lay.addLayout(head)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("serveRequests")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        h = self.table.horizontalHeader()
        h.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        h.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        lay.addWidget(self.table, 1)
        self._url = ""

    # -- the switch and its settings ------------------------------------------------

    def settings(self) -> ServeSettings:
        return ServeSettings(port=self.port.value(), others=self.others.isChecked(), api_key=self.key.text().strip(),
                             queue=self.queue.value())

    def start_settings(self) -> ServeSettings:
        """The settings to start serving with, saved; never other machines without a key.
        A key typed here is used; else the one an earlier session kept in the keyring;
        else, when other machines may connect, a new one, shown here. The key in use is
        kept in the keyring (where there is one) for the next session."""
        key = self.key.text().strip()
        made = False
        if not key and _key_kept():
            key = stored_key() or ""
            if key:
                self.key.setText(key)
        if not key and self.others.isChecked():
            key, made = new_key(), True
            self.key.setText(key)
            self.key.setEchoMode(QLineEdit.EchoMode.Normal)  # shown: the clients need it
        s = self.settings()
        save_serve_settings(s)
        if s.api_key:
            kept = store_key(s.api_key)
            QSettings().setValue("serve/key_kept", kept)
            if made:
                self._note_key("A new API key was made, since other machines may connect: give it to the clients "
                               "('Authorization: Bearer KEY', the openai SDK's api_key). "
                               + ("It is kept in this system's keyring for the next time." if kept else
                                  "This system has no keyring to keep it in: the next time, another one is made."))
            elif not kept:
                self._note_key("This system has no keyring to keep the API key in: after a restart, type it again "
                               "(or a new one is made when other machines may connect).")
        return s

    def _note_key(self, text: str) -> None:
        self.key_note.setText(text)
        self.key_note.setVisible(bool(text))

    def _key_placeholder(self) -> None:
        self.key.setPlaceholderText("kept in the system's keyring" if _key_kept() else
                                    "none: a new one is made when other machines may connect" if self.others.isChecked()
                                    else "none: any program on this machine may use it")
        self.key.setToolTip("Clients send it as 'Authorization: Bearer KEY' (the openai SDK's api_key). Kept in the "
                            "system's keyring where there is one, never in the settings file. Other machines are never "
                            "served without one.")

    def _flipped(self, on: bool) -> None:
        self.switch.setText("Stop serving" if on else "Serve")
        self.switched.emit(on)  # the controller starts with start_settings()

    def key_words(self) -> str:
        """Which key other machines will need, in words."""
        return ("with the API key set here" if self.key.text().strip() or _key_kept() else
                "with a new API key, made and shown here when serving starts (none is set)")

    def warning_text(self) -> str:
        """What serving with these settings exposes, in a line ("" for this machine only)."""
        if not self.others.isChecked():
            return ""
        return (f"Every machine that can reach this one may use the models, {self.key_words()}; requests and answers "
                "travel unencrypted (plain HTTP).")

    def _warn(self) -> None:
        self.warning.setText(self.warning_text())
        self._key_placeholder()

    def set_switch(self, on: bool) -> None:
        """Show the switch on or off without flipping it again."""
        self.switch.blockSignals(True)
        self.switch.setChecked(on)
        self.switch.setText("Stop serving" if on else "Serve")
        self.switch.blockSignals(False)

    def set_serving(self, url: str | None, text: str) -> None:
        self._url = f"{url}/v1" if url else ""
        self.endpoint.setText(text)
        self.copy_btn.setEnabled(bool(url))
        for w in (self.port, self.others, self.queue):
            w.setEnabled(url is None)
        self.key.setReadOnly(url is not None)  # not disabled: the key in use can still be selected and copied

    # -- the request list -------------------------------------------------------------

    def show_ticket(self, t) -> None:
        """Add or update the row of a request (a queue Ticket); a refused one gets a row of its own."""
        if t.state == "failed" and t.id == 0:
            self._refused += 1
            row = self._new_row()
            self._fill(row, t, "rejected")
        else:
            row = self._rows.get(t.id)
            if row is None:
                row = self._rows[t.id] = self._new_row()
            self._fill(row, t, t.state)
            if t.state == "queued":
                self._waiting[t.id] = t
            else:
                self._waiting.pop(t.id, None)
        if self._waiting and not self._tick.isActive():
            self._tick.start()
        self._summarise()

    def _refresh_waiting(self) -> None:
        for tid, t in list(self._waiting.items()):
            row = self._rows.get(tid)
            if row is None or t.state != "queued":
                self._waiting.pop(tid, None)
                continue
            self._fill(row, t, t.state)
        if not self._waiting:
            self._tick.stop()

    def _new_row(self) -> int:
        if self.table.rowCount() >= MAX_ROWS:
            self.table.removeRow(self.table.rowCount() - 1)
            self._rows = {k: v for k, v in self._rows.items() if v < MAX_ROWS - 1}
        self.table.insertRow(0)  # newest first
        self._rows = {k: v + 1 for k, v in self._rows.items()}
        return 0

    def _fill(self, row: int, t, state: str) -> None:
        st = t.stats
        speed = st.tokens_per_second if st else None
        cells = [
            time.strftime("%H:%M:%S", time.localtime(t.submitted_at)),
            t.client,
            {"chat": "chat", "completion": "completion", "app": "this app"}.get(t.kind, t.kind),
            STATE_WORDS.get(state, state) + (f" ({t.cancel_reason})" if state == "cancelled" and t.cancel_reason else ""),
            str(t.prompt_tokens),
            str(st.generated) if st else "-",
            format_num(speed, "{:.1f}"),
            format_pct(st.acceptance_rate) if st else "-",
            f"{t.queue_seconds:.1f} s" if state != "rejected" else "-",
        ]
        for col, text in enumerate(cells):
            item = self.table.item(row, col)
            if item is None:
                item = QTableWidgetItem(text)
                if col >= 4:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, col, item)
            elif item.text() != text:
                item.setText(text)
        if state == "error" and t.error:
            self.table.item(row, 3).setToolTip(t.error)

    def _summarise(self) -> None:
        n = len(self._rows)
        self.summary.setText(f"{n} served or waiting" + (f", {self._refused} refused (queue full)" if self._refused else ""))
