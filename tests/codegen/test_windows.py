"""Small windows (``lower_expr.ExprLowering.window``: reductions of a few points per
element, written out) and pieces along an outer axis (``piecewise.cut``), on bilinear
upsampling written with ``//`` and ``%`` (its gradient adds about nine 2-point windows per
element, its boundary rows more) and on windows that a bound or a clamp cuts short: the C
backend against the numpy backend, on hypothesis-drawn shapes."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from benchmarks.cases import by_id
from benchmarks.systems.te_sys import define

from .util import agree, rand, without_comments


def upsample(n, c, h, w, s):
    """Bilinear upsampling by ``s`` (half-pixel centres, edges clamped), as users write it."""
    X = te.placeholder((n, c, h, w), name="X")

    def lerp(o, size):
        # output o sits at input (o + 0.5) / s - 0.5 = i0 + f
        num = 2 * o + 1 - s  # 2 * s * (i0 + f)
        lo = te.maximum(num // (2 * s), 0)
        hi = te.minimum(num // (2 * s) + 1, size - 1)
        f = te.cast(num % (2 * s), "float32") / (2.0 * s)
        return lo, hi, te.select(num < 0, 0.0, f)

    def body(b, ch, y, x):
        (y0, y1, fy), (x0, x1, fx) = lerp(y, h), lerp(x, w)
        # the four taps, each with its weight (a sum of products: another order than
        # the benchmark's two lerps of lerps)
        return sum(((wy * wx) * X[b, ch, yy, xx] for yy, wy in ((y0, 1.0 - fy), (y1, fy))
                    for xx, wx in ((x0, 1.0 - fx), (x1, fx))), te.const(0.0))
    return X, te.compute((n, c, s * h, s * w), body, name="Y")


def upsample2(n, c, h, w):
    """The benchmark's form (case 29): 2x, taps 3/4 and 1/4, written with ``//`` and ``%``."""
    case = by_id(29)
    (X,), Y = define(case, dict(case.params(quick=True), N=n, C=c, H=h, W=w))
    return X, Y


def gradient(X, Y):
    H = te.placeholder(Y.shape, name="H")
    return H, te.differentiate(Y, [X], head=H)[0]


def check(X, Y, seed=0):
    """Forward and gradient agree with the numpy backend; returns the gradient's build."""
    x = rand(X.shape, seed=seed)
    agree([Y], [X], x)
    H, dX = gradient(X, Y)
    f, _ = agree([dX], [X, H], x, rand(Y.shape, seed=seed + 1))
    return f


def test_the_upsampling_gradient_adds_its_windows_written_out():
    f = check(*upsample2(2, 3, 12, 16))
    src = without_comments(f.source)
    # no partial sums for a window of 2 points, no loop over a window's points
    assert "part" not in src and "k0 <" not in src
    # the rows' tests (the first and last rows add more sums) cut an outer axis of the
    # middle columns (not of the single first and last columns: no vector lanes there)
    sched = str(f.schedule)
    assert "dX[1:15]: pieces (pieces=((0, 1), (1, 11), (11, 12)), axis=i2)" in sched, sched
    assert sched.count(": loops") == 5, sched
    middle = f.source[f.source.index("/* dX[1:15][:, :, 1:11, :]"):]
    loop = middle[middle.index("#pragma omp simd"):]
    loop = loop[:loop.index("b2[")]
    assert " if " not in loop and "if (" not in loop, loop  # no test left in the vector loop


def test_the_upsampling_runs_residues_of_its_columns_without_floor_divisions():
    X, Y = upsample2(2, 3, 12, 16)
    f, _ = agree([Y], [X], rand(X.shape))
    assert "split (factor=2, pieces=((0, 1), (1, 15), (15, 16)))" in str(f.schedule)
    src = without_comments(f.source)
    middle = src[src.index("for (int64_t i", src.index("< 15; ") - 40):]
    middle = middle[:middle.index("}")]
    # the middle piece: contiguous reads at q - 1, q, q + 1, no clamp on them; the
    # rows' divisions hoisted
    q = middle.split()[2]
    assert "floordiv" not in middle and "%" not in middle, middle
    assert f"16 + ({q} + -1)]" in middle and f"16 + ({q} + 1)]" in middle, middle
    assert f"max_i64({q}" not in middle and f"min_i64({q}" not in middle, middle


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 2), st.integers(1, 7), st.integers(1, 9), st.integers(0, 99))
def test_upsampling_by_two_on_random_shapes(c, h, w, seed):
    check(*upsample2(1, c, h, w), seed=seed)


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 6), st.integers(1, 7), st.sampled_from([2, 3, 4]), st.integers(0, 99))
def test_upsampling_by_other_factors_on_random_shapes(h, w, s, seed):
    check(*upsample(1, 2, h, w, s), seed=seed)


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 20), st.integers(1, 5), st.integers(0, 99))
def test_windows_cut_short_at_the_end(n, k, seed):
    # a window of k points that the array's end cuts short: guarded points
    X = te.placeholder((n,), name="X")
    r = te.reduce_axis(k, "r")
    Y = te.compute((n,), lambda i: te.sum(X[i + r] * (r + 1.0), axis=r, where=i + r < n),
                   name="Y")
    M = te.compute((n,), lambda i: te.max(X[i + r], axis=r, where=i + r < n), name="M")
    agree([Y, M], [X], rand((n,), seed=seed))


def test_a_window_whose_outer_loop_runs_more_points_than_it_has_per_row():
    # a + b == i: one b per a, but a takes up to 8 values: the loop over a runs 8 times
    X = te.placeholder((8, 8), name="X")
    a, b = te.reduce_axis(8, "a"), te.reduce_axis(8, "b")
    Y = te.compute((15,), lambda i: te.sum(X[a, b], axis=[a, b], where=a + b == i), name="Y")
    f, (y,) = agree([Y], [X], rand((8, 8)))
    x = rand((8, 8))
    np.testing.assert_allclose(y, [np.fliplr(x).diagonal(7 - i).sum() for i in range(15)],
                               rtol=1e-5)


@settings(max_examples=12, deadline=None)
@given(st.integers(2, 4), st.integers(0, 3), st.integers(1, 9), st.integers(0, 99))
def test_residues_of_a_row_that_is_not_a_multiple_of_the_divisor(c, extra, q, seed):
    # an interleaving of c rows (as the residue classes of a strided gradient are read
    # back: codegen.residue_classes): the last q holds the first n % c residues alone
    n = c * q + extra % c
    if n < c:
        n += c
    parts = [te.placeholder((3, -(-(n - r) // c)), name=f"P{r}") for r in range(c)]

    def body(i, x):
        v = parts[-1][i, x // c]
        for r in reversed(range(c - 1)):
            v = te.select(x % c == r, parts[r][i, x // c], v)
        return v
    Y = te.compute((3, n), body, name="Y")
    f, _ = agree([Y], parts, *[rand(p.shape, seed=seed + k) for k, p in enumerate(parts)])
    assert f.schedule["Y"].strategy == "split"
    if n % c:
        assert f.schedule["Y"].param("pieces")[-1] == (n // c, n // c + 1), f.schedule
