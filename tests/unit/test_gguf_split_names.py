"""Split GGUF names: any part names the model, and llama.cpp is handed the first."""

from pathlib import Path

from specdesk.library.gguf.split import first_part, missing_parts, parse_split_name, split_parts


def test_a_part_name_parses_and_rebuilds_every_part():
    s = parse_split_name("Qwen2.5-7B-Q4_K_M-00002-of-00003.gguf")
    assert (s.base, s.no, s.count) == ("Qwen2.5-7B-Q4_K_M", 2, 3)
    assert [s.part(i) for i in (1, 3)] == ["Qwen2.5-7B-Q4_K_M-00001-of-00003.gguf", "Qwen2.5-7B-Q4_K_M-00003-of-00003.gguf"]
    assert s.display == "Qwen2.5-7B-Q4_K_M.gguf"


def test_names_that_are_not_parts():
    for name in ("model.gguf", "model-00000-of-00003.gguf", "model-00004-of-00003.gguf", "model-1-of-3.gguf",
                 "model-00001-of-00002.bin"):
        assert parse_split_name(name) is None, name


def test_any_part_leads_to_the_first_and_to_every_part(tmp_path: Path):
    parts = [tmp_path / f"m-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    for p in parts[:2]:
        p.write_bytes(b"GGUF")
    assert split_parts(parts[1]) == parts
    assert first_part(parts[2]) == parts[0]
    assert missing_parts(parts[0]) == [parts[2]]
    single = tmp_path / "one.gguf"
    assert split_parts(single) == [single] and first_part(single) == single


def test_canonical_keeps_a_split_models_names_through_links(tmp_path: Path):
    """In the Hugging Face cache each part is a link to a blob named by its hash: the
    model's one path is its first part's link (llama.cpp finds the others by name), in
    a resolved folder; a single file resolves to the real file as before."""
    import os

    from specdesk.library.gguf.split import canonical, model_size

    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "rev"
    blobs.mkdir()
    snap.mkdir(parents=True)
    for i, size in ((1, 10), (2, 20), (3, 30)):
        (blobs / f"sha{i}").write_bytes(b"x" * size)
        os.symlink(f"../../blobs/sha{i}", snap / f"m-0000{i}-of-00003.gguf")
    os.symlink(snap, tmp_path / "alias")
    first = snap / "m-00001-of-00003.gguf"
    for name in ("m-00001-of-00003.gguf", "m-00003-of-00003.gguf"):
        assert canonical(tmp_path / "alias" / name) == first
    assert model_size(snap / "m-00002-of-00003.gguf") == 60
    (blobs / "single").write_bytes(b"y")
    os.symlink(blobs / "single", snap / "single.gguf")
    assert canonical(snap / "single.gguf") == blobs / "single" and model_size(snap / "single.gguf") == 1
    # a part whose first part is not there keeps its own name
    lone = tmp_path / "x-00002-of-00002.gguf"
    lone.write_bytes(b"z")
    assert canonical(lone) == lone
