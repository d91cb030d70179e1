"""The side panel: live speculation statistics, charts and memory per model."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QFrame, QGridLayout, QGroupBox, QLabel, QSizePolicy, QVBoxLayout, QWidget

from ..engine.memory import MemoryReport
from ..speculative.stats import Stats

pg.setConfigOptions(antialias=True, background="w", foreground="#495057")

GREEN = "#2b8a3e"
BLUE = "#1c7ed6"
GREY = "#868e96"


def fmt_bytes(n: int | float | None) -> str:
    if n is None:
        return "n/a"
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    if n >= 2**20:
        return f"{n / 2**20:.0f} MiB"
    return f"{n / 2**10:.0f} KiB"


class ShareBar(QWidget):
    """A horizontal bar split into the target's and the draft's share of memory."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumHeight(14)
        self.setMaximumHeight(14)
        self._parts: list[tuple[float, str]] = []

    def set_parts(self, parts: list[tuple[float, str]]) -> None:
        self._parts = parts
        self.update()

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt API
        p = QPainter(self)
        r = self.rect().adjusted(0, 0, -1, -1)
        p.setPen(QColor("#ced4da"))
        p.setBrush(QColor("#f8f9fa"))
        p.drawRect(r)
        total = sum(v for v, _ in self._parts) or 1.0
        x = float(r.left())
        for v, colour in self._parts:
            w = r.width() * v / total
            p.fillRect(QRectF(x + 1, r.top() + 1, max(0.0, w - 1), r.height() - 1), QColor(colour))
            x += w
        p.end()


