"""Gradients of recurrences: the adjoint is a recurrence running the other way."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te

from .gradcheck import check_grads, numeric_grad, second_order


def ewma(T, R, dtype="float64"):
    d = te.placeholder((R, T), dtype, "d")
    e = te.recurrence((T, R), lambda e, t, r: te.select(
        t == 0, d[r, 0], 0.5 * d[r, t] + 0.5 * e[t - 1, r]), name="e", dtype=dtype)
    return d, e


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_seed_case_imperative_systems_got_wrong(backend):
    # e0 = d0, e1 = 0.5 d0 + 0.5 d1, loss e1**2: both gradients equal e1.
    d, e = ewma(2, 1, "float32")
    L = te.compute((), lambda: e[1, 0] ** 2, name="L")
    (dd,) = te.differentiate(L, [d])
    data = np.array([[0.417022, 0.72032449]], np.float32)
    g = te.build(dd, inputs=[d], backend=backend)(data)
    e1 = 0.5 * data[0, 0] + 0.5 * data[0, 1]
    assert abs(e1 - 0.568673) < 1e-6
    np.testing.assert_allclose(g, [[e1, e1]], rtol=1e-6)


def test_adjoint_of_a_recurrence_runs_backwards():
    d, e = ewma(6, 2)
    H = te.placeholder((6, 2), "float64", "H")
    res = te.differentiate(e, [d], head=H)
    de = res.adjoints[e]
    assert de.carry is not None and de.carry.step == -1


def _last_step_loss(e, T, R):
    r = te.reduce_axis(R)
    return te.compute((), lambda: te.sum(e[T - 1, r] * e[T - 1, r], axis=r), name="L")


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_ewma_long_against_finite_differences(backend):
    T, R = 512, 1
    d, e = ewma(T, R)
    L = _last_step_loss(e, T, R)
    (dd,) = te.differentiate(L, [d])
    data = np.random.default_rng(0).standard_normal((R, T))
    g = te.build(dd, inputs=[d], backend=backend)(data)
    # closed form: e[T-1] = sum_t w_t d_t with w_0 = 0.5^(T-1), w_t = 0.5^(T-t)
    w = np.array([0.5 ** (T - 1)] + [0.5 ** (T - t) for t in range(1, T)])
    eT = (w * data[0]).sum()
    np.testing.assert_allclose(g[0], 2 * eT * w, rtol=1e-10, atol=1e-300)
    # and spot-check a few entries against central differences
    fl = te.build(L, inputs=[d], backend="numpy")
    for t in (0, T - 3, T - 1):
        p, m = data.copy(), data.copy()
        p[0, t] += 1e-6
        m[0, t] -= 1e-6
        num = (fl(p) - fl(m)) / 2e-6
        assert abs(num - g[0, t]) <= 1e-6 * max(1.0, abs(num))


def test_ewma_second_order():
    T, R = 5, 2
    d, e = ewma(T, R)
    L = _last_step_loss(e, T, R)
    second_order(L, [d], [np.random.default_rng(1).standard_normal((R, T))])


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_alpha_compositing(backend):
    # front-to-back: acc[s] = (1 - acc[s-1]) * x[s] + acc[s-1]
    S, R = 5, 3
    x = te.placeholder((R, S), "float64", "x")
    acc = te.recurrence((S, R), lambda a, s, r: te.select(
        s == 0, x[r, 0], (1.0 - a[s - 1, r]) * x[r, s] + a[s - 1, r]), name="acc", dtype="float64")
    L = _last_step_loss(acc, S, R)
    arr = np.random.default_rng(2).uniform(0, 0.5, (R, S))
    check_grads(L, [x], [arr], backend=backend)
    second_order(L, [x], [arr], backend=backend)


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_tanh_rnn_cell(backend):
    T, B, H = 4, 2, 3
    x = te.placeholder((T, B, H), "float64", "x")
    W = te.placeholder((H, H), "float64", "W")
    k = te.reduce_axis(H, "k")
    h = te.recurrence((T, B, H), lambda h, t, b, j: te.tanh(x[t, b, j] + te.select(
        t == 0, 0.0, te.sum(h[t - 1, b, k] * W[k, j], axis=k))), name="h", dtype="float64")
    r1, r2 = te.reduce_axis(B), te.reduce_axis(H)
    L = te.compute((), lambda: te.sum(h[T - 1, r1, r2] ** 2, axis=[r1, r2]), name="L")
    rng = np.random.default_rng(3)
    check_grads(L, [x, W], [rng.standard_normal((T, B, H)), 0.5 * rng.standard_normal((H, H))],
                backend=backend)


@pytest.mark.parametrize("offset", [0, 1])
def test_recurrence_reading_same_or_later_point_is_refused(offset):
    x = te.placeholder((5,), "float64", "x")
    with pytest.raises(te.RecurrenceError, match=r"reads itself at (c\[min\(t \+ 1, 4\)\]|c\[t\])"):
        te.recurrence((5,), lambda c, t: te.select(
            t < 4, c[te.minimum(t + offset, 4)] + x[t], x[t]) if offset else c[t] + x[t],
            name="c")


# {{{ cells whose nonlinearity holds a sum over the previous step

# The partial of such a cell holds the sum itself (sigmoid' = s (1 - s) of it),
# inside a gather over the same reduce axis: substituting the gather's solution
# into it must not touch the sum's own (bound) axis.


def _cell(kind, T, B=2, H=3):
    """``(inputs, h, arrays)``: a recurrent cell over ``T`` steps, ``h[t] = f(h[t-1])``."""
    rng = np.random.default_rng(T * 10 + len(kind))
    k = te.reduce_axis(H, "k")
    W = te.placeholder((H, H), "float64", "W")
    u = te.placeholder((T, B, H), "float64", "u")

    def prev(h, t, b):  # sum_k h[t-1, b, k] W[k, j] (0 at t = 0), sharing the axis k
        return lambda j, U=W: te.select(t == 0, 0.0, te.sum(h[t - 1, b, k] * U[k, j], axis=k))

    if kind == "sigmoid_skip":  # the issue's reproducer
        fn = lambda h, t, b, j: u[t, b, j] + te.sigmoid(prev(h, t, b)(j))
    elif kind == "tanh_skip":
        fn = lambda h, t, b, j: u[t, b, j] + 0.5 * te.tanh(prev(h, t, b)(j))
    elif kind == "exp":
        fn = lambda h, t, b, j: u[t, b, j] * te.exp(0.3 * prev(h, t, b)(j))
    elif kind == "product":  # two sums over the same axis, multiplied
        V = te.placeholder((H, H), "float64", "V")
        fn = lambda h, t, b, j: u[t, b, j] + prev(h, t, b)(j) * te.tanh(prev(h, t, b)(j, V))
    elif kind == "gru":
        Uz, Ur = (te.placeholder((H, H), "float64", n) for n in ("Uz", "Ur"))
        xz, xr = (te.placeholder((T, B, H), "float64", n) for n in ("xz", "xr"))

        def fn(h, t, b, j):
            z = te.sigmoid(xz[t, b, j] + prev(h, t, b)(j, Uz))
            r = te.sigmoid(xr[t, b, j] + prev(h, t, b)(j, Ur))
            n = te.tanh(u[t, b, j] + r * prev(h, t, b)(j))
            return (1.0 - z) * n + z * te.select(t == 0, 0.0, h[t - 1, b, j])
    elif kind == "fused_gru":  # one weight for the three gates, read at gate * H + j
        W3 = te.placeholder((H, 3 * H), "float64", "W3")
        xz, xr = (te.placeholder((T, B, H), "float64", n) for n in ("xz", "xr"))

        def fn(h, t, b, j):
            def pre(g):
                k3 = te.reduce_axis(H, "k3")
                return te.select(t == 0, 0.0, te.sum(h[t - 1, b, k3] * W3[k3, g * H + j],
                                                     axis=k3))
            z = te.sigmoid(xz[t, b, j] + pre(1))
            r = te.sigmoid(xr[t, b, j] + pre(0))  # W3[k, 0 * H + j]: simplified in partials
            n = te.tanh(u[t, b, j] + r * pre(2))
            return (1.0 - z) * n + z * te.select(t == 0, 0.0, h[t - 1, b, j])
    elif kind == "lstm":  # state [.., 0, j] is the cell c, [.., 1, j] the output h
        Ui, Uf, Uo = (te.placeholder((H, H), "float64", n) for n in ("Ui", "Uf", "Uo"))
        k2 = te.reduce_axis(H, "k2")

        def fn(s, t, b, w, j):
            def pre(U):
                return te.select(t == 0, 0.0, te.sum(s[t - 1, b, 1, k2] * U[k2, j], axis=k2))
            i, f, o = te.sigmoid(pre(Ui)), te.sigmoid(pre(Uf)), te.sigmoid(pre(Uo))
            g = te.tanh(u[t, b, j] + pre(W))
            c = f * te.select(t == 0, 0.0, s[t - 1, b, 0, j]) + i * g
            return te.select(w == 0, c, o * te.tanh(c))
        h = te.recurrence((T, B, 2, H), fn, name="s", dtype="float64")
    else:
        raise ValueError(kind)
    if kind != "lstm":
        h = te.recurrence((T, B, H), fn, name="h", dtype="float64")
    inputs = sorted({t.uid: t for t in te.ir.topo_order([h])
                     if isinstance(t, te.ir.Placeholder)}.values(), key=lambda t: t.uid)
    arrays = [rng.standard_normal(tuple(x.shape)) * (0.6 if x.shape[0] == H else 1.0)
              for x in inputs]
    return inputs, h, arrays


def _weighted_loss(h, seed=5):
    """``sum(h * C)`` for a constant ``C``: every step's adjoint differs."""
    C = te.compute(tuple(h.shape), lambda *ix: te.cast(
        ((ix[0] * 7 + ix[-1] * 3) % 5), "float64") * 0.25 - 0.5, name="C")
    axes = [te.reduce_axis(s) for s in h.shape]
    return te.compute((), lambda: te.sum(h[tuple(axes)] * C[tuple(axes)], axis=axes), name="L")


