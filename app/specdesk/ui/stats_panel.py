"""The side panel: live speculation statistics, charts and memory per model.

Live statistics cost the engine nearly nothing: each step's statistics are kept (a
reference and a chart point, no Qt work) and shown at a bounded rate: figures
every ``REPAINT_MS``, charts every ``CHART_EVERY`` of those, and everything at the
end. A label or a style is set only when it changed. The Qt thread's time per
repaint is recorded in ``repaint_ms``.
"""

from __future__ import annotations

import time
import html
import math
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, QTimer
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import (
    QFrame,
    QGraphicsItem,
    QGridLayout,
    QGroupBox,
    QLabel,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from ..bench.stats import FASTER, SLOWER, WITHIN_NOISE, single_run_band, single_run_verdict
from ..fmt import format_bytes
from ..session.text import chat_verdict_text, slower_reason
from ..speculative.stats import Stats

if TYPE_CHECKING:  # a type only; the front ends reach the engine's types through the session
    from ..session.core import MemoryReport

pg.setConfigOptions(antialias=True, background="w", foreground="#495057")

GREEN = "#2b8a3e"
BLUE = "#1c7ed6"
GREY = "#868e96"
# Live figures are shown at most this often (and at the end): twice a second is as often
# as a person reads a changing number, and on a 2-core machine the Qt thread's painting
# takes its share from the decode (tools/app_vs_cli.py, target alone, 256 tokens: the Qt
# thread used 7.7-8.6% of decode time with the figures at 80 ms and the charts every
# 480 ms, 5.5-6.0% at 500 ms and 1 s). The streamed text keeps its own, faster rate.
REPAINT_MS = 500
# The charts follow every second repaint: painting the two plots was over half the
# panel's Qt-thread time when they followed every third 80 ms repaint.
CHART_EVERY = 2

VERDICT_STYLE = "padding: 6px; border-radius: 4px; background: {};"
# green only beyond the machine's noise; within it, neither gain nor loss
VERDICT_BACKGROUNDS = {FASTER: "#d3f9d8", WITHIN_NOISE: "#f1f3f5", SLOWER: "#ffe3e3"}


def nice_ceiling(x: float) -> float:
    """The smallest round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of
    ten) that is at least ``x`` (> 0): an axis maximum that reads well."""
    if x <= 0:
        return 1.0
    step = 10.0 ** math.floor(math.log10(x))
    for m in (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        if m * step >= x * (1 - 1e-9):
            return m * step
    return 10.0 * step


# One helper for sizes (kept under this name for the views that import it from here).


def decisions_text(st: Stats, top: int = 3) -> str:
    """Why the steps drafted or did not: the most frequent kinds of decision."""
    if not st.decisions:
        return ""
    ranked = sorted(st.decisions.items(), key=lambda kv: -kv[1])[:top]
    return "why: " + " · ".join(f"{k} ×{n}" for k, n in ranked)


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

    def paintEvent(self, event) -> None:
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
        if text != self.value.text():
            self.value.setText(text)


class StatsPanel(QFrame):
    # one run's repeat-to-repeat spread on this machine, once a comparison measured it
    _run_noise: float | None = None

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("statsPanel")
        self.setMinimumWidth(300)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 8)
        lay.setSpacing(8)
        self._build_figures(lay)
        self._build_notes(lay)
        self._build_charts(lay)
        self._build_memory(lay)
        lay.addStretch(1)
        self._init_state()

    def _build_figures(self, lay: QVBoxLayout) -> None:
        """The verdict against target alone, and the answer's figures."""
        self.verdict = QLabel("No answer yet.")
        self.verdict.setObjectName("verdict")
        self.verdict.setWordWrap(True)
        self._verdict_bg = "#f1f3f5"
        self.verdict.setStyleSheet(VERDICT_STYLE.format(self._verdict_bg))
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

    def _build_notes(self, lay: QVBoxLayout) -> None:
        """Where the time went, why the steps drafted, and auto's estimate."""
        self.time_split = QLabel("")
        self.time_split.setObjectName("timeSplit")
        self.time_split.setStyleSheet("color:#495057; font-size: 11px;")
        self.time_split.setWordWrap(True)
        lay.addWidget(self.time_split)
        # why the controller drafted or did not (auto's decisions, counted over the answer)
        self.decisions = QLabel("")
        self.decisions.setObjectName("decisions")
        self.decisions.setStyleSheet("color:#495057; font-size: 11px;")
        self.decisions.setWordWrap(True)
        self.decisions.setToolTip(
            "Why each step drafted or not: 'bound<1' = even a draft that is always right cannot pay at the costs "
            "measured here; 'catch-up too dear' = the draft would first have to catch up on more than it could win; "
            "'probe' = a try to measure; 'by cost model' = the draft length with the best predicted speed."
        )
        lay.addWidget(self.decisions)
        # auto's current estimate: drafting against target alone, per token, and why
        self.auto_estimate = QLabel("")
        self.auto_estimate.setObjectName("autoEstimate")
        self.auto_estimate.setStyleSheet("color:#495057; font-size: 11px;")
        self.auto_estimate.setWordWrap(True)
        self.auto_estimate.setToolTip(
            "auto drafts only while drafting has been measured cheaper per emitted token than target alone, "
            "each with its 90% interval, over its own recent steps (everything counted: draft, catch-up, verify, "
            "rollback, Python). Until that is decided it tries drafting within a budget of 2.5% of the answer's time."
        )
        self.auto_estimate.setVisible(False)
        lay.addWidget(self.auto_estimate)

    def _build_charts(self, lay: QVBoxLayout) -> None:
        """Tokens/s over the answer, with target alone's line, and acceptance by draft position."""
        self.speed_plot = pg.PlotWidget()
        self.speed_plot.setObjectName("speedPlot")
        self.speed_plot.setFixedHeight(180)
        self.speed_plot.setTitle("tokens/s over the answer", size="9pt")
        self.speed_plot.setLabel("bottom", "tokens generated")
        self.speed_plot.showGrid(x=True, y=True, alpha=0.2)
        self.speed_plot.setMouseEnabled(x=False, y=False)
        self.speed_plot.hideButtons()
        self.speed_curve = self.speed_plot.plot([], [], pen=pg.mkPen(BLUE, width=2), name="this answer", antialias=False)
        self.ref_line = pg.InfiniteLine(angle=0, pen=pg.mkPen(GREY, width=1.5, style=Qt.PenStyle.DashLine),
                                        label="target alone {value:.1f}", labelOpts={"position": 0.02, "color": GREY,
                                                   "anchors": [(0, 0), (0, 0)]})  # left-aligned under the line: never cut
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
        for plot in (self.speed_plot, self.pos_plot):
            for name in ("left", "bottom"):
                # An axis draws its ticks, labels and grid lines (which span the plot) again at
                # every repaint of the plot, ~2 ms each here: cached as a pixmap, it is drawn
                # again only when its range or size changes (an update invalidates the cache).
                plot.getAxis(name).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)

    def _build_memory(self, lay: QVBoxLayout) -> None:
        """Each model's memory, their shares, the process and the devices."""
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
        self.mem_devices = QLabel("devices: –")
        self.mem_devices.setObjectName("memDevices")
        for w in (self.mem_target, self.mem_draft, self.share, self.mem_share, self.mem_rss, self.mem_vram, self.mem_devices):
            ml.addWidget(w)
        for w in (self.mem_target, self.mem_draft, self.mem_share, self.mem_rss, self.mem_vram, self.mem_devices):
            w.setWordWrap(True)
            w.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        lay.addWidget(mem)

    def _init_state(self) -> None:
        """What is shown, and the timer that shows it at a bounded rate."""
        self._reference: float | None = None
        self._reference_how = "measured"
        self._xs: list[float] = []
        self._ys: list[float] = []
        self._stats: Stats | None = None
        self._shown: tuple[int, bool] | None = None  # the statistics on screen (id, live)
        self._live = True
        self._flushes = 0
        self._charted = 0  # chart points on screen
        self._speed_range: tuple[float, float] | None = None  # the live speed chart's (x, y) maxima
        self._bars: tuple = ()
        self._pos_range: float | None = None
        self._repaint = QTimer(self)
        self._repaint.setSingleShot(True)
        self._repaint.setInterval(REPAINT_MS)
        self._repaint.timeout.connect(self.flush)
        self.repaint_ms: deque[float] = deque(maxlen=4096)  # Qt-thread milliseconds per flush
        self._empty_ranges()

    def _empty_ranges(self) -> None:
        """Axes that read sensibly before any data (not pyqtgraph's 0..1)."""
        self.speed_plot.setXRange(0, 100, padding=0)
        self.speed_plot.setYRange(0, 20, padding=0)
        self.pos_plot.setXRange(0.4, 4.6, padding=0)

    # -- updates ---------------------------------------------------------------------

    def reset(self) -> None:
        self._repaint.stop()
        self._xs, self._ys = [], []
        self._stats = None
        self._shown = None
        self._flushes = 0
        self._charted = 0
        self._speed_range = None
        self._bars = ()
        self.speed_curve.setData([], [])
        self._empty_ranges()
        self._pos_range = None
        self.decisions.setText("")
        self.set_estimate("")
        self.verdict.setText("Generating…")

    def set_estimate(self, text: str) -> None:
        """auto's current estimate in words ("" hides it: a fixed k, or no answer yet)."""
        if text != self.auto_estimate.text():
            self.auto_estimate.setText(text)
        self.auto_estimate.setVisible(bool(text))

    def set_reference(self, tokens_per_second: float | None, how: str = "measured") -> None:
        """Target alone's speed for the verdict and the chart's line: ``how`` is
        "measured" (a comparison or a plain answer) or "estimated" (from the single
        target steps this session timed)."""
        self._reference = tokens_per_second
        self._reference_how = how
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

    def set_noise(self, run_to_run: float | None) -> None:
        """How far one run's speed moves from repeat to repeat on this machine (a
        fraction, from a comparison): the verdict calls an answer faster or slower
        only beyond what that noise allows one answer."""
        self._run_noise = run_to_run
        self._update_verdict(live=False)

    def update_stats(self, st: Stats, live: bool = True) -> None:
        """Live statistics of one step are shown at the next repaint; final ones
        (``live=False``) at once."""
        self._stats = st
        self._live = live
        tps = st.tokens_per_second
        if tps is not None and live:
            self._xs.append(st.generated)
            self._ys.append(tps)
        if live:
            if not self._repaint.isActive():
                self._repaint.start()
        else:
            self.flush()

    def flush(self) -> None:
        """Show the latest statistics (and, every CHART_EVERY repaints or at the end,
        the charts)."""
        self._repaint.stop()
        st, live = self._stats, self._live
        if st is None or self._shown == (id(st), live):
            return
        t0 = time.perf_counter()
        self._shown = (id(st), live)
        self._flushes += 1
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
        why = decisions_text(st)
        if why != self.decisions.text():
            self.decisions.setText(why)
        if not live or self._flushes % CHART_EVERY == 1:
            self._update_charts(st, live)
        self._update_verdict(live)
        self.repaint_ms.append((time.perf_counter() - t0) * 1000.0)

    def _update_charts(self, st: Stats, live: bool = True) -> None:
        if len(self._xs) != self._charted:
            self._charted = len(self._xs)
            self.speed_curve.setData(self._xs, self._ys)
            if live:
                self._live_ranges()
        if not live and self._xs:
            self._speed_range = None
            self.speed_plot.enableAutoRange()  # the finished answer fills the chart
        rates = st.acceptance_per_position
        xs = [i + 1 for i, r in enumerate(rates) if r is not None]
        hs = [r for r in rates if r is not None]
        if (xs, hs) != self._bars:
            self._bars = (xs, hs)
            self.pos_bars.setOpts(x=xs, height=hs, width=0.7)
            if xs and max(xs) != self._pos_range:
                self._pos_range = max(xs)
                self.pos_plot.setXRange(0.4, max(xs) + 0.6, padding=0)

    def _live_ranges(self) -> None:
        """The speed chart's ranges while an answer runs: stepped (the tokens axis
        doubles, the speed axis rounds up to a round number with headroom), so they
        change a few times an answer rather than at every update (a finished answer
        fills the chart). An axis draws its
        ticks and the grid again whenever its range changes, which was most of the
        panel's painting, on the cores the decode runs on."""
        x = max(self._xs[-1], 1.0)
        y = max(max(self._ys), self._reference or 0.0)
        rng = self._speed_range
        if rng is not None and x <= rng[0] and y <= rng[1]:
            return
        xmax = 64.0
        while xmax < x:
            xmax *= 2
        ymax = nice_ceiling(1.1 * y)
        if rng is not None:
            xmax, ymax = max(xmax, rng[0]), max(ymax, rng[1])
        self._speed_range = (xmax, ymax)
        self.speed_plot.setXRange(0, xmax, padding=0)
        self.speed_plot.setYRange(0, ymax, padding=0)

    def _update_verdict(self, live: bool) -> None:
        st = self._stats
        if st is None or st.tokens_per_second is None:
            return
        tps = st.tokens_per_second
        if self._reference:
            ratio = tps / self._reference
            band = single_run_band(self._run_noise)
            verdict = single_run_verdict(ratio, band)
            text = chat_verdict_text(ratio, band, verdict, self._reference, self._reference_how, live,
                                     slower_reason(st) if verdict == SLOWER else "")
            bg = VERDICT_BACKGROUNDS[verdict]
        else:
            prefix = "So far: " if live else ""
            text, bg = f"{prefix}{tps:.1f} tok/s. No target-alone reference yet: run a comparison.", "#f1f3f5"
        if text != self.verdict.text():
            self.verdict.setText(text)
        if bg != self._verdict_bg:  # a style sheet re-polishes the widget: only on a change
            self._verdict_bg = bg
            self.verdict.setStyleSheet(VERDICT_STYLE.format(bg))

    def set_devices(self, devices: Sequence, gpu_offload: bool) -> None:
        """The devices llama.cpp can use (every backend: CUDA, Vulkan, Metal, HIP, RPC), with their memory."""
        def one(d) -> str:
            if getattr(d, "is_remote", False):
                where = f"{html.escape(d.name)} (remote, {html.escape(d.description)})"
                if getattr(d, "error", ""):
                    return f"{where}: unreachable"
                return f"{where}: {format_bytes(d.free_bytes)} free of {format_bytes(d.total_bytes)}"
            return f"{html.escape(d.name)} ({d.kind}): {format_bytes(d.free_bytes)} free of {format_bytes(d.total_bytes)}"

        lines = [one(d) for d in devices]
        text = "devices: " + ("; ".join(lines) if lines else "none reported")
        if not gpu_offload:
            text += " · this llama.cpp has no GPU backend: GPU layers have no effect"
        self.mem_devices.setText(text)
        self.mem_devices.setToolTip("\n".join(f"{d.name}: {d.description} ({d.backend})" for d in devices))

    def set_memory(self, rep: MemoryReport) -> None:
        t, d = rep.model("target"), rep.model("draft")
        def line(m) -> str:
            parts = [f"weights {format_bytes(m.weights_bytes)}"]
            if m.repack_bytes:
                parts.append(f"repacked {format_bytes(m.repack_bytes)}")
            parts.append(f"KV {format_bytes(m.kv_bytes)} ({m.n_ctx} ctx)")
            if getattr(m, "state_bytes", 0):  # a hybrid model: its recurrent state, with the rollback's snapshots
                snap = f", {format_bytes(m.snapshot_bytes)} of it snapshots" if m.snapshot_bytes else ""
                parts.append(f"recurrent state {format_bytes(m.state_bytes)}{snap}")
            if m.compute_bytes:
                parts.append(f"compute {format_bytes(m.compute_bytes)}")
            text = " + ".join(parts)
            if m.vram_bytes:
                text += f"; {format_bytes(m.vram_bytes)} of it on the GPU"
            if getattr(m, "remote_bytes", 0):
                text += f"; {format_bytes(m.remote_bytes)} of it on RPC servers"
            if getattr(m, "where", ""):  # on a build that offloads: where its layers are
                text = f"{html.escape(m.where)}<br>{text}"
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
        self.mem_share.setText("" if share is None else f"the draft adds {format_bytes(d.total_bytes)}: {100 * share:.0f}% of the models' memory")
        self.mem_share.setVisible(share is not None)  # no draft: no empty line in the group
        self.mem_rss.setText(f"process RSS: {format_bytes(rep.rss_bytes)}")
        if rep.gpus:
            g = rep.gpus[0]
            mine = f", this process {format_bytes(g.process_bytes)}" if g.process_bytes is not None else ""
            self.mem_vram.setText(f"VRAM ({g.name}): {format_bytes(g.used_bytes)} / {format_bytes(g.total_bytes)}{mine}")
        else:
            self.mem_vram.setText("VRAM: no GPU" if rep.gpu_status == "no NVIDIA GPU" else f"VRAM: {rep.gpu_status}")
