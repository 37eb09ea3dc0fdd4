"""The strategy table (codegen.strategies): every strategy is chosen where it should be,
forcing one gives the same values, and a strategy that does not apply is refused."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tensorexpr as te
from codegen import strategies
from tensorexpr.ir import Compute

from ..passes.gradcheck import numeric_grad, rel_err
from .util import agree, rand


def _matmul():
    A = te.placeholder((20, 12), name="A")
    B = te.placeholder((12, 40), name="B")
    k = te.reduce_axis((0, 12), name="k")
    C = te.compute((20, 40), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [C], [A, B], [rand((20, 12)), rand((12, 40), seed=1)]


def _dot_rows():
    # B read backwards along k: no transposed copy, so the jammed dot products run
    H = te.placeholder((9, 33), name="H")
    B = te.placeholder((10, 33), name="B")
    k = te.reduce_axis((0, 33), name="k")
    D = te.compute((9, 10), lambda i, j: te.sum(H[i, k] * B[j, 32 - k], axis=k), name="D")
    return [D], [H, B], [rand((9, 33)), rand((10, 33), seed=1)]


def _conv_weight_gradient():
    X = te.placeholder((2, 3, 10, 20), name="X")
    H = te.placeholder((2, 4, 8, 18), name="H")
    n, y, x = te.reduce_axis(2, "n"), te.reduce_axis(8, "y"), te.reduce_axis(18, "x")
    dW = te.compute((4, 3, 3, 3), lambda f, c, ky, kx: te.sum(
        H[n, f, y, x] * X[n, c, y + ky, x + kx], axis=[n, y, x]), name="dW")
    return [dW], [X, H], [rand((2, 3, 10, 20)), rand((2, 4, 8, 18), seed=1)]


def _padded_gradient():
    H = te.placeholder((1, 2, 12, 12), name="H")
    W = te.placeholder((2, 3, 3, 3), name="W")
    f, ky, kx = te.reduce_axis(2), te.reduce_axis(3), te.reduce_axis(3)
    dX = te.compute((1, 3, 14, 14), lambda n, c, y, x: te.sum(
        H[n, f, y - ky, x - kx] * W[f, c, ky, kx], axis=[f, ky, kx],
        where=(y - ky >= 0) & (y - ky < 12) & (x - kx >= 0) & (x - kx < 12)), name="dX")
    return [dX], [H, W], [rand((1, 2, 12, 12)), rand((2, 3, 3, 3), seed=1)]


def _gather_rows():
    E = te.placeholder((10, 16), name="E")
    idx = te.placeholder((4,), dtype="int32", name="idx")
    Y = te.compute((4, 16), lambda i, d: E[idx[i], d] * 2.0, name="Y")
    return [Y], [E, idx], [rand((10, 16)), np.array([3, 0, 9, 3], np.int32)]


def _pieces():
    X = te.placeholder((6, 40), name="X")
    Y = te.compute((6, 40), lambda i, j: X[i, te.maximum(j - 1, 0)] + X[i, te.minimum(j + 1, 39)],
                   name="Y")
    return [Y], [X], [rand((6, 40))]


def _blocks():
    X = te.placeholder((40, 37), name="X")
    Y = te.compute((37, 40), lambda j, i: X[i, j] * 2.0, name="Y")
    return [Y], [X], [rand((40, 37))]


def _split():
    X = te.placeholder((3, 8), name="X")
    P = te.placeholder((3, 4), name="P")
    Y = te.compute((3, 8), lambda i, j: te.select(X[i, j] > P[i, j // 2], P[i, j // 2], 0.0),
                   name="Y")
    return [Y], [X, P], [rand((3, 8)), rand((3, 4), seed=1)]


def _steps(checkpoints=None):
    W = te.placeholder((16, 16), name="W")
    x = te.placeholder((6, 3, 16), name="x")
    k = te.reduce_axis(16, name="k")
    h = te.recurrence((6, 3, 16), lambda h, t, b, j: te.tanh(x[t, b, j] + te.select(
        t == 0, 0.0, te.sum(h[t - 1, b, k] * W[k, j], axis=k))), name="h",
        checkpoints=checkpoints)
    return [h], [x, W], [rand((6, 3, 16)), rand((16, 16), seed=1) * 0.3]


def _adjoint_steps():
    # the weight gradient of a checkpointed tanh RNN: a step at a time, last step first
    (h,), (x, W), arrays = _steps(checkpoints=2)
    H = te.placeholder(h.shape, name="H")
    dW, = te.differentiate(h, [W], head=H)
    return [dW], [x, W, H], arrays + [rand((6, 3, 16), seed=2)]


def _step_rows():
    # the input gradient of a checkpointed tanh RNN fed through a projection: a sum along
    # the adjoint's steps, computed a step at a time in every build of the program
    X = te.placeholder((6, 3, 8), name="X")
    Wx, W = te.placeholder((8, 16), name="Wx"), te.placeholder((16, 16), name="W")
    d, k = te.reduce_axis(8, name="d"), te.reduce_axis(16, name="k")
    xp = te.compute((6, 3, 16), lambda t, b, j: te.sum(X[t, b, d] * Wx[d, j], axis=d), name="xp")
    h = te.recurrence((6, 3, 16), lambda h, t, b, j: te.tanh(xp[t, b, j] + te.select(
        t == 0, 0.0, te.sum(h[t - 1, b, k] * W[k, j], axis=k))), name="h", checkpoints=2)
    H = te.placeholder(h.shape, name="H")
    dX, = te.differentiate(h, [X], head=H)
    return [dX], [X, Wx, W, H], [rand((6, 3, 8)), rand((8, 16), seed=1) * 0.3,
                                 rand((16, 16), seed=2) * 0.3, rand((6, 3, 16), seed=3)]


def _interchange():
    # a cumulative sum along rows: the rows outside the carried loop, in blocks
    X = te.placeholder((40, 24), name="X")
    c = te.recurrence((40, 24), lambda c, r, t: te.select(t == 0, X[r, 0], c[r, t - 1] + X[r, t]),
                      name="c")
    return [c], [X], [rand((40, 24))]


def _loops():
    X = te.placeholder((5, 7), name="X")
    Y = te.compute((5, 7), lambda i, j: te.exp(X[i, j]) + 1.0, name="Y")
    return [Y], [X], [rand((5, 7))]


def _scatter_rows():
    E = te.placeholder((10, 16), name="E")
    idx = te.placeholder((4,), dtype="int32", name="idx")
    H = te.placeholder((4, 16), name="H")
    dE, = te.differentiate(te.compute((4, 16), lambda i, d: E[idx[i], d], name="Y"), [E],
                           head=H)
    return [dE], [H, idx], [rand((4, 16)), np.array([3, 0, 9, 3], np.int32)]


def _scatter():
    E = te.placeholder((10,), name="E")
    idx = te.placeholder((4,), dtype="int32", name="idx")
    H = te.placeholder((4,), name="H")
    dE, = te.differentiate(te.compute((4,), lambda i: E[idx[i]], name="Y"), [E], head=H)
    return [dE], [H, idx], [rand(4), np.array([3, 0, 9, 3], np.int32)]


PROGRAMS = {"adjoint-steps": _adjoint_steps, "step-rows": _step_rows, "rows": _matmul, "jam": _dot_rows,
            "taps": _conv_weight_gradient,
            "padded-copy": _padded_gradient, "gather-rows": _gather_rows, "pieces": _pieces,
            "blocks": _blocks, "split": _split, "steps": _steps, "interchange": _interchange,
            "loops": _loops,
            "scatter-rows": _scatter_rows, "scatter": _scatter}


def test_every_strategy_of_the_table_has_a_program_here():
    assert set(PROGRAMS) == {s.name for s in strategies.TABLE}


def test_the_module_docstring_lists_the_table_in_its_order():
    listed = re.findall(r"^``([a-z-]+)``", strategies.__doc__, re.M)
    compute = [s.name for s in strategies.TABLE if s.kind is Compute]
    assert listed == compute


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_strategy_is_chosen_for_its_program_and_agrees_with_numpy(name):
    outs, ins, arrays = PROGRAMS[name]()
    f, _ = agree(outs, ins, *arrays)
    assert f.schedule[outs[0].name].strategy == name, str(f.schedule)


@pytest.mark.parametrize("name", ["rows", "jam", "taps", "blocks", "split", "pieces",
                                  "gather-rows", "padded-copy", "steps", "interchange",
                                  "adjoint-steps"])
def test_forcing_plain_loops_gives_the_same_values(name):
    outs, ins, arrays = PROGRAMS[name]()
    t = outs[0].name
    fast = te.build(outs, ins)
    plain = te.build(outs, ins, options=te.ScheduleOptions(force={t: "loops"}))
    assert plain.schedule[t].strategy == "loops" and fast.schedule[t].strategy == name
    assert plain.source != fast.source
    np.testing.assert_allclose(plain(*arrays), fast(*arrays), rtol=1e-5, atol=1e-5)


def test_forcing_a_strategy_that_does_not_apply_names_the_tensor_and_the_choices():
    outs, ins, _ = _loops()
    with pytest.raises(ValueError, match=r"strategy 'rows' does not apply to tensor 'Y' "
                                         r"\(defined at .*test_strategies.py.*the ones that do: "
                                         r"loops"):
        te.build(outs, ins, options=te.ScheduleOptions(force={"Y": "rows"}))


def test_an_unknown_strategy_is_refused_with_the_list():
    outs, ins, _ = _loops()
    with pytest.raises(ValueError, match="the strategies are adjoint-steps, step-rows, padded-copy, rows"):
        te.build(outs, ins, options=te.ScheduleOptions(force={"Y": "fast"}))


def test_forcing_rows_over_a_padded_copy():
    outs, ins, arrays = _padded_gradient()
    f = te.build(outs, ins, options=te.ScheduleOptions(force={"dX": "rows"}))
    assert f.schedule["dX"].strategy == "rows" and not f.schedule.copies
    want = te.build(outs, ins, backend="numpy")(*arrays)
    np.testing.assert_allclose(f(*arrays), want, rtol=1e-5, atol=1e-5)


# {{{ compared sums: every strategy adds them in written order, or declines them

def _spread(shape, seed):
    """float64 values of magnitudes far apart (1e-3 .. 1e3): the order of a sum's terms
    shows in its rounding."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.5, 1.5, shape) * 10.0 ** rng.integers(-3, 4, shape)


