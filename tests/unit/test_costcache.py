"""auto's measured costs carry over to the next session on the same pair."""

import json
import os
import sys

import pytest

from specdesk import files
from specdesk.session import costcache
from specdesk.speculative.controller import StepCost
from specdesk.speculative.auto import AutoK
from specdesk.speculative.costmodel import CostModel


def _measured(pays: bool = True) -> AutoK:
    """A controller after a session on a pair: target alone at 0.1 s a token; drafting k
    verifies k + 1 tokens in 0.1 + 0.01 k s and drafts in 0.02 k s (it pays), or in
    0.1 + 0.09 k s and 0.06 k s (a CPU: even a draft always right cannot pay)."""
    auto = AutoK()
    for _ in range(40):
        k = auto.budget("draft", 2, 400)
        d = auto.take_decision()
        verify = 0.1 + (0.01 if pays else 0.09) * k
        draft = (0.02 if pays else 0.06) * k
        auto.observe(StepCost("draft" if k else "", None, k, k, draft, verify, draft_synced=2 if k else 0,
                              emitted=k + 1, step_seconds=verify + draft, decision=d))
    return auto


def test_costs_round_trip_with_a_capped_weight():
    auto = _measured(pays=False)
    fresh = AutoK()
    fresh.restore_costs(json.loads(json.dumps(auto.saved_costs())), weight=4)
    assert fresh.costs.verify_cost(1) == auto.costs.verify_cost(1)
    assert fresh.costs.draft_cost(2) == auto.costs.draft_cost(2)
    # counted as 4 measurements, not more: a new one moves the estimate by a fifth
    v1 = fresh.costs.verify_cost(1)
    fresh.costs.observe_verify(1, v1 + 0.05)
    assert abs(fresh.costs.verify_cost(1) - (v1 + 0.050 / 5)) < 1e-9
    # and the outcomes, as ratios to target alone, capped alike: target alone is not
    # carried (its seconds follow the load), so they apply once it was timed, here on a
    # machine twice as busy
    r, _ = auto.source_ratio("draft")
    assert fresh.source_ratio("draft") is None
    for _ in range(fresh.first_steps):
        fresh.budget("draft", 2, 400)
        fresh.observe(StepCost("", None, 0, 0, 0.0, 0.2, emitted=1, step_seconds=0.2, decision=fresh.take_decision()))
    fresh.budget("draft", 2, 400)
    assert abs(fresh.source_ratio("draft")[0] - r) < 1e-9
    assert fresh.judges.sources["draft"].n <= 4


def test_a_restored_controller_skips_the_exploring():
    """Where drafting was measured to pay, the next session drafts as soon as it has
    timed target alone, with no probe, and prepares the draft up front; where no draft
    could pay, it never drafts, and the draft never evaluates the prompt."""
    fresh = AutoK()
    assert fresh.peek("draft", 1, 400) == 1  # never tried: the entry ticket
    for pays, peek, reasons in ((True, 1, {"measured cheaper"}), (False, 0, {"bound<1"})):
        restored = AutoK()
        restored.restore_costs(_measured(pays).saved_costs())
        for _ in range(restored.first_steps):
            restored.budget("draft", 2, 400)
            restored.observe(StepCost("", None, 0, 0, 0.0, 0.1, emitted=1, step_seconds=0.1,
                                      decision=restored.take_decision()))
        assert restored.peek("draft", 1, 400) == peek
        seen = set()
        for _ in range(5):
            restored.budget("draft", 2, 400)
            seen.add(restored.take_decision().reason)
        assert seen == reasons


def test_damaged_entries_are_skipped():
    cm = CostModel.from_dict({"verify": {"1": 0.1, "2": "x", "0": 0.2, "3": -1.0, "4": float("nan")},
                              "draft": {"2": 0.05}, "counts": {"verify": {"1": "bad"}}})
    # a text, a zero size, a negative or NaN cost, an unreadable count: all dropped
    assert cm.verify == {}
    assert cm.draft_cost(2) == 0.05


def test_save_and_load_a_real_file(tmp_path):
    path = tmp_path / "cache" / "auto-costs.json"
    assert costcache.load("pair", path) is None  # nothing saved yet
    state = _measured().saved_costs()
    costcache.save("pair", state, path)
    assert costcache.load("pair", path) == state
    assert costcache.load("another pair", path) is None
    # no temp file left: the folder holds the file and nothing else (the atomic write's
    # temporary is ".auto-costs.json.XXXX.tmp" beside it)
    assert sorted(p.name for p in path.parent.iterdir()) == ["auto-costs.json"]


def test_a_corrupt_file_is_ignored_and_replaced(tmp_path):
    path = tmp_path / "auto-costs.json"
    path.write_text("{ not json")
    assert costcache.load("pair", path) is None
    costcache.save("pair", {"verify": {"1": 0.1}}, path)
    assert costcache.load("pair", path) == {"verify": {"1": 0.1}}


def test_keeps_only_the_most_recent_pairs(tmp_path):
    path = tmp_path / "auto-costs.json"
    for i in range(costcache.MAX_ENTRIES + 5):
        costcache.save(f"pair {i}", {"verify": {"1": 0.1}}, path)
    pairs = json.loads(path.read_text())["entries"]
    assert len(pairs) == costcache.MAX_ENTRIES
    assert "pair 0" not in pairs and f"pair {costcache.MAX_ENTRIES + 4}" in pairs


