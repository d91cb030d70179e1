"""Split GGUF models (``name-00001-of-0000N.gguf`` ...), as gguf-split writes them.

A real split model made from SmolLM2 (tests/data/gguf/split_gguf.py) validates as one
model named by any part, is estimated and inspected from all its parts, and loads and
generates through the Session API and the CLI when named by its second part, exactly as
the single file does. A missing or mismatched part is one clear line.

The rules llama.cpp's loader applies to a set (src/llama-model-loader.cpp of the
vendored 0.3.36) are checked against the real loader on a tiny complete llama model
split in three and damaged one way per case: every damaged set is refused by
``validate_gguf`` and rejected -- or crashed on -- by llama.cpp (loaded in a subprocess,
tests/data/gguf/llama_load_worker.py), and the intact set loads in both.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGUFValueType as VT

from specdesk.errors import ModelFileError
from specdesk.library.gguf import estimate_memory, inspect_gguf, validate_gguf
from specdesk.library.gguf.split import canonical, first_part, model_size
from specdesk.session import GenerationConfig, ModelSpec, Session, check_model_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "gguf"))
from llama_load_worker import CRASHED, LOADED, REJECTED, load_many  # noqa: E402
from split_gguf import rewrite_part, split_gguf  # noqa: E402
from synth.tiny_llama import write_tiny_llama  # noqa: E402

PROMPT = "The capital of France is"
CONFIG = GenerationConfig(proposer="none", max_tokens=12)


@pytest.fixture(scope="module")
def smol_split(smol_path, tmp_path_factory) -> list[Path]:
    """SmolLM2 in three parts: smol-00001-of-00003.gguf ... (98 MB in all)."""
    return split_gguf(smol_path, tmp_path_factory.mktemp("split") / "smol.gguf", 3)


@pytest.fixture(scope="module")
def whole_tokens(smol_path) -> list[int]:
    with Session.load(ModelSpec(smol_path, n_ctx=256, threads=2), remember_costs=False) as s:
        return s.run(s.raw_prompt(PROMPT), CONFIG).tokens


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(SPECDESK_DATA_DIR=str(tmp_path / "data"), SPECDESK_CACHE_DIR=str(tmp_path / "cache"))
    return env


def _cli(tmp_path: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specdesk", *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=_env(tmp_path))


def _one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def _partial_set(parts: list[Path], dest: Path, keep: list[int]) -> list[Path]:
    """Links to the parts numbered in ``keep`` (1-based) in ``dest``."""
    dest.mkdir()
    out = []
    for i in keep:
        link = dest / parts[i - 1].name
        link.symlink_to(parts[i - 1])
        out.append(link)
    return out


# -- one model, named by any part ---------------------------------------------------------

def test_any_part_validates_estimates_and_inspects_as_the_whole_model(smol_split, smol_path):
    whole = validate_gguf(smol_path)
    for part in smol_split:
        g = validate_gguf(part)
        assert g.path == smol_split[0]  # what llama.cpp must open
        assert [t.name for t in g.tensors] == [t.name for t in whole.tensors]
        assert check_model_file(part) == smol_split[0]
    g = validate_gguf(smol_split[1])
    for n_ctx, ngl in ((4096, 0), (1024, 12), (512, -1)):
        assert estimate_memory(g, n_ctx, ngl) == estimate_memory(whole, n_ctx, ngl)
    split_info, whole_info = inspect_gguf(smol_split[2]), inspect_gguf(smol_path)
    assert split_info["parameters"] == whole_info["parameters"] and split_info["memory"] == whole_info["memory"]
    assert split_info["parts"] == 3 and whole_info["parts"] == 1
    assert split_info["file_size"] == model_size(smol_split[1]) == sum(p.stat().st_size for p in smol_split)
    assert first_part(smol_split[2]) == smol_split[0] and canonical(smol_split[1]) == smol_split[0].resolve()


def test_the_session_loads_a_split_target_named_by_its_second_part(smol_split, whole_tokens, smol_path):
    with Session.load(ModelSpec(smol_split[1], n_ctx=256, threads=2), remember_costs=False) as s:
        assert s.target.spec.path == smol_split[0]
        tokens = s.run(s.raw_prompt(PROMPT), CONFIG).tokens
        weights = s.memory().models[0].weights_bytes
    assert len(tokens) == 12 and tokens == whole_tokens
    assert weights == estimate_memory(validate_gguf(smol_path), 256)["weights_bytes"]


def test_a_split_draft_drafts_for_the_whole_model(smol_split, whole_tokens, smol_path):
    """The same model split as the draft: it shares the target's vocabulary, drafts, and
    at T=0 the answer is the target's own."""
    with Session.load(ModelSpec(smol_path, n_ctx=256, threads=2), ModelSpec(smol_split[2], n_ctx=256, threads=2),
                      remember_costs=False) as s:
        assert s.draft.spec.path == smol_split[0] and s.compat and not s.translated
        g = s.run(s.raw_prompt(PROMPT), GenerationConfig(proposer="draft", k=3, max_tokens=12))
    assert g.tokens == whole_tokens and g.stats.drafted > 0 and g.stats.accepted > 0