def _cmp_rows():
    # a matrix product's rows, row blocks in register tiles
    A, B = te.placeholder((20, 12), "float64", "A"), te.placeholder((12, 40), "float64", "B")
    k, r = te.reduce_axis(12, "k"), te.reduce_axis(20, "r")
    twin = lambda i, j: te.sum(A[i, k] * B[k, j], axis=k)  # noqa: E731
    M = te.compute((40,), lambda j: te.max(te.sum(A[r, k] * B[k, j], axis=k), axis=r), name="M")
    a = _spread((20, 12), 0)
    a[1] = a[0]  # ties
    return ((20, 40), twin), M, [A, B], [a, _spread((12, 40), 1)], 0


def _cmp_jam():
    H, B = te.placeholder((9, 33), "float64", "H"), te.placeholder((10, 33), "float64", "B")
    k, r = te.reduce_axis(33, "k"), te.reduce_axis(9, "r")
    twin = lambda i, j: te.sum(H[i, k] * B[j, 32 - k], axis=k)  # noqa: E731
    M = te.compute((10,), lambda j: te.max(te.sum(H[r, k] * B[j, 32 - k], axis=k), axis=r),
                   name="M")
    h = _spread((9, 33), 0)
    h[3] = h[5]
    return ((9, 10), twin), M, [H, B], [h, _spread((10, 33), 1)], 0