def test_the_key_changes_with_the_file_and_the_setup(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(b"x")
    b.write_bytes(b"y")
    k = costcache.pair_key(a, 2, 0, b, 2, 0)
    assert costcache.pair_key(a, 2, 0, b, 2, 0) == k
    assert costcache.pair_key(a, 4, 0, b, 2, 0) != k  # threads
    assert costcache.pair_key(a, 2, 99, b, 2, 0) != k  # GPU offload
    assert costcache.pair_key(a, 2, 0, None, None, 0) != k  # no draft
    a.write_bytes(b"xx")  # the file changed
    assert costcache.pair_key(a, 2, 0, b, 2, 0) != k


def test_the_temp_file_check_can_fail(tmp_path, monkeypatch):
    """A write that leaves its temporary behind is caught by the check above."""
    path = tmp_path / "cache" / "auto-costs.json"

    def leaky_replace(src, dst):  # copy instead of rename: the temporary stays
        with open(src, "rb") as f:
            data = f.read()
        with open(dst, "wb") as f:
            f.write(data)

    monkeypatch.setattr(files.os, "replace", leaky_replace)
    costcache.save("pair", {"verify": {"1": 0.1}}, path)
    names = sorted(p.name for p in path.parent.iterdir())
    assert names != ["auto-costs.json"] and any(n.startswith(".auto-costs.json.") for n in names)


def _kept(folder):
    return [p for p in folder.iterdir() if ".damaged-" in p.name]


@pytest.mark.parametrize("content", [
    "[1, 2, 3]",  # a list, not an object
    '{"version": 2, "entries": [["pair", {"seq": 1}]]}',  # pairs a list
    "[" * 200_000 + "]" * 200_000,  # nested past the recursion limit
    '{"version": 2, "entries": ' + "[" * 200_000 + "]" * 200_000 + "}",
])
def test_a_cache_of_the_wrong_shape_is_ignored_then_replaced(tmp_path, content):
    path = tmp_path / "auto-costs.json"
    path.write_text(content)
    assert costcache.load("pair", path) is None
    costcache.save("pair", {"verify": {"1": 0.1}}, path)
    assert costcache.load("pair", path) == {"verify": {"1": 0.1}}


def test_an_unreadable_cache_is_moved_aside_not_deleted(tmp_path):
    path = tmp_path / "auto-costs.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    assert costcache.load("pair", path) is None
    [kept] = _kept(tmp_path)
    assert kept.read_text().startswith("[[[")


def test_entries_of_the_wrong_shape_are_left_out(tmp_path):
    path = tmp_path / "auto-costs.json"
    good = {"verify": {"1": 0.1}, "draft": {"2": 0.05}, "counts": {"verify": {"1": 3}}, "catch_up": [0.01, 2],
            "outcomes": {"draft": [0.8, 3.0, 0.2, 4.0], "draft|3": [0.7, 3.5, 0.1, 2.0]}}
    path.write_text(json.dumps({"version": 2, "entries": {
        "list entry": [1, 2],
        "list state": {"seq": 1, "value": [1, 2]},
        "bad seq": {"seq": "x", "value": good},
        "inner lists": {"seq": 2, "value": {"verify": [0.1], "draft": {"2": "x", "3": 0.2},
                                            "counts": [1], "catch_up": {"a": 1},
                                            "outcomes": {"draft": [0.8, "x", 0.2, 4], "ngram:4|2": [1, 2, 3],
                                                         "draft|1": [0.9, 2.0, 0.1, 3.0]}}},
        "good": {"seq": 3, "value": good},
    }}))
    assert costcache.load("list entry", path) is None
    assert costcache.load("list state", path) is None
    assert costcache.load("bad seq", path) == good
    assert costcache.load("inner lists", path) == {"verify": {}, "draft": {"3": 0.2},
                                                   "outcomes": {"draft|1": [0.9, 2.0, 0.1, 3.0]}}
    assert costcache.load("good", path) == good
    # what load gives is what the controller reads without failing
    for key in ("bad seq", "inner lists", "good"):
        AutoK().restore_costs(costcache.load(key, path))
    costcache.save("new", good, path)  # a text seq once crashed max()
    pairs = json.loads(path.read_text())["entries"]
    assert set(pairs) == {"bad seq", "inner lists", "good", "new"} and pairs["new"]["seq"] == 4


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file names are bytes")
def test_a_file_name_that_is_not_utf8_is_saved_and_found_again(tmp_path):
    target = tmp_path / os.fsdecode(b"model-\xff\xfe.gguf")  # a surrogate-escaped name
    target.write_bytes(b"x")
    key = costcache.pair_key(target, 2, 0, None, None, 0)
    assert "\udcff" in key
    path = tmp_path / "auto-costs.json"
    costcache.save(key, {"verify": {"1": 0.1}}, path)  # raised UnicodeEncodeError (ensure_ascii=False)
    assert costcache.load(key, path) == {"verify": {"1": 0.1}}
    path.read_bytes().decode("ascii")  # plain ASCII on disk
