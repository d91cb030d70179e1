"""Chat settings: the values, their persistence (QSettings for the defaults, the
chat database per chat) and the dialog that edits them."""

from __future__ import annotations

import json
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
from ..session import GenerationConfig, ModelSpec, default_threads, gpu_build_hint, needs_draft_model
from ..session.remote import SECURITY_WARNING, parse_endpoints, reinstall_command, rpc_supported
from ..speculative.sampling import SamplingParams

PROPOSER_LABELS = {
    "draft": "Draft model",
    "ngram": "N-gram lookup (no draft model)",
    "hybrid": "Hybrid (n-gram, else draft model)",
    "none": "None (target alone)",
}

def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")


# What a stored value must satisfy to be used (see ChatSettings.from_dict).
_VALID = {
    "proposer": lambda v: v in PROPOSER_LABELS,
    "k": lambda v: 1 <= v <= 64,
    "p_min": lambda v: _finite(v) and 0.0 <= v < 1.0,
    "temperature": lambda v: _finite(v) and 0.0 <= v <= 100.0,
    "top_k": lambda v: v >= 0,
    "top_p": lambda v: _finite(v) and 0.0 < v <= 1.0,
    "min_p": lambda v: _finite(v) and 0.0 <= v < 1.0,
    "max_tokens": lambda v: 1 <= v <= 1 << 20,
    "n_ctx": lambda v: 16 <= v <= 1 << 22,
    "threads": lambda v: 0 <= v <= 1024,
    "target_gpu_layers": lambda v: 0 <= v <= 100_000,
    "draft_gpu_layers": lambda v: 0 <= v <= 100_000,
    "rpc": lambda v: rpc_error(v) is None,
}


def rpc_error(text: str) -> str | None:
    """Why the RPC servers field cannot be used, or None ("" means no servers)."""
    try:
        parse_endpoints(text)
    except SpecDeskError as e:
        return str(e)
    return None

# Settings that only take effect after the models are reloaded.
RELOAD_KEYS = ("n_ctx", "threads", "target_gpu_layers", "draft_gpu_layers", "rpc")


