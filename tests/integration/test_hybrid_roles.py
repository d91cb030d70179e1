"""Doctor and the Library say, per model, what it can be (a target, a draft, an MTP
source) and why not: a qwen35 hybrid with its MTP head (a target rolling back by
snapshots, a draft by checkpoints, heads that draft), the same file with its heads
stripped of a tensor, a hybrid SpecDesk does not check (refused), and a sliding-window
model. Their roles come from the library's summary of each file, as users see it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from gguf import GGUFValueType as VT

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "gguf"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from synth.hybrid import HybridSpec, write_hybrid_model  # noqa: E402
from synth.swa import SwaSpec, write_swa_model  # noqa: E402
from synth.tiny_llama import rebuild_gguf  # noqa: E402

from specdesk.cli import doctor  # noqa: E402
from specdesk.library.gguf import read_gguf  # noqa: E402


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    d = tmp_path_factory.mktemp("library")
    hybrid = write_hybrid_model(d / "hybrid-mtp.gguf", HybridSpec(heads="agree"))
    write_swa_model(d / "sliding.gguf", SwaSpec())
    g = read_gguf(hybrid)
    renamed = {"general.architecture": (VT.STRING, "qwen3next")}
    for key, value in g.metadata.items():
        if key.startswith("qwen35."):
            renamed[key] = None
            vtype, etype = g.value_types[key]
            renamed["qwen3next" + key[len("qwen35"):]] = (vtype, (etype, [int(x) for x in value]) if vtype == VT.ARRAY else value)
    rebuild_gguf(hybrid, d / "next.gguf", set_kv=renamed)
    return d


def test_doctor_says_what_each_model_can_be(library, monkeypatch):
    monkeypatch.setenv("SPECDESK_MODELS_DIR", str(library))
    r = doctor.report(scan_library=True)
    models = {m["name"]: m for m in r["models"]}
    h = models["hybrid-mtp"]
    assert h["usable"] and h["as_target"].startswith("yes, rolls back by recurrent-state snapshots (16 kept")
    assert h["as_draft"].startswith("yes, rolls back by checkpoints")
    assert h["rollback"]["target"] == "snapshots" and h["rollback"]["snapshot_bytes"] == 16 * h["rollback"]["state_bytes"] > 0
    assert h["draft_sources"] == {"MTP heads": "1 MTP head"} and h["drafts_alone"]
    s = models["sliding"]
    assert s["as_target"] == s["as_draft"] == "yes (a sliding window of 7: rollbacks past it are rebuilt exactly)"
    n = models["next"]
    assert not n["usable"] and n["as_target"].startswith("no: next.gguf: architecture 'qwen3next' is a hybrid")
    text = doctor._text(r)
    assert "hybrid-mtp: as a target yes, rolls back by recurrent-state snapshots" in text
    assert "MTP heads: 1 MTP head" in text and "next: unusable: next.gguf: architecture 'qwen3next'" in text


def test_the_estimate_of_a_hybrid_is_what_llama_cpp_allocates(library, tmp_path):
    """The library's estimate counts the KV cache of the attention layers only and the
    recurrent state with a target's 16 snapshots: as the loaded target's buffers say."""
    from specdesk.library.gguf import estimate_memory, validate_gguf
    from specdesk.session import ModelSpec, Session

    path = library / "hybrid-mtp.gguf"
    est = estimate_memory(validate_gguf(path), n_ctx=1024)
    s = Session.load(ModelSpec(path, n_ctx=1024, threads=1), remember_costs=False)
    try:
        m = s.memory().model("target")
    finally:
        s.close()
    assert est["kv_bytes"] == m.kv_bytes
    assert 0.95 * est["state_bytes"] <= m.state_bytes <= 1.1 * est["state_bytes"], (est["state_bytes"], m.state_bytes)


def test_the_advisor_prices_the_rollback(tmp_path):
    """The advisor measures a hybrid target's verify batches rolled back as the loop rolls
    them back (by a snapshot, not a restore), and says what rolling back costs: the
    target's snapshots, the hybrid draft's checkpoints and replayed tokens."""
    from hybrid_models import write_models

    from specdesk.bench.advisor import advise, calibrate
    from specdesk.session import ModelSpec, Session

    m = write_models(tmp_path)
    s = Session.load(ModelSpec(m["target"], n_ctx=1024, threads=1), ModelSpec(m["draft"], n_ctx=1024, threads=1),
                     remember_costs=False)
    try:
        cal = calibrate(s, k_max=4, reps=2, acceptance_tokens=24, drift=False, loop=False)
    finally:
        s.close()
    t, d = cal.rollback["target"], cal.rollback["draft model"]
    assert t["snapshots"] > 0 and t["restores"] == 0  # every verify batch rolled back by a snapshot
    assert d["checkpoints"] > 0 and d["restores"] > 0 and d["replayed"] < 20  # the draft's rewinds hit a checkpoint
    text = advise(cal).text
    assert "The target is a hybrid: it keeps 16 snapshots of its recurrent state" in text
    assert "The draft model is a hybrid too and rolls back by checkpoints" in text
    assert cal.to_dict()["rollback"] == cal.rollback
