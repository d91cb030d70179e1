"""Hugging Face Hub support (specdesk.library.hub) against FakeHub (tests/hubserver.py).

Everything goes over real HTTP on 127.0.0.1 through the real huggingface_hub client:
nothing of huggingface_hub is mocked. The served files are the real SmolLM2 test model
(98 MB), SmolLM2 split into three parts as gguf-split writes them, small GGUF files
written with gguf-py's GGUFWriter here, and a tiny complete llama model
(tools/synth/tiny_llama.py), whole and split, that llama.cpp loads.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
from huggingface_hub import constants as hf_constants

from hubserver import FakeHub
from specdesk.errors import Cancelled
from specdesk.library import hub as hubmod
from specdesk.library.hub import DownloadError, HubFile, HubModelFile
from specdesk.library.hub import transfer as hubtransfer
from specdesk.cli.download import add_download_parser, cmd_download
from specdesk.fmt import format_download_size
from specdesk.library.gguf import validate_gguf
from specdesk.session import GenerationConfig, ModelSpec, Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "gguf"))
from split_gguf import split_gguf  # noqa: E402
from synth.tiny_llama import TinySpec, write_tiny_llama  # noqa: E402

SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
QUANTS = ["Q4_K_M", "Q8_0", "F16", "IQ4_XS", "BF16"]
SPLIT = [f"big-Q8_0-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
GATED = [f"g-Q4_0-{i:05d}-of-00002.gguf" for i in (1, 2)]
SMOL_SPLIT = [f"SmolLM2-135M-Instruct.Q4_1-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
TINY = "tiny-llama-Q8_0.gguf"
# huggingface_hub's http_get writes (and reports progress) in chunks of this size
CHUNK = hf_constants.DOWNLOAD_CHUNK_SIZE


def _tiny_gguf(path: Path) -> Path:
    """A small structurally valid GGUF (not a loadable model)."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(path.stem)
    w.add_tensor("t0", np.arange(64, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _one_line(e: BaseException) -> str:
    msg = str(e)
    assert msg and "\n" not in msg, msg
    return msg


def _snapshot_files(cache: Path, repo_id: str) -> list[Path]:
    snaps = cache / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    return sorted(p for p in snaps.rglob("*") if not p.is_dir()) if snaps.exists() else []


def _blobs(cache: Path, repo_id: str) -> list[str]:
    blobs = cache / f"models--{repo_id.replace('/', '--')}" / "blobs"
    return sorted(p.name for p in blobs.iterdir()) if blobs.exists() else []


@pytest.fixture(scope="module")
def served(tmp_path_factory, smol_path):
    d = tmp_path_factory.mktemp("served")
    mixed: dict = {f"tiny-{q}.gguf": _tiny_gguf(d / f"tiny-{q}.gguf") for q in QUANTS}
    tiny = write_tiny_llama(d / TINY)
    mixed.update(zip(SPLIT, split_gguf(tiny, d / "big-Q8_0.gguf", len(SPLIT))))
    mixed["mmproj-F16.gguf"] = mixed["tiny-F16.gguf"]
    mixed["README.md"] = b"# mixed\n"
    mixed["config.json"] = b"{}"
    gated = dict(zip(GATED, split_gguf(tiny, d / "g-Q4_0.gguf", len(GATED))))
    smol_split = dict(zip(SMOL_SPLIT, split_gguf(smol_path, d / "smol" / SMOL, len(SMOL_SPLIT))))
    return {
        "org/mixed": mixed,
        "org/split": {name: mixed[name] for name in SPLIT},
        "org/smol": {SMOL: smol_path, "README.md": b"# SmolLM2\n"},
        "org/smol-split": smol_split,
        "org/tiny": {TINY: tiny},
        "org/bad": {
            "html-Q4_0.gguf": b"<!DOCTYPE html><html>Sign in</html>" + b" " * 4000,
            "corrupt-Q8_0.gguf": _tiny_gguf(d / "corrupt-Q8_0.gguf"),
        },
        "org/gated": gated,
    }


@pytest.fixture(scope="module")
def _hub(served):
    with FakeHub(served) as h:
        yield h


@pytest.fixture
def hub(_hub, tmp_path, monkeypatch):
    """The module's FakeHub with no faults and an empty log; HF_ENDPOINT points at it,
    HF_HUB_CACHE at a fresh temp dir (both read by specdesk at call time)."""
    _hub.clear_faults()
    _hub.clear_log()
    monkeypatch.setenv("HF_ENDPOINT", _hub.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield _hub
    _hub.clear_faults()


@pytest.fixture
def cache(hub, tmp_path) -> Path:
    return (tmp_path / "hf-cache").resolve()  # download() returns resolved paths


def _smol(hub) -> HubModelFile:
    return hubmod.pick(hubmod.list_gguf("org/smol"), quant="Q4_1")


# --------------------------------------------------------------------------------------
# Listing and picking
# --------------------------------------------------------------------------------------


def test_parse_quant():
    cases = {
        "model-Q4_K_M.gguf": "Q4_K_M",
        "SmolLM2-135M-Instruct.Q4_1.gguf": "Q4_1",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf": "Q4_K_M",
        "Llama-3-8B-IQ4_XS.gguf": "IQ4_XS",
        "x-IQ2_XXS-00001-of-00002.gguf": "IQ2_XXS",
        "model-bf16.gguf": "BF16",
        "model.F16.gguf": "F16",
        "Qwen3-30B-A3B-UD-Q4_K_XL.gguf": "Q4_K_XL",
        "Q8_0/big-Q8_0-00002-of-00003.gguf": "Q8_0",
        "QwQ-32B.gguf": None,
    }
    assert {name: hubmod.parse_quant(name) for name in cases} == cases


def test_list_gguf_sizes_quants_and_split_as_one_entry(hub, served):
    models = hubmod.list_gguf("org/mixed")
    by_name = {m.name: m for m in models}
    assert set(by_name) == {f"tiny-{q}.gguf" for q in QUANTS} | {"big-Q8_0.gguf"}  # no README, no mmproj
    for q in QUANTS:
        m = by_name[f"tiny-{q}.gguf"]
        assert m.quant == q and not m.is_split and len(m.files) == 1
        assert m.primary.size == m.total_size == served["org/mixed"][m.primary.filename].stat().st_size
        assert m.primary.sha256 == hub.sha256("org/mixed", m.primary.filename)
    big = by_name["big-Q8_0.gguf"]
    assert big.quant == "Q8_0" and big.is_split and big.complete and big.n_parts == 3
    assert [f.filename for f in big.files] == SPLIT and big.primary.filename == SPLIT[0]
    assert big.total_size == sum(served["org/mixed"][n].stat().st_size for n in SPLIT)
    # the listing is one model_info call with files metadata
    api = [r for r in hub.requests if r.kind == "api"]
    assert len(api) == 1 and api[0].query.get("blobs") == ["true"]


def test_pick_by_file_and_quant_with_clear_errors(hub):
    models = hubmod.list_gguf("org/mixed")
    assert hubmod.pick(models, filename="tiny-IQ4_XS.gguf").quant == "IQ4_XS"
    assert hubmod.pick(models, quant="q4_k_m").primary.filename == "tiny-Q4_K_M.gguf"
    assert hubmod.pick(models, filename=SPLIT[1]).files[0].filename == SPLIT[0]
    assert hubmod.pick(models, filename="big-Q8_0.gguf").is_split
    assert hubmod.pick(models, filename="big-Q8_0.gguf", quant="Q8_0").is_split

    with pytest.raises(DownloadError) as e:
        hubmod.pick(models, quant="Q5_K_M")
    assert _one_line(e.value) == "no Q5_K_M file in the repo; available quants: BF16, F16, IQ4_XS, Q4_K_M, Q8_0"
    with pytest.raises(DownloadError) as e:
        hubmod.pick(models, quant="Q8_0")
    assert "2 files have quant Q8_0" in _one_line(e.value) and "--file" in str(e.value)
    with pytest.raises(DownloadError) as e:
        hubmod.pick(models)
    assert "choose one with --quant or --file" in _one_line(e.value)
    with pytest.raises(DownloadError) as e:
        hubmod.pick(models, filename="nope.gguf")
    assert "no GGUF file named 'nope.gguf'" in _one_line(e.value) and "tiny-F16.gguf" in str(e.value)
    with pytest.raises(DownloadError) as e:
        hubmod.pick([], quant="Q4_K_M")
    assert _one_line(e.value) == "the repo has no GGUF files"


# --------------------------------------------------------------------------------------
# Downloads
# --------------------------------------------------------------------------------------


def test_download_with_progress(hub, cache, smol_path):
    calls: list[tuple[int, int]] = []
    path = hubmod.download("org/smol", _smol(hub), progress=lambda d, t: calls.append((d, t)))
    size = smol_path.stat().st_size
    assert path == cache / "models--org--smol" / "snapshots" / hub.commit("org/smol") / SMOL
    assert path.is_file() and _sha256(path) == hub.sha256("org/smol", SMOL)
    assert calls[0][0] == 0 and calls[-1] == (size, size)
    assert all(t == size for _, t in calls)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:])), "progress must be monotonic"
    assert len(calls) >= 5  # one per chunk
    assert (cache / "models--org--smol" / "refs" / "main").read_text() == hub.commit("org/smol")
    assert not [b for b in _blobs(cache, "org/smol") if b.endswith(".incomplete")]
    # the bytes came from the "CDN" the Hub redirected to, in one GET
    [get] = hub.downloads(SMOL)
    assert get.kind == "cdn" and get.status == 200 and get.bytes_sent == size

    # a second call finds it in the cache: no new transfer, progress says done
    hub.clear_log()
    calls.clear()
    assert hubmod.download("org/smol", _smol(hub), progress=lambda d, t: calls.append((d, t))) == path
    assert hub.downloads(SMOL) == [] and calls[-1] == (size, size)


