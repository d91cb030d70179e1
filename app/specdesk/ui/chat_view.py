"""The chat transcript: streamed token by token, each token coloured by where it
came from, with a tooltip naming its draft position and, where known, p and q.

Markdown is rendered readably: fenced code in a monospace font on a tinted block,
inline `code` monospace, headings bold. With provenance colouring off, finished
messages are rendered by Qt's own Markdown support.

Streaming costs the engine nearly nothing: tokens are kept as they arrive (plain
Python, no Qt work) and written to the document at a bounded rate (every
``REPAINT_MS`` and at the end of the answer), appended at the end of the answer in
one edit block, so only the last paragraph is laid out again: an assistant's message
is a run of blocks with side margins in the document's root frame, which Qt lays out
incrementally (in a nested frame, as a user's message is, every edit lays the whole
frame out again, and a frame's cost grew with the answer). The Qt thread's time per
repaint is recorded in ``repaint_ms``.
"""

from __future__ import annotations

import html
import time
from collections import deque
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPoint, Qt, QTimer
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QPainter,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
    QTextFrameFormat,
)
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QTextBrowser, QToolTip, QWidget

from ..speculative.proposers.base import Source, model_sources, lookup_sources
from .flow import FlowLayout

# a token's kind -> (background, label, explanation)
_KINDS = {
    "accepted": ("#bfeec0", "accepted draft", "proposed by the draft model and kept by the target"),
    "correction": ("#ffcdb8", "correction", "the target's own token after it rejected a draft token"),
    "bonus": ("#c9ddff", "bonus", "the target's extra token after it accepted the whole draft"),
    "target": ("", "target", "a plain target step (nothing was drafted)"),
}


def _of_source(source: Source) -> tuple[str, str, str]:
    verb = "copied from" if source.is_lookup else "drafted by"
    return source.colour, f"accepted {source.label}", f"{verb} {source.what} and kept by the target"


class _Provenance(dict):
    """A colour key (a token's kind, or the source of an accepted draft token that has a
    colour of its own) -> (background, label, explanation): the kinds written here, the
    sources from their own fields (speculative.proposers.base), whichever exist."""

    def __missing__(self, key: str) -> tuple[str, str, str]:
        source = Source.of(key)
        if not source.colour:
            raise KeyError(key)
        return _of_source(source)

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key) -> bool:
        return self.get(key) is not None


PROVENANCE = _Provenance(_KINDS)


def own_colour() -> tuple[Source, ...]:
    """The sources whose accepted tokens have a colour of their own (a draft model's have "accepted"'s)."""
    return tuple(s for s in (*model_sources(), *lookup_sources()) if s.colour)


SPAN_PROP = QTextFormat.Property.UserProperty + 1
USER_BG = "#f1f3f5"
REPAINT_MS = 80  # streamed text is written at most this often (and at the end)
INSET = 8  # a message's text from its edges, in pixels


def _answer_format() -> QTextBlockFormat:
    """An assistant's blocks: inset as a user's message is by its frame's padding (the
    blocks that follow, a new line's, inherit it)."""
    bf = QTextBlockFormat()
    bf.setLeftMargin(INSET)
    bf.setRightMargin(INSET)
    return bf


def colour_key(kind: str, source: str) -> str:
    if kind == "accepted" and source and Source.of(source).colour:
        return str(source)
    return kind if kind in PROVENANCE else "target"


@dataclass
class Span:
    """One output token in the transcript (characters [start, end) of its message)."""

    start: int
    end: int
    kind: str
    source: str
    position: int | None
    p: float | None
    q: float | None
    lookup: int | None

    def to_list(self) -> list:
        return [self.start, self.end, self.kind, self.source, self.position, self.p, self.q, self.lookup]

    @classmethod
    def from_list(cls, x: list) -> Span:
        return cls(*x)

    def describe(self) -> str:
        label = PROVENANCE[colour_key(self.kind, self.source)][1]
        parts = [f"<b>{html.escape(label)}</b>"]
        if self.kind == "accepted" and self.position:
            parts.append(f"draft position {self.position}")
        elif self.kind in ("correction", "bonus") and self.position:
            parts.append(f"after {self.position - 1} accepted")
        if self.lookup is not None:
            parts.append(f"copied from token {self.lookup} of the context")
        if self.p is not None:
            parts.append(f"p = {self.p:.3f}")
        if self.q is not None:
            parts.append(f"q = {self.q:.3f}")
        return "<br>".join(parts)


