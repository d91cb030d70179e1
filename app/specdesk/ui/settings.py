"""Chat settings: the values, their persistence (QSettings for the defaults, the
chat database per chat) and the dialog that edits them."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, fields, replace

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ..errors import SpecDeskError
from ..session import GenerationConfig, ModelSpec, default_threads, gpu_build_hint
from ..session.remote import SECURITY_WARNING, parse_endpoints, reinstall_command, rpc_supported
from ..speculative.proposers import registry
from ..speculative.sampling import SamplingParams

log = logging.getLogger(__name__)

#: The proposers a chat chooses from (translated is what draft runs as on a pair of two
#: vocabularies), with their labels.
PROPOSER_LABELS = {name: registry.kind(name).label for name in registry.CHOICES}

# The range of each number's widget in SettingsDialog, (lowest, highest): the dialog is
# built from it, and a stored value outside it falls back to the default (see
# ChatSettings.from_dict). A value the dialog cannot show must never reach a chat: a
# negative seed makes numpy raise on every answer, a top-k past 2**31 - 1 makes
# QSpinBox.setValue overflow.
RANGES: dict[str, tuple[float, float]] = {
    "k": (1, 16),
    "p_min": (0.0, 0.99),
    "temperature": (0.0, 5.0),
    "top_k": (0, 100_000),
    "top_p": (0.01, 1.0),
    "min_p": (0.0, 0.99),
    "seed": (0, 2**31 - 1),
    "max_tokens": (1, 1 << 20),
    "n_ctx": (256, 1 << 20),
    "threads": (0, 256),
    "target_gpu_layers": (-1, 999),
    "draft_gpu_layers": (-1, 999),
}
#: GPU layers "auto" (as many as fit, the target first): the spin box's lowest value, shown as "auto"
AUTO_LAYERS = -1
#: Present in settings stored since GPU layers default to auto; in older ones 0 was the default
LAYERS_FORMAT_KEY = "gpu_layers_auto"


def rpc_error(text: str) -> str | None:
    """Why the RPC servers field cannot be used, or None ("" means no servers)."""
    try:
        parse_endpoints(text)
    except SpecDeskError as e:
        return str(e)
    return None


def _checked(name: str, kind: type, raw: object) -> tuple[object, str | None]:
    """(the value, None) when ``raw`` is a usable value of setting ``name``, else (None, why)."""
    if kind is bool:
        return (raw, None) if isinstance(raw, bool) else (None, "not true or false")
    if kind is str:
        if not isinstance(raw, str):
            return None, "not text"
        if name == "proposer" and raw not in PROPOSER_LABELS:
            return None, f"not one of {', '.join(PROPOSER_LABELS)}"
        if name == "rpc":
            why = rpc_error(raw)
            if why is not None:
                return None, why
        return raw, None
    # numbers: an int field takes only an int, a float field an int or a float; never a bool
    if isinstance(raw, bool) or not isinstance(raw, (int, float) if kind is float else int):
        return None, f"not {'a number' if kind is float else 'a whole number'}"
    lo, hi = RANGES[name]
    if not lo <= raw <= hi:  # NaN fails too
        return None, f"outside {lo}..{hi}"
    return kind(raw), None


def _short(raw: object) -> str:
    text = repr(raw)
    return text if len(text) <= 60 else text[:57] + "..."


# Settings that only take effect after the models are reloaded.
RELOAD_KEYS = ("n_ctx", "threads", "target_gpu_layers", "draft_gpu_layers", "rpc")


@dataclass(frozen=True)
class ChatSettings:
    proposer: str = registry.DEFAULT
    k: int = 4
    auto_k: bool = True
    p_min: float = 0.0
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = 0
    max_tokens: int = 512
    n_ctx: int = 4096
    threads: int = 0  # 0 = physical cores
    target_gpu_layers: int = AUTO_LAYERS  # AUTO_LAYERS: as many as fit (session.offload); 0: none
    draft_gpu_layers: int = AUTO_LAYERS
    rpc: str = ""  # host:port[,host:port...]: RPC servers for the target's layers (the draft stays local)

    def to_dict(self) -> dict:
        return {**asdict(self), LAYERS_FORMAT_KEY: True}

    @classmethod
    def from_dict(cls, d: object) -> "ChatSettings":
        """Settings from a stored dict. Anything else, and every value of the wrong type or
        outside what its widget accepts, falls back to the default (logged): stored
        settings may come from an older version, another machine or a damaged file, and
        must never stop the app or break a chat."""
        out = cls()
        if not isinstance(d, dict):
            if d is not None:
                log.warning("ignoring stored chat settings that are not a mapping (%s)", type(d).__name__)
            return out
        for f in fields(cls):
            if f.name not in d:
                continue
            default = getattr(out, f.name)
            value, why = _checked(f.name, type(default), d[f.name])
            if why is None:
                out = replace(out, **{f.name: value})
            else:
                log.warning("ignoring the stored setting %s=%s (%s); using %r", f.name, _short(d[f.name]), why, default)
        return _old_default_layers(d, out)

    def generation_config(self) -> GenerationConfig:
        """The chat's own configuration (what an answer runs on the loaded pair is the
        session's to choose: ``Session.choose``)."""
        proposer = self.proposer
        return GenerationConfig(
            proposer=proposer,
            k="auto" if self.auto_k else max(1, self.k),
            p_min=self.p_min,
            sampling=SamplingParams(
                temperature=self.temperature,
                top_k=self.top_k,
                top_p=self.top_p,
                min_p=self.min_p,
            ),
            seed=self.seed,
            max_tokens=self.max_tokens,
        )

    def model_spec(self, path, role: str) -> ModelSpec:
        layers = self.target_gpu_layers if role == "target" else self.draft_gpu_layers
        rpc = parse_endpoints(self.rpc) if role == "target" and rpc_error(self.rpc) is None else ()
        return ModelSpec(path, n_gpu_layers=None if layers == AUTO_LAYERS else layers, threads=self.threads or None, n_ctx=self.n_ctx, rpc=rpc)

    def needs_reload(self, other: "ChatSettings") -> bool:
        return any(getattr(self, k) != getattr(other, k) for k in RELOAD_KEYS)


