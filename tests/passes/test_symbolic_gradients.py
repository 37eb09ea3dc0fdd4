"""Gradients of programs with symbolic sizes: one gradient program, many sizes."""
from __future__ import annotations

import numpy as np

import tensorexpr as te


def test_strided_conv1d_gradient_at_two_sizes():
    n = te.var("n")
    X = te.placeholder((2 * n + 1,), "float64", "X")
    W = te.placeholder((3,), "float64", "W")
    k = te.reduce_axis(3, "k")
    Y = te.compute((n,), lambda h: te.sum(X[2 * h + k] * W[k], axis=k), name="Y")
    H = te.placeholder((n,), "float64", "H")
    dX, dW = te.differentiate(Y, [X, W], head=H)
    f = te.build([dX, dW], inputs=[X, W, H], backend="numpy")
    rng = np.random.default_rng(0)
    for size in (3, 8):
        x, w, h = rng.standard_normal(2 * size + 1), rng.standard_normal(3), rng.standard_normal(size)
        gx, gw = f(x, w, h)
        want_x = np.zeros_like(x)
        for i in range(size):
            want_x[2 * i:2 * i + 3] += h[i] * w
        want_w = np.array([sum(h[i] * x[2 * i + q] for i in range(size)) for q in range(3)])
        np.testing.assert_allclose(gx, want_x)
        np.testing.assert_allclose(gw, want_w)


def test_clamped_blur_gradient_symbolic():
    n = te.var("n")
    X = te.placeholder((n,), "float64", "X")

    def c(e):
        return te.minimum(te.maximum(e, 0), n - 1)
    Y = te.compute((n,), lambda i: X[c(i - 1)] + 2.0 * X[i] + X[c(i + 1)], name="Y")
    H = te.placeholder((n,), "float64", "H")
    (dX,) = te.differentiate(Y, [X], head=H)
    text = str(dX)
    assert "sum_" not in text  # every tap inverts to single terms: no reduction at all
    f = te.build(dX, inputs=[X, H], backend="numpy")
    for size in (1, 2, 9):
        h = np.random.default_rng(size).standard_normal(size)
        want = 2.0 * h
        for i in range(size):
            want[max(i - 1, 0)] += h[i]
            want[min(i + 1, size - 1)] += h[i]
        np.testing.assert_allclose(f(np.zeros(size), h), want)