class _MarkdownState:
    """Just enough Markdown to render code readably while streaming.

    Characters are styled as they arrive (never held back for a later token), so
    every character keeps the provenance of the token that produced it.
    """

    def __init__(self) -> None:
        self.in_fence = False
        self.in_inline = False
        self.fence_line = False  # the rest of a ``` line (its language tag) is dimmed
        self.line_start = True  # only blanks so far on this line
        self.ticks = 0  # consecutive backticks
        self.run_at_line_start = False
        self.inline_before = False

    def feed(self, text: str) -> list[tuple[str, str]]:
        """Split text into (style, chunk), style in {"text", "code", "inline", "fence"}."""
        out: list[tuple[str, str]] = []

        def emit(style: str, ch: str) -> None:
            if out and out[-1][0] == style:
                out[-1] = (style, out[-1][1] + ch)
            else:
                out.append((style, ch))

        for ch in text:
            if ch == "`":
                if self.ticks == 0:
                    self.run_at_line_start = self.line_start
                    self.inline_before = self.in_inline
                self.ticks += 1
                if self.ticks == 3 and self.run_at_line_start:
                    self.in_inline = False
                    self.in_fence = not self.in_fence
                    self.fence_line = True
                elif not self.in_fence and self.ticks == 1:
                    self.in_inline = not self.in_inline
                elif not self.in_fence and self.ticks == 2:
                    self.in_inline = self.inline_before
                emit("fence", ch)
                self.line_start = False
                continue
            self.ticks = 0
            if ch == "\n":
                style = "fence" if self.fence_line else ("code" if self.in_fence else "text")
                emit(style, ch)
                self.fence_line = False
                self.in_inline = False
                self.line_start = True
                continue
            if self.fence_line:
                style = "fence"
            elif self.in_fence:
                style = "code"
            elif self.in_inline:
                style = "inline"
            else:
                style = "text"
            emit(style, ch)
            if not ch.isspace():
                self.line_start = False
        return out


