"""tensorexpr.transform: substitution and sub-expression replacement respect binders.

A reduction binds its axes in its body and ``where``. Rewriting the axes of an
enclosing expression must neither reach into a reduction that binds the same axis
(it is another variable there: a reduce axis reused by sibling reductions, or a
gather's domain axis that is also the inner sum's) nor let a reduction capture an
axis of a replacement. Each case is checked by evaluating with the numpy backend.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from tensorexpr.ir import Axis, Const, Reduce, same, walk
from tensorexpr.transform import free_axes, replace_subexpr, substitute

I64 = "int64"


def _value(expr, X, x):
    """The value of the closed scalar ``expr`` (reading ``X``) on the numpy backend."""
    t = te.compute((), lambda: expr, name="v")
    return float(te.build(t, inputs=[X], backend="numpy")(x))


def test_substitute_does_not_enter_a_reduction_binding_the_key():
    X = te.placeholder((4, 4), "float64", "X")
    k = te.reduce_axis(4, name="k")
    e = X[k, 1] + te.sum(X[k, k], axis=k)
    out = substitute(e, {k: Const(2, I64)})
    x = np.arange(16.0).reshape(4, 4)
    assert _value(out, X, x) == x[2, 1] + np.trace(x)


def test_substitute_renames_a_bound_axis_a_replacement_would_be_captured_by():
    X = te.placeholder((4, 4), "float64", "X")
    k = te.reduce_axis(4, name="k")
    j = Axis("j", Const(0, I64), Const(4, I64), te.ir.fresh_uid())
    e = te.sum(X[k, j], axis=k)       # a column sum of column j
    out = substitute(e, {j: k * 0 + 3})  # j := an expression holding k (the outer k is 3)
    red = next(x for x in walk(out) if isinstance(x, Reduce))
    assert red.axes[0].uid != k.uid  # renamed, not captured
    # The replacement's k is free in it: bind it outside to see the value.
    x = np.arange(16.0).reshape(4, 4)
    assert _value(substitute(out, {k: Const(1, I64)}), X, x) == x[:, 3].sum()
    captured = substitute(e, {j: k})  # j := k itself: sum_k' X[k', k], k still free
    assert [a.uid for a in free_axes(captured)] == [k.uid]
    assert _value(substitute(captured, {k: Const(2, I64)}), X, x) == x[:, 2].sum()


def test_substitute_maps_bounds_of_bound_axes():
    """A bound axis's range may depend on an outer axis (gathers make such sums)."""
    X = te.placeholder((6,), "float64", "X")
    i = Axis("i", Const(0, I64), Const(3, I64), te.ir.fresh_uid())
    k = Axis("k", i, i + 3, te.ir.fresh_uid())  # k in [i, i + 3)
    e = Reduce("sum", X[k], (k,), None, "float64")
    out = substitute(e, {i: Const(2, I64)})
    assert not free_axes(out)
    x = np.arange(6.0) ** 2
    assert _value(out, X, x) == x[2:5].sum()


def test_substitute_inside_the_where_of_a_sibling_reduction():
    X = te.placeholder((5,), "float64", "X")
    k = te.reduce_axis(5, name="k")
    s = te.sum(X[k], axis=k, where=X[k] > 0.0)  # k is bound in the where too
    e = X[k] * s
    out = substitute(e, {k: Const(3, I64)})
    x = np.array([1.0, -2.0, 3.0, 4.0, -5.0])
    assert _value(out, X, x) == x[3] * x[x > 0].sum()


def test_substitute_leaves_untouched_expressions_identical():
    X = te.placeholder((4,), "float64", "X")
    k = te.reduce_axis(4, name="k")
    n = Axis("n", Const(0, I64), Const(4, I64), te.ir.fresh_uid())
    e = te.sum(X[k], axis=k) * X[n]
    inner = next(x for x in walk(e) if isinstance(x, Reduce))
    out = substitute(e, {n: Const(1, I64)})
    assert next(x for x in walk(out) if isinstance(x, Reduce)) is inner