CELLS = ["sigmoid_skip", "tanh_skip", "exp", "product", "gru", "fused_gru", "lstm"]


@pytest.mark.parametrize("T", [1, 2, 3, 5])
@pytest.mark.parametrize("kind", CELLS)
def test_cell_with_a_sum_inside_its_nonlinearity(kind, T):
    inputs, h, arrays = _cell(kind, T)
    check_grads(_weighted_loss(h), inputs, arrays)


@pytest.mark.parametrize("T", [2, 5])
@pytest.mark.parametrize("kind", CELLS)
def test_cell_with_a_sum_inside_its_nonlinearity_c(kind, T):
    inputs, h, arrays = _cell(kind, T)
    check_grads(_weighted_loss(h), inputs, arrays, backend="c")


@pytest.mark.parametrize("kind", ["sigmoid_skip", "gru"])
def test_cell_with_a_sum_inside_its_nonlinearity_second_order(kind):
    inputs, h, arrays = _cell(kind, 3, B=1, H=2)
    second_order(_weighted_loss(h), inputs, arrays)


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_issue_sigmoid_of_previous_step_with_head(backend):
    """The issue's program verbatim: a head instead of a loss, dW was off by 0.42."""
    T, B, H = 3, 1, 2
    u = te.placeholder((T, B, H), "float64", "u")
    W = te.placeholder((H, H), "float64", "W")
    k = te.reduce_axis(H, name="k")
    h = te.recurrence((T, B, H), lambda h, t, b, j: u[t, b, j] + te.sigmoid(te.select(
        t == 0, 0.0, te.sum(h[t - 1, b, k] * W[k, j], axis=k))), name="h", dtype="float64")
    Hd = te.placeholder((T, B, H), "float64", "Hd")
    du, dW = te.differentiate(h, [u, W], head=Hd)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((T, B, H)), rng.standard_normal((H, H)),
              rng.standard_normal((T, B, H))]
    got = te.build([du, dW], inputs=[u, W, Hd], backend=backend)(*arrays)
    a, b_, c = te.reduce_axis(T), te.reduce_axis(B), te.reduce_axis(H)
    L = te.compute((), lambda: te.sum(h[a, b_, c] * Hd[a, b_, c], axis=[a, b_, c]), name="L")
    fl = te.build(L, inputs=[u, W, Hd], backend="numpy")
    for g, n in zip(got, (0, 1)):
        np.testing.assert_allclose(g, numeric_grad(fl, arrays, n), rtol=1e-7, atol=1e-8)
    assert "sum_{k in [0, 2)} (h[t - 1, 0, i0] * W[i0, i1])" not in str(dW)


