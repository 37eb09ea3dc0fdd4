"""Sums by taps (``codegen.tapsum``): what it tells row fusion about its loops."""
from __future__ import annotations

import tensorexpr as te

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
