"""The stride identities of ``codegen.residue_algebra``, checked point by point."""
from __future__ import annotations


from hypothesis import given, settings, strategies as st

from codegen.residue_algebra import decompose, linear, terms, tidy
from tensorexpr.ir import Axis, Const
from tensorexpr.transform import eval_int, substitute


def _axis(name, lo, hi, uid):
    return Axis(name, Const(lo, "int64"), Const(hi, "int64"), uid)


def _at(e, values):
    return int(eval_int(substitute(e, {a: Const(v, "int64") for a, v in values.items()})))



@settings(max_examples=60, deadline=None)
@given(s=st.integers(2, 4), c=st.integers(-3, 3), b=st.integers(-7, 7), k=st.integers(-2, 2),
       op=st.sampled_from(["floordiv", "mod"]))
def test_tidy_keeps_every_value(s, c, b, k, op):
    # (s*c*q + k*x + b) // s and % s, for negative operands too
    q, x = _axis("q", -3, 5, 1), _axis("x", -2, 3, 2)
    e = (q * (s * c) + x * k + b) // s if op == "floordiv" else (q * (s * c) + x * k + b) % s
    t = tidy(e, q.uid, s)
    if c:  # q leaves every modulo by s (with c == 0 it is multiplied by 0 and stays)
        assert not any(isinstance(n, Axis) and n.uid == q.uid and op == "mod"
                       for n in _mods_of(t))
    for qv in range(-3, 5):
        for xv in range(-2, 3):
            assert _at(t, {q: qv, x: xv}) == _at(e, {q: qv, x: xv})


def _mods_of(e):
    from tensorexpr.ir import Binary, walk
    return [a for m in walk(e) if isinstance(m, Binary) and m.op == "mod" for a in walk(m.a)]


@settings(max_examples=60, deadline=None)
@given(s=st.integers(2, 4), cy=st.integers(-2, 2), k=st.integers(-9, 9),
       with_r=st.booleans())
def test_decompose_is_exact_where_it_applies(s, cy, k, with_r):
    y, r = _axis("y", -2, 5, 1), _axis("r", 0, s, 2)
    e = y * (s * cy) + k + (r if with_r else 0)
    got = decompose(e, s, {r.uid})
    if with_r and k % s:
        assert got is None
        return
    plane, quotient = got
    for yv in range(-2, 5):
        for rv in range(s):
            p, qv = _at(plane, {y: yv, r: rv}), _at(quotient, {y: yv, r: rv})
            assert 0 <= p < s and s * qv + p == _at(e, {y: yv, r: rv})


def test_terms_and_linear_of_non_affine_indices():
    y = _axis("y", 0, 8, 1)
    assert terms(y * y) is None and linear(y // 2, y.uid) is None
    assert terms(-(y * 3) + 1)[:2] == (1, {1: -3})
