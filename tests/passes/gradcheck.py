"""Finite-difference gradient checking shared by the differentiation tests."""
from __future__ import annotations

import numpy as np

import tensorexpr as te
from tensorexpr.ir import Reduce, ScatterAdd, topo_order, walk


def numeric_grad(fn, arrays, k, eps=1e-6):
    """Central differences of the scalar ``fn(*arrays)`` w.r.t. ``arrays[k]`` (float64)."""
    a = arrays[k]
    out = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        plus = [x.copy() for x in arrays]
        minus = [x.copy() for x in arrays]
        plus[k][idx] += eps
        minus[k][idx] -= eps
        out[idx] = (float(fn(*plus)) - float(fn(*minus))) / (2 * eps)
    return out


def rel_err(got, want) -> float:
    return float(np.abs(np.asarray(got) - want).max() / max(np.abs(want).max(), 1e-8))


def check_grads(L, inputs, arrays, wrt=None, backend="numpy", tol=1e-6):
    """Gradients of scalar ``L`` against central differences; returns the gradient tensors."""
    wrt = list(range(len(inputs))) if wrt is None else wrt
    grads = te.differentiate(L, [inputs[k] for k in wrt])
    f = te.build(list(grads), inputs=inputs, backend=backend)
    got = f(*arrays)
    got = got if isinstance(got, tuple) else (got,)
    fl = te.build(L, inputs=inputs, backend="numpy")
    for g, k in zip(got, wrt):
        want = numeric_grad(fl, arrays, k)
        assert rel_err(g, want) < tol, (inputs[k].name, rel_err(g, want))
    return grads


def second_order(L, inputs, arrays, wrt=None, seed=1, tol=1e-5, backend="numpy"):
    """Differentiate ``sum_k <dL/dx_k, V_k>`` again and compare with finite differences.

    This is a Hessian-vector product (and the pattern of a gradient penalty): the
    first gradients take part in a second loss.
    """
    rng = np.random.default_rng(seed)
    wrt = list(range(len(inputs))) if wrt is None else wrt
    grads = te.differentiate(L, [inputs[k] for k in wrt])
    vs = [te.placeholder(g.shape, dtype=g.dtype, name=f"V{n}") for n, g in enumerate(grads)]
    v_arrays = [rng.standard_normal(g.shape) for g in grads]
    terms = []
    for g, v in zip(grads, vs):
        axes = [te.reduce_axis(s) for s in g.shape]
        terms.append(te.compute((), lambda g=g, v=v, axes=axes: te.sum(
            g[tuple(axes)] * v[tuple(axes)], axis=axes) if axes else g[()] * v[()]))
    L2 = terms[0]
    for t in terms[1:]:
        L2 = te.compute((), lambda a=L2, b=t: a[()] + b[()])
    all_inputs = list(inputs) + vs
    all_arrays = list(arrays) + v_arrays
    return check_grads(L2, all_inputs, all_arrays, wrt=wrt, tol=tol, backend=backend)


def sum_of_squares(Y, head=None):
    """``L = sum(Y * Y)`` (or ``sum(H * Y)``) as a 0-d tensor."""
    axes = [te.reduce_axis(s) for s in Y.shape]
    if head is None:
        return te.compute((), lambda: te.sum(Y[tuple(axes)] * Y[tuple(axes)], axis=axes), name="L")
    return te.compute((), lambda: te.sum(head[tuple(axes)] * Y[tuple(axes)], axis=axes), name="L")


def has_scatter(tensors) -> bool:
    return any(isinstance(t, ScatterAdd) for t in topo_order(list(tensors)))


def largest_tensor(tensors, sizes=None) -> int:
    """Number of elements of the largest tensor reachable from ``tensors`` (static shapes)."""
    best = 0
    for t in topo_order(list(tensors)):
        n = 1
        for d in t.shape:
            n *= int(d)
        best = max(best, n)
    return best