def _old_default_layers(d: dict, s: ChatSettings) -> ChatSettings:
    """Settings stored before GPU layers defaulted to auto held 0 and 0 for both models:
    the old default (the boxes were disabled on CPU-only builds, and on a GPU build 0 was
    what a user who chose nothing kept), so such a pair becomes auto. A pair in which
    either count is not 0 was chosen, and stays as stored; in settings stored since,
    0 means 0. So with p-min: 0.75, the old default, becomes 0 (off), the new one
    (cutting a draft short where verifying is cheap costs more than it saves)."""
    if LAYERS_FORMAT_KEY in d:
        return s
    if s.p_min == 0.75:
        s = replace(s, p_min=0.0)
    if (s.target_gpu_layers, s.draft_gpu_layers) != (0, 0):
        return s
    return replace(s, target_gpu_layers=AUTO_LAYERS, draft_gpu_layers=AUTO_LAYERS)


def load_defaults() -> ChatSettings:
    qs = QSettings()
    raw = qs.value("chat/defaults")
    if isinstance(raw, str):
        try:
            return ChatSettings.from_dict(json.loads(raw))
        except (ValueError, RecursionError):
            pass
    return ChatSettings()


def save_defaults(s: ChatSettings) -> None:
    qs = QSettings()
    qs.setValue("chat/defaults", json.dumps(s.to_dict()))
    qs.sync()


