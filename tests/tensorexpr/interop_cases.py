"""Programs the PyTorch and JAX adapter tests share (float64, symbolic batch sizes).

Each case is ``(outputs, inputs)`` from ``define()`` and numpy arguments from
``args(rng, n)``: shapes from a batch size ``n``, values away from the kinks
(ties of a max, zero of a relu) so that finite differences are meaningful.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List

import numpy as np

import tensorexpr as te


@dataclass
class Case:
    name: str
    define: Callable[[], tuple]
    args: Callable[[np.random.Generator, int], List[np.ndarray]]


def _layer():
    n = te.var("n")
    X, W = te.placeholder((n, 4), "float64", "X"), te.placeholder((4, 3), "float64", "W")
    b = te.placeholder((3,), "float64", "b")
    k = te.reduce_axis(4, name="k")
    Y = te.compute((n, 3), lambda i, j: te.tanh(te.sum(X[i, k] * W[k, j], axis=k) + b[j]),
                   name="Y")
    return Y, [X, W, b]


def _softmax():
    n = te.var("n")
    X = te.placeholder((n, 5), "float64", "X")
    k1, k2 = te.reduce_axis(5, name="k1"), te.reduce_axis(5, name="k2")
    m = te.compute((n,), lambda i: te.max(X[i, k1], axis=k1), name="m")
    e = te.compute((n, 5), lambda i, j: te.exp(X[i, j] - m[i]), name="e")
    s = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
    Y = te.compute((n, 5), lambda i, j: e[i, j] / s[i], name="Y")
    return [Y, s], [X]  # two outputs, and saved values (m, e) that are not outputs


def conv_pool(C=2, F=3, H=6, dtype="float64"):
    """A 3x3 convolution, a relu and a 2x2 max-pool over a symbolic batch ``n``."""
    n = te.var("n")
    X = te.placeholder((n, C, H, H), dtype, "X")
    W = te.placeholder((F, C, 3, 3), dtype, "W")
    b = te.placeholder((F,), dtype, "b")
    c, ky, kx = (te.reduce_axis(d, name=nm) for d, nm in ((C, "c"), (3, "ky"), (3, "kx")))
    conv = te.compute((n, F, H - 2, H - 2), lambda i, f, y, x: te.maximum(te.sum(
        X[i, c, y + ky, x + kx] * W[f, c, ky, kx], axis=[c, ky, kx]) + b[f], 0.0), name="conv")
    ry, rx = te.reduce_axis(2, name="ry"), te.reduce_axis(2, name="rx")
    P = (H - 2) // 2
    pool = te.compute((n, F, P, P), lambda i, f, y, x: te.max(
        conv[i, f, 2 * y + ry, 2 * x + rx], axis=[ry, rx]), name="pool")
    return pool, [X, W, b]


def _ewma():
    T = te.var("T")
    d = te.placeholder((3, T), "float64", "d")
    a = te.placeholder((3,), "float64", "a")
    e = te.recurrence((T, 3), lambda e, t, r: te.select(
        t == 0, d[r, 0], a[r] * d[r, t] + (1.0 - a[r]) * e[t - 1, r]), name="e",
        dtype="float64")
    return e, [d, a]


def _embedding():
    n = te.var("n")
    E = te.placeholder((5, 3), "float64", "E")
    idx = te.placeholder((n,), "int64", "idx")
    Y = te.compute((n, 3), lambda i, j: E[idx[i], j] * E[idx[i], j], name="Y")
    return Y, [E, idx]


def _blur():
    n = te.var("n")
    X = te.placeholder((n,), "float64", "X")
    Y = te.compute((n,), lambda i: (X[te.maximum(i - 1, 0)] + X[i]
                                    + X[te.minimum(i + 1, n - 1)]) / 3.0, name="Y")
    return Y, [X]


def _flatten():
    X = te.placeholder((2, 3, 4), "float64", "X")
    Y = te.compute((2, 12), lambda i, k: X[i, k // 4, k % 4], name="Y")  # a view: no kernel
    Z = te.compute((2,), lambda i: X[i, 0, 0] * X[i, 2, 3], name="Z")
    return [Y, Z], [X]


def _spread(rng, shape):
    """Distinct values, at least 0.05 apart, in random order: no ties, no relu kink."""
    size = int(np.prod(shape))
    return (rng.permutation(size) * 0.05 - size * 0.025 + 0.0123).reshape(shape)


CASES = [
    Case("layer", _layer, lambda rng, n: [rng.standard_normal((n, 4)),
                                          rng.standard_normal((4, 3)), rng.standard_normal(3)]),
    Case("softmax", _softmax, lambda rng, n: [rng.standard_normal((n, 5))]),
    Case("conv_pool", conv_pool, lambda rng, n: [_spread(rng, (n, 2, 6, 6)),
                                                 rng.standard_normal((3, 2, 3, 3)) * 0.3,
                                                 rng.standard_normal(3) * 0.1]),
    Case("ewma", _ewma, lambda rng, n: [rng.standard_normal((3, n + 1)),
                                        rng.uniform(0.2, 0.8, 3)]),
    Case("embedding", _embedding, lambda rng, n: [rng.standard_normal((5, 3)),
                                                  rng.integers(0, 5, n)]),
    Case("blur", _blur, lambda rng, n: [rng.standard_normal(n + 1)]),
    Case("flatten", _flatten, lambda rng, n: [rng.standard_normal((2, 3, 4))]),
]