def _cmp_taps():
    # a convolution's weight gradient, the max over its filters (r first: M_sum[r, c, ky, kx])
    X, H = te.placeholder((2, 3, 8, 12), "float64", "X"), te.placeholder((2, 4, 6, 10), "float64", "H")
    n, y, x, r = (te.reduce_axis(e, nm) for e, nm in ((2, "n"), (6, "y"), (10, "x"), (4, "r")))
    twin = lambda f, c, ky, kx: te.sum(H[n, f, y, x] * X[n, c, y + ky, x + kx],  # noqa: E731
                                       axis=[n, y, x])
    M = te.compute((3, 3, 3), lambda c, ky, kx: te.max(te.sum(
        H[n, r, y, x] * X[n, c, y + ky, x + kx], axis=[n, y, x]), axis=r), name="M")
    h = _spread((2, 4, 6, 10), 1)
    h[:, 2] = h[:, 0]
    return ((4, 3, 3, 3), twin), M, [X, H], [_spread((2, 3, 8, 12), 0), h], 1


def _cmp_padded_copy():
    # a convolution's input gradient (a gather at y - ky, x - kx), the max over channels
    H, W = te.placeholder((1, 2, 9, 9), "float64", "H"), te.placeholder((2, 3, 3, 3), "float64", "W")
    f, ky, kx, r = (te.reduce_axis(3 if nm != "f" else 2, nm) for nm in ("f", "ky", "kx", "r"))
    inside = lambda y, x: (y - ky >= 0) & (y - ky < 9) & (x - kx >= 0) & (x - kx < 9)  # noqa: E731
    twin = lambda n, c, y, x: te.sum(H[n, f, y - ky, x - kx] * W[f, c, ky, kx],  # noqa: E731
                                      axis=[f, ky, kx], where=inside(y, x))
    M = te.compute((1, 11, 11), lambda n, y, x: te.max(te.sum(
        W[f, r, ky, kx] * H[n, f, y - ky, x - kx], axis=[f, ky, kx], where=inside(y, x)),
        axis=r), name="M")
    w = _spread((2, 3, 3, 3), 1)
    w[:, 2] = w[:, 0]
    return ((1, 3, 11, 11), twin), M, [H, W], [_spread((1, 2, 9, 9), 0), w], 1


