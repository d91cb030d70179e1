"""The kernel drift probe on the fake backend: none where batches compute what single
steps compute, and exactly the hand-computed drift where a batch perturbs the logits."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fakes import FakeBackend, FakeModel
from specdesk.speculative.drift import (
    NEAR_TIE_LOGITS,
    Drift,
    measure_drift,
    probe_cost,
    top2_margin,
    total_variation,
    window_starts,
)
from specdesk.session.text import claim_text, drift_summary, verdict_text
from specdesk.speculative.sampling import SamplingParams, warp

V = 12
TEXT = [int(x) for x in np.random.default_rng(3).integers(0, V, size=80)]


class DriftingBackend(FakeBackend):
    """A backend whose verify batches move each row's logits by ``eps * (b - 1) * pattern[p]``
    at position p, as if a batch of b tokens ran other kernels; single steps are exact."""

    def __init__(self, model: FakeModel, eps: float, seed: int = 5) -> None:
        super().__init__(model)
        self.eps = eps
        self.pattern = np.random.default_rng(seed).normal(0.0, 1.0, size=(4096, model.n_vocab)).astype(np.float32)

    def eval(self, tokens, all_rows=True, fn=None):
        p0 = self.n_past
        rows = super().eval(tokens, all_rows=True).copy()
        b = len(tokens)
        if b > 1:
            rows += self.eps * (b - 1) * self.pattern[p0 : p0 + b]
        rows = rows if all_rows else rows[-1:]
        return fn(rows) if fn is not None else rows

    def delta(self, b: int, p: int) -> np.ndarray:
        return self.eps * (b - 1) * self.pattern[p] if b > 1 else np.zeros(self.n_vocab, np.float32)


def _single(model: FakeModel, p: int) -> np.ndarray:
    """The exact logits at position p (predicting TEXT[p + 1])."""
    return model.logits(TEXT[: p + 1])


def test_no_drift_where_batches_compute_what_steps_compute():
    fake = FakeBackend(FakeModel(n_vocab=V, seed=0))
    d = measure_drift(fake, TEXT, batch_sizes=(2, 3, 5), window=7, windows=2, control=True)
    assert [b.batch for b in d.by_batch] == [1, 2, 3, 5]
    assert d.positions == 14 and all(b.positions == 14 for b in d.by_batch)
    for b in d.by_batch:
        assert b.tv_mean == b.tv_max == b.logit_diff_max == 0.0 and b.flips == 0
    assert d.flip_share == 0.0 and d.tv_max == 0.0 and d.flip_margin_max is None
    assert fake.n_past == 0  # the context is left empty
    # every batch had exactly its size: ceil(7 / b) batches per window and size
    assert {b for b in fake.batches if b <= 5} == {1, 2, 3, 5}  # (the rest: prefills of the prefix)
    assert fake.batches.count(5) == 2 * 2 and fake.batches.count(3) == 2 * 3 and fake.batches.count(2) == 2 * 4
    assert "no argmax flipped" in drift_summary(d)


def test_drift_matches_the_hand_computed_total_variation_and_logit_difference():
    model = FakeModel(n_vocab=V, seed=0)
    fake = DriftingBackend(model, eps=0.05)
    params = SamplingParams(temperature=0.8)
    starts = [30, 50]
    d = measure_drift(fake, TEXT, batch_sizes=(2, 4), window=6, starts=starts, params=params)
    for b in (2, 4):
        tvs, diffs, flips = [], [], 0
        for s in starts:
            for i in range(6):
                p = s + i
                a = _single(model, p)
                x = a + fake.delta(b, p)
                tvs.append(total_variation(warp(a, params), warp(x, params)))
                diffs.append(float(np.max(np.abs(x - a))))
                flips += int(np.argmax(x) != np.argmax(a))
        got = d.batch(b)
        assert got.positions == 12
        assert got.tv_mean == pytest.approx(np.mean(tvs), rel=1e-5)
        assert got.tv_max == pytest.approx(np.max(tvs), rel=1e-5)
        assert got.logit_diff_max == pytest.approx(np.max(diffs), rel=1e-5)
        assert got.flips == flips
    # a larger batch moves the logits further here, and so the distribution
    assert d.batch(4).tv_mean > d.batch(2).tv_mean > 0
    assert d.worst_batch == 4 and d.tv_max == d.batch(4).tv_max
    assert d.tv_mean == pytest.approx((d.batch(2).tv_mean + d.batch(4).tv_mean) / 2)


def test_flips_happen_only_at_near_ties_and_greedy_tv_is_the_flip_share():
    model = FakeModel(n_vocab=V, seed=0, scale=0.6)  # flat logits: many near-ties
    fake = DriftingBackend(model, eps=0.08)
    d = measure_drift(fake, TEXT, batch_sizes=(2, 3, 4), window=12, windows=3, params=SamplingParams())
    assert d.flips > 0
    # a flip needs the two best logits closer than the largest movement, twice over
    assert d.flip_margin_max <= 2 * d.logit_diff_max
    for b in d.batches:
        assert b.tv_mean == pytest.approx(b.flip_share)  # one-hot distributions: TV is 0 or 1
    starts = window_starts(len(TEXT), 12, 4, 3)
    margins = [top2_margin(_single(model, s + i)) for s in starts for i in range(12)]
    assert d.near_ties == sum(1 for m in margins if m <= NEAR_TIE_LOGITS)
    assert "flipped the argmax" in drift_summary(d)


def test_the_control_catches_nondeterministic_single_steps():
    class Noisy(FakeBackend):
        def __init__(self, model):
            super().__init__(model)
            self.rng = np.random.default_rng(0)

        def eval(self, tokens, all_rows=True, fn=None):
            rows = super().eval(tokens, all_rows)
            rows = rows + self.rng.normal(0, 0.01, size=rows.shape).astype(np.float32)
            return fn(rows) if fn is not None else rows

    d = measure_drift(Noisy(FakeModel(n_vocab=V)), TEXT, batch_sizes=(2,), window=5, windows=1, control=True)
    assert d.control is not None and d.control.tv_mean > 0 and d.control.logit_diff_max > 0


def test_window_placement_and_bad_texts():
    assert window_starts(100, 16, 9, 1) == [76]
    s = window_starts(100, 16, 9, 3)
    assert s[0] == 33 and s[-1] == 76 and len(s) == 3
    with pytest.raises(ValueError, match="too short"):
        window_starts(20, 16, 9, 2)
    with pytest.raises(ValueError, match="does not fit"):
        measure_drift(FakeBackend(FakeModel(n_vocab=V)), TEXT, batch_sizes=(2,), window=4, starts=[78])
    with pytest.raises(ValueError, match=">= 2"):
        measure_drift(FakeBackend(FakeModel(n_vocab=V)), TEXT, batch_sizes=(1, 2), window=4)


def test_probe_cost_adds_the_single_steps_and_each_batch():
    # 8 positions: 8 single steps at 1 s; b=2: 4 batches at 2 s; b=3: 3 batches at 3 s
    assert probe_cost(1.0, lambda b: float(b), (2, 3), 8) == 8 + 4 * 2 + 3 * 3
    assert probe_cost(1.0, lambda b: float(b), (2,), 8, control=True) == 16 + 8


def test_progress_reaches_one_and_can_cancel():
    seen = []
    measure_drift(FakeBackend(FakeModel(n_vocab=V)), TEXT, batch_sizes=(2, 3), window=4, windows=2, progress=seen.append)
    assert seen == sorted(seen) and seen[-1] == pytest.approx(1.0)

    class Stop(Exception):
        pass

    def stop(_f):
        raise Stop

    with pytest.raises(Stop):
        measure_drift(FakeBackend(FakeModel(n_vocab=V)), TEXT, batch_sizes=(2,), window=4, progress=stop)


def test_round_trip_and_plain_texts():
    fake = DriftingBackend(FakeModel(n_vocab=V, seed=0, scale=0.6), eps=0.08)
    d = measure_drift(fake, TEXT, batch_sizes=(2, 3), window=10, windows=2, control=True,
                      params=SamplingParams(temperature=1.0, top_k=5))
    d2 = Drift.from_dict(d.to_dict())
    assert d2.to_dict() == d.to_dict()
    dd = d.to_dict()
    assert dd["by_batch"][0]["batch"] == 1 and dd["sampling"]["top_k"] == 5
    assert "T=1, top-k 5" in drift_summary(d)

    claim = claim_text(dd)
    assert "as llama.cpp computes it in a verify batch" in claim
    assert "only at near-ties" in claim and "total variation" in claim
    assert "not measured" in claim_text(None)
    assert "not compared token for token" in claim_text(dd, 0.7)
    assert "not compared" not in claim_text(dd, 0.0)


def test_verdict_text_points_to_the_drift():
    near = {"index": 9, "baseline_text": " the", "speculative_text": " a", "margin": 0.05, "margin_batched": 0.06,
            "reproduced": True, "verdict": "near-tie"}
    drift = {"flip_share": 0.004, "positions": 500, "logit_diff_max": 0.21}
    text = verdict_text(near, drift)
    assert text.startswith("near-tie at token 9")
    assert "moved the margin by 0.110" in text and "flips the argmax at 0.40% of positions" in text
    assert "drift" not in verdict_text(near, None)
    bad = dict(near, verdict="mismatch", margin=2.5, margin_batched=1.0)
    assert "worth reporting" in verdict_text(bad, drift)
    assert "worth reporting" in verdict_text(dict(bad, margin=float("nan")), drift)


# -- the cache --------------------------------------------------------------------------------


def _drift(tv: float = 0.01) -> Drift:
    fake = DriftingBackend(FakeModel(n_vocab=V, seed=0), eps=tv)
    return measure_drift(fake, TEXT, batch_sizes=(2,), window=4, windows=1)


def test_cache_round_trip_prune_and_damaged_file(tmp_path):
    from specdesk.session import drift as drift_cache

    path = tmp_path / "drift.json"
    assert drift_cache._load("k", path) is None
    d = _drift()
    drift_cache.CACHE.save("k", d.to_dict(), path)
    assert drift_cache._load("k", path).to_dict() == d.to_dict()
    for i in range(drift_cache.MAX_ENTRIES + 3):
        drift_cache.CACHE.save(f"k{i}", d.to_dict(), path)
    assert drift_cache._load("k", path) is None and drift_cache._load(f"k{drift_cache.MAX_ENTRIES + 2}", path)
    path.write_text("{not json")
    assert drift_cache._load("k0", path) is None
    drift_cache.CACHE.save("k", d.to_dict(), path)  # a damaged file is replaced, not an error
    assert drift_cache._load("k", path) is not None
    path.write_text('{"version": 2, "entries": {"k": {"value": {"by_batch": "x"}}}}')
    assert drift_cache._load("k", path) is None


def test_cache_key_follows_the_file_the_machine_the_build_and_the_probe(tmp_path):
    from specdesk.session import drift as drift_cache

    f = tmp_path / "t.gguf"
    f.write_bytes(b"x" * 10)
    t1 = drift_cache.target_id(f, 2, 0)
    assert drift_cache.target_id(f, 4, 0) != t1 and drift_cache.target_id(f, 2, 99) != t1
    f.write_bytes(b"y" * 11)
    assert drift_cache.target_id(f, 2, 0) != t1
    p1 = drift_cache.probe_id(SamplingParams(1.0), (2, 3), TEXT)
    assert drift_cache.probe_id(SamplingParams(0.5), (2, 3), TEXT) != p1
    assert drift_cache.probe_id(SamplingParams(1.0), (2, 3, 4), TEXT) != p1
    assert drift_cache.probe_id(SamplingParams(1.0), (2, 3), TEXT[1:]) != p1
    assert "llama-cpp-python" in drift_cache.llama_build()
    assert drift_cache.machine_id({"cpu": "A", "cores": 2, "gpu": None}) != drift_cache.machine_id({"cpu": "B", "cores": 2, "gpu": None})


def _fake_session(tmp_path: Path, backend) -> SimpleNamespace:
    f = tmp_path / "target.gguf"
    if not f.exists():
        f.write_bytes(b"gguf")
    backend.threads = 2
    return SimpleNamespace(
        target=SimpleNamespace(spec=SimpleNamespace(path=f, n_gpu_layers=0), ctx=backend),
        chat_prompt=lambda messages: TEXT,
    )


def test_pair_drift_measures_once_then_reads_the_cache(tmp_path):
    from specdesk.session.drift import pair_drift

    cache = tmp_path / "cache.json"
    fake = DriftingBackend(FakeModel(n_vocab=V, seed=0), eps=0.05)
    s = _fake_session(tmp_path, fake)
    d1 = pair_drift(s, batch_sizes=(2, 3), windows=1, cache_path=cache)
    assert fake.batches and d1.extra["cached"] is False and d1.positions == 16
    n = len(fake.batches)
    d2 = pair_drift(s, batch_sizes=(2, 3), windows=1, cache_path=cache)
    assert len(fake.batches) == n  # nothing evaluated
    assert d2.extra["cached"] is True and d2.by_batch == d1.by_batch
    pair_drift(s, batch_sizes=(2, 3), params=SamplingParams(0.5), windows=1, cache_path=cache)
    assert len(fake.batches) > n  # other settings: measured again
    pair_drift(s, batch_sizes=(2, 3), windows=1, cache_path=cache, use_cache=False)
    assert fake.n_past == 0


@pytest.mark.parametrize("content", [
    # the layout of the first cache version, with a null and a text seq (save once raised TypeError)
    '{"version": 1, "entries": {"a": {"seq": null, "drift": {}}, "b": {"seq": "7", "drift": {}}}}',
    '{"version": 2, "entries": {"a": {"seq": null, "value": {}}, "b": {"seq": "7", "value": {"by_batch": 3}}}}',
    '{"version": 2, "entries": [1, 2]}',
    '{"version": 2, "entries": {"a": null, "b": [1], "c": {"seq": 1}}}',
])
def test_a_damaged_drift_cache_never_fails_a_comparison(tmp_path, content):
    from specdesk.session.drift import CACHE, pair_drift

    cache = tmp_path / "kernel-drift.json"
    cache.write_text(content)
    fake = DriftingBackend(FakeModel(n_vocab=V, seed=0), eps=0.05)
    s = _fake_session(tmp_path, fake)
    d = pair_drift(s, batch_sizes=(2,), windows=1, cache_path=cache)  # measured, then saved over the damage
    assert d.positions and d.extra["cached"] is False
    again = pair_drift(s, batch_sizes=(2,), windows=1, cache_path=cache)
    assert again.extra["cached"] is True and again.by_batch == d.by_batch
    assert CACHE._read(cache)  # the file is usable again
