"""The caches of isl answers (tensorexpr.polyhedral.recent, spaces): keys compared by
structure, not identity, where IR nodes are built again; shared values the callers
cannot change for each other."""
from __future__ import annotations

import math

import tensorexpr as te
from tensorexpr.ir import Axis, Const
from tensorexpr.polyhedral import Space
from tensorexpr.polyhedral.recent import Recent
from tensorexpr.polyhedral.spaces import zero_and_vars


def _axis(uid, hi=8):
    return Axis("i", Const(0, "int64"), Const(hi, "int64"), uid)


def test_an_equal_key_built_again_hits_and_another_misses():
    r = Recent(4)
    made = []
    make = lambda: made.append(1) or len(made)  # noqa: E731
    X = te.placeholder((8,), name="X")
    assert r.get((_axis(5), X[_axis(5)] + 1.0), make) == 1
    assert r.get((_axis(5), X[_axis(5)] + 1.0), make) == 1  # new nodes, same structure
    assert r.get((_axis(5), X[_axis(5)] + 2.0), make) == 2  # another constant
    assert r.get((_axis(6), X[_axis(6)] + 1.0), make) == 3  # another axis (uid)
    assert r.get((_axis(5, 9), X[_axis(5, 9)] + 1.0), make) == 4  # another bound
    assert len(made) == 4


def test_a_nan_constant_matches_itself_by_structure():
    r = Recent(2)
    assert r.get((Const(math.nan, "float32"),), lambda: "a") == "a"
    assert r.get((Const(math.nan, "float32"),), lambda: "b") == "a"


def test_plain_keys_compare_by_value():
    r = Recent(2, plain=True)
    assert r.get(("shape", (1, ("a", 2.5))), lambda: 1) == 1
    assert r.get(("shape", (1, ("a", 2.5))), lambda: 2) == 1
    assert r.get(("shape", (1, ("a", 2.0))), lambda: 3) == 3


def test_spaces_share_their_variables_but_not_the_dict():
    i = _axis(7)
    a, b = Space([i], ["n"]), Space([_axis(7)], ["n"])
    assert a.vars is not b.vars and a.vars["a7"] is b.vars["a7"]
    a.vars["extra"] = a.vars[0]
    assert "extra" not in b.vars and "extra" not in zero_and_vars(("a7",), ("n",))
    # the isl answers from shared variables are those of variables made afresh
    assert str(a.box()) == str(Space([_axis(7)], ["n"]).box())
    assert str(Space([_axis(8)]).box()) == "{ [a8] : 0 <= a8 <= 7 }"
