"""The chat view on its own: streamed tokens, provenance spans, hover, Markdown."""

from dataclasses import dataclass

from PySide6.QtCore import QPoint
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QApplication
from specdesk.speculative.stats import Stats
from specdesk.ui.chat_view import ChatView, Span, _MarkdownState
from specdesk.ui.stats_panel import StatsPanel


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


def test_streamed_tokens_are_written_at_a_bounded_rate_and_appended_at_the_end(qtbot):
    """200 steps arriving faster than the repaint interval cost one document change,
    which appends after what was already there (nothing re-inserted or re-laid out
    before it)."""
    v = ChatView()
    v.show()
    v.add_message("user", "count")
    v.begin_answer()
    v.append_tokens([Tok("zero ", "target", position=None)])
    v.flush()
    before = v.document().characterCount()
    changes = []
    v.document().contentsChange.connect(lambda pos, removed, added: changes.append((pos, removed, added)))
    for i in range(200):
        v.append_tokens([Tok(f"{i} ", "accepted"), Tok("x ", "bonus", position=2)])
    assert changes == [] and "199 x" not in v.toPlainText()  # kept, not yet written
    assert v.live_text.endswith("199 x ")  # but already part of the answer
    qtbot.waitUntil(lambda: "199 x" in v.toPlainText())
    assert len(changes) == 1
    pos, removed, added = changes[0]
    assert removed == 0 and pos >= before - 2 and added == len(v.live_text) - len("zero ")
    assert len(v.repaint_ms) == 2
    v.close()


def test_a_streamed_frame_lays_out_the_answers_end_not_the_whole_answer(qtbot):
    """Each repaint of a long answer asks Qt to lay out again only its last lines: the
    layout's dirty region starts near the document's end, however long the answer has
    grown (in a nested frame, as it was, every repaint laid out the answer from its
    first line, and a frame's cost grew with the answer)."""
    v = ChatView()
    v.resize(700, 500)
    v.show()
    v.add_message("user", "count")
    v.begin_answer()
    tops: list[float] = []
    v.document().documentLayout().update.connect(lambda r: tops.append(r.y()))
    line = v.fontMetrics().lineSpacing()
    below = []  # per repaint: the height of the document from the dirty region's top down
    for i in range(240):
        v.append_tokens([Tok(f"    x{i} = x{i} + 1\n" if i % 2 else f"# step {i}", "accepted")])
        tops.clear()
        v.flush()
        qtbot.wait(1)  # the event loop lays the document out
        assert tops, i
        below.append(v.document().size().height() - min(tops))
    assert v.document().size().height() > 60 * line  # the answer is long: 120 lines
    late = below[120:]  # the viewport's width settled (a scroll bar appearing lays all out)
    assert max(late) <= 4 * line, (max(late), line)
    v.close()


def test_the_end_of_an_answer_writes_what_is_pending(qtbot):
    v = ChatView()
    v.show()
    v.begin_answer()
    v.append_tokens([Tok("Hello", "accepted")])
    v.append_tokens([Tok(" there", "correction", p=0.2)])
    text, spans = v.end_answer()  # no event loop ran: end_answer writes them itself
    assert text == "Hello there" and "Hello there" in v.toPlainText()
    assert [s.kind for s in spans] == ["accepted", "correction"]
    # a provenance toggle while tokens are pending keeps each of them exactly once
    v.begin_answer()
    v.append_tokens([Tok("abc", "accepted")])
    v.set_provenance(False)
    v.append_tokens([Tok("def", "bonus")])
    v.end_answer()
    assert v.toPlainText().count("abcdef") == 1
    # a discarded answer leaves nothing behind, even what was pending
    v.begin_answer()
    v.append_tokens([Tok("gone", "accepted")])
    v.discard_answer()
    qtbot.wait(2 * 80)
    assert "gone" not in v.toPlainText()
    v.close()


