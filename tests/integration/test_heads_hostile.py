"""Hostile draft heads: files that name layers their target lacks, of another width, with
a block size of 0 or 2^31, a selector missing or half there, another vocabulary, a bad
``d2t`` map, no mask token, a target whose graph exposes no layer inputs; and headers
mutated at random. Each pair runs as a user's would (Session.load, then a few drafted
tokens) in a subprocess, so an abort in llama.cpp is a failure rather than the end of
the test run: every named one is refused in one line (and the CLI exits 2 with that
line), and no mutant aborts."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as VT

from clirun import assert_one_line_error, cli
from specdesk.library.gguf import read_gguf

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests" / "data" / "gguf"))
from head_pair_worker import CRASHED, ERROR, REFUSED, TIMEOUT, run_pairs  # noqa: E402
from isolated import EXITED  # noqa: E402
from synth.heads import write_dflash_pair, write_eagle3_pair  # noqa: E402
from synth.mutations import apply_mutations, header_fields, random_ops  # noqa: E402
from synth.tiny_llama import TinySpec, rebuild_gguf, write_tiny_llama  # noqa: E402

#: name -> (kind, writer changes, what the refusal says)
CASES = {
    "eagle3 layer 9 of 4": ("eagle3", dict(layers=(0, 2, 9)), "reads layer 9 of its target"),
    "dflash layer 7 of 4": ("dflash", dict(layers=(1, 7)), "reads layer 7 of its target"),
    "eagle3 four layers": ("eagle3", dict(layers=(0, 1, 2, 3)), "reads 3 target layers"),
    "eagle3 for a wider target": ("eagle3", dict(mode="random", target_hidden=128), "expects a target 128 wide"),
    "eagle3 narrower, sharing": ("eagle3", dict(mode="random", head_embd=32), "uses its target's token embeddings"),
    "dflash narrower": ("dflash", dict(mode="random", head_embd=32), "expects a target 32 wide"),
    "dflash block 0": ("dflash", dict(block_size=0), "dflash.block_size is 0"),
    "dflash block 2^31": ("dflash", dict(block_size=2**31), "dflash.block_size is 2147483648"),
    "dflash selector key, no tensors": ("dflash", dict(selector_top_k=4), "without its selector"),
    "dflash selector tensors, no keys": ("dflash", dict(selector_tensors=True), "has selector tensors but no"),
    "eagle3 another vocabulary": ("eagle3", dict(head_vocab=1), "vocabulary of 405 tokens"),
}
#: name -> (kind, the head's metadata/tensor edits for rebuild_gguf, what the refusal says)
EDITS = {
    "dflash mask past the vocabulary": ("dflash", dict(set_kv={"tokenizer.ggml.mask_token_id": (VT.UINT32, 9999)}),
                                        "names no mask token"),
    "eagle3 d2t of floats": ("eagle3", dict(extra_tensors=[("d2t", (406,), Q.F32)]), "tensor 'd2t'"),
    "dflash no target layers": ("dflash", dict(set_kv={"dflash.target_layers": None}), "names no target layers"),
}
WRITERS = {"eagle3": write_eagle3_pair, "dflash": write_dflash_pair}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    out = {}
    for i, (name, (kind, changes, _)) in enumerate(CASES.items()):
        out[name] = (kind, *WRITERS[kind](root / f"c{i}", **changes))
    for i, (name, (kind, edits, _)) in enumerate(EDITS.items()):
        target, head = WRITERS[kind](root / f"e{i}")
        out[name] = (kind, target, rebuild_gguf(head, head.with_name("edited.gguf"), **edits))
    target, head = write_eagle3_pair(root / "qwen2")
    other = write_tiny_llama(root / "qwen2" / "granite.gguf", TinySpec(tokenizer="bpe", arch="granite"))
    out["a target without layer inputs"] = ("eagle3", other, head)
    out["a head as the target"] = ("eagle3", head, head)
    return out


NEEDLES = {**{n: c[2] for n, c in CASES.items()}, **{n: c[2] for n, c in EDITS.items()},
           "a target without layer inputs": "gives no layer inputs of a granite model",
           "a head as the target": "a head of another model"}


def test_every_hostile_pair_is_refused_in_one_line_and_none_aborts(files):
    names = list(files)
    results = run_pairs([files[n] for n in names])
    for name, (status, msg) in zip(names, results):
        assert status == REFUSED, (name, status, msg)
        assert NEEDLES[name] in msg, (name, msg)


@pytest.mark.parametrize("name", ["eagle3 layer 9 of 4", "dflash block 2^31"])
def test_the_cli_exits_2_with_that_line(files, name):
    kind, target, head = files[name]
    r = cli("generate", "--target", target, "--draft", head, "--proposer", kind, "--ctx", "256", "--raw",
            "--prompt", "the of", "--max-tokens", "4")
    assert_one_line_error(r, NEEDLES[name])


def test_mutated_heads_never_abort(tmp_path):
    """Header mutations of both kinds of agreeing head (seeded): each pair is refused,
    or it runs; none aborts or hangs."""
    rng = random.Random(4949)
    cases = []
    for kind, writer in WRITERS.items():
        target, head = writer(tmp_path / kind)
        data = head.read_bytes()
        fields = header_fields(data, read_gguf(head))
        for i in range(60):
            mutant = tmp_path / kind / f"m{i}.gguf"
            mutant.write_bytes(apply_mutations(data, random_ops(rng, data, fields)))
            cases.append((kind, str(target), str(mutant)))
    results = run_pairs(cases)
    bad = [(c[2], r) for c, r in zip(cases, results) if r[0] in (CRASHED, TIMEOUT, EXITED, ERROR)]
    assert not bad, bad
    assert {r[0] for r in results} >= {REFUSED}
    print({s: sum(r[0] == s for r in results) for s in {r[0] for r in results}})
