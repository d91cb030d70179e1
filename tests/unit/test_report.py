"""The benchmark report writer on a synthetic but self-consistent benchmark result."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specdesk import files
from specdesk.bench import report
from specdesk.bench.report import CSV_FIELDS, FILE_NAMES, markdown, write_report
from specdesk.bench.runner import summarize
from specdesk.bench.rows import ConfigRow
from specdesk.session.text import speedup_text, verdict_label
from specdesk.errors import SpecDeskError
from specdesk.speculative.stats import Stats

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

SUITES = {"code_editing": 0.82, "chat": 0.55, "summarization": 0.68}  # draft acceptance per suite
NGRAM_ACCEPT = {"code_editing": 0.7, "chat": 0.2, "summarization": 0.45}
CONFIGS = ["none", "draft:k=2", "draft:auto", "ngram"]


# -- a synthetic result, shaped exactly like the runner's ---------------------------------


def _draft_len(config: str, rng) -> int:
    if config == "none":
        return 0
    if config.startswith("draft:k="):
        return int(config.split("=")[1])
    if config == "draft:auto":
        return int(rng.integers(0, 6))
    if config == "ngram":
        return int(rng.choice([0, 0, 3]))  # n-gram lookup finds a match only some of the time
    raise ValueError(config)


def _simulate(suite: str, config: str, rng, max_tokens: int, ngram_drafts: bool = True) -> Stats:
    p = NGRAM_ACCEPT[suite] if config == "ngram" else SUITES[suite]
    draft_cost = 0.0002 if config == "ngram" else 0.005
    s = Stats(prompt_tokens=40, prompt_evaluated=40, prompt_seconds=0.2 * rng.uniform(0.95, 1.05))
    while s.generated < max_tokens:
        k = _draft_len(config, rng) if (config != "ngram" or ngram_drafts) else 0
        n_acc = 0
        while n_acc < k and rng.random() < p:
            n_acc += 1
        s.record_step(k, n_acc, min(n_acc + 1, max_tokens - s.generated))
        noise = rng.uniform(0.97, 1.03)
        s.verify_seconds += 0.035 * (1 + 0.12 * k) * noise
        s.draft_seconds += draft_cost * k * noise
    s.native_seconds = s.verify_seconds + s.draft_seconds
    s.decode_seconds = s.native_seconds * rng.uniform(1.01, 1.04)
    return s


def make_result(
    configs=tuple(CONFIGS),
    temperature: float = 0.0,
    advisor: bool = True,
    ngram_drafts: bool = True,
    prompts: int = 3,
    repeats: int = 2,
    max_tokens: int = 48,
) -> dict:
    rng = np.random.default_rng(7)
    configs = list(configs)
    suites = list(SUITES)
    runs = []
    order = 0
    for suite in suites:
        for pi in range(prompts):
            for rep in range(repeats):
                for config in configs:  # interleaved, as the runner does
                    s = _simulate(suite, config, rng, max_tokens, ngram_drafts)
                    identical = divergence = None
                    if temperature == 0.0 and config != "none":
                        identical = True
                        # One near-tie in chat with k=2, one real mismatch in summarization with auto.
                        if (suite, config, pi, rep) == ("chat", "draft:k=2", 1, 0):
                            identical, divergence = False, {"index": 11, "baseline_text": "With", "speculative_text": "A", "margin": 0.157, "verdict": "near-tie"}
                        if (suite, config, pi, rep) == ("summarization", "draft:auto", 2, 1):
                            identical, divergence = False, {"index": 30, "baseline_text": " the", "speculative_text": " a", "margin": 2.5, "verdict": "mismatch"}
                    runs.append({
                        "suite": suite, "prompt_id": f"{suite}-{pi}", "repeat": rep, "order": order, "config": config,
                        "stats": s.to_dict(), "stop_reason": "max_tokens", "text": f"output of {config} on {suite}-{pi}, naïve | text",
                        "identical": identical, "divergence": divergence,
                    })
                    order += 1
    summary = summarize(runs, configs)  # the runner's own aggregation: the shapes the writers read
    per_suite = summary["per_suite"]
    adv = None
    if advisor:
        preds = []
        for row in per_suite:
            if row["config"] == "none":
                continue
            predicted = row["speedup"] * (1 + rng.uniform(-0.08, 0.08))
            lo, hi = row["speedup_ci"]
            preds.append({"suite": row["suite"], "config": row["config"], "predicted_speedup": predicted,
                          "measured_speedup": row["speedup"], "measured_ci": row["speedup_ci"],
                          "measured_verdict": row["verdict"], "within_interval": lo <= predicted <= hi,
                          "error": (predicted - row["speedup"]) / row["speedup"]})
        adv = {
            "costs": {"verify": {str(k): 0.035 * (1 + 0.12 * (k - 1)) for k in range(1, 7)},
                      "draft": {str(k): 0.005 * k for k in range(1, 7)}},
            "predictions": preds,
            "recommendation": "Use draft:auto for code editing; for chat the target alone is as fast.",
            "memory_alternative": "ngram needs no extra memory and gains 10% on code editing.",
        }
    has_draft = any(c.startswith("draft") for c in configs)
    return {
        "meta": {
            "created": "2026-11-29T10:00:00", "specdesk_version": "0.1.0",
            "machine": {"cpu": "Intel(R) Xeon(R) CPU @ 2.20GHz", "cores": 2, "gpu": "no NVIDIA GPU"},
            "target": "/home/u/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            "draft": "/home/u/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" if has_draft else None,
            "settings": {"max_tokens": max_tokens, "temperature": temperature, "repeats": repeats, "seed": 0,
                         "suites": suites, "configs": configs},
        },
        "configs": configs,
        "runs": runs,
        "summary": summary,
        "advisor": adv,
        "memory": {"target_bytes": 1.2e9, "draft_bytes": 5.1e8 if has_draft else 0,
                   "extra_ram_bytes": 5.1e8 if has_draft else 0, "extra_vram_bytes": 0},
    }


@pytest.fixture(scope="module")
def result() -> dict:
    return make_result()


@pytest.fixture(scope="module")
def written(result, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "new" / "dir"  # missing parents are created
    paths = write_report(result, out)
    return out, paths


# -- files -------------------------------------------------------------------------------------


def test_writes_all_six_files(written):
    out, paths = written
    assert [p.name for p in paths] == FILE_NAMES
    assert all(p.parent == out and p.is_file() and p.stat().st_size > 0 for p in paths)
    assert sorted(os.listdir(out)) == sorted(FILE_NAMES)  # no temp files left behind


def test_json_round_trips(written, result):
    out, _ = written
    text = (out / "report.json").read_text(encoding="utf-8")
    assert json.loads(text) == result
    assert "\n  " in text  # indented


def test_csv_one_row_per_run(written, result):
    out, _ = written
    with open(out / "report.csv", newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == CSV_FIELDS
    assert len(rows) == len(result["runs"]) == 3 * 4 * 3 * 2
    for row, run in zip(rows, result["runs"]):
        assert (row["suite"], row["prompt_id"], row["config"]) == (run["suite"], run["prompt_id"], run["config"])
        assert int(row["repeat"]) == run["repeat"] and int(row["order"]) == run["order"]
        for k in ("generated", "steps", "drafted", "accepted", "prompt_tokens"):
            assert int(row[k]) == run["stats"][k]
        for k in ("tokens_per_second", "mean_accepted_length", "decode_seconds", "draft_seconds",
                  "verify_seconds", "overhead_seconds", "prompt_seconds"):
            assert float(row[k]) == pytest.approx(run["stats"][k])
        if run["stats"]["acceptance_rate"] is None:
            assert row["acceptance_rate"] == ""
        else:
            assert float(row["acceptance_rate"]) == pytest.approx(run["stats"]["acceptance_rate"])
        assert row["identical"] == {None: "", True: "true", False: "false"}[run["identical"]]
        div = run["divergence"]
        assert row["divergence_verdict"] == (div["verdict"] if div else "")
        assert (float(row["divergence_margin"]) == div["margin"]) if div else row["divergence_margin"] == ""
        assert row["stop_reason"] == "max_tokens"
        # the run's paired ratio, and its suite's speedup with the interval and verdict
        base = next(b for b in result["runs"] if b["config"] == "none" and
                    (b["suite"], b["prompt_id"], b["repeat"]) == (run["suite"], run["prompt_id"], run["repeat"]))
        assert float(row["paired_ratio"]) == pytest.approx(
            run["stats"]["tokens_per_second"] / base["stats"]["tokens_per_second"])
        sr = next(x for x in result["summary"]["per_suite"] if (x["suite"], x["config"]) == (run["suite"], run["config"]))
        assert float(row["suite_speedup"]) == pytest.approx(sr["speedup"])
        assert (float(row["suite_speedup_low"]), float(row["suite_speedup_high"])) == pytest.approx(tuple(sr["speedup_ci"]))
        assert row["suite_verdict"] == sr["verdict"]


def _sections(md: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for line in md.splitlines():
        if line.startswith("## "):
            current = line[3:].split(" (")[0]
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return out


def _row(lines: list[str], config: str) -> list[str]:
    rows = [l for l in lines if l.startswith(f"| `{config}` |")]
    assert len(rows) == 1, (config, lines)
    return [c.strip() for c in rows[0].strip("|").split("|")]


def test_markdown_tables(written, result):
    out, _ = written
    md = (out / "report.md").read_text(encoding="utf-8")
    assert md == markdown(result)
    assert md.startswith("# ")
    header = md.splitlines()[2]
    for part in ("Intel(R) Xeon(R)", "2 cores", "no NVIDIA GPU", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                 "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "max 48 tokens", "temperature 0.0", "2 repeats"):
        assert part in header
    assert "/home/u" not in md  # model names only, not the user's paths
    sections = _sections(md)
    for row in result["summary"]["per_suite"]:
        cells = _row(sections[row["suite"]], row["config"])
        assert len(cells) == 8
        assert cells[1] == f"{row['median_tps']:.1f}"
        assert cells[2].startswith(f"{row['speedup']:.2f}×")
        if row["config"] == "none":
            assert cells[2] == "1.00×" and cells[3] == "baseline" and cells[6] == "baseline"
        else:
            # the speedup with its 95% interval, and the verdict it allows
            lo, hi = row["speedup_ci"]
            assert cells[2] == f"{row['speedup']:.2f}× ({lo:.2f}–{hi:.2f})"
            assert cells[3].strip("*") == verdict_label(ConfigRow.from_dict(row))
            assert (cells[3].startswith("**")) == (row["verdict"] in ("faster", "slower"))
            assert cells[4] == f"{row['acceptance'] * 100:.1f}%"
            assert cells[6].startswith(f"{row['identical']}/{row['compared']}")
        assert cells[5] == f"{row['mean_accepted_length']:.2f}"
        assert cells[7] == f"{row['overhead_share'] * 100:.1f}%"
    for row in result["summary"]["overall"]:
        cells = _row(sections["All suites"], row["config"])
        assert cells[2] == speedup_text(ConfigRow.from_dict(row))
    # every verdict is named, and the repeats' noise is said
    assert any(r["verdict"] == "within-noise" for r in result["summary"]["per_suite"])
    assert "**How sure:**" in md and "from one repeat to the next" in md
    # Divergence counts, in their suite's row and overall.
    assert "(1 near-tie)" in _row(sections["chat"], "draft:k=2")[6]
    assert "**1 mismatch**" in _row(sections["summarization"], "draft:auto")[6]
    assert "(1 near-tie)" in _row(sections["All suites"], "draft:k=2")[6]
    assert "(" not in _row(sections["code_editing"], "draft:k=2")[6]
    # Memory and the reading guide.
    assert "486 MiB of RAM" in md and "none of VRAM" in md
    assert "How to read this" in sections


def test_markdown_advisor_present_and_absent(result):
    md = markdown(result)
    sec = _sections(md)["Advisor"]
    for p in result["advisor"]["predictions"]:
        line = next(l for l in sec if l.startswith(f"| {p['suite']} | `{p['config']}` |"))
        assert f"{p['predicted_speedup']:.2f}×" in line
        lo, hi = p["measured_ci"]
        assert f"{p['measured_speedup']:.2f}× ({lo:.2f}–{hi:.2f})" in line  # the measured interval beside it
        assert f"{p['error'] * 100:.1f}%" in line
    assert result["advisor"]["recommendation"] in md
    assert result["advisor"]["memory_alternative"] in md
    assert "| 1 | 35.0 | 5.0 |" in sec

    no_adv = dict(result, advisor=None)
    md2 = markdown(no_adv)
    assert "## Advisor" not in md2 and "predicted" not in md2


def _check_png(path: Path, min_w: int = 500, min_h: int = 300):
    import matplotlib.image

    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 10_000
    img = matplotlib.image.imread(str(path))
    h, w = img.shape[:2]
    assert min_w <= w <= 4000 and min_h <= h <= 3000
    assert img.std() > 0.05  # not blank


def test_pngs_are_valid(written):
    out, _ = written
    for name in ("speedup.png", "acceptance_by_position.png", "tokens_per_second.png"):
        _check_png(out / name)


def test_acceptance_by_position_aggregates_sums(result):
    rates = report.charts._acceptance_by_position(result)
    assert "none" not in rates and set(rates) == {"draft:k=2", "draft:auto", "ngram"}
    assert len(rates["draft:k=2"]) == 2
    runs = [r for r in result["runs"] if r["config"] == "draft:auto"]
    acc = sum(r["stats"]["accepted_per_position"][1] for r in runs if len(r["stats"]["drafted_per_position"]) > 1)
    dra = sum(r["stats"]["drafted_per_position"][1] for r in runs if len(r["stats"]["drafted_per_position"]) > 1)
    assert rates["draft:auto"][1] == pytest.approx(acc / dra)
    # Acceptance at a later position can only be lower: accepting it needs the earlier ones.
    r2 = rates["draft:k=2"]
    assert 0 < r2[1] < r2[0] <= 1


# -- other shapes of result ----------------------------------------------------------------------


def test_sampling_result_without_comparisons(tmp_path):
    res = make_result(temperature=0.7, advisor=False, prompts=2, repeats=1)
    assert all(r["identical"] is None and r["divergence"] is None for r in res["runs"])
    paths = write_report(res, tmp_path / "t07")
    assert [p.name for p in paths] == FILE_NAMES
    for p in paths[3:]:
        _check_png(p)
    md = (tmp_path / "t07" / "report.md").read_text(encoding="utf-8")
    assert "near-tie" not in "\n".join(l for l in md.splitlines() if l.startswith("| `"))
    assert "only at temperature 0" in md
    assert _row(_sections(md)["chat"], "draft:k=2")[6] == "–"
    rows = list(csv.DictReader(open(tmp_path / "t07" / "report.csv", newline="", encoding="utf-8")))
    assert {r["identical"] for r in rows} == {""}


def test_config_that_never_drafted(tmp_path):
    res = make_result(configs=("none", "ngram"), advisor=False, ngram_drafts=False, prompts=2, repeats=1)
    assert all(r["stats"]["drafted"] == 0 for r in res["runs"])
    assert report.charts._acceptance_by_position(res) == {}
    paths = write_report(res, tmp_path / "nodraft")
    assert [p.name for p in paths] == FILE_NAMES
    for p in paths[3:]:
        _check_png(p, min_w=400, min_h=250)
    md = paths[2].read_text(encoding="utf-8")
    cells = _row(_sections(md)["code_editing"], "ngram")
    assert cells[4] == "–" and cells[5] == "1.00"
    assert "Draft:** none" in md and "No draft model" in md


# -- bad input ----------------------------------------------------------------------------------


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_out_dir_is_a_file(tmp_path, result):
    f = tmp_path / "report"
    f.write_text("keep me")
    before = _tree(tmp_path)
    with pytest.raises(SpecDeskError) as e:
        write_report(result, f)
    assert "\n" not in str(e.value) and str(f) in str(e.value)
    assert _tree(tmp_path) == before and f.read_text() == "keep me"


def test_out_dir_under_a_file(tmp_path, result):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(SpecDeskError) as e:
        write_report(result, f / "sub" / "dir")
    assert "\n" not in str(e.value)
    assert _tree(tmp_path) == ["file"]


def test_read_only_dir(tmp_path, result):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    try:
        try:
            (d / "probe").write_text("x")
        except OSError:
            pass
        else:
            pytest.skip("a read-only directory is writable here (running as root)")
        with pytest.raises(SpecDeskError):
            write_report(result, d)
        with pytest.raises(SpecDeskError):
            write_report(result, d / "missing")
        assert list(d.iterdir()) == []
    finally:
        d.chmod(0o755)


def test_not_a_result(tmp_path):
    for bad in ([], {"runs": []}, {"configs": [], "runs": {}, "summary": {}}):
        with pytest.raises(SpecDeskError):
            write_report(bad, tmp_path / "x")
    assert list(tmp_path.iterdir()) == []


def test_failure_while_rendering_leaves_no_directory(tmp_path, result, monkeypatch):
    def boom(_result):
        raise RuntimeError("chart failed")

    monkeypatch.setattr(report.charts, "tokens_per_second_chart", boom)
    with pytest.raises(RuntimeError):
        write_report(result, tmp_path / "a" / "b")
    assert list(tmp_path.iterdir()) == []


def test_failed_write_leaves_no_partial_file(tmp_path, result, monkeypatch):
    real = os.replace

    def flaky(src, dst):
        if str(dst).endswith("report.md"):
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(files.os, "replace", flaky)  # the one atomic writer, specdesk.files
    with pytest.raises(SpecDeskError, match="No space left"):
        write_report(result, tmp_path)
    names = sorted(os.listdir(tmp_path))
    assert names == ["report.csv", "report.json"]  # complete files only, no temp files
    assert json.loads((tmp_path / "report.json").read_text(encoding="utf-8")) == result


def test_import_is_cheap_and_never_imports_qt(tmp_path):
    code = (
        "import sys, json\n"
        "import specdesk.bench.report as r\n"
        "assert 'matplotlib' not in sys.modules, 'matplotlib imported at import time'\n"
        "res = json.load(open(sys.argv[1]))\n"
        "r.write_report(res, sys.argv[2])\n"
        "qt = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'PyQt5', 'PyQt6', 'shiboken6', 'tkinter')]\n"
        "assert not qt, qt\n"
    )
    src = tmp_path / "in.json"
    src.write_text(json.dumps(make_result(configs=("none", "draft:k=2"), advisor=False, prompts=1, repeats=1)))
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    proc = subprocess.run([sys.executable, "-c", code, str(src), str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path / "out")) == sorted(FILE_NAMES)


# -- exactness and kernel drift ------------------------------------------------------------------


def _drift_dict() -> dict:
    from specdesk.speculative.drift import BatchDrift, Drift

    return Drift(
        by_batch=(
            BatchDrift(1, 32, 0.0, 0.0, 0.0, 0.0, 0),
            BatchDrift(2, 32, 0.0081, 0.053, 0.21, 0.05, 1, 0.115),
            BatchDrift(3, 32, 0.0064, 0.031, 0.18, 0.04, 0),
        ),
        positions=32, near_ties=3, temperature=1.0, window=16, windows=2,
    ).to_dict()


def test_markdown_states_the_claim_and_the_drift_by_batch_size(result):
    md = markdown(dict(result, drift=_drift_dict()))
    sec = "\n".join(_sections(md)["Exactness and kernel drift"])
    assert "as llama.cpp computes it in a verify batch" in sec
    assert "only at near-ties" in sec and "1.56% of positions" in sec  # 1 flip in 64 (position, batch) pairs
    assert "| 2 | 0.810% | 5.30% | 0.2100 | 1 (3.1%) |" in sec
    assert "| 1 (control: single steps again) | 0 | 0 | 0.0000 | 0 (0.0%) |" in sec
    # each divergence in a sentence, the near-tie pointing to the drift
    near = next(l for l in sec.splitlines() if "chat/chat-1" in l)
    assert "near-tie at token 11" in near and "flips the argmax at 1.56% of positions" in near
    mism = next(l for l in sec.splitlines() if "summarization/summarization-2" in l)
    assert "mismatch at token 30" in mism and "worth reporting" in mism
    # the advisor's calibration carries the drift too
    md2 = markdown(dict(result, advisor=dict(result["advisor"], drift=_drift_dict())))
    assert "| 3 | 0.640% | 3.10% | 0.1800 | 0 (0.0%) |" in md2


def test_markdown_without_drift_says_it_was_not_measured_and_what_exact_means_at_t_gt_0():
    md = markdown(make_result(advisor=False, prompts=1, repeats=1))
    assert "the drift was not measured here" in md
    md = markdown(dict(make_result(temperature=0.7, advisor=False, prompts=1, repeats=1), drift=_drift_dict()))
    assert "At T=0.7 runs are not compared token for token" in md


def test_text_that_is_not_utf8_does_not_lose_the_report(tmp_path):
    """A suite path or prompt from argv with bytes that are not UTF-8 (surrogate
    escapes) is written escaped; the report is not lost after the whole run."""
    res = make_result(temperature=0.0, advisor=False, prompts=1, repeats=1)
    for r in res["runs"]:
        r["text"] = "bad byte \udcff here"
    paths = write_report(res, tmp_path / "bad")
    assert [p.name for p in paths] == FILE_NAMES
    assert "\\udcff" in (tmp_path / "bad" / "report.json").read_text(encoding="utf-8")