def test_interrupted_download_fails_then_resumes(hub, cache, smol_path):
    size = smol_path.stat().st_size
    cut = 5 * CHUNK  # on a chunk boundary, so every byte sent before the cut is kept
    hub.fail_after(SMOL, cut)  # every attempt dies there: huggingface_hub retries 5 times, then gives up
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/smol", _smol(hub))
    msg = _one_line(e.value)
    assert msg.startswith(f"download of {SMOL} was interrupted after 52.4 MB of 98.4 MB") and "resume" in msg
    assert _snapshot_files(cache, "org/smol") == []  # no complete file where llama.cpp would look
    assert _blobs(cache, "org/smol") == [f"{hub.sha256('org/smol', SMOL)}.incomplete"]

    hub.clear_faults()
    hub.clear_log()
    calls: list[tuple[int, int]] = []
    path = hubmod.download("org/smol", _smol(hub), progress=lambda d, t: calls.append((d, t)))
    [get] = hub.downloads(SMOL)
    assert get.range == f"bytes={cut}-" and get.range_start == cut > 0 and get.status == 206
    assert get.bytes_sent == size - cut
    assert calls[0] == (cut, size) and calls[-1] == (size, size)  # progress starts where it stopped
    assert _sha256(path) == hub.sha256("org/smol", SMOL)
    assert _blobs(cache, "org/smol") == [hub.sha256("org/smol", SMOL)]


