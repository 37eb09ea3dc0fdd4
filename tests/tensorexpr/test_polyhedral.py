"""tensorexpr.polyhedral: answers about index expressions (the isl module)."""
from __future__ import annotations

import tensorexpr as te
from tensorexpr.ir import Axis, Const
from tensorexpr.polyhedral import affine_form, is_index_arithmetic

I64 = "int64"


def test_affine_form_of_a_data_dependent_index_is_none():
    # issue 7: sampling the offset at a point evaluated I[0] as a constant and raised
    # "not a closed integer expression" (the C backend hoists E[I[i] % 3, j]'s row)
    k = Axis("k", Const(0, I64), Const(4, I64), 10_001)
    j = Axis("j", Const(0, I64), Const(3, I64), 10_002)
    Ix = te.placeholder((4,), dtype="int32", name="I")
    X = te.placeholder((4,), name="X")
    for e in (Ix[k] % 3, (Ix[k] % 3) * 3 + j, Ix[0] // 2 + k, te.select(Ix[k] > 0, k, j),
              (X[k] * 2.0).astype("int64") % 3, (k.astype("float32") / 2.0).astype("int64")):
        assert not is_index_arithmetic(e)
        assert affine_form(e, [k, j]) is None


def test_affine_form_still_sees_flattens_and_clamps():
    k = Axis("k", Const(0, I64), Const(12, I64), 10_003)
    assert is_index_arithmetic(te.minimum(k // 4, 2) + (k % 4).astype("int32"))
    assert affine_form((k // 4) * 4 + k % 4 + 3, [k]) == (3, (1,))
    assert affine_form(te.select(k < 20, k, 0) * 2, [k]) == (0, (2,))


def test_recent_answers_equal_keys_built_afresh_and_only_those():
    # Recent compares a key once per hit (its kept key object is moved by identity):
    # expressions built afresh are one key, another constant or type another
    from tensorexpr.polyhedral import Recent
    r = Recent(4)
    k = Axis("k", Const(0, I64), Const(4, I64), 10_003)
    made = []

    def ask(e):
        return r.get((k, e), lambda: made.append(str(e)) or len(made))
    assert ask(k + 1) == ask(k + 1) == 1
    assert ask(k + 2) == 2 and ask(k.astype("int32") + 1) == 3 and ask(k + 1) == 1
    assert made == ["(k + 1)", "(k + 2)", "(int32(k) + 1)"]
    for n in range(3, 8):  # the least recently used are dropped, k + 1 among them
        ask(k + n)
    assert ask(k + 1) == len(made)
