"""The Compare tab: the honest evaluation a user would otherwise do by hand.

Pick prompts (one of your own, or a suite) and configurations; SpecDesk runs them
interleaved against target alone, off the UI thread, and shows tokens/s, the paired
speedup, acceptance, tokens per step, the draft's extra memory, whether the output
is identical at temperature 0 (and why not), the advisor's prediction next to each
measured speedup, and the answers side by side. Next to "identical at T=0" it shows
what exactness means on this machine: the target's kernel drift between single-token
steps and verify batches, measured (or taken from the cache) before the runs.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
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

from ..bench.advisor import advisor_section, calibrate
from ..session import needs_draft_model
from ..session.drift import pair_drift
from ..bench.configs import parse_configs
from ..bench.report import write_report
from ..bench.runner import BenchOptions, SessionTarget, run_bench
from ..bench.suites import Prompt, Suite, describe_builtin, load_file, load_suite
from ..errors import Cancelled, SpecDeskError
from ..library.quants import offer_upgrade
from ..session.text import claim_text, verdict_text
from ..fmt import format_bytes
from .stats_panel import BLUE, GREY
from .tasks import Task

log = logging.getLogger(__name__)

PRESET_CONFIGS = ["draft:k=1", "draft:k=2", "draft:k=4", "draft:auto", "ngram", "ngram+history", "hybrid"]
DEFAULT_ON = {"draft:k=2", "draft:k=4", "draft:auto", "ngram"}
CUSTOM_PROMPT = "(your prompt below)"


class CompareTab(QWidget):
    # the finished benchmark result dict
    finished = Signal(object)
    # tokens/s of target alone, for the chat's reference line: (target path, tok/s)
    reference_measured = Signal(object, float)
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
        self.result: dict | None = None
        self.calibration = None

        root = QHBoxLayout(self)
        # ---- controls: one column that scrolls when the screen is short (1280x720)
        controls = QWidget()
        cl = QVBoxLayout(controls)
        cl.setContentsMargins(0, 6, 4, 0)  # room for the first group box title

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
        self._suite_file: str | None = None
        cl.addWidget(pbox)

        cbox = QGroupBox("Configurations (target alone always runs)")
        cg = QGridLayout(cbox)
        self.config_boxes: dict[str, QCheckBox] = {}
        for i, name in enumerate(PRESET_CONFIGS):
            b = QCheckBox(name)
            b.setChecked(name in DEFAULT_ON)
            self.config_boxes[name] = b
            cg.addWidget(b, i // 2, i % 2)
        self.extra_configs = QLineEdit()
        self.extra_configs.setObjectName("extraConfigs")
        self.extra_configs.setPlaceholderText("more, e.g. draft:k=6,ngram:k=8")
        cg.addWidget(self.extra_configs, (len(PRESET_CONFIGS) + 1) // 2, 0, 1, 2)
        cl.addWidget(cbox)

        obox = QGroupBox("Run")
        of = QFormLayout(obox)
        self.repeats = QSpinBox()
        self.repeats.setRange(1, 20)
        self.repeats.setValue(2)
        of.addRow("Repeats", self.repeats)
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(8, 4096)
        self.max_tokens.setValue(96)
        of.addRow("Max tokens", self.max_tokens)
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setToolTip("At 0 the outputs must match target alone; SpecDesk checks and explains")
        of.addRow("Temperature", self.temperature)
        self.use_advisor = QCheckBox("predict with the advisor (~20 s)")
        self.use_advisor.setToolTip("Measures this machine's step, verify and draft costs first, then predicts each configuration's speedup")
        self.use_advisor.setChecked(True)
        of.addRow(self.use_advisor)
        cl.addWidget(obox)

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
        cl.addLayout(row)
        self.progress = QProgressBar()
        self.progress.setObjectName("compareProgress")
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        cl.addWidget(self.progress)
        self.status = QLabel("Load a pair, choose prompts and configurations, then run.")
        self.status.setObjectName("compareStatus")
        self.status.setWordWrap(True)
        cl.addWidget(self.status)
        self.advice = QLabel("")
        self.advice.setObjectName("adviceLabel")
        self.advice.setWordWrap(True)
        self.advice.setStyleSheet("padding:6px; background:#f1f3f5; border-radius:4px;")
        self.advice.setVisible(False)
        cl.addWidget(self.advice)
        self._published: dict | None = None
        self.quant_btn = QPushButton("Download…")
        self.quant_btn.setObjectName("downloadQuantButton")
        self.quant_btn.setVisible(False)
        self.quant_btn.clicked.connect(
            lambda: self._published and self.download_requested.emit(self._published["repo"], self._published["file"]))
        cl.addWidget(self.quant_btn)
        self.exactness = QLabel("")
        self.exactness.setObjectName("exactnessLabel")
        self.exactness.setWordWrap(True)
        self.exactness.setStyleSheet("padding:6px; background:#f8f9fa; border-radius:4px; color:#343a40;")
        self.exactness.setVisible(False)
        cl.addWidget(self.exactness)
        cl.addStretch(1)
        scroll = QScrollArea()
        scroll.setObjectName("compareControls")
        scroll.setWidget(controls)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setFixedWidth(340)
        root.addWidget(scroll)

        # ---- results
        results = QSplitter(Qt.Orientation.Vertical)
        top = QWidget()
        tl = QHBoxLayout(top)
        tl.setContentsMargins(0, 0, 0, 0)
        self.table = QTableWidget(0, 8)
        self.table.setObjectName("compareTable")
        self.table.setHorizontalHeaderLabels(
            ["config", "tok/s", "speedup", "predicted", "accepted", "tok/step", "+memory", "same at T=0"]
        )
        for col, tip in enumerate(["", "decode tokens per second", "tok/s against target alone",
                                   "the advisor's predicted speedup", "acceptance rate of drafted tokens",
                                   "tokens per target step (1 for target alone)", "memory the draft adds",
                                   "whether the output equals target alone's at temperature 0"]):
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
        self.chart.setTitle("speedup · blue: predicted", size="9pt")
        self.chart.setMouseEnabled(x=False, y=False)
        self.chart.hideButtons()
        self.chart.setMinimumWidth(200)
        self.chart.setMaximumWidth(300)
        tl.addWidget(self.chart, 1)
        results.addWidget(top)

        answers = QWidget()
        al = QVBoxLayout(answers)
        al.setContentsMargins(0, 0, 0, 0)
        arow = QHBoxLayout()
        arow.addWidget(QLabel("Answers side by side for"))
        self.answer_prompt = QComboBox()
        self.answer_prompt.setObjectName("answerPrompt")
        self.answer_prompt.currentIndexChanged.connect(self._show_answers)
        arow.addWidget(self.answer_prompt, 1)
        al.addLayout(arow)
        self.answer_split = QSplitter(Qt.Orientation.Horizontal)
        self.answer_split.setObjectName("answerColumns")
        al.addWidget(self.answer_split, 1)
        results.addWidget(answers)
        results.setSizes([300, 400])
        root.addWidget(results, 1)

    # -- inputs -----------------------------------------------------------------------------

    def _source_changed(self, _i: int) -> None:
        data = self.source.currentData()
        if data == "__file__":
            path, _ = QFileDialog.getOpenFileName(self, "A prompt suite", str(Path.home()), "Prompt files (*.jsonl *.txt);;All files (*)")
            if path:
                self._suite_file = path
                self.source.setItemText(self.source.currentIndex(), f"file: {Path(path).name}")
            else:
                self.source.setCurrentIndex(0)
        self.prompt.setEnabled(self.source.currentData() is None)

    def selected_configs(self) -> str:
        names = ["none"] + [n for n, b in self.config_boxes.items() if b.isChecked()]
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

    # -- running ----------------------------------------------------------------------------

    # Running lasts until the comparison's outcome has been handled on this thread, as
    # the window's answers and loads do: its thread ends a moment before or after its
    # result arrives, and the window's state must not depend on which comes first.
    @property
    def running(self) -> bool:
        return self._task is not None and not self._handled

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
        if session.draft is None:
            configs = [c for c in configs if not c.needs_draft]
        if len(configs) < 2:
            self.error.emit("Choose at least one configuration besides target alone (draft configurations need a draft model).")
            return
        repeats, max_tokens, temp = self.repeats.value(), self.max_tokens.value(), round(self.temperature.value(), 3)
        use_advisor = self.use_advisor.isChecked() and session.draft is not None
        total_runs = sum(len(s.prompts) for s in suites) * repeats * len(configs) + len(configs)

        def work(task: Task):
            cal = None
            if use_advisor:
                cal = calibrate(session, progress=lambda m, f: task.report(m, 0.2 * f), cancel=task.is_cancelled)
                session.auto.costs = copy.deepcopy(cal.costs)
                drift = cal.drift
            else:
                # what "identical" means here: the kernel drift (cached per target setup,
                # machine and llama.cpp build; a few seconds the first time)
                def drift_progress(f: float) -> None:
                    if task.is_cancelled():
                        raise Cancelled("the comparison was cancelled")
                    task.report("measuring the kernel drift of verify batches", 0.1 * f)

                drift = pair_drift(session, progress=drift_progress)

            def prog(done: int, total: int, what: str) -> None:
                base = 0.2 if use_advisor else 0.1
                task.report(f"{done}/{total}: {what}", base + (1 - base) * done / max(1, total))

            res = run_bench(
                SessionTarget(session),
                suites,
                configs,
                BenchOptions(repeats=repeats, max_tokens=max_tokens, temperature=temp),
                progress=prog,
                cancel=task.is_cancelled,
            )
            if cal is not None:
                res["advisor"] = advisor_section(cal, res)
                # the better quant the draft's memory would buy: is it published where the target came from?
                pub, note = offer_upgrade(session.target.spec.path, cal.quant_upgrade, cal.draft_bytes)
                res["published_quant"] = pub.to_dict() if pub else None
                res["published_quant_note"] = note
            if drift is not None:
                res["drift"] = drift.to_dict()
            return res

        def leased(task: Task):
            # the session is freed only after this comparison ends (Session.lease)
            with session.lease():
                return work(task)

        task = Task(leased, "comparison")
        self._task = task
        self._handled = False
        task.progress.connect(self._on_progress)
        task.succeeded.connect(self._on_done)
        task.failed.connect(self._on_failed)
        task.was_cancelled.connect(lambda: self._finish("cancelled"))
        task.finished.connect(self.stopped.emit)  # the thread has ended: state can be refreshed
        self.status.setText(f"running {total_runs} generations…")
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

    def _on_done(self, res: dict | None) -> None:
        if res is None:
            self._finish("")
            return
        self.result = res
        self.progress.setValue(1000)
        self._finish(f"done: {len(res['runs'])} generations")
        self.save_btn.setEnabled(True)
        self.show_result(res)
        base = next((r for r in res["summary"]["overall"] if r["config"] == "none"), None)
        if base and base["median_tps"]:
            self.reference_measured.emit(Path(res["meta"]["target"]), float(base["median_tps"]))
        self.finished.emit(res)

    # -- results ------------------------------------------------------------------------------

    def show_result(self, res: dict) -> None:
        overall = res["summary"]["overall"]
        preds: dict[str, list[float]] = {}
        adv = res.get("advisor") or {}
        for p in adv.get("predictions") or []:
            preds.setdefault(p["config"], []).append(p["predicted_speedup"])
        mem = res.get("memory") or {}
        self.table.setRowCount(len(overall))
        for i, row in enumerate(overall):
            c = row["config"]
            pred = sum(preds[c]) / len(preds[c]) if c in preds else None
            extra = "—"
            if c != "none" and needs_draft_model(c.split(":")[0]):
                extra = f"+{format_bytes(mem.get('extra_ram_bytes'))} RAM"
                if mem.get("extra_vram_bytes"):
                    extra += f", +{format_bytes(mem.get('extra_vram_bytes'))} VRAM"
            elif c != "none":
                extra = "none (no draft model)"
            ident, tip = self._identity(res, row)
            cells = [
                c if c != "none" else "none (target alone)",
                f"{row['median_tps']:.1f}" if row["median_tps"] else "–",
                f"{row['speedup']:.2f}×" if row["speedup"] else "–",
                f"{pred:.2f}×" if pred else "–",
                f"{100 * row['acceptance']:.0f}%" if row["acceptance"] is not None else "–",
                f"{row['mean_accepted_length']:.2f}" if row["mean_accepted_length"] else "–",
                extra,
                ident,
            ]
            for j, text in enumerate(cells):
                it = QTableWidgetItem(text)
                if j == 7 and tip:
                    it.setToolTip(tip)
                if j == 2 and row["speedup"] and c != "none":
                    it.setForeground(pg.mkColor("#2b8a3e" if row["speedup"] >= 1.05 else "#c92a2a" if row["speedup"] < 0.95 else "#495057"))
                self.table.setItem(i, j, it)
        self._draw_chart(overall, preds)
        text = adv.get("recommendation") or ""
        up = (adv.get("calibration") or {}).get("quant_upgrade")
        if up and "better quantization" not in text:
            text += (f" Without the draft, its memory would buy the target at {up['better']} instead of "
                     f"{up['current']}: about {format_bytes(up['better_bytes'])} (+{format_bytes(up['extra_bytes'])}).")
        pub = res.get("published_quant")
        if pub:
            size = f" ({format_bytes(pub['size'])})" if pub.get("size") else ""
            text += f" {pub['repo']} publishes {pub['quant']} as {pub['file']}{size}."
            self.quant_btn.setText(f"Download {pub['quant']}{size}…")
            self.quant_btn.setToolTip(f"Open the download dialog on {pub['repo']} with {pub['file']} selected")
        elif up and res.get("published_quant_note"):
            text += f" ({res['published_quant_note']}.)"
        self._published = pub
        self.quant_btn.setVisible(bool(pub))
        self.advice.setText(text.strip())
        self.advice.setVisible(bool(text.strip()))
        drift = self._drift(res)
        temperature = ((res.get("meta") or {}).get("settings") or {}).get("temperature")
        self.exactness.setText(claim_text(drift, temperature))
        self.exactness.setToolTip(self._drift_table(drift))
        self.exactness.setVisible(True)
        self.answer_prompt.blockSignals(True)
        self.answer_prompt.clear()
        seen = []
        for r in res["runs"]:
            key = (r["suite"], r["prompt_id"])
            if key not in seen:
                seen.append(key)
                self.answer_prompt.addItem(f"{r['suite']} / {r['prompt_id']}", key)
        self.answer_prompt.blockSignals(False)
        self._show_answers()

    @staticmethod
    def _drift(res: dict) -> dict | None:
        d = res.get("drift") or (res.get("advisor") or {}).get("drift")
        return d if isinstance(d, dict) else None

    @staticmethod
    def _drift_table(drift: dict | None) -> str:
        """The drift by batch size, for a tooltip."""
        if not drift:
            return "The kernel drift was not measured."
        lines = [f"Kernel drift by verify batch size ({drift.get('positions')} positions):"]
        for b in drift.get("by_batch") or []:
            lines.append(
                f"  batch {b['batch']}: mean TV {100 * b['tv_mean']:.3f}%, worst {100 * b['tv_max']:.2f}%, "
                f"logits ±{b['logit_diff_max']:.3f}, argmax flips {b['flips']}/{b['positions']}"
            )
        return "\n".join(lines)

    @classmethod
    def _identity(cls, res: dict, row: dict) -> tuple[str, str]:
        drift = cls._drift(res)
        if row["config"] == "none":
            return "baseline", ""
        if not row["compared"]:
            temperature = ((res.get("meta") or {}).get("settings") or {}).get("temperature")
            return "not compared (T > 0)", claim_text(drift, temperature)
        tips = []
        for r in res["runs"]:
            if r["config"] == row["config"] and r["identical"] is False and r.get("divergence"):
                tips.append(f"{r['suite']}/{r['prompt_id']} #{r['repeat'] + 1}: {verdict_text(r['divergence'], drift)}")
        text = f"{row['identical']}/{row['compared']} identical"
        if row["near_ties"]:
            text += f", {row['near_ties']} near-tie"
        if row["mismatches"]:
            text += f", {row['mismatches']} MISMATCH"
        if drift and drift.get("positions"):
            text += f" · drift flips {100 * drift.get('flip_share', 0.0):.2g}%"
        tip = "\n".join(tips[:12])
        if row["near_ties"] and not row["mismatches"]:
            tip += ("\n\nA near-tie: a batched verify pass runs other kernels than a single step, and where the two "
                    "best tokens nearly tie the argmax can flip. Not a bug.")
        tip += "\n\n" + claim_text(drift)
        return text, tip.strip()

    def _draw_chart(self, overall: list[dict], preds: dict[str, list[float]]) -> None:
        self.chart.clear()
        rows = [r for r in overall if r["config"] != "none" and r["speedup"]]
        xs = list(range(len(rows)))
        heights = [r["speedup"] for r in rows]
        brushes = ["#69db7c" if h >= 1.0 else "#ffa8a8" for h in heights]
        if rows:
            self.chart.addItem(pg.BarGraphItem(x=[x - 0.17 for x in xs], height=heights, width=0.32, brushes=brushes))
            pxs = [x + 0.17 for x, r in zip(xs, rows) if r["config"] in preds]
            pys = [sum(preds[r["config"]]) / len(preds[r["config"]]) for r in rows if r["config"] in preds]
            if pxs:
                self.chart.addItem(pg.BarGraphItem(x=pxs, height=pys, width=0.32, brush=pg.mkBrush(BLUE + "66"), pen=pg.mkPen(BLUE)))
            self.chart.addItem(pg.InfiniteLine(pos=1.0, angle=0, pen=pg.mkPen(GREY, style=Qt.PenStyle.DashLine)))
            ax = self.chart.getAxis("bottom")
            # short tick labels (draft:k=2 -> k=2, draft:auto -> auto, ngram:auto -> ngram) fit a narrow chart
            ax.setTicks([[(x, r["config"].replace("draft:", "").replace(":auto", "")) for x, r in zip(xs, rows)]])
            self.chart.setXRange(-0.6, len(rows) - 0.4, padding=0)
            self.chart.setYRange(0, max(heights + [1.2]) * 1.1)

    def _show_answers(self) -> None:
        for i in reversed(range(self.answer_split.count())):
            w = self.answer_split.widget(i)
            w.setParent(None)
            w.deleteLater()
        if self.result is None or self.answer_prompt.currentData() is None:
            return
        suite, pid = self.answer_prompt.currentData()
        for c in self.result["configs"]:
            r = next((x for x in self.result["runs"] if x["suite"] == suite and x["prompt_id"] == pid and x["config"] == c and x["repeat"] == 0), None)
            if r is None:
                continue
            box = QWidget()
            bl = QVBoxLayout(box)
            bl.setContentsMargins(2, 2, 2, 2)
            st = r["stats"]
            head = QLabel(f"<b>{c}</b> · {st['tokens_per_second']:.1f} tok/s" + (f" · {100 * st['acceptance_rate']:.0f}% accepted" if st.get("acceptance_rate") is not None else ""))
            head.setWordWrap(True)  # many columns must fit the window, not widen it
            head.setMinimumWidth(40)
            bl.addWidget(head)
            # code keeps its shape: monospace, one source line per line (scroll sideways)
            view = QPlainTextEdit()
            view.setReadOnly(True)
            view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
            view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
            view.setMinimumWidth(40)
            view.setPlainText(r["text"])
            bl.addWidget(view, 1)
            self.answer_split.addWidget(box)

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