class SettingsDialog(QDialog):
    """Edit one chat's settings. Says which changes reload the models."""

    def __init__(self, settings: ChatSettings, has_gpu: bool, parent: QWidget | None = None,
                 refusals: dict[str, str] | None = None) -> None:
        """``refusals``: the choices the loaded target cannot run whatever draft is loaded,
        each with why (greyed out with it; ``Session.cannot_run``)."""
        super().__init__(parent)
        self.setWindowTitle("Chat settings")
        self.setObjectName("settingsDialog")
        self._initial = settings
        lay = QVBoxLayout(self)
        # Two columns: one column of every group is taller than a 1366x768 screen leaves
        # a dialog once the models' notes wrap.
        cols = QHBoxLayout()
        left, right = QVBoxLayout(), QVBoxLayout()
        left.addWidget(self._build_speculation(settings, refusals or {}))
        left.addWidget(self._build_sampling(settings))
        left.addStretch(1)
        right.addWidget(self._build_models(settings, has_gpu))
        right.addStretch(1)
        cols.addLayout(left, 1)
        cols.addLayout(right, 1)
        lay.addLayout(cols)
        self.setMinimumWidth(860)  # room for a list of RPC servers; fits a 1024-wide screen
        self.reload_note = QLabel("")
        self.reload_note.setObjectName("reloadNote")
        self.reload_note.setWordWrap(True)
        lay.addWidget(self.reload_note)
        for w in (self.n_ctx, self.threads, self.target_gpu_layers, self.draft_gpu_layers):
            w.valueChanged.connect(self._update_note)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self._ok = buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.rpc.textChanged.connect(self._update_note)
        self._update_note()

    def _build_speculation(self, settings: ChatSettings, refusals: dict[str, str]) -> QGroupBox:
        """The proposer (the registry's choices, by label; those in ``refusals`` greyed
        out with why), k or auto, and p_min."""
        spec = QGroupBox("Speculation")
        f = QFormLayout(spec)
        self.proposer = QComboBox()
        for key, label in PROPOSER_LABELS.items():
            self.proposer.addItem(label, key)
        self.proposer.setCurrentIndex(list(PROPOSER_LABELS).index(settings.proposer))
        f.addRow("Proposer", self.proposer)
        self.refusal_notes: list[QLabel] = []
        for name, why in refusals.items():
            i = self.proposer.findData(name)
            if i < 0:
                continue
            self.proposer.setItemData(i, why, Qt.ItemDataRole.ToolTipRole)
            item = self.proposer.model().item(i)
            if item is not None:
                item.setEnabled(False)
            note = QLabel(f"{PROPOSER_LABELS[name]}: {why}")
            note.setObjectName("refusalNote")
            note.setWordWrap(True)
            note.setStyleSheet("color:#868e96;")
            f.addRow(note)
            self.refusal_notes.append(note)
        krow = QHBoxLayout()
        self.auto_k = QCheckBox("auto")
        self.auto_k.setToolTip("Draft only as far as it pays, from measured costs and acceptance")
        self.k = self._spin("k", settings.k)
        self.auto_k.toggled.connect(lambda on: self.k.setEnabled(not on))
        self.auto_k.setChecked(settings.auto_k)
        self.k.setEnabled(not settings.auto_k)
        krow.addWidget(self.k)
        krow.addWidget(self.auto_k)
        krow.addStretch(1)
        f.addRow("Draft length k", krow)
        self.p_min = self._dspin("p_min", 0.05, settings.p_min)
        self.p_min.setToolTip("Stop drafting when the draft's top probability falls below this")
        f.addRow("p_min", self.p_min)
        return spec

    def _build_sampling(self, settings: ChatSettings) -> QGroupBox:
        samp = QGroupBox("Sampling")
        f = QFormLayout(samp)
        self.temperature = self._dspin("temperature", 0.1, settings.temperature)
        self.temperature.setToolTip("0 = greedy: the output is exactly the target's argmax")
        f.addRow("Temperature", self.temperature)
        self.top_k = self._spin("top_k", settings.top_k)
        self.top_k.setSpecialValueText("off")
        f.addRow("Top-k", self.top_k)
        self.top_p = self._dspin("top_p", 0.05, settings.top_p)
        f.addRow("Top-p", self.top_p)
        self.min_p = self._dspin("min_p", 0.01, settings.min_p)
        f.addRow("Min-p", self.min_p)
        self.seed = self._spin("seed", settings.seed)
        f.addRow("Seed", self.seed)
        self.max_tokens = self._spin("max_tokens", settings.max_tokens)
        f.addRow("Max tokens", self.max_tokens)
        return samp

    def _build_models(self, settings: ChatSettings, has_gpu: bool) -> QGroupBox:
        """Context, threads, GPU layers (said to do nothing on a build without GPU
        offload) and the RPC servers: changes reload the models."""
        models = QGroupBox("Models (changes reload them)")
        # The notes go under the form, not in it: a QFormLayout row gives a word-wrapped
        # label one line's height, and cut the GPU note at 1366x768.
        box = QVBoxLayout(models)
        f = QFormLayout()
        box.addLayout(f)
        self.n_ctx = self._spin("n_ctx", settings.n_ctx)
        self.n_ctx.setSingleStep(1024)
        f.addRow("Context size", self.n_ctx)
        self.threads = self._spin("threads", settings.threads)
        self.threads.setSpecialValueText(f"auto ({default_threads()})")
        f.addRow("Threads", self.threads)
        self.target_gpu_layers = self._spin("target_gpu_layers", settings.target_gpu_layers)
        self.draft_gpu_layers = self._spin("draft_gpu_layers", settings.draft_gpu_layers)
        f.addRow("Target GPU layers", self.target_gpu_layers)
        f.addRow("Draft GPU layers", self.draft_gpu_layers)
        self.gpu_note = QLabel("")
        self.gpu_note.setObjectName("gpuNote")
        self.gpu_note.setWordWrap(True)
        self.gpu_note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        if not has_gpu:
            # Said, not silently ignored: this build cannot offload, whatever the numbers say.
            for w in (self.target_gpu_layers, self.draft_gpu_layers):
                w.setEnabled(False)
                w.setToolTip("This llama.cpp build has no GPU offload; layers stay on the CPU")
            self.gpu_note.setText("This llama.cpp was built without GPU support, so GPU layers have no effect. "
                                  f"To offload: {gpu_build_hint()}")
            self.gpu_note.setStyleSheet("color:#e67700;")
        self.rpc = QLineEdit(settings.rpc)
        self.rpc.setObjectName("rpcServers")
        self.rpc.setPlaceholderText("host:port, … (specdesk rpc-server on each machine)")
        self.rpc.setToolTip("The target's layers go to these RPC servers and this machine; the draft stays local. "
                            + SECURITY_WARNING)
        f.addRow("Target on RPC servers", self.rpc)
        self.rpc_note = QLabel("")
        self.rpc_note.setObjectName("rpcNote")
        self.rpc_note.setWordWrap(True)
        self.rpc_note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        for note in (self.gpu_note, self.rpc_note):
            box.addWidget(note)
        if not rpc_supported():
            self.rpc.setEnabled(False)
            self.rpc_note.setText("This llama.cpp was built without the RPC backend. To use other machines: "
                                  f"{reinstall_command()}")
            self.rpc_note.setStyleSheet("color:#e67700;")
        for note in (self.gpu_note, self.rpc_note):
            note.setVisible(bool(note.text()))  # an empty note takes no room
        return models

    @staticmethod
    def _spin(name: str, v: int) -> QSpinBox:
        w = QSpinBox()
        lo, hi = RANGES[name]
        w.setRange(int(lo), int(hi))
        w.setValue(v)
        if name.endswith("_gpu_layers"):
            w.setSpecialValueText("auto")  # AUTO_LAYERS, the lowest value
            w.setToolTip("auto: as many layers as the GPU's free memory holds, the target first; 0: none")
        return w

    @staticmethod
    def _dspin(name: str, step: float, v: float) -> QDoubleSpinBox:
        w = QDoubleSpinBox()
        w.setRange(*RANGES[name])
        w.setSingleStep(step)
        w.setDecimals(2)
        w.setValue(v)
        return w

    def showEvent(self, event) -> None:  # noqa: N802 - Qt API
        """Tall enough for the notes' wrapped lines: a window's size comes from its
        layout's minimum, which counts a word-wrapped label as one line."""
        super().showEvent(event)
        self._fit_height()

    def _fit_height(self) -> None:
        need = self.layout().heightForWidth(self.width())
        if need > self.height():
            self.resize(self.width(), need)

    def _update_note(self) -> None:
        if self.rpc.isEnabled():
            why = rpc_error(self.rpc.text())
            self.rpc_note.setText(why or "")
            self.rpc_note.setStyleSheet("color:#c92a2a;" if why else "")
            self.rpc_note.setVisible(bool(why))
            if why and self.isVisible():
                self._fit_height()  # a complaint that wraps gets its lines
            self._ok.setEnabled(why is None)
        if self.value().needs_reload(self._initial):
            self.reload_note.setText("⟳ Applying these settings reloads both models (in the background).")
        else:
            self.reload_note.setText("")

    def value(self) -> ChatSettings:
        return ChatSettings(
            proposer=self.proposer.currentData(),
            k=self.k.value(),
            auto_k=self.auto_k.isChecked(),
            p_min=round(self.p_min.value(), 4),
            temperature=round(self.temperature.value(), 4),
            top_k=self.top_k.value(),
            top_p=round(self.top_p.value(), 4),
            min_p=round(self.min_p.value(), 4),
            seed=self.seed.value(),
            max_tokens=self.max_tokens.value(),
            n_ctx=self.n_ctx.value(),
            threads=self.threads.value(),
            target_gpu_layers=self.target_gpu_layers.value(),
            draft_gpu_layers=self.draft_gpu_layers.value(),
            rpc=self.rpc.text().strip() if rpc_error(self.rpc.text()) is None else self._initial.rpc,
        )
