"""The race you can watch: a comparison's answers side by side, replayed at the speed
each was really produced.

Every run of a comparison records when each of its tokens came out (the runner's
``timeline``: the end of each propose/verify step, after the prompt). Replay types
every answer out again on one clock, each token at its recorded time (all of a
step's tokens at once: one verify pass emitted them), with the chat's provenance
colours, so target alone and each configuration race at their measured speeds.
Recorded timings are the honest way to show a race on a machine where two live
runs side by side would fight over the cores (:data:`REPLAY_NOTE` says so).

The clock is a callable (``time.monotonic`` by default); a test passes a scripted
one and calls :meth:`RaceView.tick` itself.
"""

from __future__ import annotations

import bisect
import html
import time
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor, QFontDatabase, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ..bench.runner import KIND_CODES
from ..session.text import REPLAY_NOTE, replay_clock_text
from ..speculative.proposers.base import Source
from .chat_view import PROVENANCE, colour_key

KINDS = {code: kind for kind, code in KIND_CODES.items()}  # a timeline's letter -> the token's kind
TICK_MS = 30
SPEEDS = (("1×", 1.0), ("2×", 2.0), ("4×", 4.0), ("½×", 0.5))


@dataclass(frozen=True)
class Piece:
    """Text that appeared at once (one step's tokens of one provenance)."""

    at: float  # seconds after the run started (its prompt included)
    text: str
    colour: str  # a key of the chat's PROVENANCE


def pieces(run: dict) -> list[Piece]:
    """A run's text cut at its recorded times; one piece, at its end, without a timeline."""
    text = run.get("text") or ""
    tl = run.get("timeline")
    stats = run.get("stats") or {}
    if not tl or not tl.get("t"):
        end = float(stats.get("prompt_seconds") or 0.0) + float(stats.get("decode_seconds") or 0.0)
        return [Piece(end, text, "target")] if text else []
    out: list[Piece] = []
    start = float(tl.get("prompt_seconds") or 0.0)
    chars, kinds, sources = tl.get("chars") or [], tl.get("kind") or "", tl.get("source") or ""
    pos = i = 0
    for t, n in zip(tl["t"], tl.get("n") or []):
        for _ in range(n):
            if i >= len(chars):
                break
            key = colour_key(KINDS.get(kinds[i:i + 1], "target"), Source.by_code(sources[i:i + 1]) or "")
            piece = text[pos:pos + chars[i]]
            pos += chars[i]
            i += 1
            if out and out[-1].at == start + t and out[-1].colour == key:
                out[-1] = Piece(out[-1].at, out[-1].text + piece, key)
            elif piece:
                out.append(Piece(start + t, piece, key))
    if pos < len(text):  # what the timeline does not cover (an old record) comes at the end
        out.append(Piece(out[-1].at if out else start, text[pos:], "target"))
    return out