def test_dropped_connection_is_resumed_within_the_call(hub, cache, smol_path):
    size = smol_path.stat().st_size
    hub.fail_after(SMOL, size // 2, times=1)
    path = hubmod.download("org/smol", _smol(hub))
    first, second = hub.downloads(SMOL)
    assert first.dropped and first.bytes_sent == size // 2
    assert second.status == 206 and 0 < second.range_start <= size // 2
    assert hub.bytes_sent(SMOL) < size + CHUNK  # about one file, not two
    assert _sha256(path) == hub.sha256("org/smol", SMOL)


def test_cancel_then_resume(hub, cache, smol_path):
    size = smol_path.stat().st_size
    seen: list[int] = []
    with pytest.raises(Cancelled):
        hubmod.download("org/smol", _smol(hub), progress=lambda d, t: seen.append(d),
                        cancel=lambda: bool(seen) and seen[-1] >= 0.4 * size)
    assert _snapshot_files(cache, "org/smol") == []
    partial = cache / "models--org--smol" / "blobs" / f"{hub.sha256('org/smol', SMOL)}.incomplete"
    kept = partial.stat().st_size
    assert 0 < kept < size

    hub.clear_log()
    path = hubmod.download("org/smol", _smol(hub))
    [get] = hub.downloads(SMOL)
    assert get.range_start == kept and get.bytes_sent == size - kept
    assert _sha256(path) == hub.sha256("org/smol", SMOL)
    assert not partial.exists()


def test_progress_while_held_then_cancel(hub, cache):
    """The GUI case: the transfer stalls (FakeHub.hold), progress shows what arrived,
    the user cancels; the cancel takes effect when the next chunk arrives."""
    reached = hub.hold(SMOL, 2 * CHUNK)
    seen: list[int] = []
    stop = threading.Event()
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            hubmod.download("org/smol", _smol(hub), progress=lambda d, t: seen.append(d), cancel=stop.is_set)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            outcome.append(e)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert reached.wait(20)
        deadline = time.monotonic() + 20
        while (not seen or seen[-1] < 2 * CHUNK) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert seen[-1] == 2 * CHUNK
        stop.set()
    finally:
        hub.release(SMOL)
        worker.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], Cancelled)
    partial = cache / "models--org--smol" / "blobs" / f"{hub.sha256('org/smol', SMOL)}.incomplete"
    assert partial.stat().st_size == 2 * CHUNK