def test_replace_subexpr_does_not_replace_under_a_binder_of_its_axes():
    X = te.placeholder((4,), "float64", "X")
    k = te.reduce_axis(4, name="k")
    target = X[k]
    e = X[k] + te.sum(X[k], axis=k)  # only the first X[k] is the outer k's
    out = replace_subexpr(e, target, te.const(10.0, "float64"))
    x = np.arange(4.0)
    assert _value(out, X, x) == 10.0 + x.sum()
    # without axes in it, a target is replaced everywhere
    c = te.const(1.0, "float64") + 2.0
    out2 = replace_subexpr(te.sum(X[k] * c, axis=k), c, te.const(0.5, "float64"))
    assert _value(out2, X, x) == 0.5 * x.sum()


@settings(max_examples=40, deadline=None)
@given(lo=st.integers(-3, 3), width=st.integers(1, 4), at=st.integers(0, 3),
       nested=st.booleans())
def test_substitute_agrees_with_evaluation(lo, width, at, nested):
    """Substituting an axis by a constant = evaluating at that point, whatever the
    reductions inside bind (the same axis object, or ranges depending on it)."""
    X = te.placeholder((16,), "float64", "X")
    i = Axis("i", Const(0, I64), Const(4, I64), te.ir.fresh_uid())
    k = Axis("k", Const(lo, I64) + i, Const(lo + width, I64) + i, te.ir.fresh_uid())
    inner = Reduce("sum", X[k + 4] * X[i + 8], (k,), None, "float64")
    e = X[i] * inner
    if nested:
        m = te.reduce_axis(2, name="m")
        e = e + te.sum(X[m + i] * X[m], axis=m)
    x = np.random.default_rng((lo + 3) * 10 + width).uniform(-1, 1, 16)
    got = _value(substitute(e, {i: Const(at, I64)}), X, x)
    want = x[at] * sum(x[kk + 4] * x[at + 8] for kk in range(lo + at, lo + width + at))
    if nested:
        want += sum(x[mm + at] * x[mm] for mm in range(2))
    assert np.isclose(got, want, rtol=1e-12, atol=1e-12)
    assert same(substitute(e, {}), e)


def test_replace_subexprs_each_is_replace_subexprs_of_each():
    # (a recurrence's partials share their nodes: rewritten together, once per target)
    import tensorexpr as te
    from tensorexpr.ir import same
    from tensorexpr.transform import replace_subexprs, replace_subexprs_each
    X = te.placeholder((4,), name="X")
    k = te.reduce_axis(4, name="k")
    s = te.sum(X[k] * 2.0, axis=k)
    t = te.tanh(X[0] + s)
    exprs = [t * (1.0 - t * t), t + X[1], X[2] * 3.0, s, te.exp(s) * t]
    pairs = [(s, X[3]), (t, X[1] * 5.0), (X[2], X[0])]
    got = replace_subexprs_each(exprs, pairs)
    want = [replace_subexprs(e, pairs) for e in exprs]
    assert all(same(a, b) for a, b in zip(got, want))
    # in turn: the sum replaced first, the tanh holding it no longer matches its target
    assert str(got[0]) == "(tanh(X[0] + X[3]) * (1.0 - (tanh(X[0] + X[3]) * tanh(X[0] + X[3]))))"
    assert str(got[2]) == "(X[0] * 3.0)"
    # an expression holding no target is returned itself
    e = X[0] + 1.0
    assert replace_subexprs_each([e], pairs)[0] is e


def test_free_axes_kept_on_a_node_answer_by_structure_and_stay_the_callers():
    from tensorexpr.ir import Axis, Const
    from tensorexpr.transform import free_axes
    import tensorexpr as te
    i = Axis("i", Const(0, "int64"), Const(4, "int64"), 901)
    j = Axis("j", Const(0, "int64"), Const(4, "int64"), 902)
    X = te.placeholder((4, 4), name="X")
    k = te.reduce_axis(4, name="k")
    e = te.sum(X[i, k] * X[k, j], axis=k)
    first = free_axes(e)
    assert [a.uid for a in first] == [901, 902]
    first.append(k)  # the caller's list: the node's answer is not changed
    assert [a.uid for a in free_axes(e)] == [901, 902]
    # an equal expression built again (another node) has the same answer
    again = te.sum(X[i, k] * X[k, j], axis=k)
    assert again is not e and [a.uid for a in free_axes(again)] == [901, 902]
    # another expression does not get this one's answer
    assert [a.uid for a in free_axes(X[i, 0] + 1.0)] == [901]
