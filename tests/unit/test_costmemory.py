"""auto's measured costs carry over to the next session on the same pair."""

import json

from specdesk import costmemory
from specdesk.speculative.controller import AutoK, StepCost
from specdesk.speculative.costmodel import CostModel


def _measured() -> AutoK:
    auto = AutoK()
    for _ in range(10):
        auto.observe(StepCost("", None, 0, 0, 0.0, 0.100))  # a target step
        auto.observe(StepCost("draft", None, 3, 3, 0.060, 0.130))  # draft 3, verify 4
    return auto


def test_costs_round_trip_with_a_capped_weight():
    auto = _measured()
    fresh = AutoK()
    fresh.restore_costs(json.loads(json.dumps(auto.saved_costs())), weight=4)
    assert fresh.costs.verify_cost(1) == auto.costs.verify_cost(1)
    assert fresh.costs.verify_cost(4) == auto.costs.verify_cost(4)
    assert fresh.costs.draft_cost(3) == auto.costs.draft_cost(3)
    # counted as 4 measurements, not 10: a new one moves the estimate by a fifth
    fresh.costs.observe_verify(1, 0.150)
    assert abs(fresh.costs.verify_cost(1) - (0.100 + 0.050 / 5)) < 1e-9


def test_a_restored_controller_decides_from_the_first_step():
    # a fresh controller spends its first step measuring target alone
    assert AutoK().budget("draft", None, 8) == 0
    auto = _measured()
    restored = AutoK()
    restored.restore_costs(auto.saved_costs())
    # drafting 3 at 0.19 s for up to 4 tokens beats 0.10 s per token: it drafts at once
    assert restored.costs.step_cost == auto.costs.step_cost
    assert restored.budget("draft", None, 8) > 0


def test_damaged_entries_are_skipped():
    cm = CostModel.from_dict({"verify": {"1": 0.1, "2": "x", "0": 0.2, "3": -1.0, "4": float("nan")},
                              "draft": {"2": 0.05}, "counts": {"verify": {"1": "bad"}}})
    # a text, a zero size, a negative or NaN cost, an unreadable count: all dropped
    assert cm.verify == {}
    assert cm.draft_cost(2) == 0.05


def test_save_and_load_a_real_file(tmp_path):
    path = tmp_path / "cache" / "auto-costs.json"
    assert costmemory.load("pair", path) is None  # nothing saved yet
    state = _measured().saved_costs()
    costmemory.save("pair", state, path)
    assert costmemory.load("pair", path) == state
    assert costmemory.load("another pair", path) is None
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".auto-costs-")]  # no temp file left


def test_a_corrupt_file_is_ignored_and_replaced(tmp_path):
    path = tmp_path / "auto-costs.json"
    path.write_text("{ not json")
    assert costmemory.load("pair", path) is None
    costmemory.save("pair", {"verify": {"1": 0.1}}, path)
    assert costmemory.load("pair", path) == {"verify": {"1": 0.1}}


def test_keeps_only_the_most_recent_pairs(tmp_path):
    path = tmp_path / "auto-costs.json"
    for i in range(costmemory.MAX_ENTRIES + 5):
        costmemory.save(f"pair {i}", {"verify": {"1": 0.1}}, path)
    pairs = json.loads(path.read_text())["pairs"]
    assert len(pairs) == costmemory.MAX_ENTRIES
    assert "pair 0" not in pairs and f"pair {costmemory.MAX_ENTRIES + 4}" in pairs


def test_the_key_changes_with_the_file_and_the_setup(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(b"x")
    b.write_bytes(b"y")
    k = costmemory.pair_key(a, 2, 0, b, 2, 0)
    assert costmemory.pair_key(a, 2, 0, b, 2, 0) == k
    assert costmemory.pair_key(a, 4, 0, b, 2, 0) != k  # threads
    assert costmemory.pair_key(a, 2, 99, b, 2, 0) != k  # GPU offload
    assert costmemory.pair_key(a, 2, 0, None, None, 0) != k  # no draft
    a.write_bytes(b"xx")  # the file changed
    assert costmemory.pair_key(a, 2, 0, b, 2, 0) != k
