"""Straight-through estimators: training through a quantizer whose true gradient is
zero almost everywhere. ``override={q: fn}`` replaces the gradient through ``q``:
the identity (the classic straight-through estimator) and the identity clipped to
the quantizer's range (as in binarized networks). A linear model with weights
quantized to multiples of 1/4 learns a target it could not reach otherwise (the
exact gradient is 0, so it never moves). Run it:

    python examples/straight_through.py
"""
from __future__ import annotations

import numpy as np

import tensorexpr as te

D, N, STEP = 6, 128, 0.25


def quantized_regression(estimator):
    """``(W, X, y, loss, dW)`` for ``loss = mean_n (X[n] . round_4(W) - y[n])^2``."""
    W = te.placeholder((D,), name="W")
    X = te.placeholder((N, D), name="X")
    y = te.placeholder((N,), name="y")
    q = te.compute((D,), lambda d: te.floor(W[d] / STEP + 0.5) * STEP, name="q")
    k, n = te.reduce_axis(D, name="k"), te.reduce_axis(N, name="n")
    pred = te.compute((N,), lambda i: te.sum(X[i, k] * q[k], axis=k), name="pred")
    loss = te.compute((), lambda: te.sum((pred[n] - y[n]) ** 2, axis=n) / N, name="loss")
    overrides = {
        "exact": {},
        "identity": {q: lambda q_, W_, h: h},
        "clipped": {q: lambda q_, W_, h: te.compute(W_.shape, lambda d: te.select(
            te.abs(W_[d]) <= 1.0, h[d], 0.0), name="ste_clipped")},
    }[estimator]
    (dW,) = te.differentiate(loss, [W], override=overrides)
    return W, X, y, loss, dW


def main(steps=150, lr=0.05, seed=0):
    """Returns ``{estimator: final loss}`` starting from W = 0."""
    rng = np.random.default_rng(seed)
    true_w = rng.choice(np.arange(-1, 1.01, STEP), D).astype(np.float32)
    x = rng.standard_normal((N, D)).astype(np.float32)
    y = x @ true_w
    final = {}
    for estimator in ("exact", "identity", "clipped"):
        W, X, Y, loss, dW = quantized_regression(estimator)
        f_loss, f_grad = te.build(loss), te.build(dW, inputs=[W, X, Y])
        w = np.zeros(D, np.float32)
        for _ in range(steps):
            w -= lr * f_grad(w, x, y)
        final[estimator] = float(f_loss(w, x, y))
        print(f"{estimator:>8}: loss {final[estimator]:.5f}")
    return final


if __name__ == "__main__":
    main()