def test_cancel_before_start(hub, cache):
    with pytest.raises(Cancelled):
        hubmod.download("org/smol", _smol(hub), cancel=lambda: True)
    assert hub.downloads(SMOL) == []


def test_split_model_downloads_as_a_set(hub, cache, served):
    model = hubmod.pick(hubmod.list_gguf("org/mixed"), filename="big-Q8_0.gguf")
    calls: list[tuple[int, int]] = []
    path = hubmod.download("org/mixed", model, progress=lambda d, t: calls.append((d, t)))
    snap = cache / "models--org--mixed" / "snapshots" / hub.commit("org/mixed")
    assert path == snap / SPLIT[0]
    assert sorted(p.name for p in snap.iterdir()) == SPLIT
    for name in SPLIT:
        assert (snap / name).read_bytes() == served["org/mixed"][name].read_bytes()
    assert calls[-1] == (model.total_size, model.total_size)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))
    # only the chosen model was transferred
    assert {r.filename for r in hub.requests if r.method == "GET" and r.kind == "cdn"} == set(SPLIT)


def test_a_split_model_resumes_an_interrupted_part_then_loads_from_any_part(hub, cache, served, smol_path):
    """SmolLM2 in three parts, as gguf-split writes them: part 2's transfer dies after one
    chunk; the next call asks only for the rest of part 2 and part 3, the set validates as
    one model, and named by its second part it generates what the single file generates."""
    model = hubmod.pick(hubmod.list_gguf("org/smol-split"))
    assert model.is_split and model.n_parts == 3 and model.name == SMOL
    sizes = {name: served["org/smol-split"][name].stat().st_size for name in SMOL_SPLIT}
    cut = CHUNK  # a chunk boundary: what was sent before the cut is kept
    hub.fail_after(SMOL_SPLIT[1], cut)  # every try dies there, so the call gives up
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/smol-split", model)
    assert _one_line(e.value).startswith(f"download of {SMOL_SPLIT[1]} was interrupted after 10.5 MB of ")
    hub.clear_faults()
    hub.clear_log()
    path = hubmod.download("org/smol-split", model)
    snap = cache / "models--org--smol-split" / "snapshots" / hub.commit("org/smol-split")
    assert path == snap / SMOL_SPLIT[0]
    assert hub.downloads(SMOL_SPLIT[0]) == []  # complete before the cut: not asked again
    [resumed] = hub.downloads(SMOL_SPLIT[1])
    assert resumed.range_start == cut and resumed.bytes_sent == sizes[SMOL_SPLIT[1]] - cut
    assert [r.range_start for r in hub.downloads(SMOL_SPLIT[2])] == [None]
    for name in SMOL_SPLIT:
        assert _sha256(snap / name) == hub.sha256("org/smol-split", name)

    g = validate_gguf(snap / SMOL_SPLIT[2])
    assert g.path == path and len(g.tensors) == len(validate_gguf(smol_path).tensors)
    config = GenerationConfig(proposer="none", max_tokens=12)
    with Session.load(ModelSpec(snap / SMOL_SPLIT[1], n_ctx=256, threads=2), remember_costs=False) as s:
        assert s.target.spec.path == path  # llama.cpp is handed the first part
        split_tokens = s.run(s.raw_prompt("The capital of France is"), config).tokens
    with Session.load(ModelSpec(smol_path, n_ctx=256, threads=2), remember_costs=False) as s:
        whole_tokens = s.run(s.raw_prompt("The capital of France is"), config).tokens
    assert len(split_tokens) == 12 and split_tokens == whole_tokens


def test_a_split_download_with_a_mismatched_part_is_refused_and_removed(hub, cache, served):
    """A repo whose part 2 belongs to another set (the same tiny model split in two):
    every part arrives with the right checksum, but the set does not load; the download
    says which part is wrong and keeps nothing where llama.cpp would look."""
    hub.add_file("org/mismatch", SPLIT[0], served["org/mixed"][SPLIT[0]])
    hub.add_file("org/mismatch", SPLIT[1], served["org/gated"][GATED[1]])
    hub.add_file("org/mismatch", SPLIT[2], served["org/mixed"][SPLIT[2]])
    model = hubmod.pick(hubmod.list_gguf("org/mismatch"))
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/mismatch", model)
    msg = _one_line(e.value)
    assert msg.startswith("big-Q8_0.gguf from org/mismatch is not a usable GGUF model and was removed: ")
    assert f"{SPLIT[1]}: split.count is 2, but {SPLIT[0]} says the model has 3 parts" in msg
    assert _snapshot_files(cache, "org/mismatch") == []


