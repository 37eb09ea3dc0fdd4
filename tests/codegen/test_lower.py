"""codegen.lower: index expressions of data, and temporaries' scopes (C vs numpy backend)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import tensorexpr as te

from ..passes.gradcheck import check_grads, numeric_grad, rel_err, sum_of_squares
from .util import agree, assert_same, rand, without_comments


def _gather(shape, index, n=5, dtype="int32"):
    """``Y[i, j...] = X[index(I, i), j...] * 2`` over ``n`` rows, and its loss."""
    X = te.placeholder(shape, dtype="float64", name="X")
    I = te.placeholder((n,), dtype=dtype, name="I")
    Y = te.compute((n,) + tuple(shape[1:]),
                   lambda i, *js: X[(index(I, i),) + tuple(js)] * 2.0, name="Y")
    return X, I, Y


INDICES = {
    "mod": (lambda I, i: I[i] % 3, 3, (-4, 7)),
    "floordiv": (lambda I, i: I[i] // 4, 2, (0, 7)),
    "sub_size1": (lambda I, i: I[i] - 1, 1, (1, 1)),
    "mod_size1": (lambda I, i: I[i] % 1, 1, (-3, 3)),
    "first_mod": (lambda I, i: I[0] % 3, 3, (-4, 7)),
    "with_axis": (lambda I, i: (I[i] + i) % 3, 3, (-4, 7)),
    "div_mod": (lambda I, i: I[i] // 2 % 3, 3, (-6, 6)),
    "clamp": (lambda I, i: te.minimum(te.maximum(I[i], 0), 2), 3, (-3, 5)),
    "cast_select": (lambda I, i: te.select(I[i] < 0, 0, I[i] % 3).astype("int64"), 3, (-3, 5)),
    "of_float": (lambda I, i: (I[i].astype("float32") * 0.5).astype("int64") % 3, 3, (-6, 6)),
}


@pytest.mark.parametrize("cols", [(), (1,), (4,)], ids=["1d", "cols1", "cols4"])
@pytest.mark.parametrize("name", sorted(INDICES))
def test_data_dependent_index_expressions(name, cols):
    # issue 7: E[I[i] % 3, j] raised "not a closed integer expression" in the C backend
    # (its row index is hoisted and checked once per row, and the flattened offset was
    # then sampled at a point, evaluating I[0] as if it were a constant)
    index, rows, (lo, hi) = INDICES[name]
    X, I, Y = _gather((rows,) + cols, index)
    x = rand((rows,) + cols, "float64", seed=1)
    iv = rand((5,), "int32", seed=2, low=lo, high=hi)
    agree([Y], [X, I], x, iv)
    L = sum_of_squares(Y)
    (g,) = te.differentiate(L, [X])
    agree([g], [X, I], x, iv)
    check_grads(L, [X, I], [x, iv], wrt=[0], backend="c")


@pytest.mark.parametrize("cols", [(), (4,)], ids=["1d", "cols4"])
def test_data_dependent_index_out_of_range_raises(cols):
    X, I, Y = _gather((3,) + cols, lambda I, i: I[i] // 2)
    iv = np.array([0, 1, 6, 2, 3], np.int32)  # 6 // 2 == 3: outside X's 3 rows
    for backend in ("c", "numpy"):
        f = te.build(Y, inputs=[X, I], backend=backend)
        with pytest.raises(IndexError, match="'X'"):
            f(rand((3,) + cols, "float64"), iv)



@pytest.mark.parametrize("c", [2, 3, 4])
@pytest.mark.parametrize("first", [True, False], ids=["I0", "Ij"])
def test_split_row_lowered_once(c, first):
    # issue 7: X[I[0], j] * X[j // 2, j] was lowered whole, then again split by
    # j = 2q + r, and the split copy reused the checked read's temporary t1 from
    # the lowering thrown away: "'t1' undeclared"
    n = 4 * c
    X = te.placeholder((n, n), dtype="float64", name="X")
    I = te.placeholder((n,), dtype="int32", name="I")
    Y = te.compute((n,), lambda j: X[I[0] if first else I[j // c], j] * X[j // c, j] + X[j % c, j],
                   name="Y")
    x, iv = rand((n, n), "float64", seed=c), rand((n,), "int32", seed=c, low=0, high=n - 1)
    agree([Y], [X, I], x, iv)
    check_grads(sum_of_squares(Y), [X, I], [x, iv], wrt=[0], backend="c")



@pytest.mark.parametrize("n", [5, 7, 8])
@pytest.mark.parametrize("fn", ["minimum", "maximum"])
def test_vjp_of_minimum_over_partial_flatten(fn, n):
    # issue 7: Y[i] = minimum(X[i // 4, i % 4], 0.5) for i < 7: its VJP reads
    # dY at i = 4 * a + b, split by b = i % 4 with the first lowering's temporary
    # ('t2' undeclared)
    X = te.placeholder((2, 4), dtype="float64", name="X")
    Y = te.compute((n,), lambda i: getattr(te, fn)(X[i // 4, i % 4], 0.5), name="Y")
    x = rand((2, 4), "float64", seed=n)
    L = sum_of_squares(Y)
    (g,) = te.differentiate(L, [X])
    agree([Y, g], [X], x)
    check_grads(L, [X], [x], backend="c")

@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_gather_times_select_on_its_reduction(op):
    # issue 7: the VJP's scatter for E[I[i], k] runs over k, guarded by the select's
    # condition, which is itself a reduction over k: lowering bound k twice and isl
    # refused the space ("non-unique var name"). The inner binding shadows the outer.
    E = te.placeholder((4, 3), dtype="float64", name="E")
    I = te.placeholder((5,), dtype="int32", name="I")
    k = te.reduce_axis(3, name="k")
    red = getattr(te, op)
    Y = te.compute((5, 3), lambda i, j: E[I[i], j] * te.select(
        red(E[I[i], k], axis=k) > 0, red(E[I[i], k], axis=k), 0.5), name="Y")
    e, iv = rand((4, 3), "float64", seed=3), rand((5,), "int32", seed=4, low=0, high=3)
    agree([Y], [E, I], e, iv)
    L = sum_of_squares(Y)
    (g,) = te.differentiate(L, [E])
    agree([g], [E, I], e, iv)
    check_grads(L, [E, I], [e, iv], wrt=[0], backend="c")


def test_rebound_axis_shadows_outer_guards_and_temporaries():
    # The inner reduction binds the scatter's axis k again: the outer k's guard
    # (k >= 1) and its loaded E[I[i], k] must not be taken for the inner k's.
    from tensorexpr.ir import Binary, Reduce, ScatterAdd, fresh_uid
    E = te.placeholder((4, 3), dtype="float64", name="E")
    I = te.placeholder((2,), dtype="int32", name="I")
    i, k = te.reduce_axis(2, name="i"), te.reduce_axis(3, name="k")
    inner = Reduce("sum", E[I[i], k], (k,), None, "float64")
    where = Binary("and", k >= 1, inner > E[I[i], k], "bool")
    S = ScatterAdd("S", (te.const(4, "int64"), te.const(3, "int64")), "float64", fresh_uid(),
                   "test", axes=(i, k), where=where, indices=(I[i], k),
                   value=E[I[i], k] * inner)
    e, iv = rand((4, 3), "float64", seed=5), np.array([1, 3], np.int32)
    _, (got,) = agree([S], [E, I], e, iv)
    want = np.zeros((4, 3))
    for a in range(2):
        row = e[iv[a]]
        for kk in range(1, 3):
            if row.sum() > row[kk]:
                want[iv[a], kk] += row[kk] * row.sum()
    np.testing.assert_allclose(got, want)


# {{{ random programs: data-dependent indices, flattens, selects, min/max reductions

NI = 5


@st.composite
def index_recipe(draw, depth: int, atoms):
    """An integer expression over the axes named in ``atoms``: arithmetic, // and % by
    constants, min/max, casts, selects, and reads of the index tensor ``I``."""
    if depth <= 0 or draw(st.integers(0, 2)) == 0:
        kind = draw(st.sampled_from(["axis", "const", "data", "data"]))
        if kind == "axis":
            return ("axis", draw(st.sampled_from(atoms)))
        if kind == "const":
            return ("const", draw(st.integers(-2, 5)))
        return ("data", draw(index_recipe(depth - 1, atoms)))
    kind = draw(st.sampled_from(["add", "sub", "mulc", "div", "mod", "min", "max", "cast",
                                 "select"]))
    a = draw(index_recipe(depth - 1, atoms))
    if kind in ("mulc", "div", "mod"):
        return (kind, a, draw(st.integers(1, 4)))
    if kind == "cast":
        return ("cast", a, draw(st.sampled_from(["int32", "int64"])))
    b = draw(index_recipe(depth - 1, atoms))
    if kind == "select":
        return ("select", draw(index_recipe(depth - 1, atoms)), a, b)
    return (kind, a, b)


def _index(r, env, I):
    k = r[0]
    if k == "axis":
        return env[r[1]]
    if k == "const":
        return te.const(r[1], "int64")
    if k == "data":
        return I[_index(r[1], env, I) % NI]
    a = _index(r[1], env, I)
    if k in ("mulc", "div", "mod", "cast"):
        return {"mulc": lambda: a * r[2], "div": lambda: a // r[2], "mod": lambda: a % r[2],
                "cast": lambda: a.astype(r[2])}[k]()
    if k == "select":
        return te.select(_index(r[1], env, I) > 1, _index(r[2], env, I), _index(r[3], env, I))
    b = _index(r[2], env, I)
    return {"add": lambda: a + b, "sub": lambda: a - b,
            "min": lambda: te.minimum(a, b), "max": lambda: te.maximum(a, b)}[k]()


@st.composite
def body_recipe(draw, depth: int, atoms):
    """A float expression: reads of ``X`` at random index expressions (wrapped in
    range by %, a clamp, a select guard, a flatten, or not at all), products, sums,
    selects, and sum/max/min reductions (over 4 points, or 8 through a flatten
    ``X[k // n1 % n0, k % n1]``, with or without ``where k < 7`` or a data condition)."""
    if depth <= 0 or draw(st.integers(0, 2)) == 0:
        if draw(st.integers(0, 3)) == 0:  # j // c, j % c: a row computed c points at a time
            return ("split", draw(st.integers(2, 4)), draw(st.booleans()),
                    draw(index_recipe(1, atoms)))
        wrap = draw(st.sampled_from(["mod", "clamp", "guard", "flat", "raw"]))
        return ("read", draw(index_recipe(2, atoms)), draw(index_recipe(2, atoms)), wrap)
    kind = draw(st.sampled_from(["mul", "add", "select", "red", "red"]))
    if kind == "red":
        name = f"k{depth}"
        return ("red", draw(st.sampled_from(["min", "max", "sum"])), draw(st.booleans()),
                draw(st.sampled_from(["none", "lt7", "data"])), name,
                draw(body_recipe(depth - 1, atoms + [name])))
    parts = [draw(body_recipe(depth - 1, atoms)) for _ in range(3 if kind == "select" else 2)]
    return (kind,) + tuple(parts)


def _body(r, env, X, I, axes=None):
    """``r`` as an expression; reductions of the same depth share their axis object
    (``select(sum_k ... > 0, sum_k ..., ...)``), as users may write."""
    axes = {} if axes is None else axes
    n0, n1 = X.shape
    k = r[0]
    if k == "split":
        _, c, rem, idx = r
        col = env["j"] % c if rem else env["j"] // c
        return X[_index(idx, env, I) % n0, col % n1] * X[0, (env["j"] // c) % n1]
    if k == "read":
        a, b = _index(r[1], env, I), _index(r[2], env, I)
        if r[3] == "mod":
            return X[a % n0, b % n1]
        if r[3] == "clamp":
            return X[te.minimum(te.maximum(a, 0), n0 - 1), te.minimum(te.maximum(b, 0), n1 - 1)]
        if r[3] == "guard":
            return te.select((a >= 0) & (a < n0) & (b >= 0) & (b < n1), X[a, b], 0.5)
        if r[3] == "flat":
            f = (a * n1 + b) % (n0 * n1)
            return X[f // n1, f % n1]
        return X[a, b]
    if k == "red":
        _, op, flat, where, name, sub = r
        ax = axes.setdefault((name, flat), te.reduce_axis(8 if flat else 4, name=name))
        inner = _body(sub, {**env, name: ax}, X, I, axes)
        if flat:
            inner = inner * X[(ax // n1) % n0, ax % n1]
        cond = {"none": None, "lt7": ax < 7, "data": I[ax % NI] > 0}[where]
        return {"min": te.min, "max": te.max, "sum": te.sum}[op](inner, axis=ax, where=cond)
    parts = [_body(p, env, X, I, axes) for p in r[1:]]
    if k == "mul":
        return parts[0] * parts[1]
    if k == "add":
        return parts[0] + parts[1]
    return te.select(parts[0] > 0, parts[1], parts[2])


# 30 examples: each builds three C programs (the suite's slowest test at 60); the fuzzer
# (tests/fuzz) draws data-dependent indices too, at any length
@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(body_recipe(3, ["i", "j"]), st.sampled_from([(4, 4), (1, 4), (4, 1), (2, 4), (3, 2)]),
       st.integers(0, 3))
def test_random_programs_with_data_dependent_indices(recipe, xshape, seed):
    # issue 7's class: ValueError from eval_int, islpy's "non-unique var name",
    # and temporaries ('t1') used where no declaration is in scope
    X = te.placeholder(xshape, dtype="float64", name="X")
    I = te.placeholder((NI,), dtype="int32", name="I")
    H = te.placeholder((3, 4), dtype="float64", name="H")
    try:
        Y = te.compute((3, 4), lambda i, j: _body(recipe, {"i": i, "j": j}, X, I), name="Y")
    except te.BoundsError:
        assume(False)  # an affine read outside X: refused when defined, as documented
    a, b = te.reduce_axis(3), te.reduce_axis(4)
    # empty max/min reductions are infinite: the loss keeps the finite values
    Yf = te.compute((3, 4), lambda i, j: te.select(te.abs(Y[i, j]) < 1e30, Y[i, j], 0.0))
    L = te.compute((), lambda: te.sum(H[a, b] * Yf[a, b], axis=[a, b]), name="L")
    rng = np.random.default_rng(seed)
    x, h = rng.uniform(-2, 2, xshape), rng.uniform(-1, 1, (3, 4))
    iv = rng.integers(-1, 6, NI).astype(np.int32)
    try:
        want = te.build(Y, inputs=[X, I], backend="numpy")(x, iv)
    except IndexError:
        with pytest.raises(IndexError, match="'X'|'I'"):
            te.build(Y, inputs=[X, I])(x, iv)
        return
    assert_same(te.build(Y, inputs=[X, I])(x, iv), want)
    (g,) = te.differentiate(L, [X])
    got = te.build(g, inputs=[X, I, H])(x, iv, h)
    loss = te.build(L, inputs=[X, I, H], backend="numpy")
    assert rel_err(got, numeric_grad(lambda xx: loss(xx, iv, h), [x], 0)) < 1e-6

# }}}


def _chain(X, links, body):
    P = X
    for _ in range(links):
        P = (lambda P: te.compute(X.shape, lambda i: body(P, i), name="T", dtype=X.dtype))(P)
    return P


@pytest.mark.parametrize("links", [3, 70, 400])
@pytest.mark.parametrize("body", [
    lambda P, i: 0.9 * te.tanh(P[i]) + 0.1,   # read once in place: inlined at any size
    lambda P, i: 0.5 * P[3 - i] + 0.25,       # cheap: inlined wherever it is read
])
def test_a_long_chain_of_inlinable_tensors_lowers(links, body):
    # Every link was inlined into the next, so the chain became one expression as deep
    # as the chain, and lowering it recursed past Python's limit (RecursionError)
    X = te.placeholder((4,), dtype="float64", name="X")
    Y = _chain(X, links, body)
    fc, _ = agree(Y, [X], np.linspace(-1.0, 1.0, 4))
    if links == 3:  # a short chain is still computed where it is read: one loop nest
        assert without_comments(fc.source).count("for (") == 1


@pytest.mark.parametrize("where", [
    lambda X, I, k: (X[I[k]] > 0.0) & (k < 3),
    lambda X, I, k: (k >= 0) & (X[I[k]] > 0.0) & (k < 3),
    lambda X, I, k: (X[I[k]] > 0.0) & ((k < 3) & (k % 2 == 0)),
], ids=["data_first", "affine_data_affine", "nested"])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_where_conjuncts_are_evaluated_left_to_right(where, op):
    # The C backend made the affine ``k < 3`` a loop bound ahead of the data-dependent
    # conjunct before it, so it never checked X[I[k]] at k >= 3 (returned a value
    # where numpy raised): both must evaluate ``&`` left to right (ir.py).
    X = te.placeholder((4,), name="X", dtype="float64")
    I = te.placeholder((6,), name="I", dtype="int64")
    k = te.reduce_axis(6, name="k")
    S = te.compute((), lambda: getattr(te, op)(X[I[k]], axis=k, where=where(X, I, k)),
                   name="S")
    x = np.array([1.0, 2.0, 3.0, 4.0])
    for backend in ("numpy", "c"):
        f = te.build(S, backend=backend)
        with pytest.raises(IndexError, match="'X' at index 9"):
            f(x, np.array([0, 1, 2, 9, 9, 9]))
        # in range everywhere: both agree
        assert f(x, np.array([0, 1, 2, 3, 1, 0])) == te.build(S, backend="numpy")(
            x, np.array([0, 1, 2, 3, 1, 0]))


def test_affine_conjuncts_before_a_data_dependent_one_still_bound_the_loop():
    # (long enough not to be a window written out point by point: lower_expr.window)
    X = te.placeholder((4,), name="X", dtype="float64")
    I = te.placeholder((40,), name="I", dtype="int64")
    k = te.reduce_axis(40, name="k")
    S = te.compute((), lambda: te.sum(X[I[k]], axis=k, where=(k < 20) & (X[I[k]] > 0.0)),
                   name="S")
    f = te.build(S)
    assert "k0 < 20" in f.source
    x, i = np.array([1.0, -2.0, 3.0, 4.0]), np.array([0, 1, 2] * 6 + [0, 3] + [9] * 20)
    assert f(x, i) == te.build(S, backend="numpy")(x, i) == 6 * 4.0 + 5.0


def test_a_work_estimate_past_int64_is_capped():
    # a GRU's VJP multiplied its loops' extents past 2^63: the C constant overflowed
    # (GCC: "integer constant is too large"); any estimate past the cap runs threaded
    import tensorexpr as te
    from codegen.lower import WORK_CAP, Lowerer
    from codegen.signature import Signature
    from tensorexpr.ir import Const
    A = te.placeholder((4,), name="A")
    lw = Lowerer(Signature([te.compute((4,), lambda i: A[i] + 1.0, name="B")], [A]))
    big = lw.work_of([Const(1 << 40, "int64"), Const(1 << 40, "int64")])
    assert big.value == WORK_CAP < (1 << 62)


def test_short_windows_sum_without_partial_sums():
    # A 2x2 window per output (bilinear upsampling's gradient): the last axis's loop runs
    # 2 points, so no row of partial sums is zeroed and added up per element (15x slower);
    # a window as long as a vector keeps them (a row's sum over 16 lanes).
    X = te.placeholder((2, 6, 6), name="X")
    y, x = te.reduce_axis((0, 12), name="y"), te.reduce_axis((0, 12), name="x")
    D = te.compute((2, 6, 6), lambda n, i, j: te.sum(X[n, y // 2, x // 2] * 0.25, axis=[y, x],
                   where=(y // 2 == i) & (x // 2 == j)), name="D")
    r, c = te.reduce_axis((0, 16), name="r"), te.reduce_axis((0, 16), name="c")
    W = te.placeholder((4, 16, 16), name="W")
    S = te.compute((4,), lambda b: te.sum(W[b, r, c], axis=[r, c]), name="S")
    fd, _ = agree([D], [X], rand((2, 6, 6)))
    fs, _ = agree([S], [W], rand((4, 16, 16)))
    assert "part" not in without_comments(fd.source)
    assert "part" in without_comments(fs.source)


def test_a_sum_whose_value_is_compared_is_added_in_written_order():
    # M = max_r sum_{k, l} X[r, k, l]: its gradient's tie test recomputes the sum in
    # other loops; both add the terms in the order written (no partial sums, no lanes)
    X = te.placeholder((4, 3, 32), name="X")
    r, k, l = (te.reduce_axis(n, name=nm) for n, nm in ((4, "r"), (3, "k"), (32, "l")))
    M = te.compute((), lambda: te.max(te.sum(X[r, k, l], axis=[k, l]), axis=r), name="M")
    S = te.compute((4,), lambda i: te.sum(X[i, k, l], axis=[k, l]) * 2.0, name="S")
    fm, _ = agree([M], [X], rand((4, 3, 32)))
    fs, _ = agree([S], [X], rand((4, 3, 32)))
    assert "part" not in without_comments(fm.source) and "simd" not in fm.source
    assert "part" in without_comments(fs.source)
    (dX,) = te.differentiate(M, [X])
    x = rand((4, 3, 32))
    g = te.build([dX], [X])(x)
    best = int(np.argmax(x.sum(axis=(1, 2))))
    assert np.array_equal(g[best], np.ones((3, 32), np.float32)) and g.sum() == 96


def test_a_sum_under_an_elementwise_max_or_an_order_test_is_not_a_compared_sum():
    # a row norm's sum clamped by maximum(., eps), or gated by a > test: no tie test
    # recomputes it (ir.TIE_TESTS), so it keeps its lanes (written order made the
    # row L2 normalization 5x slower); its gradient is the float64 central difference's
    X = te.placeholder((6, 40), "float64", "X")
    k = te.reduce_axis(40, name="k")
    ss = te.compute((6,), lambda b: te.sum(X[b, k] * X[b, k], axis=k), name="ss",
                    dtype="float64")
    Y = te.compute((6, 40), lambda b, d: X[b, d] / te.sqrt(te.maximum(ss[b], 1e-12))
                   + te.select(ss[b] > 120.0, X[b, d], 0.0), name="Y", dtype="float64")
    x = rand((6, 40), dtype="float64")
    f, _ = agree([Y], [X], x)
    assert "reduction(+" in f.source or "part" in without_comments(f.source)
    check_grads(sum_of_squares(Y), [X], [x], backend="c")


@pytest.mark.parametrize("n", [33, 47, 65])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_compared_sum_in_a_tensor_of_its_own_is_added_in_written_order(n, dtype):
    # found by the fuzzer's big sizes: M = max_r 0.5 * sum_k X[k, k]^2, the sum not
    # using r, is hoisted into a tensor of its own (M_sum) that the tie test reads;
    # M_sum was summed in vector lanes (n > 16 lanes), M in order: where the two
    # roundings differ no point ties and dX was 0
    X = te.placeholder((n, n), dtype, "X")
    r, k = te.reduce_axis((1, 66), name="r"), te.reduce_axis(n, name="k")
    M = te.compute((), lambda: te.max(0.5 * te.sum(X[k, k] * X[k, k], axis=k), axis=r),
                   name="M", dtype=dtype)
    (dX,) = te.differentiate(M, [X])
    for seed in range(4):  # magnitudes far apart: the order of the terms shows
        rng = np.random.default_rng(seed)
        x = (rng.uniform(-1.5, 1.5, (n, n)) * 10.0 ** rng.integers(-3, 4, (n, n))).astype(dtype)
        f, (m, g) = agree([M, dX], [X], x)
        # every r ties: their shares add up to the slope of 0.5 * sum(x_kk^2)
        assert_same(g, np.diag(np.diag(x)))
    assert "M_sum" in f.schedule  # the sum has a tensor of its own


def test_a_compared_sum_cut_into_pieces_keeps_written_order():
    # found by the fuzzer's big sizes: the extracted sum M_sum (r in [0, 3) reads row r,
    # r in [3, 7) row 2) is cut into pieces, new tensors each lowered by taps (partial
    # sums per tap: another order than the max's); no point tied and dX was 0. The
    # pieces' sums are compared sums too, and taps declines those
    X = te.placeholder((3, 25), dtype="float32", name="X")
    r, k = te.reduce_axis((0, 7), name="r"), te.reduce_axis((0, 25), name="k")
    M = te.compute((1, 1), lambda i, j: te.max(te.select(i < 0, -1.0, te.sum(
        X[i, k] * X[te.minimum(r, 2), k], axis=k)), axis=r), name="M", dtype="float32")
    (dX,) = te.differentiate(M, [X])
    x = np.random.default_rng(0).uniform(-1.5, 1.5, (3, 25)).astype(np.float32)
    agree([M, dX], [X], x)


@pytest.mark.parametrize("n", [64, 257, 300, 512, 1000])
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_long_extrema_in_several_vectors_of_lanes_combined_as_a_tree(n, op, dtype):
    # rows of >= 4 * EXTREMUM_LANES points keep 64 partial results, combined pairwise;
    # any order gives the numpy result, NaN (propagated) and infinities included
    from codegen.lower_expr import EXTREMUM_LANES
    X = te.placeholder((5, n), dtype, "X")
    k = te.reduce_axis(n, "k")
    Y = te.compute((5,), lambda i: getattr(te, op)(X[i, k], axis=k), name="Y", dtype=dtype)
    f = te.build(Y, [X])
    if n >= 4 * EXTREMUM_LANES:
        assert f"[{EXTREMUM_LANES}]" in f.source
    x = np.random.default_rng(n).standard_normal((5, n)).astype(dtype)
    x[1, n // 3] = np.nan
    x[2, -1] = np.inf if op == "max" else -np.inf
    x[3, :] = -np.inf if op == "max" else np.inf
    want = getattr(np, op)(x, axis=1)
    np.testing.assert_array_equal(f(x), want)


def test_a_tiled_contraction_counts_its_work_per_vector():
    # the thread threshold prices a streaming loop's operation; a register-tiled
    # contraction does a vector's lanes of FMAs per operation (a tanh RNN's step sums
    # ran on the team every step: 4x slower on 2 threads than on 1)
    from codegen import target
    from codegen.pipeline import source_text
    from codegen.signature import Signature
    A, B = te.placeholder((64, 64), name="A"), te.placeholder((64, 64), name="B")
    k = te.reduce_axis(64, "k")
    Y = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="Y")
    with target.use(target.Target(64, 32, True)):   # AVX-512: 16 float32 lanes
        src = source_text(Signature([Y], [A, B]))
    assert "if(parallel: 16384 >= te_min_work)" in src   # 64 * 64 * 64 / 16
    E = te.compute((64, 64), lambda i, j: te.exp(A[i, j]), name="E")  # streaming: per point
    with target.use(target.Target(64, 32, True)):
        assert "4096 >= te_min_work" in source_text(Signature([E], [A]))
