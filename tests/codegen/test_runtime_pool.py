"""Intermediate buffers are reused across calls; outputs never are."""
from __future__ import annotations

import threading

import numpy as np

import tensorexpr as te


def _program():
    n = te.var("n")
    X = te.placeholder((n,), "float64", "X")
    T = te.compute((n,), lambda i: te.exp(X[i]) * 2.0, name="T")  # an intermediate
    k = te.reduce_axis(n, "k")
    S = te.compute((), lambda: te.sum(T[k], axis=k), name="S")
    Y = te.compute((n,), lambda i: T[i] / S[()], name="Y")
    return te.build(Y, inputs=[X])


def test_repeated_calls_with_new_inputs_and_sizes_stay_right():
    f = _program()
    rng = np.random.default_rng(0)
    outs = []
    for size in (5, 5, 9, 5, 1):
        x = rng.standard_normal(size)
        y = f(x)
        np.testing.assert_allclose(y, np.exp(x) / np.exp(x).sum())
        outs.append((x, y))
    for x, y in outs:  # earlier outputs were not overwritten by later calls
        np.testing.assert_allclose(y, np.exp(x) / np.exp(x).sum())


def test_concurrent_calls_do_not_share_buffers():
    f = _program()
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(20000) for _ in range(8)]
    results = [None] * len(xs)

    def work(k):
        for _ in range(5):
            results[k] = f(xs[k])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, y in zip(xs, results):
        np.testing.assert_allclose(y, np.exp(x) / np.exp(x).sum())