def _cmp_rows_residues():
    # a stride-2 convolution's input gradient: rows per residue of x, masked full tiles,
    # whose short tap axis would get an accumulator per tap (another order)
    H, W = te.placeholder((4, 20), "float64", "H"), te.placeholder((4, 3), "float64", "W")
    kx, r = te.reduce_axis(3, "kx"), te.reduce_axis(4, "r")
    inside = lambda x: ((x - kx) % 2 == 0) & (x - kx >= 0) & ((x - kx) // 2 < 20)  # noqa: E731
    twin = lambda c, x: te.sum(H[c, (x - kx) // 2] * W[c, kx], axis=kx,  # noqa: E731
                               where=inside(x))
    M = te.compute((41,), lambda x: te.max(te.sum(H[r, (x - kx) // 2] * W[r, kx], axis=kx,
                                                  where=inside(x)), axis=r), name="M")
    h, w = _spread((4, 20), 0), _spread((4, 3), 1)
    h[3], w[3] = h[0], w[0]
    return ((4, 41), twin), M, [H, W], [h, w], 0


# strategy -> (program, what it does with a compared sum: "keeps" order, or "declines" it)
COMPARED = {"rows": (_cmp_rows, "keeps"), "jam": (_cmp_jam, "declines"),
            "taps": (_cmp_taps, "declines"), "padded-copy": (_cmp_padded_copy, "keeps"),
            "rows-residues": (_cmp_rows_residues, "keeps")}


@pytest.mark.parametrize("name", sorted(COMPARED))
def test_a_compared_sum_keeps_written_order_in_each_strategy(name):
    # max_r sum(...): the gradient's tie test recomputes the sum in written order and
    # compares it bit for bit with the extracted sum M_sum; a strategy adding M_sum's
    # terms in another order (lanes, a partial sum per tap) ties no point: dX was 0
    make, what = COMPARED[name]
    (shape, twin), M, ins, arrays, wrt = make()
    strategy = name.split("-residues")[0]
    T = te.compute(shape, twin, name="T", dtype="float64")
    assert te.build([T], ins).schedule["T"].strategy == strategy    # the twin takes it
    axes = [te.reduce_axis(e) for e in M.shape]
    L = te.compute((), lambda: te.sum(M[tuple(axes)], axis=axes), name="L", dtype="float64")
    grads = te.differentiate(L, ins)
    f, (m, *got) = agree([M, *grads], ins, *arrays)
    taken = [c.strategy for c in f.schedule.choices if c.tensor == "M_sum"]
    assert (strategy in taken) == (what == "keeps"), str(f.schedule)
    want = numeric_grad(te.build(L, ins, backend="numpy"), arrays, wrt)
    # (sums of terms up to 1e6: central differences lose digits; a missed tie is off by 1/2)
    assert rel_err(got[wrt], want) < 1e-4
    assert np.count_nonzero(got[wrt]) > 0

# }}}
