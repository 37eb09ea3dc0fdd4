"""Random sums of products at sizes the blocked strategies take (hypothesis): C = numpy.

``test_c_random`` draws expression trees over a (3, 4) box: too small for the strategies
that block rows, jam elements, run taps or pad copies (their thresholds start at 4 to
16 elements). A padded 1 x 1 convolution channels last once ran by taps with the
select's test checked for the first row of a block only, and read outside its input:
no random test reached that shape. Here a program is one sum of two reads, each index
an output axis, a reduction axis, a shifted or strided mix of both, or a constant, over
output and reduction boxes of 1 to 33 points (sums mostly, maxima and minima too: values
repeat, so their gradients' ties are broken alike or not); reads that can fall outside
their tensor are guarded, by a select around the product (as a padded convolution is written) or by
the sum's ``where``, and an epilogue may follow. The forward sum and its gradient with
respect to both inputs (the adjoint of a shifted read is a gather with conditions) are
compared between the C and numpy backends.

Values are multiples of 0.5 in float64, so every sum is exact whatever its order (a max's
gradient shared among a tie is checked to rounding).
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import tensorexpr as te

from .util import assert_same

SIZES = [1, 2, 3, 4, 5, 8, 9, 16, 17, 33]


@st.composite
def programs(draw):
    """A recipe: output and reduction extents, two reads' index forms, the guard's form
    and an epilogue."""
    out = draw(st.lists(st.sampled_from(SIZES), min_size=2, max_size=4))
    red = draw(st.lists(st.sampled_from([1, 2, 3, 4, 5, 8, 16, 17]), min_size=1, max_size=3))
    if np.prod(out) * np.prod(red) > 60_000:   # keep the numpy reference quick
        red = red[:1]
        out = out[:3]

    def index():
        kind = draw(st.sampled_from(["out", "red", "shift", "shift", "stride", "const"]))
        o, r = draw(st.integers(0, len(out) - 1)), draw(st.integers(0, len(red) - 1))
        return (kind, o, r, draw(st.integers(-2, 2)))

    reads = [[index() for _ in range(draw(st.integers(1, 4)))] for _ in range(2)]
    guard = draw(st.sampled_from(["select", "where"]))
    epilogue = draw(st.sampled_from(["none", "scale", "add"]))
    op = draw(st.sampled_from(["sum", "sum", "max", "min"]))
    return out, red, reads, guard, epilogue, op


def _build(recipe):
    out, red, reads, guard, epilogue, op = recipe
    reduce = {"sum": te.sum, "max": te.max, "min": te.min}[op]
    raxes = [te.reduce_axis(n, f"r{k}") for k, n in enumerate(red)]

    def expr(form, oaxes):
        kind, o, r, c = form
        return {"out": lambda: oaxes[o], "red": lambda: raxes[r],
                "shift": lambda: oaxes[o] + raxes[r] + c,
                "stride": lambda: 2 * oaxes[o] + raxes[r] + c,
                "const": lambda: te.const(max(c, 0), "int64")}[kind]()

    def extent(form):
        """The least and greatest value of an index form over the boxes."""
        kind, o, r, c = form
        if kind == "out":
            return 0, out[o] - 1
        if kind == "red":
            return 0, red[r] - 1
        if kind == "const":
            return max(c, 0), max(c, 0)
        return c, (2 if kind == "stride" else 1) * (out[o] - 1) + red[r] - 1 + c

    # each tensor as large as the in-range part of its reads (at least one element)
    shapes = [tuple(max(1, min(hi + 1, 2 + hi // 2)) for _, hi in map(extent, forms))
              for forms in reads]
    A = te.placeholder(shapes[0], "float64", "A")
    B = te.placeholder(shapes[1], "float64", "B")

    def body(*oaxes):
        idx = [[expr(f, oaxes) for f in forms] for forms in reads]
        conds = [c for ix, shape in zip(idx, shapes) for i, n in zip(ix, shape)
                 for c in (i >= 0, i < n)]
        inside = conds[0]
        for c in conds[1:]:
            inside = inside & c
        # unclamped: a select evaluates only its taken branch, where the reads are inside
        prod = A[tuple(idx[0])] * B[tuple(idx[1])]
        if guard == "select" or op != "sum":  # (a max over no point would be -inf)
            s = reduce(te.select(inside, prod, 0.0), axis=raxes)
        else:
            s = te.sum(prod, axis=raxes, where=inside)
        if epilogue == "scale":
            return s * 0.5
        if epilogue == "add":
            return s + A[tuple(0 for _ in shapes[0])]
        return s
    Y = te.compute(tuple(out), body, name="Y")
    return A, B, Y


def _values(shape, rng):
    return rng.integers(-6, 7, shape) / 2.0


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(recipe=programs(), seed=st.integers(0, 99))
def test_random_contraction_and_its_gradient_agree_with_numpy(recipe, seed):
    A, B, Y = _build(recipe)
    H = te.placeholder(Y.shape, "float64", "H")
    dA, dB = te.differentiate(Y, [A, B], head=H)
    rng = np.random.default_rng(seed)
    a, b, h = _values(A.shape, rng), _values(B.shape, rng), _values(Y.shape, rng)
    for outs, ins, args in (([Y], [A, B], (a, b)), ([dA, dB], [A, B, H], (a, b, h))):
        got = te.build(outs, ins)(*args)
        want = te.build(outs, ins, backend="numpy")(*args)
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        # a tie of a max shares its gradient (1/count of it each): rounded, not exact
        tol = 0 if recipe[-1] == "sum" else 1e-12
        for g, w in zip(got, want):
            assert_same(g, w, rtol=tol, atol=tol)