@dataclass(frozen=True)
class ChatSettings:
    proposer: str = "draft"
    k: int = 4
    auto_k: bool = True
    p_min: float = 0.75
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = 0
    max_tokens: int = 512
    n_ctx: int = 4096
    threads: int = 0  # 0 = physical cores
    target_gpu_layers: int = 0
    draft_gpu_layers: int = 0
    rpc: str = ""  # host:port[,host:port...]: RPC servers for the target's layers (the draft stays local)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: object) -> "ChatSettings":
        """Settings from a stored dict. Anything else, and every value of the wrong type
        or out of range, falls back to the default: stored settings may come from an
        older version, another machine or a damaged file, and must never stop the app."""
        out = cls()
        if not isinstance(d, dict):
            return out
        for f in fields(cls):
            if f.name not in d:
                continue
            kind = type(getattr(out, f.name))
            raw = d[f.name]
            if kind in (int, float) and (isinstance(raw, bool) or not isinstance(raw, (int, float))):
                continue
            if kind is bool and not isinstance(raw, bool):
                continue
            if kind is str and not isinstance(raw, str):
                continue
            try:
                value = kind(raw)
            except (TypeError, ValueError, OverflowError):
                continue
            ok = _VALID.get(f.name)
            if ok is None or ok(value):
                out = replace(out, **{f.name: value})
        return out

    def generation_config(self, has_draft: bool) -> GenerationConfig:
        proposer = self.proposer
        if needs_draft_model(proposer) and not has_draft:
            proposer = "ngram"
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
        return ModelSpec(path, n_gpu_layers=layers, threads=self.threads or None, n_ctx=self.n_ctx, rpc=rpc)

    def needs_reload(self, other: "ChatSettings") -> bool:
        return any(getattr(self, k) != getattr(other, k) for k in RELOAD_KEYS)


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

    def __init__(self, settings: ChatSettings, has_gpu: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Chat settings")
        self.setObjectName("settingsDialog")
        self._initial = settings
        lay = QVBoxLayout(self)

        spec = QGroupBox("Speculation")
        f = QFormLayout(spec)
        self.proposer = QComboBox()
        for key, label in PROPOSER_LABELS.items():
            self.proposer.addItem(label, key)
        self.proposer.setCurrentIndex(list(PROPOSER_LABELS).index(settings.proposer))
        f.addRow("Proposer", self.proposer)
        krow = QHBoxLayout()
        self.auto_k = QCheckBox("auto")
        self.auto_k.setToolTip("Draft only as far as it pays, from measured costs and acceptance")
        self.k = QSpinBox()
        self.k.setRange(1, 16)
        self.k.setValue(settings.k)
        self.auto_k.toggled.connect(lambda on: self.k.setEnabled(not on))
        self.auto_k.setChecked(settings.auto_k)
        self.k.setEnabled(not settings.auto_k)
        krow.addWidget(self.k)
        krow.addWidget(self.auto_k)
        krow.addStretch(1)
        f.addRow("Draft length k", krow)
        self.p_min = self._dspin(0.0, 0.99, 0.05, settings.p_min)
        self.p_min.setToolTip("Stop drafting when the draft's top probability falls below this")
        f.addRow("p_min", self.p_min)
        lay.addWidget(spec)

        samp = QGroupBox("Sampling")
        f = QFormLayout(samp)
        self.temperature = self._dspin(0.0, 5.0, 0.1, settings.temperature)
        self.temperature.setToolTip("0 = greedy: the output is exactly the target's argmax")
        f.addRow("Temperature", self.temperature)
        self.top_k = self._spin(0, 100000, settings.top_k)
        self.top_k.setSpecialValueText("off")
        f.addRow("Top-k", self.top_k)
        self.top_p = self._dspin(0.01, 1.0, 0.05, settings.top_p)
        f.addRow("Top-p", self.top_p)
        self.min_p = self._dspin(0.0, 0.99, 0.01, settings.min_p)
        f.addRow("Min-p", self.min_p)
        self.seed = self._spin(0, 2**31 - 1, settings.seed)
        f.addRow("Seed", self.seed)
        self.max_tokens = self._spin(1, 1 << 20, settings.max_tokens)
        f.addRow("Max tokens", self.max_tokens)
        lay.addWidget(samp)

        models = QGroupBox("Models (changes reload them)")
        f = QFormLayout(models)
        self.n_ctx = self._spin(256, 1 << 20, settings.n_ctx)
        self.n_ctx.setSingleStep(1024)
        f.addRow("Context size", self.n_ctx)
        self.threads = self._spin(0, 256, settings.threads)
        self.threads.setSpecialValueText(f"auto ({default_threads()})")
        f.addRow("Threads", self.threads)
        self.target_gpu_layers = self._spin(0, 999, settings.target_gpu_layers)
        self.draft_gpu_layers = self._spin(0, 999, settings.draft_gpu_layers)
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
            f.addRow(self.gpu_note)
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
        f.addRow(self.rpc_note)
        if not rpc_supported():
            self.rpc.setEnabled(False)
            self.rpc_note.setText("This llama.cpp was built without the RPC backend. To use other machines: "
                                  f"{reinstall_command()}")
            self.rpc_note.setStyleSheet("color:#e67700;")
        lay.addWidget(models)

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

    @staticmethod
    def _spin(lo: int, hi: int, v: int) -> QSpinBox:
        w = QSpinBox()
        w.setRange(lo, hi)
        w.setValue(v)
        return w

    @staticmethod
    def _dspin(lo: float, hi: float, step: float, v: float) -> QDoubleSpinBox:
        w = QDoubleSpinBox()
        w.setRange(lo, hi)
        w.setSingleStep(step)
        w.setDecimals(2)
        w.setValue(v)
        return w

    def _update_note(self) -> None:
        if self.rpc.isEnabled():
            why = rpc_error(self.rpc.text())
            self.rpc_note.setText(why or "")
            self.rpc_note.setStyleSheet("color:#c92a2a;" if why else "")
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