def test_incomplete_split_set_is_refused(hub):
    model = hubmod.pick(hubmod.list_gguf("org/mixed"), filename="big-Q8_0.gguf")
    two = HubModelFile(model.quant, model.files[:2])
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/mixed", two)
    assert _one_line(e.value) == "big-Q8_0.gguf is split into 3 parts but the repo has 2 of them"


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------


def test_repo_not_found(hub, cache):
    with pytest.raises(DownloadError) as e:
        hubmod.list_gguf("org/nope")
    assert _one_line(e.value).startswith(f"repository 'org/nope' not found on {hub.url}")
    assert "HF_TOKEN" in str(e.value)
    ghost = HubModelFile("Q4_0", (HubFile("x-Q4_0.gguf", 10, "Q4_0"),))
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/nope", ghost)
    assert _one_line(e.value).startswith("repository 'org/nope' not found")


def test_file_not_found(hub, cache):
    ghost = HubModelFile("Q4_0", (HubFile("ghost-Q4_0.gguf", 10, "Q4_0"),))
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/mixed", ghost)
    assert _one_line(e.value) == "file 'ghost-Q4_0.gguf' not found in org/mixed at revision 'main'"
    model = _smol(hub)
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/smol", model, revision="v9")
    assert _one_line(e.value) == "revision 'v9' not found in org/smol"
    hub.set_status(SMOL, 404)  # listed, but gone when downloaded
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/smol", model)
    assert _one_line(e.value) == f"file '{SMOL}' not found in org/smol at revision 'main'"
    assert hub.downloads(SMOL) == []


def test_unauthorized_and_gated(hub, cache):
    hub.set_status("org/mixed", 401)
    with pytest.raises(DownloadError) as e:
        hubmod.list_gguf("org/mixed")
    msg = _one_line(e.value)
    assert msg.startswith("unauthorized (HTTP 401) for org/mixed") and "token" in msg

    hub.gate("org/gated", "hf_good")
    with pytest.raises(DownloadError) as e:
        hubmod.list_gguf("org/gated")
    msg = _one_line(e.value)
    assert msg.startswith("org/gated is gated: accept its conditions at") and "HF_TOKEN" in msg
    with pytest.raises(DownloadError) as e:
        hubmod.list_gguf("org/gated", token="hf_bad")
    assert "your token has no access" in _one_line(e.value)

    hub.clear_log()
    [model] = hubmod.list_gguf("org/gated", token="hf_good")
    path = hubmod.download("org/gated", model, token="hf_good")
    assert path.name == GATED[0] and (path.parent / GATED[1]).is_file()
    hub_side = [r for r in hub.requests if r.kind in ("api", "resolve")]
    assert hub_side and all(r.headers.get("authorization") == "Bearer hf_good" for r in hub_side)
    cdn = [r for r in hub.requests if r.kind == "cdn"]
    assert cdn and all("authorization" not in r.headers for r in cdn), "the token must not go to the CDN"


def test_network_unreachable(hub, cache):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(DownloadError) as e:
        hubmod.list_gguf("org/smol", endpoint=f"http://127.0.0.1:{port}")
    msg = _one_line(e.value)
    assert msg.startswith(f"cannot reach http://127.0.0.1:{port}") and "network" in msg


def test_corrupt_download_is_rejected(hub, cache):
    """Right size, wrong bytes: the sha256 the Hub lists catches it; nothing is kept."""
    hub.corrupt("corrupt-Q8_0.gguf")
    model = hubmod.pick(hubmod.list_gguf("org/bad"), filename="corrupt-Q8_0.gguf")
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/bad", model)
    msg = _one_line(e.value)
    assert msg.startswith("corrupt-Q8_0.gguf: checksum mismatch")
    assert hub.sha256("org/bad", "corrupt-Q8_0.gguf")[:16] in msg
    assert _snapshot_files(cache, "org/bad") == [] and _blobs(cache, "org/bad") == []