# }}}


@pytest.mark.parametrize("kind", ["sigmoid_skip", "product", "gru", "fused_gru", "lstm"])
def test_adjoint_reads_the_forward_sums_instead_of_recomputing_them(kind):
    """A sum over the previous step inside a nonlinearity is in the partials: the
    adjoints and gradients read it, computed once over the finished recurrence (a
    GRU's VJP at T=16, B=4, D=16: 65 -> 0.6 ms), instead of summing again in every
    term (the benchmark's GRU with one fused weight: 19.8 s -> 46 ms)."""
    inputs, h, arrays = _cell(kind, 3)
    grads = te.differentiate(_weighted_loss(h), inputs)
    # a forward sum recomputed in a gradient keeps the forward's reduce axis
    own = {a.uid for x in te.ir.walk(h.body, unique=True) if isinstance(x, te.ir.Reduce)
           for a in x.axes}
    for g in list(grads.adjoints.values()) + list(grads):
        inline = [x for x in te.ir.walk(g.body, unique=True) if isinstance(x, te.ir.Reduce)
                  and {a.uid for a in x.axes} & own]
        assert not inline, (g.name, [str(x) for x in inline])
    check_grads(_weighted_loss(h), inputs, arrays)


# {{{ adjoints whose self-reads sit under data-dependent guards

