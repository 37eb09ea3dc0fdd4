"""Symbolic sizes: one build of a layer and its gradient runs at every batch size,
empty batches included, and ``inspect.signature`` shows what to pass. Sizes are bound
from the input shapes; a mismatch names the input and the sizes its shape uses. Run
it:

    python examples/symbolic_sizes.py
"""
from __future__ import annotations

import inspect

import numpy as np

import tensorexpr as te


def main(batches=(1, 7, 0, 64, 3)):
    """Returns the batch sizes run and the signature of the gradient."""
    B, F = te.var("B"), te.var("F")
    X = te.placeholder((B, F), name="X")
    W = te.placeholder((F, 8), name="W")
    k = te.reduce_axis((0, F), name="k")
    Y = te.compute((B, 8), lambda b, o: te.tanh(te.sum(X[b, k] * W[k, o], axis=k)), name="Y")
    H = te.placeholder((B, 8), name="H")
    dX, dW = te.differentiate(Y, [X, W], head=H)
    f = te.build([Y, dX, dW], inputs=[X, W, H])
    print("signature", inspect.signature(f))
    rng = np.random.default_rng(0)
    for n in batches:
        x, w = rng.standard_normal((n, 5)).astype(np.float32), rng.standard_normal(
            (5, 8)).astype(np.float32)
        h = rng.standard_normal((n, 8)).astype(np.float32)
        y, gx, gw = f(x, w, h)
        ref = np.tanh(x @ w)
        assert y.shape == (n, 8) and gx.shape == (n, 5) and gw.shape == (5, 8)
        np.testing.assert_allclose(gw, x.T @ (h * (1 - ref ** 2)), rtol=1e-4, atol=1e-5)
        print(f"B={n}: |dW| = {np.abs(gw).sum():.3f}")
    try:
        f(np.ones((2, 5), np.float32), np.ones((5, 8), np.float32), np.ones((3, 8), np.float32))
    except ValueError as err:
        print(err)
    return list(batches), str(inspect.signature(f))


if __name__ == "__main__":
    main()