def _stats(steps: int, decisions: dict | None = None) -> Stats:
    st = Stats(generated=2 * steps, steps=steps, drafted=steps, accepted=steps // 2, decode_seconds=0.05 * steps,
               drafted_per_position=[steps], accepted_per_position=[steps // 2])
    st.decisions = dict(decisions or {"draft: k>0 by cost model": steps})
    return st


def test_the_speed_charts_axes_are_drawn_again_only_when_their_range_changes(qtbot, monkeypatch):
    """An axis paints its ticks, labels and the grid lines across the plot: each repaint of
    the live curve must reuse the axes as drawn (cached), not draw them again, until a
    range step changes them."""
    import pyqtgraph as pg

    painted = []
    paint = pg.AxisItem.paint
    monkeypatch.setattr(pg.AxisItem, "paint", lambda self, *a: (painted.append(self), paint(self, *a))[1])
    p = StatsPanel()
    qtbot.addWidget(p)
    p.resize(300, 700)
    p.show()
    qtbot.waitExposed(p)
    p.reset()
    p.set_reference(30.0)
    axes = [p.speed_plot.getAxis("left"), p.speed_plot.getAxis("bottom")]
    ranges = set()
    for i in range(1, 121):  # a 240-token answer near 30 tok/s: the ranges step twice at most
        st = _stats(i)
        st.decode_seconds = st.generated / 30.0
        p.update_stats(st)
        p._update_charts(st)
        p.speed_plot.viewport().repaint()  # as the frame clock's repaint would
        QApplication.processEvents()
        ranges.add(tuple(map(tuple, p.speed_plot.getViewBox().viewRange())))
    own = [a for a in painted if any(a is x for x in axes)]
    assert len(p.speed_curve.getData()[0]) == 120  # every update reached the curve
    assert own  # the axes were drawn at all
    # each axis paints once per range (and once for the layout's first sizes), not per repaint
    assert len(own) <= 2 * (len(ranges) + 2), (len(own), len(ranges))


def test_stats_are_shown_at_a_bounded_rate_and_at_once_at_the_end(qtbot):
    p = StatsPanel()
    p.show()
    p.reset()
    p.set_reference(10.0)
    for i in range(1, 101):
        p.update_stats(_stats(i))
    assert p.m_steps.value.text() == "–" and not p.repaint_ms  # nothing shown yet
    assert len(p._xs) == 100  # but every step's point is kept for the chart
    qtbot.waitUntil(lambda: p.m_steps.value.text() == "100")
    assert len(p.repaint_ms) == 1
    assert p.decisions.text() == "why: draft: k>0 by cost model ×100"
    assert p.verdict.text().startswith("So far: 4.00×")
    final = _stats(120, {"draft: bound<1": 119, "draft: first step": 1})
    p.update_stats(final, live=False)  # the end: shown at once, without "So far"
    assert p.m_steps.value.text() == "120" and p.verdict.text().startswith("4.00×")
    assert p.decisions.text().startswith("why: draft: bound<1 ×119")
    p.close()


def test_the_live_speed_chart_keeps_its_axes_until_the_answer_outgrows_them(qtbot):
    """While an answer runs, the speed chart's ranges move in steps (the tokens axis
    doubles, the speed axis rounds up with headroom): an axis redraws its ticks and grid
    whenever its range changes, so they must change a few times an answer, not at every
    update. Every point is drawn inside them, and the finished answer fills the chart."""
    from specdesk.ui.stats_panel import nice_ceiling

    assert [nice_ceiling(x) for x in (0.5, 9.5, 23, 26.4, 101)] == [0.5, 10, 25, 30, 120]
    p = StatsPanel()
    p.show()
    p.reset()
    p.set_reference(30.0)
    vb = p.speed_plot.getViewBox()
    ranges = []
    for i in range(1, 601):  # a 1,200-token answer whose speed climbs from 20 to 44 tok/s
        st = _stats(i)
        st.decode_seconds = st.generated / (20 + 0.04 * i)
        p.update_stats(st)
        p._update_charts(st)  # as the repaints do, every update here
        (x0, x1), (y0, y1) = vb.viewRange()
        assert x1 >= p._xs[-1] and y1 >= max(p._ys) and y1 >= 30.0  # every point, and the reference, in view
        if not ranges or ranges[-1] != (x1, y1):
            ranges.append((x1, y1))
    assert len(ranges) <= 8, ranges  # 64 -> 128 -> ... -> 2048 tokens, and the speed a few times
    assert [x for x, _ in ranges] == sorted(x for x, _ in ranges)  # they only grow
    final = _stats(600)
    final.decode_seconds = final.generated / 44.0
    p.update_stats(final, live=False)
    qtbot.waitUntil(lambda: vb.viewRange()[0][1] < 1.2 * p._xs[-1])  # the finished answer fills the chart
    p.close()


def test_the_memory_group_shows_the_drafts_share_only_with_a_draft(qtbot):
    """Target alone, the line with the draft's share was an empty gap in the group."""
    from specdesk.system.memory import MemoryReport, ModelMemory

    p = StatsPanel()
    qtbot.addWidget(p)
    p.show()
    t = ModelMemory("target", "t.gguf", weights_bytes=900 << 20, kv_bytes=50 << 20, n_ctx=2048, n_gpu_layers=0)
    d = ModelMemory("draft", "d.gguf", weights_bytes=90 << 20, kv_bytes=10 << 20, n_ctx=2048, n_gpu_layers=0)
    p.set_memory(MemoryReport((t,), rss_bytes=1 << 30, gpus=(), gpu_status="no NVIDIA GPU"))
    assert not p.mem_share.isVisible() and p.mem_draft.text() == "draft: none loaded"
    p.set_memory(MemoryReport((t, d), rss_bytes=1 << 30, gpus=(), gpu_status="no NVIDIA GPU"))
    assert p.mem_share.isVisible() and "the draft adds 100 MiB: 10% of the models' memory" in p.mem_share.text()
    p.close()


def test_the_memory_group_shows_a_hybrids_state_and_its_snapshots(qtbot):
    """A hybrid target's recurrent state with the snapshots it keeps to roll back a draft."""
    from specdesk.system.memory import MemoryReport, ModelMemory

    p = StatsPanel()
    qtbot.addWidget(p)
    t = ModelMemory("target", "t.gguf", weights_bytes=900 << 20, kv_bytes=50 << 20, n_ctx=2048, n_gpu_layers=0,
                    state_bytes=170 << 20, snapshot_bytes=160 << 20)
    p.set_memory(MemoryReport((t,), rss_bytes=1 << 30, gpus=(), gpu_status="no NVIDIA GPU"))
    assert "recurrent state 170 MiB, 160 MiB of it snapshots" in p.mem_target.text()
    assert t.total_bytes == (900 + 50 + 170) << 20
    p.close()


def test_the_legend_wraps_rather_than_cut_its_labels(qtbot):
    """Ten entries on a laptop's width: each label is shown whole, on as many rows as
    the width needs (one row had cut them to "transla", "MTP he"); wide, one row."""
    from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget
    from specdesk.ui.chat_view import Legend

    host = QWidget()
    lay = QVBoxLayout(host)
    legend = Legend()
    lay.addWidget(legend)
    lay.addStretch(1)
    qtbot.addWidget(host)
    host.show()
    labels = [lbl for lbl in legend.findChildren(QLabel) if lbl.text()]
    assert len(labels) >= 10
    rows = {}
    for width in (2400, 700, 300):
        host.resize(width, 400)
        QApplication.processEvents()
        for lbl in labels:
            assert lbl.width() >= lbl.sizeHint().width(), (width, lbl.text(), lbl.width())
            assert lbl.mapTo(host, QPoint(lbl.width(), 0)).x() <= host.width(), (width, lbl.text())
        flow = legend.layout()
        rows[width] = len({flow.itemAt(i).geometry().y() for i in range(flow.count())})
        assert legend.height() >= legend.heightForWidth(legend.width()) > 0
    assert rows[2400] == 1 and rows[300] > rows[700] > 1, rows