def test_the_cli_generates_and_inspects_with_a_split_model_named_by_its_second_part(smol_split, whole_tokens, tmp_path):
    r = _cli(tmp_path, "generate", "--target", smol_split[1], "--raw", "--prompt", PROMPT, "--proposer", "none",
             "--max-tokens", 12, "--ctx", 256, "--threads", 2, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tokens"] == whole_tokens
    r = _cli(tmp_path, "models", "inspect", smol_split[1], "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["parts"] == 3 and info["path"] == str(smol_split[0])
    assert info["memory"]["weights_bytes"] == estimate_memory(validate_gguf(smol_split[0]), 4096)["weights_bytes"]


def test_a_missing_part_is_one_clear_line(smol_split, tmp_path):
    two = _partial_set(smol_split, tmp_path / "two", [1, 2])
    want = f"smol.gguf: part 3 of 3 ({smol_split[2].name}) is missing from {two[0].parent}"
    with pytest.raises(ModelFileError) as e:
        Session.load(ModelSpec(two[1], n_ctx=256, threads=2), remember_costs=False)
    assert str(e.value).startswith(want)
    line = _one_line_error(_cli(tmp_path, "generate", "--target", two[1], "--raw", "--prompt", PROMPT,
                                "--proposer", "none", "--max-tokens", 4, "--ctx", 256))
    assert want in line


def test_a_part_of_another_set_is_one_clear_line(tmp_path):
    """Part 2 of the same model split in two, put in place of part 2 of three: the
    session and the CLI say which part does not belong."""
    tiny = write_tiny_llama(tmp_path / "tiny-whole.gguf")
    three = split_gguf(tiny, tmp_path / "three" / "tiny.gguf", 3)
    two = split_gguf(tiny, tmp_path / "two" / "tiny.gguf", 2)
    shutil.copyfile(two[1], three[1])
    want = f"{three[1].name}: split.count is 2, but {three[0].name} says the model has 3 parts; it belongs to another set"
    with pytest.raises(ModelFileError) as e:
        Session.load(ModelSpec(three[2], n_ctx=64, threads=1), remember_costs=False)
    assert str(e.value) == want
    line = _one_line_error(_cli(tmp_path, "generate", "--target", three[0], "--raw", "--prompt", "the",
                                "--proposer", "none", "--max-tokens", 2, "--ctx", 64))
    assert line.endswith(want)


# -- llama.cpp's rules for a set, against the real loader ------------------------------------

def _set_kv(part: int, key: str, value=None, vtype: VT | None = None):
    def mutate(parts: list[Path]) -> None:
        def change(fields):
            fields = dict(fields)
            if vtype is None:
                fields.pop(key, None)
            else:
                fields[key] = (value, vtype, None)
            return fields
        rewrite_part(parts[part - 1], change)
    return mutate


def _remove(part: int):
    def mutate(parts: list[Path]) -> None:
        parts[part - 1].unlink()
    return mutate


def _repeat_part_2_as_part_3(parts: list[Path]) -> None:
    shutil.copyfile(parts[1], parts[2])
    rewrite_part(parts[2], lambda f: {**f, "split.no": (2, VT.UINT16, None)})


def _upper_case_names(parts: list[Path]) -> None:
    for p in parts:
        p.rename(p.with_name(p.name[: -len(".gguf")] + ".GGUF"))


#: case -> (damage, what validate_gguf says, what llama.cpp does with the first part)
#: (llama-model-loader.cpp: the rule's line in llama_model_loader's constructor)
SET_CASES = {
    "intact": (None, None, {LOADED}),
    # "failed to load GGUF split from"
    "a later part missing": (_remove(3), "part 3 of 3 (tiny-00003-of-00003.gguf) is missing", {REJECTED}),
    # gguf_get_val_u16(split.no) asserts the type: llama.cpp aborts
    "split.no of a later part is a uint32": (_set_kv(2, "split.no", 1, VT.UINT32),
                                             "metadata key 'split.no' is uint32; llama.cpp needs a uint16", {CRASHED}),
    # "invalid split file idx: %d (file: %s), expected %d"
    "split.no of a later part out of order": (_set_kv(2, "split.no", 2, VT.UINT16),
                                              "split.no is 2, but its name makes it part 2 of 3", {REJECTED}),
    # "missing key %s in GGUF split %s"
    "split.no missing in a later part": (_set_kv(3, "split.no"), "missing metadata key 'split.no'", {REJECTED}),
    # "illegal split file idx ... model must be loaded with the first split"
    "split.no of the first part is not 0": (_set_kv(1, "split.no", 1, VT.UINT16),
                                            "split.no is 1, but its name makes it part 1 of 3", {REJECTED}),
    # get_key(split.count): "key ... has wrong type"
    "split.count is a uint32": (_set_kv(1, "split.count", 3, VT.UINT32),
                                "metadata key 'split.count' is uint32; llama.cpp needs a uint16", {REJECTED}),
    # "corrupted model: %d tensors expected but %d found"
    "split.tensors.count one too many": (_set_kv(1, "split.tensors.count", 21, VT.INT32),
                                         "split.tensors.count is 21 but the 3 parts hold 20 tensors", {REJECTED}),
    # get_key(split.tensors.count) is required
    "split.tensors.count missing": (_set_kv(1, "split.tensors.count"),
                                    "missing metadata key 'split.tensors.count'", {REJECTED}),
    # get_key into an int: "key ... has wrong type"
    "split.tensors.count is a uint32": (_set_kv(1, "split.tensors.count", 20, VT.UINT32),
                                        "metadata key 'split.tensors.count' is uint32; llama.cpp needs an int32",
                                        {REJECTED}),
    # "invalid model: tensor '%s' is duplicated"
    "a part repeated": (_repeat_part_2_as_part_3, "is in part 2 and part 3; llama.cpp refuses a duplicated tensor",
                        {REJECTED}),
    # llama_split_prefix compares the lower-case postfix: "invalid split file name"
    "names in upper case": (_upper_case_names, "but its name does not end in -0000N-of-00003.gguf", {REJECTED}),
    # llama.cpp reads no split.count from a later part: refused here all the same, as a
    # part of another set (it would load a mix of two models)
    "a later part from a set of another size": (_set_kv(2, "split.count", 4, VT.UINT16),
                                                "split.count is 4, but tiny-00001-of-00003.gguf says the model has 3",
                                                {LOADED}),
}


@pytest.fixture(scope="module")
def set_cases(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """Each case's damaged set, and llama.cpp's verdict on its first part."""
    root = tmp_path_factory.mktemp("sets")
    tiny = write_tiny_llama(root / "tiny-whole.gguf")
    firsts = {}
    for i, (case, (damage, _, _)) in enumerate(SET_CASES.items()):
        parts = split_gguf(tiny, root / f"case{i}" / "tiny.gguf", 3)
        if damage is not None:
            damage(parts)
        firsts[case] = next(p for p in sorted(parts[0].parent.iterdir()) if "00001-of" in p.name)
    verdicts = load_many(list(firsts.values()))
    return {case: (firsts[case], verdicts[str(firsts[case])]) for case in SET_CASES}


@pytest.mark.parametrize("case", list(SET_CASES))
def test_a_damaged_set_is_refused_in_one_line_as_llama_cpp_refuses_it(set_cases, case):
    _, fragment, llama = SET_CASES[case]
    first, verdict = set_cases[case]
    assert verdict in llama, f"llama.cpp {verdict} the first part of {case!r}"
    if fragment is None:
        assert validate_gguf(first).path == first
        return
    with pytest.raises(ModelFileError) as e:
        validate_gguf(first)
    assert fragment in str(e.value) and "\n" not in str(e.value)
