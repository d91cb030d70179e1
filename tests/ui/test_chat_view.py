"""The chat view on its own: streamed tokens, provenance spans, hover, Markdown."""

from dataclasses import dataclass

from PySide6.QtCore import QPoint
from PySide6.QtGui import QTextCursor

from specdesk.ui.chat_view import ChatView, Span, _MarkdownState


@dataclass
class Tok:
    text: str
    kind: str
    source: str = "draft"
    position: int | None = 1
    p: float | None = None
    q: float | None = 0.9
    lookup_start: int | None = None


def test_markdown_state_styles_code_without_holding_characters_back():
    m = _MarkdownState()
    assert m.feed("```") == [("fence", "```")]
    assert m.feed("python\n") == [("fence", "python\n")]
    assert m.feed("x = 1\n") == [("code", "x = 1\n")]
    m.feed("```\n")
    assert m.feed("use `f` now") == [("text", "use "), ("fence", "`"), ("inline", "f"), ("fence", "`"), ("text", " now")]


def test_hover_finds_each_tokens_span(qtbot):
    v = ChatView()
    v.resize(600, 400)
    v.show()
    v.add_message("user", "hi")
    v.begin_answer()
    v.append_tokens([Tok("def", "accepted"), Tok(" add", "bonus", position=2), Tok("(a", "correction", p=0.4, q=None)])
    text, spans = v.end_answer()
    assert text == "def add(a" and [s.start for s in spans] == [0, 3, 7]
    start = v.document().find("def add").selectionStart()
    for offset, expected in ((0, 0), (2, 0), (3, 1), (6, 1), (7, 2), (8, 2)):
        cur = QTextCursor(v.document())
        cur.setPosition(start + offset)
        r = v.cursorRect(cur)
        assert v.span_at(QPoint(r.left() + 2, r.center().y())) is spans[expected], offset
    assert "p = 0.400" in spans[2].describe() and "correction" in spans[2].describe()
    assert "draft position 1" in spans[0].describe()
    v.close()


def test_provenance_toggle_keeps_text_and_spans(qtbot):
    v = ChatView()
    v.show()
    v.begin_answer()
    v.append_tokens([Tok("Hello", "accepted"), Tok(" world", "bonus")])
    v.end_answer()
    before = v.toPlainText()
    v.set_provenance(False)
    assert "Hello world" in v.toPlainText()
    v.set_provenance(True)
    assert v.toPlainText() == before
    assert [s.to_list()[:3] for s in v.messages()[-1][2]] == [[0, 5, "accepted"], [5, 11, "bonus"]]
    assert Span.from_list(v.messages()[-1][2][0].to_list()) == v.messages()[-1][2][0]
    v.close()