@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_adjoint_of_a_constant_self_read_under_a_data_dependent_select(backend):
    # c[t] reads c[0] where X[t] > 0 and t >= 2. The adjoint gathers it as
    # sum_{t if (i == 0) & (t >= 2) & (X[t] > 0)} dc[t]: the data-dependent conjunct made
    # the ordering check drop the whole condition, and the valid adjoint was refused
    X = te.placeholder((5,), "float64", "X")
    c = te.recurrence((5,), lambda c, t: te.sin(X[t] + te.select(
        X[t] > 0.0, te.select(t >= 2, c[0], 0.0), 0.0)), name="c", dtype="float64")
    k = te.reduce_axis(5)
    L = te.compute((), lambda: te.sum(c[k] * c[k], axis=k), name="L")
    x = np.array([0.3, -0.2, 0.5, -0.4, 0.7])
    check_grads(L, [X], [x], backend=backend)
    second_order(L, [X], [x], backend=backend)

# }}}


# {{{ the class: self-reads at earlier points that are not a fixed shift

# (index along the carried axis t, the guard that makes it earlier than t)
EARLIER = {
    "shift1": (lambda t: t - 1, lambda t: t >= 1),
    "shift2": (lambda t: t - 2, lambda t: t >= 2),
    "shift3": (lambda t: t - 3, lambda t: t >= 3),
    "const": (lambda t: 0 * t + 1, lambda t: t >= 2),
    "half": (lambda t: t // 2, lambda t: t >= 1),
    "parity": (lambda t: t - 1 - t % 2, lambda t: t >= 2),
}
OTHER = {  # index along the other axis (of extent 3), given it and t
    "same": lambda i, t: i,
    "const": lambda i, t: 0 * i + 2,
    "mod": lambda i, t: (i + t) % 3,
    "rev": lambda i, t: 2 - i,
}


def _earlier_recurrence(carry, form, other, guard):
    shape = (4, 3) if carry == 0 else (3, 4)
    X = te.placeholder(shape, "float64", "X")
    at, when = EARLIER[form]

    def body(S, *ax):
        t, i = ax[carry], ax[1 - carry]
        idx = [None, None]
        idx[carry], idx[1 - carry] = at(t), OTHER[other](i, t)
        cond = when(t) if guard == "affine" else (X[ax] > -0.5) & when(t)
        prev = [None, None]
        prev[carry], prev[1 - carry] = t - 1, i
        return te.sin(X[ax] + 0.7 * te.select(cond, S[tuple(idx)], 0.0)
                      + 0.4 * te.select(t >= 1, S[tuple(prev)], 0.0))
    R = te.recurrence(shape, body, name="R", dtype="float64")
    assert R.carry.axis == carry
    x = np.random.default_rng(carry * 7 + len(form)).uniform(-1.5, 1.5, shape)
    return X, R, x


@pytest.mark.parametrize("guard", ["affine", "data"])
@pytest.mark.parametrize("other", sorted(OTHER))
@pytest.mark.parametrize("form", sorted(EARLIER))
@pytest.mark.parametrize("carry", [0, 1])
def test_adjoint_of_a_self_read_at_an_earlier_point(carry, form, other, guard):
    X, R, x = _earlier_recurrence(carry, form, other, guard)
    L = _weighted_loss(R)
    check_grads(L, [X], [x])
    if other == "mod":
        second_order(L, [X], [x])


@pytest.mark.parametrize("form", sorted(EARLIER))
@pytest.mark.parametrize("carry", [0, 1])
def test_adjoint_of_a_self_read_at_an_earlier_point_c(carry, form):
    X, R, x = _earlier_recurrence(carry, form, "mod", "data")
    L = _weighted_loss(R)
    check_grads(L, [X], [x], backend="c")
    second_order(L, [X], [x], backend="c")

# }}}


def _running_extremum(op, inner):
    """``h[t, j] = u[t, j] + op_k inner(h[t - 1, k])``: an inline extremum over the
    recurrence's own previous step (``inner`` picks how it is written)."""
    T, H = 4, 3
    u = te.placeholder((T, H), "float64", "u")
    k = te.reduce_axis(H, name="k")
    h = te.recurrence((T, H), lambda h, t, j: u[t, j] + te.select(
        t == 0, 0.0, 0.5 * inner(op, h, t, k, H)), name="h", dtype="float64")
    r, c = te.reduce_axis(T, name="r"), te.reduce_axis(H, name="c")
    L = te.compute((), lambda: te.sum(h[r, c] * h[r, c], axis=[r, c]), name="L")
    return u, h, L


@pytest.mark.parametrize("op", ["max", "min"])
def test_inline_extremum_over_own_values_names_the_tensor_line_and_fix(op):
    # issue 12: the message named neither the recurrence nor the user's line
    u, h, L = _running_extremum(op, lambda op, h, t, k, H: getattr(te, op)(h[t - 1, k], axis=k))
    with pytest.raises(te.TensorExprError) as err:
        te.differentiate(L, [u])
    msg = str(err.value)
    assert "tensor 'h'" in msg and "test_recurrence_gradients.py" in msg, msg
    assert "h = te.recurrence(" in msg  # the user's source line
    assert f"{op}_{{k in [0, 3)}} h[t - 1, k]" in msg
    assert f"te.{op}imum" in msg and "te.stop_gradient" in msg and "te.log(te.sum(" in msg


def _pairwise(op, h, t, k, H):
    fn = te.maximum if op == "max" else te.minimum
    x = h[t - 1, 0]
    for c in range(1, H):
        x = fn(x, h[t - 1, c])
    return x


def _smooth(op, h, t, k, H):
    s = 1.0 if op == "max" else -1.0
    return s * te.log(te.sum(te.exp(s * h[t - 1, k]), axis=k))


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("inner", [_pairwise, _smooth], ids=["pairwise", "smooth"])
def test_the_fixes_the_message_suggests_differentiate(op, inner):
    u, h, L = _running_extremum(op, inner)
    x = np.random.default_rng(3).uniform(-1, 1, (4, 3))
    for backend in ("numpy", "c"):
        check_grads(L, [u], [x], backend=backend, tol=1e-6)


def test_a_stopped_inline_extremum_differentiates_as_a_constant():
    u, h, L = _running_extremum("max", lambda op, h, t, k, H: te.stop_gradient(
        te.max(h[t - 1, k], axis=k)))
    x = np.random.default_rng(4).uniform(-1, 1, (4, 3))
    (du,) = te.differentiate(L, [u])
    hv = te.build(h, backend="numpy")(x)
    np.testing.assert_allclose(te.build(du, inputs=[u], backend="numpy")(x), 2 * hv,
                               rtol=1e-12)
