"""Sums by taps (``codegen.tapsum``): what it tells row fusion about its loops."""
from __future__ import annotations

import tensorexpr as te
from codegen import tapsum

from .util import agree, rand


def test_slabs_leave_the_registers_block_axis_whole():
    # two weight-gradient-like sums over the same first axis fuse; a slab of planes would
    # narrow their block axis f, which the registers' form needs whole: slabs of rows
    X = te.placeholder((2, 8, 18, 18), name="X")
    H1, H2 = (te.placeholder((2, 16, 16, 16), name=n) for n in ("H1", "H2"))
    sums = []
    for k, H in enumerate((H1, H2)):
        n, y, x = te.reduce_axis(2, "n"), te.reduce_axis(16, "y"), te.reduce_axis(16, "x")
        sums.append(te.compute((8, 16, 2, 2), lambda c, f, a, b, H=H: te.sum(
            H[n, f, y, x] * X[n, c, y + a, x + b], axis=[n, y, x]), name=f"P{k}"))
    fc, _ = agree(sums, [X, H1, H2], rand(X.shape), rand(H1.shape, seed=1),
                  rand(H2.shape, seed=2), rtol=1e-4)
    assert all(fc.schedule[p.name].param("partial sums") == "registers" for p in sums)
    assert "fused: P0 + P1 (slabs of rows)" in str(fc.schedule)


def test_rows_of_a_block_are_not_tested_by_the_first_rows_condition():
    # A padded 1 x 1 convolution, channels last: Y[n, y, x, f] sums over c under a select
    # on y and x (the zero padding). Blocked along y, the select's test ran once for the
    # block's first row: the other rows read outside X near the border (garbage, NaN).
    X = te.placeholder((2, 6, 6, 16), name="X")
    W = te.placeholder((16, 4), name="W")
    c = te.reduce_axis(16, "c")

    def body(n, y, x, f):
        inside = (y - 1 >= 0) & (y - 1 < 6) & (x - 1 >= 0) & (x - 1 < 6)
        return te.sum(te.select(inside, X[n, y - 1, x - 1, c] * W[c, f], 0.0), axis=c)
    Y = te.compute((2, 8, 8, 4), body, name="Y")
    assert tapsum.plan(Y) is not None and tapsum.plan(Y)[2] != 1  # not blocked along y
    agree([Y], [X, W], rand(X.shape), rand(W.shape, seed=1))
