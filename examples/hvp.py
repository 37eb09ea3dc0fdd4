"""Hessian-vector products and Jacobians of an L2-regularized logistic regression.

A gradient is a tensor expression, so differentiating ``<grad L, v>`` again gives
``H v`` without forming ``H``; a small Jacobian is ``head=None`` on a non-scalar
output. Both are checked against the closed forms. Run it:

    python examples/hvp.py
"""
from __future__ import annotations

import numpy as np

import tensorexpr as te

N, D, LAM = 50, 4, 0.1


def main(seed=0):
    """Returns the largest errors of (H v, the Jacobian)."""
    rng = np.random.default_rng(seed)
    X = te.placeholder((N, D), "float64", "X")
    y = te.placeholder((N,), "float64", "y")
    w = te.placeholder((D,), "float64", "w")
    v = te.placeholder((D,), "float64", "v")
    k, n, d = te.reduce_axis(D, "k"), te.reduce_axis(N, "n"), te.reduce_axis(D, "d")
    z = te.compute((N,), lambda i: te.sum(X[i, k] * w[k], axis=k), name="z")
    # log(1 + exp(-y z)), written stably
    nll = te.compute((N,), lambda i: te.maximum(-y[i] * z[i], 0.0) + te.log(
        1.0 + te.exp(-te.abs(y[i] * z[i]))), name="nll")
    L = te.compute((), lambda: te.sum(nll[n], axis=n) / N + 0.5 * LAM * te.sum(
        w[d] * w[d], axis=d), name="L")
    (g,) = te.differentiate(L, [w])
    gv = te.compute((), lambda: te.sum(g[d] * v[d], axis=d), name="gv")
    (hv,) = te.differentiate(gv, [w])
    (J,) = te.differentiate(z, [w])                    # dz/dw: an (N, D) Jacobian
    xv, wv, vv = rng.standard_normal((N, D)), rng.standard_normal(D), rng.standard_normal(D)
    yv = rng.choice([-1.0, 1.0], N)
    got_hv = te.build(hv, inputs=[X, y, w, v])(xv, yv, wv, vv)
    p = 1 / (1 + np.exp(-yv * (xv @ wv)))
    hess = (xv.T * (p * (1 - p))) @ xv / N + LAM * np.eye(D)
    err_hv = float(np.abs(got_hv - hess @ vv).max())
    err_j = float(np.abs(te.build(J, inputs=[X, w], backend="numpy")(xv, wv) - xv).max())
    print(f"H v error {err_hv:.1e}, Jacobian error {err_j:.1e}; "
          f"names: {g.name}, {hv.name}")
    return err_hv, err_j


if __name__ == "__main__":
    main()
