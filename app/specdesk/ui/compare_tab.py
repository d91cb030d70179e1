"""The Compare tab: a view of one comparison (:func:`specdesk.bench.comparison.run_comparison`,
the engine ``specdesk bench`` runs too).

Pick prompts (one of your own, or a suite), configurations and how sure to be: by
default the comparison runs *until sure*, adding interleaved repeats until every
configuration's 95% interval is within the target (or a repeat or time budget is
spent), with progress ("repeat 4 of at most 10; …") and cancel. The table shows
tokens/s, the paired speedup with its interval and verdict (green only when the
whole interval is above 1, "within noise" as such), the advisor's prediction,
acceptance, tokens per step, the draft's extra memory and identity at T=0 (with the
kernel drift that bounds it); the chart draws the intervals as error bars; the
answers sit side by side and replay at the speed each was produced
(:mod:`specdesk.ui.replay`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..bench.comparison import ComparisonOptions, ComparisonResult, run_comparison
from ..bench.configs import parse_configs, proposer_of, split_name
from ..bench.report import write_report
from ..bench.rows import ConfigRow, rows_of
from ..bench.runner import BenchOptions, UntilSure
from ..bench.suites import Prompt, Suite, describe_builtin, load_file, load_suite
from ..errors import SpecDeskError
from ..fmt import format_bytes
from ..speculative.proposers import registry
from ..session.text import (
    claim_text,
    drift_table_text,
    identity_text,
    memory_buys_text,
    noise_text,
    predicted_cell,
    prediction_text,
    prediction_verdict_label,
    speed_verdict_text,
    speedup_text,
    stopping_text,
    VERDICT_LABELS,
)
from .replay import RaceView
from .stats_panel import BLUE, GREY
from .tasks import Task

log = logging.getLogger(__name__)

#: The configurations offered as check boxes, and those ticked at first: the registry's presets.
CUSTOM_PROMPT = "(your prompt below)"

# A speedup's colour follows its verdict: green only when the whole interval is above 1.
VERDICT_COLOURS = {"faster": "#2b8a3e", "slower": "#c92a2a", "within-noise": "#868e96"}
VERDICT_BARS = {"faster": "#69db7c", "slower": "#ffa8a8", "within-noise": "#ced4da"}
COLUMNS = ["config", "tok/s", "speedup (95%)", "verdict", "predicted", "accepted", "tok/step", "+memory", "same at T=0"]
COLUMN_TIPS = ["", "decode tokens per second", "tok/s against target alone, paired per repeat: the geometric mean "
               "and its 95% interval", "faster or slower only when the whole interval is on one side of 1×",
               "the advisor's predicted speedup", "acceptance rate of drafted tokens",
               "tokens per target step (1 for target alone)", "memory the draft adds",
               "whether the output equals target alone's at temperature 0"]
SPEEDUP, VERDICT, PREDICTED, MEMORY, IDENTITY = 2, 3, 4, 7, 8


class CompareTab(QWidget):
    # the finished benchmark result dict (ComparisonResult.to_dict())
    finished = Signal(object)
    # tokens/s of target alone, for the chat's reference line: (target path, tok/s)
    reference_measured = Signal(object, float)
    # how far one run's speed moves from repeat to repeat here (a fraction), for the chat's verdict
    noise_measured = Signal(float)
    error = Signal(str)
    # emitted whenever a run ends, however it ended
    stopped = Signal()
    download_requested = Signal(str, str)  # (repo, file): a better quant of the target to download

    def __init__(self, session_provider, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("compareTab")
        self._session = session_provider
        self._task: Task | None = None
        self._handled = True  # the last comparison's outcome has been handled
        self.comparison: ComparisonResult | None = None
        self.result: dict | None = None
        self._published: dict | None = None
        self._suite_file: str | None = None
        root = QHBoxLayout(self)
        root.addWidget(self._build_controls())
        root.addWidget(self._build_results(), 1)

    # -- layout -------------------------------------------------------------------------------

    def _build_controls(self) -> QWidget:
        """One column that scrolls when the screen is short (1280x720)."""
        controls = QWidget()
        cl = QVBoxLayout(controls)
        cl.setContentsMargins(0, 6, 4, 0)  # room for the first group box title
        cl.addWidget(self._build_prompts())
        cl.addWidget(self._build_configs())
        cl.addWidget(self._build_run())
        # Run, Cancel, Save, the progress and the status stay in view below the form,
        # which scrolls on a small screen
        pinned = QWidget()
        pl = QVBoxLayout(pinned)
        pl.setContentsMargins(0, 4, 4, 0)
        row = QHBoxLayout()
        self.run_btn = QPushButton("Run comparison")
        self.run_btn.setObjectName("runCompareButton")
        self.run_btn.clicked.connect(self.start)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.setObjectName("cancelCompareButton")
        self.cancel_btn.clicked.connect(self.cancel)
        self.cancel_btn.setEnabled(False)
        self.save_btn = QPushButton("Save report…")
        self.save_btn.setObjectName("saveReportButton")
        self.save_btn.clicked.connect(self.save_report_dialog)
        self.save_btn.setEnabled(False)
        for b in (self.run_btn, self.cancel_btn, self.save_btn):
            row.addWidget(b)
        pl.addLayout(row)
        self.progress = QProgressBar()
        self.progress.setObjectName("compareProgress")
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        pl.addWidget(self.progress)
        self.status = QLabel("Load a pair, choose prompts and configurations, then run.")
        self.status.setObjectName("compareStatus")
        self.status.setWordWrap(True)
        pl.addWidget(self.status)
        self.advice = self._note("adviceLabel", "padding:6px; background:#f1f3f5; border-radius:4px;")
        cl.addWidget(self.advice)
        self.quant_btn = QPushButton("Download…")
        self.quant_btn.setObjectName("downloadQuantButton")
        self.quant_btn.setVisible(False)
        self.quant_btn.clicked.connect(
            lambda: self._published and self.download_requested.emit(self._published["repo"], self._published["file"]))
        cl.addWidget(self.quant_btn)
        self.exactness = self._note("exactnessLabel", "padding:6px; background:#f8f9fa; border-radius:4px; color:#343a40;")
        cl.addWidget(self.exactness)
        cl.addStretch(1)
        scroll = QScrollArea()
        scroll.setObjectName("compareControls")
        scroll.setWidget(controls)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        left = QWidget()
        left.setObjectName("compareLeft")
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.setSpacing(0)
        ll.addWidget(scroll, 1)
        ll.addWidget(pinned)
        left.setFixedWidth(340)
        return left

    @staticmethod
    def _note(name: str, style: str) -> QLabel:
        label = QLabel("")
        label.setObjectName(name)
        label.setWordWrap(True)
        label.setStyleSheet(style)
        label.setVisible(False)
        return label

    def _build_prompts(self) -> QGroupBox:
        pbox = QGroupBox("Prompts")
        pl = QVBoxLayout(pbox)
        self.source = QComboBox()
        self.source.setObjectName("compareSource")
        self.source.addItem(CUSTOM_PROMPT, None)
        try:
            for name, n, desc in describe_builtin():
                self.source.addItem(f"suite: {name} ({n} prompts)", name)
                self.source.setItemData(self.source.count() - 1, desc, Qt.ItemDataRole.ToolTipRole)
            self.source.addItem("suite: all", "all")
        except SpecDeskError as e:
            log.warning("built-in suites unavailable: %s", e)
        self.source.addItem("suite from a file…", "__file__")
        self.source.currentIndexChanged.connect(self._source_changed)
        pl.addWidget(self.source)
        self.prompt = QPlainTextEdit()
        self.prompt.setObjectName("comparePrompt")
        self.prompt.setPlaceholderText("A prompt to compare on, e.g. rewrite a function you pasted here.")
        self.prompt.setPlainText("Write a Python function that checks whether a number is prime.")
        self.prompt.setMaximumHeight(110)
        pl.addWidget(self.prompt)
        return pbox

    def _build_configs(self) -> QGroupBox:
        cbox = QGroupBox("Configurations (target alone always runs)")
        cg = QGridLayout(cbox)
        self.config_boxes: dict[str, QCheckBox] = {}
        presets = registry.PRESETS  # as the registry's rows offer them now (a kind registered late too)
        for i, name in enumerate(presets):
            b = QCheckBox(name)
            b.setChecked(name in registry.CHECKED)
            self.config_boxes[name] = b
            cg.addWidget(b, i // 2, i % 2)
        self.extra_configs = QLineEdit()
        self.extra_configs.setObjectName("extraConfigs")
        self.extra_configs.setPlaceholderText("more, e.g. draft:k=6,ngram:k=8")
        cg.addWidget(self.extra_configs, (len(presets) + 1) // 2, 0, 1, 2)
        return cbox

    def _build_run(self) -> QGroupBox:
        obox = QGroupBox("Run")
        of = QFormLayout(obox)
        self.until_sure = QCheckBox("run until sure")
        self.until_sure.setObjectName("untilSure")
        self.until_sure.setToolTip("Add interleaved repeats until every configuration's 95% interval is within the "
                                   "target, or the repeat or time budget is spent")
        self.until_sure.setChecked(True)
        of.addRow(self.until_sure)
        self.sure_within = QDoubleSpinBox()
        self.sure_within.setObjectName("sureWithin")
        self.sure_within.setRange(0.5, 25.0)
        self.sure_within.setSingleStep(0.5)
        self.sure_within.setValue(3.0)
        self.sure_within.setPrefix("±")
        self.sure_within.setSuffix(" %")
        of.addRow("Sure within", self.sure_within)
        self.max_repeats = self._spin("maxRepeats", 2, 50, 10)
        of.addRow("At most repeats", self.max_repeats)
        self.time_budget = self._spin("timeBudget", 0, 240, 10)
        self.time_budget.setSuffix(" min")
        self.time_budget.setSpecialValueText("no limit")
        self.time_budget.setToolTip("Start no repeat that would end after this (0: no limit)")
        of.addRow("Time budget", self.time_budget)
        self.repeats = self._spin("repeats", 1, 50, 2)
        of.addRow("Repeats", self.repeats)
        self.until_sure.toggled.connect(self._mode_changed)
        self._mode_changed(True)
        self.max_tokens = self._spin("maxTokens", 8, 4096, 96)
        of.addRow("Max tokens", self.max_tokens)
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setToolTip("At 0 the outputs must match target alone; SpecDesk checks and explains")
        of.addRow("Temperature", self.temperature)
        self.seed = self._spin("compareSeed", 0, 2**31 - 1, 0)
        self.seed.setToolTip("Repeat r samples with seed + r (at temperature 0 it changes nothing)")
        of.addRow("Seed", self.seed)
        self.warmup = QCheckBox("warm up first")
        self.warmup.setToolTip("Run every configuration once, untimed, before the timed repeats")
        self.warmup.setChecked(True)
        of.addRow(self.warmup)
        self.use_advisor = QCheckBox("predict with the advisor (~20 s)")
        self.use_advisor.setToolTip("Measures this machine's step, verify and draft costs first, then predicts each configuration's speedup")
        self.use_advisor.setChecked(True)
        of.addRow(self.use_advisor)
        return obox

    @staticmethod
    def _spin(name: str, lo: int, hi: int, value: int) -> QSpinBox:
        s = QSpinBox()
        s.setObjectName(name)
        s.setRange(lo, hi)
        s.setValue(value)
        return s

    def _mode_changed(self, until_sure: bool) -> None:
        for w in (self.sure_within, self.max_repeats, self.time_budget):
            w.setEnabled(until_sure)
        self.repeats.setEnabled(not until_sure)

    def _build_results(self) -> QSplitter:
        results = QSplitter(Qt.Orientation.Vertical)
        top = QWidget()
        tl = QHBoxLayout(top)
        tl.setContentsMargins(0, 0, 0, 0)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("compareTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        for col, tip in enumerate(COLUMN_TIPS):
            if tip:
                self.table.horizontalHeaderItem(col).setToolTip(tip)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        hh = self.table.horizontalHeader()
        hh.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        hh.setStretchLastSection(True)
        self.table.setMinimumWidth(160)
        tl.addWidget(self.table, 3)
        self.chart = pg.PlotWidget()
        self.chart.setObjectName("speedupChart")
        # two short lines: the chart is at most 230 px wide, and one line was cut at its right
        self.chart.setTitle("speedup, 95% interval<br>blue: predicted", size="9pt")
        self.chart.setMouseEnabled(x=False, y=False)
        self.chart.hideButtons()
        self.chart.setMinimumWidth(180)
        self.chart.setMaximumWidth(230)  # the table's nine columns come first on a 1280-pixel screen
        tl.addWidget(self.chart, 0)
        results.addWidget(top)
        self.race = RaceView()
        # the answers side by side (one column per configuration), as the tests and tools find them
        self.answer_split = self.race.answer_split
        self.answer_prompt = self.race.prompt
        results.addWidget(self.race)
        results.setSizes([300, 400])
        return results

    # -- inputs -----------------------------------------------------------------------------

    def _source_changed(self, _i: int) -> None:
        data = self.source.currentData()
        if data == "__file__":
            path, _ = QFileDialog.getOpenFileName(self, "A prompt suite", str(Path.home()), "Prompt files (*.jsonl *.json *.txt);;All files (*)")
            if path:
                self._suite_file = path
                self.source.setItemText(self.source.currentIndex(), f"file: {Path(path).name}")
            else:
                self.source.setCurrentIndex(0)
        self.prompt.setEnabled(self.source.currentData() is None)

    def selected_configs(self) -> str:
        names = [registry.BASELINE] + [n for n, b in self.config_boxes.items() if b.isChecked()]
        extra = self.extra_configs.text().strip()
        if extra:
            names += [x for x in extra.split(",") if x.strip()]
        return ",".join(names)

    def suites(self):
        data = self.source.currentData()
        if data is None:
            text = self.prompt.toPlainText().strip()
            if not text:
                raise SpecDeskError("the prompt is empty")
            return [Suite("your prompt", (Prompt("prompt", text, "your prompt"),), None, "")]
        if data == "__file__":
            if not self._suite_file:
                raise SpecDeskError("choose a prompt file first")
            return [load_file(Path(self._suite_file))]
        return load_suite(data)

    def options(self, has_draft: bool) -> ComparisonOptions:
        """The comparison the form describes."""
        until = None
        if self.until_sure.isChecked():
            minutes = self.time_budget.value()
            until = UntilSure(half_width=self.sure_within.value() / 100.0, max_repeats=self.max_repeats.value(),
                              seconds=60.0 * minutes if minutes else None)
        bench = BenchOptions(repeats=self.repeats.value(), max_tokens=self.max_tokens.value(),
                             temperature=round(self.temperature.value(), 3), seed=self.seed.value(),
                             warmup=self.warmup.isChecked(), until_sure=until)
        return ComparisonOptions(bench=bench, advisor=self.use_advisor.isChecked() and has_draft)

    # -- running ----------------------------------------------------------------------------

    # Running lasts until the comparison's outcome has been handled on this thread, as
    # the window's answers and loads do: its thread ends a moment before or after its
    # result arrives, and the window's state must not depend on which comes first.
    @property
    def running(self) -> bool:
        return self._task is not None and not self._handled

    @property
    def task(self):
        """The comparison's task while one runs or last ran (None before the first)."""
        return self._task

    def set_enabled_for(self, session_loaded: bool, busy_elsewhere: bool) -> None:
        self.run_btn.setEnabled(session_loaded and not busy_elsewhere and not self.running)

    def start(self) -> None:
        session = self._session()
        if session is None:
            self.error.emit("Load a target model first.")
            return
        try:
            configs = parse_configs(self.selected_configs())
            suites = self.suites()
        except SpecDeskError as e:
            self.error.emit(str(e))
            return
        configs = session.runnable_configs(configs)
        if len(configs) < 2:
            self.error.emit("Choose at least one configuration besides target alone (draft configurations need a draft model).")
            return
        options = self.options(session.drafting_need() is not None)
        task = Task(lambda t: run_comparison(session, suites, configs, options, progress=t.report, cancel=t.is_cancelled),
                    "comparison")
        self._task = task
        self._handled = False
        task.progress.connect(self._on_progress)
        task.succeeded.connect(self._on_done)
        task.failed.connect(self._on_failed)
        task.was_cancelled.connect(lambda: self._finish("cancelled"))
        task.finished.connect(self.stopped.emit)  # the thread has ended: state can be refreshed
        per_repeat = sum(len(p.messages) for s in suites for p in s.prompts) * len(configs)
        what = (f"at most {options.bench.max_repeats} repeats" if options.bench.until_sure
                else f"{options.bench.repeats} repeat{'s' if options.bench.repeats != 1 else ''}")
        self.status.setText(f"running {per_repeat} generations a repeat, {what}…")
        self.progress.setValue(0)
        self.run_btn.setEnabled(False)
        self.cancel_btn.setEnabled(True)
        task.start()

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _on_progress(self, msg: str, frac: float) -> None:
        self.status.setText(msg)
        self.progress.setValue(int(1000 * frac))

    def _finish(self, msg: str) -> None:
        self._handled = True
        self.status.setText(msg)
        self.run_btn.setEnabled(self._session() is not None)
        self.cancel_btn.setEnabled(False)
        self.stopped.emit()

    def _on_failed(self, msg: str) -> None:
        self._finish("failed")
        self.error.emit(msg)

    def _on_done(self, comparison: ComparisonResult | None) -> None:
        if comparison is None:
            self._finish("")
            return
        self.comparison = comparison
        res = comparison.to_dict()
        self.result = res
        self.progress.setValue(1000)
        rows = list(comparison.overall().values())
        self._finish(f"done: {len(res['runs'])} generations. {stopping_text(res.get('stopping'), rows)}")
        self.save_btn.setEnabled(True)
        self.show_result(res)
        tps = comparison.baseline_tps()
        if tps:
            self.reference_measured.emit(Path(res["meta"]["target"]), float(tps))
        noise = (res["summary"].get("noise") or {}).get("run_to_run")
        if noise is not None:
            self.noise_measured.emit(float(noise))
        self.finished.emit(res)

    # -- results ------------------------------------------------------------------------------

    def show_result(self, res: dict) -> None:
        """Show a comparison's result (``ComparisonResult.to_dict()``, or a report read back)."""
        overall = rows_of(res["summary"]["overall"])
        preds = self._predictions(res)
        self.table.setRowCount(len(overall))
        for i, row in enumerate(overall):
            for j, item in enumerate(self._row_items(res, row, preds.get(row.config))):
                self.table.setItem(i, j, item)
        self._draw_chart(overall, preds)
        self._show_advice(res)
        drift = self._drift(res)
        temperature = ((res.get("meta") or {}).get("settings") or {}).get("temperature")
        self.exactness.setText(claim_text(drift, temperature))
        self.exactness.setToolTip(drift_table_text(drift))
        self.exactness.setVisible(True)
        self.race.set_result(res)

    @staticmethod
    def _predictions(res: dict) -> dict[str, dict]:
        """The advisor's prediction per configuration (the loop calibration's, the same
        for every suite): speedup, 95% interval, verdict."""
        by: dict[str, dict] = {}
        for p in (res.get("advisor") or {}).get("predictions") or []:
            if not p.get("turn") and p.get("predicted_speedup") is not None:
                by.setdefault(p["config"], p)
        return by

    def _row_items(self, res: dict, row: ConfigRow, pred: dict | None) -> list[QTableWidgetItem]:
        c, verdict, baseline = row.config, row.verdict, row.baseline
        mem = res.get("memory") or {}
        extra = "—"
        if not baseline and registry.kind(proposer_of(c)).needs_draft:
            extra = f"+{format_bytes(mem.get('extra_ram_bytes'))}"
            if mem.get("extra_vram_bytes"):
                extra += f" (+{format_bytes(mem.get('extra_vram_bytes'))} VRAM)"
        elif not baseline:
            extra = "none (no draft)"
        ident, tip = identity_text(row, res["runs"], self._drift(res), self._temperature(res))
        cells = [
            "target alone" if baseline else c,
            f"{row.median_tps:.1f}" if row.median_tps else "–",
            speedup_text(row),
            VERDICT_LABELS.get(verdict or "", "–"),  # the smallest difference it could see: in the tooltip
            predicted_cell(pred),
            f"{100 * row.acceptance:.0f}%" if row.acceptance is not None else "–",
            f"{row.mean_accepted_length:.2f}" if row.mean_accepted_length else "–",
            extra,
            ident,
        ]
        items = [QTableWidgetItem(text) for text in cells]
        items[IDENTITY].setToolTip(tip)
        items[MEMORY].setToolTip("the draft model's extra memory: RAM (and VRAM where it is offloaded)")
        if pred:
            items[PREDICTED].setToolTip(f"{prediction_verdict_label(pred)}: "
                                        + prediction_text(pred["predicted_speedup"], row, pred.get("predicted_ci")))
        if not baseline:
            why = speed_verdict_text(row)
            items[SPEEDUP].setToolTip(why)
            items[VERDICT].setToolTip(why)
            colour = VERDICT_COLOURS.get(verdict or "")
            if colour:
                items[SPEEDUP].setForeground(pg.mkColor(colour))
                items[VERDICT].setForeground(pg.mkColor(colour))
        return items

    def _show_advice(self, res: dict) -> None:
        adv = res.get("advisor") or {}
        text = adv.get("recommendation") or ""
        up = (adv.get("calibration") or {}).get("quant_upgrade")
        pub = res.get("published_quant")
        if up and "its memory would buy" not in text:  # the advice may have said it
            text += " " + memory_buys_text(up, pub, res.get("published_quant_note"))
        if pub:
            size = f" ({format_bytes(pub['size'])})" if pub.get("size") else ""
            self.quant_btn.setText(f"Download {pub['quant']}{size}…")
            self.quant_btn.setToolTip(f"Open the download dialog on {pub['repo']} with {pub['file']} selected")
        self._published = pub
        self.quant_btn.setVisible(bool(pub))
        rows = rows_of(res["summary"]["overall"])
        text = " ".join(x for x in (text.strip(), stopping_text(res.get("stopping"), rows),
                                    noise_text(res["summary"].get("noise"))) if x)
        self.advice.setText(text)
        self.advice.setVisible(bool(text))

    @staticmethod
    def _temperature(res: dict) -> float | None:
        return ((res.get("meta") or {}).get("settings") or {}).get("temperature")

    @staticmethod
    def _drift(res: dict) -> dict | None:
        d = res.get("drift") or (res.get("advisor") or {}).get("drift")
        return d if isinstance(d, dict) else None

    def _draw_chart(self, overall: list[ConfigRow], preds: dict[str, dict]) -> None:
        """Bars coloured by verdict with their 95% intervals as error bars, and the
        advisor's predictions beside them."""
        self.chart.clear()
        rows = [r for r in overall if not r.baseline and r.speedup]
        if not rows:
            return
        xs = list(range(len(rows)))
        heights = [r.speedup for r in rows]
        brushes = [VERDICT_BARS.get(r.verdict or "", VERDICT_BARS["within-noise"]) for r in rows]
        bx = [x - 0.17 for x in xs]
        self.chart.addItem(pg.BarGraphItem(x=bx, height=heights, width=0.32, brushes=brushes))
        with_ci = [(x, r) for x, r in zip(bx, rows) if r.ci]
        if with_ci:
            ex = [x for x, _ in with_ci]
            ey = [r.speedup for _, r in with_ci]
            top = [r.ci[1] - r.speedup for _, r in with_ci]
            bottom = [r.speedup - r.ci[0] for _, r in with_ci]
            self.chart.addItem(pg.ErrorBarItem(x=np.asarray(ex), y=np.asarray(ey), top=np.asarray(top), bottom=np.asarray(bottom),
                                               beam=0.12, pen=pg.mkPen("#343a40", width=1.5)))
        pxs = [x + 0.17 for x, r in zip(xs, rows) if r.config in preds]
        pys = [preds[r.config]["predicted_speedup"] for r in rows if r.config in preds]
        if pxs:
            self.chart.addItem(pg.BarGraphItem(x=pxs, height=pys, width=0.32, brush=pg.mkBrush(BLUE + "66"), pen=pg.mkPen(BLUE)))
        self.chart.addItem(pg.InfiniteLine(pos=1.0, angle=0, pen=pg.mkPen(GREY, style=Qt.PenStyle.DashLine)))
        ax = self.chart.getAxis("bottom")
        # short tick labels (draft:k=2 -> k=2, draft:auto -> auto, ngram:auto -> ngram) fit a narrow chart
        ax.setTicks([[(x, _tick(r.config)) for x, r in zip(xs, rows)]])
        self.chart.setXRange(-0.6, len(rows) - 0.4, padding=0)
        highs = [r.ci[1] for r in rows if r.ci]
        self.chart.setYRange(0, max(heights + highs + pys + [1.2]) * 1.1)

    # -- report -------------------------------------------------------------------------------

    def save_report(self, out_dir: Path) -> list[Path]:

        if self.result is None:
            raise SpecDeskError("run a comparison first")
        return write_report(self.result, out_dir)

    def save_report_dialog(self) -> None:
        d = QFileDialog.getExistingDirectory(self, "Save the report in", str(Path.home()))
        if not d:
            return
        try:
            paths = self.save_report(Path(d))
        except SpecDeskError as e:
            self.error.emit(str(e))
            return
        self.status.setText(f"saved {len(paths)} files to {d}")


def _tick(config: str) -> str:
    """A short tick label that fits a narrow chart: the default proposer's presets by
    their options (draft:k=2 -> k=2, draft:auto -> auto), another's auto by its name
    (ngram:auto -> ngram)."""
    proposer, options = split_name(config)
    short = options if proposer == registry.DEFAULT and options else config
    return short.replace(":auto", "")
