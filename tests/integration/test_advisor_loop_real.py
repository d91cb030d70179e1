"""The advisor's loop calibration on a real model (SmolLM2 as target and as its own
draft): it runs real generations through the session's decode loop, says each
prediction with its interval in ``advise --json``, and a cancel stops it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from specdesk.bench.advisor import calibrate
from specdesk.bench.loop_calibration import CALIBRATION_PROMPTS, LoopOptions
from specdesk.errors import Cancelled


def test_the_loop_calibration_runs_real_generations_and_cancels(smol_session):
    runs = []
    real_run = smol_session.run

    def counted(prompt, config, cancel=None):
        gen = real_run(prompt, config, cancel)
        runs.append((config.proposer, gen.stats.generated, gen.stats.decode_seconds))
        return gen

    smol_session.run = counted
    try:
        cal = calibrate(smol_session, drift=False, loop_options=LoopOptions(max_tokens=16, max_repeats=3))
        loop = cal.loop
        assert loop.repeats >= 3 and len(runs) == loop.runs == loop.repeats * len(loop.configs) * len(CALIBRATION_PROMPTS)
        assert all(n > 0 and s > 0 for _, n, s in runs)  # real tokens, real seconds
        assert {p for p, _, _ in runs} == {"none", "draft"}
        for c in loop.configs[1:]:
            p = loop.predict(c)
            assert p.ci[0] <= p.speedup <= p.ci[1] and p.verdict in ("faster", "slower", "within-noise")
        seen = []
        runs.clear()

        def cancel():
            return any("repeat 2 of 3" in m for m in seen)

        with pytest.raises(Cancelled):
            calibrate(smol_session, drift=False, progress=lambda m, f: seen.append(m), cancel=cancel,
                      loop_options=LoopOptions(max_tokens=16, max_repeats=3))
        # one round, then it stopped: target alone ran once per prompt (the k it tries follow the component
        # costs it measures again, so the number of draft runs may differ from the first calibration's)
        assert sum(p == "none" for p, _, _ in runs) == len(CALIBRATION_PROMPTS)
        assert len(runs) % len(CALIBRATION_PROMPTS) == 0 and len(runs) <= len(CALIBRATION_PROMPTS) * 6
    finally:
        del smol_session.run


def test_advise_json_has_every_prediction_with_its_interval(smol_path, smol_draft_path):
    r = subprocess.run([sys.executable, "-m", "specdesk", "advise", "--target", str(smol_path), "--draft",
                        str(smol_draft_path), "--ctx", "512", "--threads", "2", "--json"],
                       capture_output=True, text=True, timeout=900, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["calibration"]["loop"]["runs"] >= 3 * 2 * len(CALIBRATION_PROMPTS)
    assert out["predictions"] and out["component_predictions"]
    for p in out["predictions"]:
        assert len(p["predicted_ci"]) == 2 and p["verdict"] in ("faster", "slower", "within-noise")
        assert p["pays"] == (p["predicted_ci"][0] > 1.0)
    assert (out["best"] == "none") == (not any(p["pays"] for p in out["predictions"]))
