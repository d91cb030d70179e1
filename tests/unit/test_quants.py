"""Which higher quantization of the target the draft's memory would buy instead."""

from __future__ import annotations

from pathlib import Path

from specdesk.library.quants import BITS_PER_WEIGHT, best_upgrade, estimated_size, quant_of, upgrade_for

GIB = 2**30


def test_the_highest_quant_that_fits_the_budget_is_named():
    # a 1.04 GiB Q4_K_M target and the 0.5B draft's ~0.6 GiB: Q6_K fits, Q8_0 does not
    u = best_upgrade("Q4_K_M", int(1.04 * GIB), int(0.6 * GIB))
    assert u is not None and (u.current, u.better) == ("Q4_K_M", "Q6_K")
    assert u.better_bytes == estimated_size("Q4_K_M", int(1.04 * GIB), "Q6_K")
    assert 0 < u.extra_bytes <= int(0.6 * GIB)
    assert "Q4_K_M → Q6_K" in u.describe()
    # a larger budget reaches Q8_0, a tiny one nothing
    assert best_upgrade("Q4_K_M", int(1.04 * GIB), 2 * GIB).better == "Q8_0"
    assert best_upgrade("Q4_K_M", int(1.04 * GIB), 10 * 2**20) is None


def test_nothing_above_the_top_or_for_unknown_types():
    assert best_upgrade("F16", GIB, 100 * GIB) is None
    assert best_upgrade("Q8_0", GIB, GIB).better == "F16"
    assert best_upgrade("TQ1_0", GIB, GIB) is None
    assert best_upgrade(None, GIB, GIB) is None
    assert best_upgrade("Q4_K_M", GIB, 0) is None


def test_sizes_scale_with_bits_per_weight():
    assert estimated_size("Q4_K_M", 1000, "Q4_K_M") == 1000
    assert estimated_size("Q4_K_M", 1000, "Q8_0") == int(1000 * BITS_PER_WEIGHT["Q8_0"] / BITS_PER_WEIGHT["Q4_K_M"])
    assert estimated_size("nope", 1000, "Q8_0") is None


def test_a_real_file(smol_path):
    quant, size = quant_of(Path(smol_path))
    assert quant == "Q4_1" and size == Path(smol_path).stat().st_size
    u = upgrade_for(Path(smol_path), size)  # as much again as the file
    assert u is not None and BITS_PER_WEIGHT[u.better] > BITS_PER_WEIGHT["Q4_1"]
    assert u.extra_bytes <= size

