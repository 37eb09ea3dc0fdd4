"""The case table: tiers, ids, and a definition of every case in every system."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.cases import CASES, TIER1, TIER2, TIERS, Arg, by_id
from benchmarks.systems import numpy_sys, te_sys


def test_tiers_partition_the_cases_in_id_order():
    assert [c.id for c in CASES] == list(range(1, 34))
    assert {c.tier for c in TIER1} == {1} and {c.tier for c in TIER2} == {2}
    assert TIERS == {1: TIER1, 2: TIER2} and len(TIER2) == 19
    assert by_id(33).key == "l2norm"
    with pytest.raises(KeyError):
        by_id(34)


@pytest.mark.parametrize("key", sorted({c.key for c in CASES}))
def test_every_key_is_defined_by_tensorexpr_and_numpy(key):
    assert callable(te_sys.FORWARD[key])
    forward, backward = numpy_sys.IMPL[key]
    assert callable(forward) and callable(backward)


def test_every_tier2_case_grows_and_has_quick_sizes_no_larger_than_full():
    for case in TIER2:
        assert case.grow and set(case.grow) <= set(case.full), case.key
        assert all(case.quick[k] <= v for k, v in case.full.items()), case.key


def test_scale_multiplies_a_float_input():
    plain, scaled = Arg("W", lambda p: (64,)), Arg("W", lambda p: (64,), scale=lambda p: 0.5)
    case = by_id(1)
    a = case.inputs({"M": 1, "K": 64, "N": 1})["A"]
    twin = type(case)(1, "matmul", "x", {}, {}, (plain,), ("W",))
    half = type(case)(1, "matmul", "x", {}, {}, (scaled,), ("W",))
    w, w2 = twin.inputs({})["W"], half.inputs({})["W"]
    assert np.array_equal(w2, (w.astype(np.float64) * 0.5).astype(np.float32))
    assert a.shape == (1, 64)