def test_a_mirror_etag_that_is_not_a_sha256_still_gets_the_listed_checksum_checked(hub, cache, served):
    """A mirror answers an etag that is no sha256 ("mirror-7f3a"), and sends wrong tensor
    bytes (the header intact, so the GGUF checks cannot tell): the sha256 the repo's
    listing gives catches it, and nothing is kept."""
    size = served["org/tiny"][TINY].stat().st_size
    for header in ("ETag", "X-Linked-Etag"):
        hub.override_header(TINY, header, '"mirror-7f3a"')
    hub.corrupt(TINY, from_byte=size - 64)
    model = hubmod.pick(hubmod.list_gguf("org/tiny"))
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/tiny", model)
    msg = _one_line(e.value)
    assert msg.startswith(f"{TINY}: checksum mismatch") and hub.sha256("org/tiny", TINY)[:16] in msg
    assert _snapshot_files(cache, "org/tiny") == [] and _blobs(cache, "org/tiny") == []
    # the same mirror sending the right bytes: accepted, under its own etag
    hub.clear_faults()
    for header in ("ETag", "X-Linked-Etag"):
        hub.override_header(TINY, header, '"mirror-7f3a"')
    path = hubmod.download("org/tiny", model)
    assert _sha256(path) == hub.sha256("org/tiny", TINY) and _blobs(cache, "org/tiny") == ["mirror-7f3a"]


def _mirror(hub, filename: str, size: int | None) -> HubModelFile:
    """``filename`` as a mirror serves it: an etag that is no sha256 and a listing with no
    sha256; with ``size`` None, no size anywhere (none listed, no X-Linked-Size, a
    chunked body)."""
    for header in ("ETag", "X-Linked-Etag"):
        hub.override_header(filename, header, '"mirror-7f3a"')
    if size is None:
        hub.unsized(filename)
    return HubModelFile("Q8_0", (HubFile(filename, size, "Q8_0", sha256=None),))


def test_the_checked_download_is_the_file_placed_and_nothing_is_fetched_after_it(hub, cache, served, tmp_path):
    """Issue 51, defect 1: once the part was downloaded and checked, hf_hub_download placed
    it, sending its own HEAD; the file having changed meanwhile (a new ETag), it downloaded
    the new one itself, with no sha256 check and no size limit, and that was placed. Now
    the checked blob itself is linked into the snapshot and no request follows it."""
    true = served["org/tiny"][TINY].read_bytes()
    other = write_tiny_llama(tmp_path / "other.gguf", TinySpec(n_layer=3, n_ff=512, seed=7))
    assert other.stat().st_size > len(true)
    hub.replace_after_download("org/tiny", TINY, other)
    model = hubmod.pick(hubmod.list_gguf("org/tiny"))
    hub.clear_log()
    path = hubmod.download("org/tiny", model)
    assert path.read_bytes() == true  # what the listing's sha256 vouched for
    log = hub.requests
    [get] = [i for i, r in enumerate(log) if r.method == "GET" and r.filename == TINY]
    assert log[get].bytes_sent == len(true) and log[get + 1:] == [], [(r.method, r.path) for r in log[get + 1:]]
    assert _blobs(cache, "org/tiny") == [hashlib.sha256(true).hexdigest()]
    storage = cache / "models--org--tiny"
    assert (storage / "refs" / "main").read_text() == hub.commit("org/tiny")
    assert path == storage / "snapshots" / hub.commit("org/tiny") / TINY and path.is_symlink()