class Lane(QWidget):
    """One configuration's answer, typed out as it was produced."""

    def __init__(self, config: str, run: dict, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.config = config
        self.run = run
        self.pieces = pieces(run)
        self._times = [p.at for p in self.pieces]
        self.shown = 0
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        self.head = QLabel()
        self.head.setWordWrap(True)  # many columns must fit the window, not widen it
        self.head.setMinimumWidth(40)
        lay.addWidget(self.head)
        # code keeps its shape: monospace, one source line per line (scroll sideways)
        self.view = QPlainTextEdit()
        self.view.setReadOnly(True)
        self.view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.view.setMinimumWidth(40)
        lay.addWidget(self.view, 1)
        self._formats: dict[str, QTextCharFormat] = {}
        self.show_until(float("inf"))

    @property
    def end(self) -> float:
        return self._times[-1] if self._times else 0.0

    def text(self) -> str:
        return self.view.toPlainText()

    def _format(self, key: str) -> QTextCharFormat:
        if key not in self._formats:
            f = QTextCharFormat()
            bg = PROVENANCE.get(key, ("",))[0]
            if bg:
                f.setBackground(QColor(bg))
            self._formats[key] = f
        return self._formats[key]

    def restart(self) -> None:
        self.view.clear()
        self.shown = 0
        self._head(0.0)

    def show_until(self, t: float) -> None:
        """Show every piece produced by ``t`` seconds (and nothing after)."""
        n = bisect.bisect_right(self._times, t)
        if n > self.shown:
            cur = self.view.textCursor()
            cur.movePosition(QTextCursor.MoveOperation.End)
            for p in self.pieces[self.shown:n]:
                cur.insertText(p.text, self._format(p.colour))
            self.shown = n
        self._head(t)

    def _head(self, t: float) -> None:
        st = self.run.get("stats") or {}
        parts = [f"<b>{html.escape(self.config)}</b>"]
        if st.get("tokens_per_second"):
            parts.append(f"{st['tokens_per_second']:.1f} tok/s")
        if st.get("acceptance_rate") is not None:
            parts.append(f"{100 * st['acceptance_rate']:.0f}% accepted")
        if self.pieces and t >= self.end:
            parts.append(f"done at {self.end:.2f} s")
        self.head.setText(" · ".join(parts))


class RaceView(QWidget):
    """The answers of one prompt and repeat side by side, with a Replay button."""

    def __init__(self, parent: QWidget | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(parent)
        self.setObjectName("raceView")
        self.clock = clock
        self.result: dict | None = None
        self.lanes: list[Lane] = []
        self._t0: float | None = None
        self._speed = 1.0
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self.tick)
        self._build()

    def _build(self) -> None:
        al = QVBoxLayout(self)
        al.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        row.addWidget(QLabel("Answers side by side for"))
        self.prompt = QComboBox()
        self.prompt.setObjectName("answerPrompt")
        self.prompt.currentIndexChanged.connect(self.show_answers)
        row.addWidget(self.prompt, 1)
        self.repeat = QComboBox()
        self.repeat.setObjectName("answerRepeat")
        self.repeat.setToolTip("Which repeat's runs to show: each repeat ran every configuration once, one after another")
        self.repeat.currentIndexChanged.connect(self.show_answers)
        row.addWidget(self.repeat)
        self.replay_btn = QPushButton("Replay")
        self.replay_btn.setObjectName("replayButton")
        self.replay_btn.setToolTip("Type the answers out again, each token at the time it was produced")
        self.replay_btn.clicked.connect(self.replay)
        self.replay_btn.setEnabled(False)
        row.addWidget(self.replay_btn)
        self.speed = QComboBox()
        self.speed.setObjectName("replaySpeed")
        for label, x in SPEEDS:
            self.speed.addItem(label, x)
        self.speed.setToolTip("Replay speed: 1× is real time")
        row.addWidget(self.speed)
        self.clock_label = QLabel("")
        self.clock_label.setObjectName("replayClock")
        self.clock_label.setMinimumWidth(90)
        row.addWidget(self.clock_label)
        al.addLayout(row)
        self.note = QLabel(REPLAY_NOTE)
        self.note.setObjectName("replayNote")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color:#868e96;")
        al.addWidget(self.note)
        self.answer_split = QSplitter(Qt.Orientation.Horizontal)
        self.answer_split.setObjectName("answerColumns")
        al.addWidget(self.answer_split, 1)

    # -- content ------------------------------------------------------------------------------

    def set_result(self, res: dict) -> None:
        self.stop()
        self.result = res
        for combo in (self.prompt, self.repeat):
            combo.blockSignals(True)
            combo.clear()
        seen = []
        for r in res["runs"]:
            key = (r["suite"], r["prompt_id"])
            if key not in seen:
                seen.append(key)
                self.prompt.addItem(f"{r['suite']} / {r['prompt_id']}", key)
        for rep in sorted({r["repeat"] for r in res["runs"]}):
            self.repeat.addItem(f"repeat {rep + 1}", rep)
        for combo in (self.prompt, self.repeat):
            combo.blockSignals(False)
        self.show_answers()

    def show_answers(self) -> None:
        """The chosen prompt's answers in full, one column per configuration."""
        self.stop()
        for lane in self.lanes:
            lane.setParent(None)
            lane.deleteLater()
        self.lanes = []
        if self.result is None or self.prompt.currentData() is None:
            self.replay_btn.setEnabled(False)
            return
        suite, pid = self.prompt.currentData()
        rep = self.repeat.currentData() or 0
        for c in self.result["configs"]:
            run = next((x for x in self.result["runs"] if x["suite"] == suite and x["prompt_id"] == pid
                        and x["config"] == c and x["repeat"] == rep), None)
            if run is None:
                continue
            lane = Lane(c, run)
            self.lanes.append(lane)
            self.answer_split.addWidget(lane)
        self.replay_btn.setEnabled(bool(self.lanes))
        self.clock_label.setText("")

    # -- replay -------------------------------------------------------------------------------

    @property
    def replaying(self) -> bool:
        return self._t0 is not None

    @property
    def end(self) -> float:
        return max((lane.end for lane in self.lanes), default=0.0)

    def replay(self) -> None:
        """Start over: every answer empty, then typed out on one clock."""
        if not self.lanes:
            return
        self._speed = float(self.speed.currentData() or 1.0)
        for lane in self.lanes:
            lane.restart()
        self._t0 = self.clock()
        self.replay_btn.setText("Replay again")
        self._timer.start()
        self.tick()

    def elapsed(self) -> float:
        return 0.0 if self._t0 is None else (self.clock() - self._t0) * self._speed

    def tick(self) -> None:
        if self._t0 is None:
            return
        t = self.elapsed()
        for lane in self.lanes:
            lane.show_until(t)
        self.clock_label.setText(replay_clock_text(min(t, self.end), self.end, self._speed))
        if t >= self.end:
            self.stop()

    def stop(self) -> None:
        self._timer.stop()
        self._t0 = None