class Metric(QWidget):
    def __init__(self, title: str, name: str, tip: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        self.value = QLabel("–")
        self.value.setObjectName(name)
        self.value.setProperty("class", "metricValue")
        self.value.setStyleSheet("font-size: 17px; font-weight: 600; color: #212529;")
        cap = QLabel(title)
        cap.setStyleSheet("color: #868e96; font-size: 11px;")
        lay.addWidget(self.value)
        lay.addWidget(cap)
        self.setToolTip(tip)

    def set(self, text: str) -> None:
        self.value.setText(text)


class StatsPanel(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("statsPanel")
        self.setMinimumWidth(300)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 8)
        lay.setSpacing(8)

        self.verdict = QLabel("No answer yet.")
        self.verdict.setObjectName("verdict")
        self.verdict.setWordWrap(True)
        self.verdict.setStyleSheet("padding: 6px; border-radius: 4px; background: #f1f3f5;")
        lay.addWidget(self.verdict)

        grid = QGridLayout()
        grid.setHorizontalSpacing(14)
        grid.setVerticalSpacing(6)
        self.m_accept = Metric("acceptance", "acceptanceRate", "Accepted draft tokens / drafted tokens")
        self.m_mal = Metric("tokens per step", "meanAcceptedLength",
                            "Mean accepted length per verify step, the bonus/correction token included (as vLLM reports it)")
        self.m_tps = Metric("tokens/s (decode)", "tokensPerSecond", "Generated tokens / decode seconds")
        self.m_pps = Metric("prompt tokens/s", "promptTokensPerSecond", "Prompt tokens evaluated / prompt seconds (reused prefix excluded)")
        self.m_steps = Metric("verify steps", "steps", "Target passes; each checks one draft")
        self.m_gen = Metric("generated", "generated", "Tokens in this answer")
        for i, m in enumerate((self.m_accept, self.m_mal, self.m_tps, self.m_pps, self.m_steps, self.m_gen)):
            grid.addWidget(m, i // 2, i % 2)
        lay.addLayout(grid)
        self.time_split = QLabel("")
        self.time_split.setObjectName("timeSplit")
        self.time_split.setStyleSheet("color:#495057; font-size: 11px;")
        self.time_split.setWordWrap(True)
        lay.addWidget(self.time_split)

        # tokens/s over the answer
        self.speed_plot = pg.PlotWidget()
        self.speed_plot.setObjectName("speedPlot")
        self.speed_plot.setFixedHeight(180)
        self.speed_plot.setTitle("tokens/s over the answer", size="9pt")
        self.speed_plot.setLabel("bottom", "tokens generated")
        self.speed_plot.showGrid(x=True, y=True, alpha=0.2)
        self.speed_plot.setMouseEnabled(x=False, y=False)
        self.speed_plot.hideButtons()
        self.speed_curve = self.speed_plot.plot([], [], pen=pg.mkPen(BLUE, width=2), name="this answer")
        self.ref_line = pg.InfiniteLine(angle=0, pen=pg.mkPen(GREY, width=1.5, style=Qt.PenStyle.DashLine),
                                        label="target alone {value:.1f}", labelOpts={"position": 0.15, "color": GREY})
        self.ref_line.setVisible(False)
        self.speed_plot.addItem(self.ref_line)
        lay.addWidget(self.speed_plot)

        # acceptance per draft position
        self.pos_plot = pg.PlotWidget()
        self.pos_plot.setObjectName("positionPlot")
        self.pos_plot.setFixedHeight(150)
        self.pos_plot.setTitle("acceptance by draft position", size="9pt")
        self.pos_plot.setLabel("bottom", "draft position")
        self.pos_plot.setYRange(0, 1.0, padding=0.05)
        self.pos_plot.setMouseEnabled(x=False, y=False)
        self.pos_plot.hideButtons()
        self.pos_bars = pg.BarGraphItem(x=[], height=[], width=0.7, brush=GREEN)
        self.pos_plot.addItem(self.pos_bars)
        lay.addWidget(self.pos_plot)

        # memory
        mem = QGroupBox("Memory")
        ml = QVBoxLayout(mem)
        ml.setSpacing(4)
        self.mem_target = QLabel("target: –")
        self.mem_target.setObjectName("memTarget")
        self.mem_draft = QLabel("draft: –")
        self.mem_draft.setObjectName("memDraft")
        self.share = ShareBar()
        self.mem_share = QLabel("")
        self.mem_share.setObjectName("memShare")
        self.mem_rss = QLabel("process RSS: –")
        self.mem_rss.setObjectName("memRss")
        self.mem_vram = QLabel("VRAM: –")
        self.mem_vram.setObjectName("memVram")
        for w in (self.mem_target, self.mem_draft, self.share, self.mem_share, self.mem_rss, self.mem_vram):
            ml.addWidget(w)
        for w in (self.mem_target, self.mem_draft, self.mem_share, self.mem_rss, self.mem_vram):
            w.setWordWrap(True)
            w.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        lay.addWidget(mem)
        lay.addStretch(1)

        self._reference: float | None = None
        self._xs: list[float] = []
        self._ys: list[float] = []
        self._stats: Stats | None = None
        self._empty_ranges()

    def _empty_ranges(self) -> None:
        """Axes that read sensibly before any data (not pyqtgraph's 0..1)."""
        self.speed_plot.setXRange(0, 100, padding=0)
        self.speed_plot.setYRange(0, 20, padding=0)
        self.pos_plot.setXRange(0.4, 4.6, padding=0)

    # -- updates ---------------------------------------------------------------------

    def reset(self) -> None:
        self._xs, self._ys = [], []
        self._stats = None
        self.speed_curve.setData([], [])
        self._empty_ranges()
        self.verdict.setText("Generating…")

    def set_reference(self, tokens_per_second: float | None) -> None:
        self._reference = tokens_per_second
        if tokens_per_second:
            # visible first: pyqtgraph's line label only re-formats while shown
            self.ref_line.setVisible(True)
            self.ref_line.setValue(tokens_per_second)
        else:
            self.ref_line.setVisible(False)
        self._update_verdict(live=False)

    @property
    def reference(self) -> float | None:
        return self._reference

    def update_stats(self, st: Stats, live: bool = True) -> None:
        self._stats = st
        ar = st.acceptance_rate
        self.m_accept.set("–" if ar is None else f"{100 * ar:.0f}%")
        mal = st.mean_accepted_length
        self.m_mal.set("–" if mal is None else f"{mal:.2f}")
        tps = st.tokens_per_second
        self.m_tps.set("–" if tps is None else f"{tps:.1f}")
        pps = st.prompt_tokens_per_second
        self.m_pps.set("–" if pps is None else f"{pps:.0f}")
        self.m_steps.set(str(st.steps))
        self.m_gen.set(str(st.generated))
        if st.decode_seconds > 0:
            self.time_split.setText(
                f"decode {st.decode_seconds:.2f} s = draft {st.draft_seconds:.2f} s + verify {st.verify_seconds:.2f} s"
                f" + other {max(0.0, st.decode_seconds - st.draft_seconds - st.verify_seconds):.2f} s"
                f" · Python overhead {100 * (st.overhead_share or 0):.1f}%"
            )
        if tps is not None and live:
            self._xs.append(st.generated)
            self._ys.append(tps)
            self.speed_curve.setData(self._xs, self._ys)
            if len(self._xs) == 1:
                self.speed_plot.enableAutoRange()
        rates = st.acceptance_per_position
        xs = [i + 1 for i, r in enumerate(rates) if r is not None]
        hs = [r for r in rates if r is not None]
        self.pos_bars.setOpts(x=xs, height=hs, width=0.7)
        if xs:
            self.pos_plot.setXRange(0.4, max(xs) + 0.6, padding=0)
        self._update_verdict(live)

    def _update_verdict(self, live: bool) -> None:
        st = self._stats
        if st is None or st.tokens_per_second is None:
            return
        tps = st.tokens_per_second
        prefix = "So far: " if live else ""
        if self._reference:
            ratio = tps / self._reference
            if ratio >= 1.05:
                text, bg = f"{prefix}{ratio:.2f}× target alone — speculation pays here.", "#d3f9d8"
            elif ratio >= 0.95:
                text, bg = f"{prefix}{ratio:.2f}× target alone — about even.", "#fff3bf"
            else:
                text, bg = f"{prefix}{ratio:.2f}× target alone — speculation slows this machine down.", "#ffe3e3"
        else:
            text, bg = f"{prefix}{tps:.1f} tok/s. No target-alone reference yet: run a comparison.", "#f1f3f5"
        self.verdict.setText(text)
        self.verdict.setStyleSheet(f"padding: 6px; border-radius: 4px; background: {bg};")

    def set_memory(self, rep: MemoryReport) -> None:
        t, d = rep.model("target"), rep.model("draft")
        def line(m) -> str:
            parts = [f"weights {fmt_bytes(m.weights_bytes)}"]
            if m.repack_bytes:
                parts.append(f"repacked {fmt_bytes(m.repack_bytes)}")
            parts.append(f"KV {fmt_bytes(m.kv_bytes)} ({m.n_ctx} ctx)")
            if m.compute_bytes:
                parts.append(f"compute {fmt_bytes(m.compute_bytes)}")
            text = " + ".join(parts)
            if m.vram_bytes:
                text += f"; {fmt_bytes(m.vram_bytes)} of it on the GPU"
            return text

        if t:
            self.mem_target.setText(f"<b>target</b>: {line(t)}")
            self.mem_target.setToolTip("Buffers llama.cpp allocated. 'repacked': weights copied into a faster layout for this CPU.")
        else:
            self.mem_target.setText("target: not loaded")
        if d:
            self.mem_draft.setText(f"<b>draft</b>: {line(d)}")
        else:
            self.mem_draft.setText("draft: none loaded")
        parts = []
        if t:
            parts.append((t.total_bytes, BLUE))
        if d:
            parts.append((d.total_bytes, GREEN))
        self.share.set_parts(parts)
        share = rep.draft_share
        self.mem_share.setText("" if share is None else f"the draft adds {fmt_bytes(d.total_bytes)}: {100 * share:.0f}% of the models' memory")
        self.mem_rss.setText(f"process RSS: {fmt_bytes(rep.rss_bytes)}")
        if rep.gpus:
            g = rep.gpus[0]
            mine = f", this process {fmt_bytes(g.process_bytes)}" if g.process_bytes is not None else ""
            self.mem_vram.setText(f"VRAM ({g.name}): {fmt_bytes(g.used_bytes)} / {fmt_bytes(g.total_bytes)}{mine}")
        else:
            self.mem_vram.setText("VRAM: no GPU" if rep.gpu_status == "no NVIDIA GPU" else f"VRAM: {rep.gpu_status}")