def test_a_file_of_unknown_size_is_never_written_past_the_limit(hub, cache, served, monkeypatch):
    """A mirror that gives no size (none listed, no X-Linked-Size, a chunked body): the
    part was written for as long as the server sent. Now UNSIZED_LIMIT (50 GB; here half
    the file) stops it with one line, and the partial file is deleted as for a server
    that sends more than the listed size."""
    size = served["org/tiny"][TINY].stat().st_size
    model = _mirror(hub, TINY, None)
    monkeypatch.setattr(hubtransfer, "UNSIZED_LIMIT", size // 2)
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/tiny", model)
    msg = _one_line(e.value)
    assert msg.startswith(f"{TINY}: the server gave no size for it and sent more than ") and "stopped there" in msg, msg
    assert _blobs(cache, "org/tiny") == [] and _snapshot_files(cache, "org/tiny") == []
    # under the limit, the same file of unknown size is downloaded, and checked as a GGUF
    monkeypatch.setattr(hubtransfer, "UNSIZED_LIMIT", size)
    path = hubmod.download("org/tiny", model)
    assert _sha256(path) == hub.sha256("org/tiny", TINY)


def test_without_a_checksum_a_download_that_is_no_gguf_never_takes_its_place(hub, cache):
    """No sha256 listed, an etag that is none: the bytes (a sign-in page) became the blob,
    the snapshot link and the ref before the model was validated and removed. Now the part
    is read as a GGUF before it is moved into place, and nothing of it stays."""
    model = _mirror(hub, "html-Q4_0.gguf", 4035)
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/bad", model)
    msg = _one_line(e.value)
    assert msg.startswith("html-Q4_0.gguf: the download is not a usable GGUF file") and "no sha256" in msg, msg
    storage = cache / "models--org--bad"
    assert _blobs(cache, "org/bad") == [] and _snapshot_files(cache, "org/bad") == []
    assert not (storage / "refs").exists()  # never placed: huggingface_hub wrote no ref for it


def test_without_a_checksum_a_partial_download_is_not_resumed(hub, cache, served):
    """A partial file left by an earlier call, its tensor bytes wrong (another version of
    the file, or a broken transfer): resumed without a sha256, it became a model with the
    right header and wrong weights. Now it is downloaded again from the start."""
    true = served["org/tiny"][TINY].read_bytes()
    model = _mirror(hub, TINY, len(true))
    blobs = cache / "models--org--tiny" / "blobs"
    blobs.mkdir(parents=True)
    stale = bytearray(true[: len(true) - 128])
    stale[-64:] = bytes(b ^ 0x5A for b in stale[-64:])  # header intact: only a checksum could tell
    (blobs / "mirror-7f3a.incomplete").write_bytes(stale)
    path = hubmod.download("org/tiny", model)
    assert path.read_bytes() == true
    assert [r.range for r in hub.downloads(TINY)] == [None]  # from the first byte


class _Counting:
    """The partial file, counting the bytes written to it."""

    def __init__(self, f, counts: list[int]) -> None:
        self._f, self._counts = f, counts

    def write(self, data) -> int:
        self._counts[-1] += len(data)
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def test_a_server_that_sends_more_than_the_listed_size_is_stopped_there(hub, cache, served, monkeypatch):
    """The listing and HEAD say the file's size, the body goes on for 3 chunks more:
    no more than the listed size is ever written, and the partial file is deleted."""
    size = served["org/tiny"][TINY].stat().st_size
    counts: list[int] = []
    real_open = hubtransfer._open_partial

    def counting_open(path):
        counts.append(0)
        return _Counting(real_open(path), counts)

    monkeypatch.setattr(hubtransfer, "_open_partial", counting_open)
    hub.oversend(TINY, 3 * CHUNK)
    model = hubmod.pick(hubmod.list_gguf("org/tiny"))
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/tiny", model)
    assert counts and max(counts) <= size
    assert _one_line(e.value) == (f"{TINY}: the server sent more than the {format_download_size(size)} the Hub lists; "
                                  "stopped there and deleted the partial download")
    assert _snapshot_files(cache, "org/tiny") == [] and _blobs(cache, "org/tiny") == []


def _files_outside(root: Path, cache: Path) -> set[Path]:
    return {p for p in root.rglob("*") if not p.is_dir() and cache not in p.parents}


@pytest.mark.parametrize("header, value", [
    ("X-Linked-Etag", '"../../../escaped"'),  # blobs/../../../escaped.incomplete: beside the cache
    ("X-Linked-Etag", '"/tmp/escaped-abs"'),
    ("X-Linked-Etag", '".."'),
    ("X-Repo-Commit", "../../../escaped"),  # snapshots/../../../escaped/<file>
])
def test_a_hostile_etag_or_commit_cannot_write_outside_the_cache(hub, cache, tmp_path, header, value):
    """A malicious endpoint or mirror names the blob: the download stops with a clear
    error before anything is written, in the cache or outside it."""
    model = hubmod.pick(hubmod.list_gguf("org/mixed"), filename="tiny-F16.gguf")
    before = _files_outside(tmp_path, cache)
    hub.override_header("tiny-F16.gguf", header, value)
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/mixed", model)
    msg = _one_line(e.value)
    assert "unsafe" in msg and "refusing" in msg and "tiny-F16.gguf" in msg, msg
    assert _files_outside(tmp_path, cache) == before
    assert not list(tmp_path.rglob("*escaped*")) and not Path("/tmp/escaped-abs").exists()
    assert hub.downloads("tiny-F16.gguf") == []  # refused before any byte was asked for
    assert _blobs(cache, "org/mixed") == [] and _snapshot_files(cache, "org/mixed") == []


def test_not_a_gguf_is_rejected_after_download(hub, cache):
    """The Hub's checksum matches, but the file is an HTML page: validate_gguf refuses it
    and the file is taken out of the cache again."""
    model = hubmod.pick(hubmod.list_gguf("org/bad"), filename="html-Q4_0.gguf")
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/bad", model)
    msg = _one_line(e.value)
    assert msg.startswith("html-Q4_0.gguf from org/bad is not a usable GGUF model and was removed")
    assert "looks like an HTML page" in msg
    assert _snapshot_files(cache, "org/bad") == [] and _blobs(cache, "org/bad") == []
    assert hubmod.cached_gguf_files() == []


class _DiskFull:
    """The partial file, but writes fail with ENOSPC once ``limit`` bytes were written."""

    def __init__(self, f, limit: int) -> None:
        self._f, self._limit, self.written = f, limit, 0

    def write(self, data) -> int:
        if self.written + len(data) > self._limit:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.written += len(data)
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def test_disk_full(hub, cache, monkeypatch):
    opened: list[_DiskFull] = []
    real_open = hubtransfer._open_partial

    def open_full(path):
        opened.append(_DiskFull(real_open(path), limit=CHUNK + CHUNK // 2))
        return opened[-1]

    monkeypatch.setattr(hubtransfer, "_open_partial", open_full)
    with pytest.raises(DownloadError) as e:
        hubmod.download("org/smol", _smol(hub))
    blobs_dir = cache / "models--org--smol" / "blobs"
    assert _one_line(e.value).startswith(f"no space left on device while downloading {SMOL} to {blobs_dir}")
    assert opened and opened[0].written == CHUNK  # it failed after some bytes were written
    assert _snapshot_files(cache, "org/smol") == [] and _blobs(cache, "org/smol") == []


def test_cached_gguf_files(hub, cache, tmp_path):
    assert hubmod.cached_gguf_files() == []
    model = hubmod.pick(hubmod.list_gguf("org/split"))
    split_path = hubmod.download("org/split", model)
    # an unfinished download is not listed
    with pytest.raises(Cancelled):
        hubmod.download("org/smol", _smol(hub), progress=lambda d, t: None, cancel=lambda: bool(hub.downloads(SMOL)))
    assert any(b.endswith(".incomplete") for b in _blobs(cache, "org/smol"))
    assert hubmod.cached_gguf_files() == [("org/split", split_path)]
    assert hubmod.cached_gguf_files(cache) == [("org/split", split_path)]
    assert hubmod.cached_gguf_files(tmp_path / "does-not-exist") == []


def test_cached_file_is_used_when_offline(hub, cache):
    model = hubmod.pick(hubmod.list_gguf("org/split"))
    path = hubmod.download("org/split", model)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    assert hubmod.download("org/split", model, endpoint=f"http://127.0.0.1:{port}") == path


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------


def _parse(argv: list[str]):
    p = argparse.ArgumentParser(prog="specdesk")
    sub = p.add_subparsers(dest="command")
    m = sub.add_parser("models")
    msub = m.add_subparsers(dest="models_command")
    add_download_parser(msub)
    return p.parse_args(argv)


def test_cmd_download_in_process(hub, cache, capsys):
    assert cmd_download(_parse(["models", "download", "org/mixed", "--list"])) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["QUANT", "SIZE", "PARTS", "FILE"]
    rows = {line.split()[-1]: line.split() for line in out[1:]}
    assert rows[SPLIT[0]][0] == "Q8_0" and rows[SPLIT[0]][-2] == "3"
    assert rows["tiny-IQ4_XS.gguf"][0] == "IQ4_XS" and len(rows) == 6

    assert cmd_download(_parse(["models", "download", "org/split:Q8_0"])) == 0
    captured = capsys.readouterr()
    path = Path(captured.out.strip())
    assert path == cache / "models--org--split" / "snapshots" / hub.commit("org/split") / SPLIT[0]
    assert "big-Q8_0.gguf" in captured.err  # the progress bar

    with pytest.raises(DownloadError) as e:
        cmd_download(_parse(["models", "download", "org/mixed", "--quant", "Q2_K"]))
    assert "available quants" in _one_line(e.value)


def test_cli_models_download(_hub, tmp_path):
    _hub.clear_faults()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_ENDPOINT=_hub.url, HF_HUB_CACHE=str(tmp_path / "hf-cache"), HF_HOME=str(tmp_path / "hf-home"))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "specdesk", "models", "download", *args],
                              capture_output=True, text=True, timeout=60, env=env)

    r = run("org/mixed", "--list")
    assert r.returncode == 0, r.stderr
    assert "big-Q8_0-00001-of-00003.gguf" in r.stdout and "IQ4_XS" in r.stdout

    r = run("org/split", "--quant", "Q8_0")
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip())
    snapshot = (tmp_path / "hf-cache").resolve() / "models--org--split" / "snapshots" / _hub.commit("org/split")
    assert path == snapshot / SPLIT[0]
    assert path.is_file()

    r = run("org/nope")
    assert r.returncode == 2
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("specdesk: error: repository 'org/nope' not found")
