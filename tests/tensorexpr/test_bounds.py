"""Static bounds checking (isl) and run-time checks of data-dependent reads."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorexpr as te

from .util import BACKENDS, check, rand, run

A = te.placeholder((8,), name="A")


def bounds_error(fn):
    with pytest.raises(te.BoundsError) as info:
        fn()
    assert isinstance(info.value, IndexError)  # BoundsError is also an IndexError
    return str(info.value)


def test_off_by_one_read_names_tensor_line_and_point():
    msg = bounds_error(lambda: te.compute((8,), lambda i: A[i + 1], name="shifted"))
    assert "'shifted'" in msg and "'A'" in msg
    # the user's own source line, with its text
    assert "test_bounds.py:" in msg
    assert 'msg = bounds_error(lambda: te.compute((8,), lambda i: A[i + 1], name="shifted"))' in msg
    assert "i = 7" in msg and "(8,)" in msg  # the offending point and the index it reads


def test_off_by_one_below_and_with_symbolic_sizes():
    msg = bounds_error(lambda: te.compute((8,), lambda i: A[i - 1], name="back"))
    assert "i = 0" in msg and "(-1,)" in msg
    n = te.var("n")
    X = te.placeholder((n, 3), name="X")
    msg = bounds_error(lambda: te.compute((n, 3), lambda i, j: X[i, j + 1], name="right"))
    assert "'right'" in msg and "j = 2" in msg
    # i + 1 < n guards the read for every n
    te.compute((n, 3), lambda i, j: te.select(i + 1 < n, X[i + 1, j], 0.0), name="down")
    bounds_error(lambda: te.compute((n, 3), lambda i, j: te.select(i < n, X[i + 1, j], 0.0),
                                    name="down_bad"))


def test_guarded_reads_pass():
    te.compute((8,), lambda i: te.select(i < 7, A[i + 1], 0.0), name="select_guard")
    te.compute((8,), lambda i: te.select((i > 0) & (i < 7), A[i - 1] + A[i + 1], 0.0), name="both")
    k = te.reduce_axis(3, name="k")
    te.compute((8,), lambda i: te.sum(A[i + k], axis=k, where=i + k < 8), name="where_guard")
    # the affine part of a mixed condition is enough
    te.compute((8,), lambda i: te.sum(A[i + k], axis=k, where=(i + k < 8) & (A[i] > 0)),
               name="mixed")
    te.compute((8,), lambda i: te.select(i < 7, te.select(i > 0, A[i - 1] + A[i + 1], 0.0), 0.0),
               name="nested")


def test_bad_guards_fail():
    bounds_error(lambda: te.compute((8,), lambda i: te.select((i > 0) | (i < 7), A[i + 1], 0.0),
                                    name="or_guard"))
    k = te.reduce_axis(3, name="k")
    bounds_error(lambda: te.compute((8,), lambda i: te.sum(A[i + k], axis=k, where=i + k < 9),
                                    name="loose_where"))
    # a data-dependent guard proves nothing
    bounds_error(lambda: te.compute((8,), lambda i: te.select(A[i] > 0, A[i + 1], 0.0),
                                    name="data_guard"))
    # the condition itself is always evaluated
    bounds_error(lambda: te.compute((8,), lambda i: te.select(A[i + 1] > 0, 1.0, 0.0),
                                    name="cond_read"))


def test_right_operands_of_and_or_are_checked_under_the_left():
    """`a & b` evaluates b only where a holds, `a | b` only where a fails."""
    te.compute((8,), lambda i: te.select((i >= 1) & (A[i - 1] > 0), 1.0, 0.0), name="and_")
    te.compute((8,), lambda i: te.select((i < 1) | (A[i - 1] > 0), 1.0, 0.0), name="or_")
    te.compute((8,), lambda i: te.select(~((i < 1) | (A[i - 1] <= 0)), 1.0, 0.0), name="not_")
    te.compute((8,), lambda i: te.select((i >= 1) & (i < 7) & (A[i - 1] > A[i + 1]), 1.0, 0.0),
               name="chain")
    k = te.reduce_axis(3, name="k")
    te.compute((8,), lambda i: te.sum(1.0, axis=k, where=(i + k < 8) & (A[i + k] > 0)),
               name="where_and")
    # nested: the inner select sees the outer & as well
    te.compute((8,), lambda i: te.select((i >= 1) & (te.select(i < 7, A[i + 1], A[i - 1]) > 0),
                                         1.0, 0.0), name="nested")
    # the left operand is evaluated first, whatever the right one says
    msg = bounds_error(lambda: te.compute((8,), lambda i: te.select(
        (A[i - 1] > 0) & (i >= 1), 1.0, 0.0), name="wrong_order"))
    assert "i = 0" in msg
    bounds_error(lambda: te.compute((8,), lambda i: te.select(
        (i >= 1) | (A[i - 1] > 0), 1.0, 0.0), name="or_wrong"))


def test_read_out_of_range_only_in_the_untaken_branch_passes():
    te.compute((8,), lambda i: te.select(i >= 7, 0.0, A[i + 1]), name="else_branch")
    te.compute((8,), lambda i: te.select(i == 0, A[0], A[i - 1]), name="first")


@pytest.mark.parametrize("backend", BACKENDS)
def test_untaken_branch_is_never_evaluated(backend):
    """Values of the untaken branch (even NaN) never reach the result."""
    X = te.placeholder((6,), name="X")
    Y = te.compute((6,), lambda i: te.select(i < 5, X[i + 1] - X[i], 0.0), name="diff")
    Z = te.compute((6,), lambda i: te.select(X[i] > 0, te.log(X[i]), -1.0), name="safe_log")
    x = np.array([1.0, 2.0, -4.0, 8.0, 0.0, 3.0], np.float32)
    y, z = run(backend, [Y, Z], x)
    check(y, np.append(np.diff(x), np.float32(0)))
    check(z, np.where(x > 0, np.log(np.abs(x) + (x == 0)), -1.0).astype(np.float32))
    assert not np.isnan(z).any()


def test_clamped_indices():
    te.compute((8,), lambda i: A[te.maximum(i - 1, 0)] + A[te.minimum(i + 1, 7)], name="clamped")
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    te.compute((n,), lambda i: X[te.minimum(te.maximum(i - 2, 0), n - 1)], name="sym_clamp")
    msg = bounds_error(lambda: te.compute((8,), lambda i: A[te.minimum(i + 1, 8)], name="loose"))
    assert "i = 7" in msg
    bounds_error(lambda: te.compute((8,), lambda i: A[te.maximum(i - 2, -1)], name="loose_lo"))


def test_div_and_mod_indices():
    te.compute((16,), lambda i: A[i // 2], name="upsample")
    te.compute((100,), lambda i: A[i % 8], name="wrap")
    te.compute((8,), lambda i: A[(i - 3) % 8], name="roll")  # floor modulo is never negative
    te.compute((4,), lambda i: A[2 * i + 1], name="odd")
    msg = bounds_error(lambda: te.compute((17,), lambda i: A[i // 2], name="upsample_bad"))
    assert "i = 16" in msg
    bounds_error(lambda: te.compute((100,), lambda i: A[i % 9], name="wrap_bad"))
    # floor division: (0 - 1) // 2 == -1
    msg = bounds_error(lambda: te.compute((8,), lambda i: A[(i - 1) // 2], name="floor_bad"))
    assert "(-1,)" in msg


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_dependent_index_out_of_range_raises_index_error(backend):
    idx = te.placeholder((4,), dtype="int32", name="idx")
    Y = te.compute((4,), lambda i: A[idx[i]], name="gather")
    f = te.build(Y, backend=backend)
    a = rand(8)
    check(f(a, np.array([0, 7, 3, 3], np.int32)), a[[0, 7, 3, 3]])
    for bad in ([0, 8, 1, 1], [0, 1, -1, 2], [2**31 - 1, 0, 0, 0]):
        with pytest.raises(IndexError, match="gather"):
            f(a, np.array(bad, np.int32))
    # the function still works after an error
    check(f(a, np.array([1, 2, 3, 4], np.int32)), a[[1, 2, 3, 4]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_dependent_index_guarded_or_offset(backend):
    idx = te.placeholder((5,), dtype="int64", name="idx")
    G = te.compute((5,), lambda i: te.select((idx[i] >= 0) & (idx[i] < 8), A[idx[i]], -1.0),
                   name="guarded")
    S = te.compute((5,), lambda i: A[te.maximum(idx[i], 0) % 4 + 2], name="offset")
    a = rand(8)
    ids = np.array([0, 9, -3, 7, 2], np.int64)
    g, s = run(backend, [G, S], a, ids)
    check(g, np.where((ids >= 0) & (ids < 8), a[np.clip(ids, 0, 7)], -1.0).astype(np.float32))
    check(s, a[np.maximum(ids, 0) % 4 + 2])
    T = te.compute((5,), lambda i: A[idx[i] + 2], name="shifted")
    with pytest.raises(IndexError, match="shifted"):
        run(backend, T, a, np.array([0, 6, 1, 1, 1], np.int64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_dependent_index_in_reduction_and_untaken_branch(backend):
    idx = te.placeholder((3, 4), dtype="int32", name="idx")
    k = te.reduce_axis(4, name="k")
    S = te.compute((3,), lambda i: te.sum(A[idx[i, k]], axis=k, where=idx[i, k] < 8), name="bag")
    a = rand(8)
    ids = np.array([[0, 1, 2, 3], [7, 100, 7, 9], [5, 5, 5, 5]], np.int32)
    want = np.array([sum(a[j] for j in row if j < 8) for row in ids], np.float32)
    check(run(backend, S, a, ids), want)


# {{{ the isl check against brute force


I_EXT, J_EXT = 5, 4

leaves = st.one_of(st.sampled_from(["i", "j"]), st.integers(-3, 6))


def _grow(children):
    return st.one_of(
        st.tuples(st.sampled_from(["add", "sub", "max", "min"]), children, children),
        st.tuples(st.just("mul"), children, st.integers(-2, 3)),
        st.tuples(st.sampled_from(["floordiv", "mod"]), children, st.integers(1, 4)),
    )


index_exprs = st.recursive(leaves, _grow, max_leaves=5)


def build(e, env):
    """The language expression for a tree (``env`` maps 'i', 'j' to axes)."""
    if isinstance(e, str):
        return env[e]
    if isinstance(e, int):
        return te.const(e)
    op, a, b = e
    x = build(a, env)
    if op in ("mul", "floordiv", "mod"):
        return {"mul": lambda: x * b, "floordiv": lambda: x // b, "mod": lambda: x % b}[op]()
    y = build(b, env)
    return {"add": lambda: x + y, "sub": lambda: x - y,
            "max": lambda: te.maximum(x, y), "min": lambda: te.minimum(x, y)}[op]()


def value(e, env):
    """The same tree evaluated with Python integers (floor division and modulo)."""
    if isinstance(e, str):
        return env[e]
    if isinstance(e, int):
        return e
    op, a, b = e
    x = value(a, env)
    if op in ("mul", "floordiv", "mod"):
        return x * b if op == "mul" else x // b if op == "floordiv" else x % b
    y = value(b, env)
    return {"add": x + y, "sub": x - y, "max": max(x, y), "min": min(x, y)}[op]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(e0=index_exprs, e1=index_exprs, size0=st.integers(1, 9), size1=st.integers(1, 6),
       guard=st.one_of(st.none(), st.tuples(index_exprs, st.integers(-2, 6))))
def test_static_check_agrees_with_enumeration(e0, e1, size0, size1, guard):
    """te.compute raises BoundsError exactly when some evaluated point reads outside."""
    X = te.placeholder((size0, size1), name="X")
    out_of_range = False
    for i, j in itertools.product(range(I_EXT), range(J_EXT)):
        env = {"i": i, "j": j}
        if guard is not None and not value(guard[0], env) < guard[1]:
            continue  # the read is not evaluated here
        p, q = value(e0, env), value(e1, env)
        out_of_range |= not (0 <= p < size0 and 0 <= q < size1)

    def body(i, j):
        env = {"i": i, "j": j}
        read = X[build(e0, env), build(e1, env)]
        if guard is None:
            return read
        return te.select(build(guard[0], env) < guard[1], read, 0.0)

    if out_of_range:
        with pytest.raises(te.BoundsError):
            te.compute((I_EXT, J_EXT), body, name="Y")
    else:
        te.compute((I_EXT, J_EXT), body, name="Y")


def _combine(children):
    return st.one_of(st.tuples(st.sampled_from(["and", "or"]), children, children),
                     st.tuples(st.just("not"), children))


# ("data",) stands for a data-dependent condition (D[k] > 0): true or false at run time.
conditions = st.recursive(
    st.one_of(st.tuples(st.sampled_from(["lt", "eq"]), index_exprs, st.integers(-2, 6)),
              st.just(("data",))), _combine, max_leaves=4)


def build_cond(c, env, D, counter):
    if c[0] == "data":
        counter.append(None)
        return D[len(counter) - 1] > 0
    if c[0] == "not":
        return ~build_cond(c[1], env, D, counter)
    if c[0] in ("and", "or"):
        a, b = build_cond(c[1], env, D, counter), build_cond(c[2], env, D, counter)
        return a & b if c[0] == "and" else a | b
    x = build(c[1], env)
    return x < c[2] if c[0] == "lt" else x == c[2]


def holds(c, env, data):
    """``c`` at a point, the data conditions taking the values ``data`` (consumed in order)."""
    if c[0] == "data":
        return next(data)
    if c[0] == "not":
        return not holds(c[1], env, data)
    if c[0] in ("and", "or"):
        a, b = holds(c[1], env, data), holds(c[2], env, data)
        return (a and b) if c[0] == "and" else (a or b)
    x = value(c[1], env)
    return x < c[2] if c[0] == "lt" else x == c[2]


def n_data(c):
    return 1 if c[0] == "data" else 0 if c[0] in ("lt", "eq") else \
        sum(n_data(x) for x in c[1:])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(e0=index_exprs, e1=index_exprs, size0=st.integers(1, 9), size1=st.integers(1, 6),
       cond=conditions, in_where=st.booleans())
def test_guards_with_logic_and_data_agree_with_enumeration(e0, e1, size0, size1, cond,
                                                           in_where):
    """Guards built from & | ~, affine and data-dependent comparisons, in select or where=.

    A read is evaluated at a point if some values of the data conditions make the
    guard hold there; the check must raise exactly when such a point reads outside.
    """
    X = te.placeholder((size0, size1), name="X")
    D = te.placeholder((8,), name="D")
    m = n_data(cond)
    out_of_range = False
    for i, j in itertools.product(range(I_EXT), range(J_EXT)):
        env = {"i": i, "j": j}
        if not any(holds(cond, env, iter(vals))
                   for vals in itertools.product([False, True], repeat=m)):
            continue
        p, q = value(e0, env), value(e1, env)
        out_of_range |= not (0 <= p < size0 and 0 <= q < size1)

    def define():
        if in_where:
            r = te.reduce_axis(J_EXT, name="j")
            return te.compute((I_EXT,), lambda i: te.sum(
                X[build(e0, {"i": i, "j": r}), build(e1, {"i": i, "j": r})], axis=r,
                where=build_cond(cond, {"i": i, "j": r}, D, [])), name="Y")

        def body(i, j):
            env = {"i": i, "j": j}
            return te.select(build_cond(cond, env, D, []), X[build(e0, env), build(e1, env)], 0.0)
        return te.compute((I_EXT, J_EXT), body, name="Y")

    if out_of_range:
        with pytest.raises(te.BoundsError):
            define()
    else:
        define()


# }}}


# {{{ reads inside conditions: & and | short-circuit

# ("xread", e0, e1) stands for X[e0, e1] > 0: a read that must be in range wherever the
# short-circuit evaluation of the condition reaches it, and true or false at run time.
read_conditions = st.recursive(
    st.one_of(st.tuples(st.sampled_from(["lt", "eq"]), index_exprs, st.integers(-2, 6)),
              st.tuples(st.just("xread"), index_exprs, index_exprs)), _combine, max_leaves=4)


def build_read_cond(c, env, X):
    if c[0] == "xread":
        return X[build(c[1], env), build(c[2], env)] > 0
    if c[0] == "not":
        return ~build_read_cond(c[1], env, X)
    if c[0] in ("and", "or"):
        a, b = build_read_cond(c[1], env, X), build_read_cond(c[2], env, X)
        return a & b if c[0] == "and" else a | b
    return build_cond(c, env, None, [])


def reaches_outside(c, env, vals, shape) -> tuple:
    """``(value, bad)`` of ``c`` evaluated left to right with short-circuit ``&`` and
    ``|``; reads take their values from the iterator ``vals``; ``bad``: some read that
    was evaluated lies outside ``shape``."""
    if c[0] == "xread":
        p, q = value(c[1], env), value(c[2], env)
        return next(vals), not (0 <= p < shape[0] and 0 <= q < shape[1])
    if c[0] == "not":
        v, bad = reaches_outside(c[1], env, vals, shape)
        return not v, bad
    if c[0] in ("and", "or"):
        a, bad = reaches_outside(c[1], env, vals, shape)
        if a == (c[0] == "or"):
            return a, bad
        b, bad_b = reaches_outside(c[2], env, vals, shape)
        return b, bad or bad_b
    x = value(c[1], env)
    return (x < c[2] if c[0] == "lt" else x == c[2]), False


def n_reads(c):
    return 1 if c[0] == "xread" else 0 if c[0] in ("lt", "eq") else \
        sum(n_reads(x) for x in c[1:])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cond=read_conditions, size0=st.integers(1, 9), size1=st.integers(1, 6),
       in_where=st.booleans())
def test_reads_in_conditions_are_checked_where_short_circuit_reaches_them(cond, size0, size1,
                                                                            in_where):
    """te.compute raises BoundsError exactly when, for some run-time values of the reads,
    the left-to-right, short-circuit evaluation of the condition reads outside X."""
    X = te.placeholder((size0, size1), name="X")
    m = n_reads(cond)
    out_of_range = False
    for i, j in itertools.product(range(I_EXT), range(J_EXT)):
        for vals in itertools.product([False, True], repeat=m):
            out_of_range |= reaches_outside(cond, {"i": i, "j": j}, iter(vals),
                                            (size0, size1))[1]

    def define():
        if in_where:
            r = te.reduce_axis(J_EXT, name="j")
            return te.compute((I_EXT,), lambda i: te.sum(
                1.0, axis=r, where=build_read_cond(cond, {"i": i, "j": r}, X)), name="Y")
        return te.compute((I_EXT, J_EXT), lambda i, j: te.select(
            build_read_cond(cond, {"i": i, "j": j}, X), 1.0, 0.0), name="Y")

    if out_of_range:
        with pytest.raises(te.BoundsError):
            define()
    else:
        define()

# }}}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(-3, 3), st.integers(-3, 3), st.integers(-6, 12), st.integers(1, 4),
       st.sampled_from(["plain", "floordiv", "mod", "max", "min"]), st.integers(1, 9))
def test_reads_proved_inside_by_intervals_are_inside_by_isl(a, b, c, d, form, size):
    # the interval fast path may only say "inside" where isl finds no point outside
    from tensorexpr import bounds
    from tensorexpr.ir import Axis, Const
    X = te.placeholder((size,), name="X")
    i = Axis("i", Const(0, "int64"), Const(4, "int64"), 1)
    k = Axis("k", Const(1, "int64"), Const(3, "int64"), 2)
    ix = i * a + k * b + c
    ix = {"plain": ix, "floordiv": ix // d, "mod": ix % d, "max": te.maximum(ix, 0),
          "min": te.minimum(ix, size - 1)}[form]
    points = [(p, q) for p in range(4) for q in range(1, 3)]
    values = [te.transform.eval_int(te.transform.substitute(
        ix, {i: Const(p, "int64"), k: Const(q, "int64")})) for p, q in points]
    inside = all(0 <= v < size for v in values)
    proved = bounds.inside_by_intervals(X[ix], (i, k))
    assert not proved or inside
    if proved:
        return
    t = te.compute((1,), lambda _: X[0], name="T")  # any tensor to name in a message
    if inside:
        bounds._check_read(t, X[ix], (), (i, k))
    else:
        with pytest.raises(te.BoundsError):
            bounds._check_read(t, X[ix], (), (i, k))
