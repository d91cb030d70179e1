""""Spend the draft's memory on a better quant of the target" -- checked against the
target's own Hugging Face repo, served by a local stand-in Hub over 127.0.0.1.

SmolLM2-135M (Q4_1, about 5 bits per weight) is the target. The stand-in repo
publishes it with Q5_K_M and Q8_0 files whose listed sizes are real (sparse files of
the size llama.cpp's bits per weight give), so the choice depends on what is listed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdesk.errors import SpecDeskError
from specdesk.library import hub as hubmod
from specdesk.library.quants import estimated_size, hub_repo_of, published_upgrade, quant_of
from hubserver import FakeHub

REPO = "org/SmolLM2-135M-Instruct-GGUF"


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


@pytest.fixture(scope="module")
def sizes(smol_path):
    quant, size = quant_of(Path(smol_path))
    assert quant == "Q4_1"
    return {"Q4_1": size, "Q5_K_M": estimated_size("Q4_1", size, "Q5_K_M"), "Q8_0": estimated_size("Q4_1", size, "Q8_0")}


@pytest.fixture(scope="module")
def hub_url(tmp_path_factory, smol_path, sizes):
    d = tmp_path_factory.mktemp("quants")
    served = {
        REPO: {
            "smollm2-135m-instruct-q4_1.gguf": smol_path,
            "smollm2-135m-instruct-q5_k_m.gguf": _sparse(d / "q5.gguf", sizes["Q5_K_M"]),
            "smollm2-135m-instruct-q8_0.gguf": _sparse(d / "q8.gguf", sizes["Q8_0"]),
            "README.md": b"# SmolLM2\n",
        },
        "org/only-lower": {"smollm2-135m-instruct-q3_k_m.gguf": _sparse(d / "q3.gguf", sizes["Q4_1"] // 2)},
    }
    with FakeHub(served) as h:
        yield h.url


@pytest.fixture
def hub(hub_url, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", hub_url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return hub_url


def test_the_best_published_quant_that_fits_the_drafts_memory(hub, smol_path, sizes):
    room_for_q8 = sizes["Q8_0"] - sizes["Q4_1"]
    best = published_upgrade(Path(smol_path), room_for_q8, repo=REPO)
    assert (best.quant, best.file, best.size) == ("Q8_0", "smollm2-135m-instruct-q8_0.gguf", sizes["Q8_0"])
    assert best.command == f"specdesk models download {REPO} --file smollm2-135m-instruct-q8_0.gguf"
    assert "Q8_0" in best.describe() and REPO in best.describe()
    # less memory: the next one down that the repo publishes (it has no Q6_K)
    best = published_upgrade(Path(smol_path), room_for_q8 - 1, repo=REPO)
    assert best.quant == "Q5_K_M" and best.size == sizes["Q5_K_M"]
    assert published_upgrade(Path(smol_path), sizes["Q5_K_M"] - sizes["Q4_1"] - 1, repo=REPO) is None


def test_a_repo_without_a_higher_quant_offers_nothing(hub, smol_path):
    assert published_upgrade(Path(smol_path), 10 * 2**30, repo="org/only-lower") is None


def test_an_unknown_repo_is_one_line(hub, smol_path):
    with pytest.raises(SpecDeskError) as e:
        published_upgrade(Path(smol_path), 2**30, repo="org/missing")
    assert "\n" not in str(e.value) and "org/missing" in str(e.value)


def test_the_offered_file_downloads_with_the_command_given(hub, smol_path, sizes, tmp_path):
    """The suggestion is a real file of the repo: `pick` finds it by the name offered."""
    best = published_upgrade(Path(smol_path), sizes["Q8_0"], repo=REPO)
    picked = hubmod.pick(hubmod.list_gguf(REPO), filename=best.file)
    assert picked.quant == best.quant and picked.total_size == best.size


def test_the_repo_a_target_came_from(tmp_path, qwen_target_path):
    snap = tmp_path / "hub" / "models--bartowski--Some-Model-GGUF" / "snapshots" / ("a" * 40)
    assert hub_repo_of(snap / "Some-Model-Q4_K_M.gguf") == "bartowski/Some-Model-GGUF"
    # the default pair's manifest names the repo its files come from
    assert hub_repo_of(Path(qwen_target_path)) == "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"
    assert hub_repo_of(tmp_path / "my-own-model.gguf") is None


def test_advise_names_the_published_quant_and_the_command(hub, tmp_path, smol_path, sizes):
    """`specdesk advise` on a target from the HF cache, with a draft of the target's own
    size: the draft's memory would buy Q8_0 by the estimate, and the repo publishes it."""
    snap = tmp_path / "hf" / f"models--{REPO.replace('/', '--')}" / "snapshots" / ("b" * 40)
    snap.mkdir(parents=True)
    target = snap / "smollm2-135m-instruct-q4_1.gguf"
    os.symlink(smol_path, target)
    env = dict(os.environ, HF_ENDPOINT=hub, HF_HUB_CACHE=str(tmp_path / "hf"))
    env.pop("HF_HUB_OFFLINE", None)
    r = subprocess.run([sys.executable, "-m", "specdesk", "advise", "--target", str(target), "--draft", str(smol_path),
                        "--ctx", "512", "--threads", "2", "--json"], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    pub = out["published_quant"]
    assert pub is not None, out["published_quant_note"]
    assert pub["repo"] == REPO and pub["quant"] in ("Q5_K_M", "Q8_0")
    assert pub["command"].startswith(f"specdesk models download {REPO} --file ")
    # offline, it says why it did not ask
    env["HF_HUB_OFFLINE"] = "1"
    r = subprocess.run([sys.executable, "-m", "specdesk", "advise", "--target", str(target), "--draft", str(smol_path),
                        "--ctx", "512", "--threads", "2"], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr
    assert "HF_HUB_OFFLINE is set" in r.stdout and "(estimated)" in r.stdout
