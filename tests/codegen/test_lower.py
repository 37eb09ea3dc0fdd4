"""codegen.lower: index expressions of data, and temporaries' scopes (C vs numpy backend)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te

from ..passes.gradcheck import check_grads, sum_of_squares
from .util import agree, rand


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