class ChatView(QTextBrowser):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatView")
        self.setOpenExternalLinks(True)
        self.setReadOnly(True)
        self.viewport().setMouseTracking(True)
        self._mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self._provenance = True
        self._messages: list[tuple[str, str, list[Span] | None]] = []  # finished messages
        self._live_spans: list[Span] = []
        self._live_text = ""
        self._live_md: _MarkdownState | None = None
        self._all_spans: list[Span] = []  # flat list indexed by SPAN_PROP
        self._pending: list[Span] = []  # received, not yet written to the document
        self.document().setDocumentMargin(12)
        self.document().setUndoRedoEnabled(False)  # read-only: an undo stack only grows
        # The style sheet gives the view a rounded border and leaves its viewport
        # transparent, so every repaint of the streamed text repainted the window behind
        # it (the main window, the splitter, the tabs, the chat panel: nine widgets a
        # frame). The viewport paints its own background instead (paintEvent) and Qt
        # repaints only it, and scrolls it by copying what is already drawn.
        self.viewport().setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self._background = QColor("#ffffff")
        self._repaint = QTimer(self)
        self._repaint.setSingleShot(True)
        self._repaint.setInterval(REPAINT_MS)
        self._repaint.timeout.connect(self.flush)
        self.repaint_ms: deque[float] = deque(maxlen=4096)  # Qt-thread milliseconds per flush

    # -- public API ----------------------------------------------------------------

    @property
    def provenance(self) -> bool:
        return self._provenance

    def set_provenance(self, on: bool) -> None:
        if on != self._provenance:
            self._provenance = on
            self._rerender()

    def set_messages(self, messages: list[tuple[str, str, list[Span] | None]]) -> None:
        """(role, text, spans) for each finished message."""
        self._messages = list(messages)
        self._live_md = None
        self._rerender()

    def add_message(self, role: str, text: str, spans: list[Span] | None = None) -> None:
        self._messages.append((role, text, spans))
        self._render_message(role, text, spans)
        self._scroll_to_end()

    def begin_answer(self) -> None:
        self._drop_pending()
        self._live_spans = []
        self._live_text = ""
        self._live_md = _MarkdownState()
        self._start_block("assistant")

    def append_tokens(self, tokens) -> None:
        """tokens: TokenInfo objects of one step. They are kept now and written at
        the next repaint (see :meth:`flush`)."""
        if self._live_md is None:
            self.begin_answer()
        for t in tokens:
            start = len(self._live_text)
            self._live_text += t.text
            span = Span(start, len(self._live_text), t.kind, t.source, t.position, t.p, t.q, t.lookup_start)
            self._live_spans.append(span)
            self._pending.append(span)
        if self._pending and not self._repaint.isActive():
            self._repaint.start()

    def flush(self) -> None:
        """Write the tokens received since the last repaint, in one edit block at the
        end of the answer."""
        self._repaint.stop()
        if not self._pending or self._live_md is None:
            self._pending = []
            return
        t0 = time.perf_counter()
        cur = self._end_cursor()  # the live answer is the document's last message
        cur.beginEditBlock()
        for sp in self._pending:
            self._insert_token(cur, self._live_text[sp.start : sp.end], sp, self._live_md, colour=self._provenance)
        cur.endEditBlock()
        self._pending = []
        self._scroll_to_end()
        self.repaint_ms.append((time.perf_counter() - t0) * 1000.0)

    def _drop_pending(self) -> None:
        self._repaint.stop()
        self._pending = []

    def end_answer(self) -> tuple[str, list[Span]]:
        self.flush()
        text, spans = self._live_text, self._live_spans
        self._messages.append(("assistant", text, spans))
        self._live_md = None
        self._live_spans = []
        self._live_text = ""
        if not self._provenance:
            self._rerender()
        return text, spans

    def discard_answer(self) -> None:
        self._drop_pending()
        self._live_md = None
        self._live_spans = []
        self._live_text = ""
        self._rerender()

    @property
    def live_text(self) -> str:
        """The answer received so far (written to the document at the next repaint)."""
        return self._live_text

    def messages(self) -> list[tuple[str, str, list[Span] | None]]:
        return list(self._messages)

    def last_answer(self) -> str:
        for role, text, _ in reversed(self._messages):
            if role == "assistant":
                return text
        return ""

    def transcript(self) -> str:
        names = {"user": "You", "assistant": "Assistant", "system": "System"}
        return "\n\n".join(f"{names.get(r, r)}:\n{t}" for r, t, _ in self._messages)

    # -- rendering -------------------------------------------------------------------

    def _end_cursor(self) -> QTextCursor:
        cur = QTextCursor(self.document())
        cur.movePosition(QTextCursor.MoveOperation.End)
        return cur

    def _scroll_to_end(self) -> None:
        sb = self.verticalScrollBar()
        sb.setValue(sb.maximum())

    def _rerender(self) -> None:
        self._drop_pending()  # the live spans below include them
        self.document().clear()
        self._all_spans = []
        block = QTextCursor(self.document())
        block.beginEditBlock()  # one layout pass for the whole transcript
        for role, text, spans in self._messages:
            self._render_message(role, text, spans)
        if self._live_md is not None:
            cur = self._start_block("assistant")
            md = _MarkdownState()
            self._live_md = md
            for sp in self._live_spans:
                self._insert_token(cur, self._live_text[sp.start : sp.end], sp, md, colour=self._provenance)
        block.endEditBlock()
        self._scroll_to_end()

    def _start_block(self, role: str) -> QTextCursor:
        """A heading for one message, and where its text goes: a frame with a
        background for the user's, blocks with the same inset in the root frame for
        the assistant's (see the module docstring); returns a cursor there."""
        cur = self._end_cursor()
        if not self.document().isEmpty():
            # a blank line between messages, whatever block (a list item, a margin)
            # the last one ended in
            cur.insertBlock(QTextBlockFormat(), QTextCharFormat())
        head = QTextCharFormat()
        head.setFontWeight(QFont.Weight.Bold)
        head.setForeground(QColor("#495057"))
        bf = QTextBlockFormat()
        bf.setTopMargin(10)
        if role == "assistant":
            bf.setBottomMargin(INSET)
        cur.insertBlock(bf)
        cur.insertText("You" if role == "user" else "Assistant", head)
        if role == "assistant":
            cur.insertBlock(_answer_format(), QTextCharFormat())
            return cur
        frame = QTextFrameFormat()
        frame.setPadding(INSET)
        frame.setBorder(0)
        if role == "user":
            frame.setBackground(QColor(USER_BG))
        return cur.insertFrame(frame).lastCursorPosition()

    def _render_message(self, role: str, text: str, spans: list[Span] | None) -> None:
        cur = self._start_block(role)
        if role != "assistant" or not spans or not self._provenance:
            if role == "assistant":
                start = cur.position()
                cur.insertMarkdown(text)
                cur.setPosition(start, QTextCursor.MoveMode.KeepAnchor)
                cur.mergeBlockFormat(_answer_format())  # Markdown's blocks, inset as the others
            else:
                cur.insertText(text, QTextCharFormat())
            return
        md = _MarkdownState()
        for sp in spans:
            self._insert_token(cur, text[sp.start : sp.end], sp, md, colour=True)

    def _insert_token(self, cur: QTextCursor, text: str, span: Span, md: _MarkdownState, colour: bool) -> None:
        idx = len(self._all_spans)
        self._all_spans.append(span)
        bg = PROVENANCE[colour_key(span.kind, span.source)][0] if colour else ""
        for style, chunk in md.feed(text):
            fmt = QTextCharFormat()
            fmt.setProperty(SPAN_PROP, idx)
            if bg:
                fmt.setBackground(QColor(bg))
            if style in ("code", "inline"):
                fmt.setFont(self._mono)
                fmt.setForeground(QColor("#1d3557"))
            elif style == "fence":
                fmt.setFont(self._mono)
                fmt.setForeground(QColor("#868e96"))
            cur.insertText(chunk, fmt)

    # -- hover -----------------------------------------------------------------------

    def span_at(self, pos: QPoint) -> Span | None:
        """The token under a viewport point, if any."""
        cur = self.cursorForPosition(pos)  # the character boundary nearest to pos
        idx = cur.position()
        if pos.x() < self.cursorRect(cur).x():
            idx -= 1  # pos is over the character before that boundary
        if idx < 0 or idx + 1 > self.document().characterCount() - 1:
            return None
        probe = QTextCursor(self.document())
        probe.setPosition(idx + 1)  # a cursor's char format is that of the character before it
        prop = probe.charFormat().property(SPAN_PROP)
        if not isinstance(prop, int) or prop >= len(self._all_spans):
            return None
        return self._all_spans[prop]

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt API
        painter = QPainter(self.viewport())
        painter.fillRect(event.rect(), self._background)
        painter.end()
        super().paintEvent(event)

    def viewportEvent(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            span = self.span_at(event.pos())
            if span is not None:
                QToolTip.showText(event.globalPos(), span.describe(), self.viewport())
            else:
                QToolTip.hideText()
            return True
        return super().viewportEvent(event)


class Legend(QWidget):
    """Each colour of the chat and what it means (its tooltip says more), in as many
    rows as the width needs: ten entries do not fit one row on a laptop's screen, and a
    label cut short ("transla", "MTP he") says nothing."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("legend")
        lay = FlowLayout(self)
        lay.setContentsMargins(4, 0, 4, 0)
        for key in ("accepted", *own_colour(), "correction", "bonus"):
            bg, label, why = PROVENANCE[key]
            label = key.label if isinstance(key, Source) else ("draft" if key == "accepted" else label)
            item = QWidget()
            row = QHBoxLayout(item)
            row.setContentsMargins(0, 0, 0, 0)
            row.setSpacing(4)
            sw = QLabel()
            sw.setFixedSize(14, 14)
            sw.setStyleSheet(f"background:{bg}; border:1px solid #adb5bd; border-radius:2px;")
            text = QLabel(label)
            for w in (item, sw, text):
                w.setToolTip(why)
            row.addWidget(sw)
            row.addWidget(text)
            lay.addWidget(item)
        hint = QLabel("uncoloured: target step")
        hint.setToolTip("A plain target step (nothing was drafted). Hover a token for its details.")
        hint.setStyleSheet("color:#868e96;")
        lay.addWidget(hint)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
