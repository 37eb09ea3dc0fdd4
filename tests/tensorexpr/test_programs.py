"""Whole programs written in the language against the same computation in plain numpy."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te

from .util import BACKENDS, check, rand, run


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_with_symbolic_rows(backend):
    n = te.var("n")
    A = te.placeholder((n, 6), name="A")
    B = te.placeholder((6, 5), name="B")
    k = te.reduce_axis((0, 6), name="k")
    C = te.compute((n, 5), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    f = te.build(C, backend=backend)
    b = rand(6, 5, seed=1)
    for rows in (1, 4):
        a = rand(rows, 6)
        check(f(a, b), a @ b)


def conv2d_ref(x, w, stride, pad, dilation):
    """NCHW convolution (cross-correlation) by explicit loops over the output."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    for y in range(oh):
        for z in range(ow):
            patch = xp[:, :, y * stride:y * stride + dilation * (kh - 1) + 1:dilation,
                       z * stride:z * stride + dilation * (kw - 1) + 1:dilation]
            out[:, :, y, z] = np.einsum("nchw,ochw->no", patch, w)
    return out


def conv2d(X, W, stride, pad, dilation):
    n, c, h, wd = X.shape
    o, _, kh, kw = W.shape
    oh = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    rc, rh, rw = te.reduce_axis(c, "rc"), te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")

    def body(b, f, y, z):
        yy, zz = y * stride + rh * dilation - pad, z * stride + rw * dilation - pad
        inside = (yy >= 0) & (yy < h) & (zz >= 0) & (zz < wd)
        v = te.select(inside, X[b, rc, yy, zz], 0.0) if pad else X[b, rc, yy, zz]
        return te.sum(v * W[f, rc, rh, rw], axis=[rc, rh, rw])

    return te.compute((n, o, oh, ow), body, name="conv")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stride, pad, dilation", [(1, 1, 1), (2, 0, 1), (2, 1, 1), (1, 0, 2),
                                                   (1, 1, 2)])
def test_conv2d_nchw(stride, pad, dilation, backend):
    X = te.placeholder((2, 3, 7, 6), name="X")
    W = te.placeholder((4, 3, 3, 3), name="W")
    Y = conv2d(X, W, stride, pad, dilation)
    x, w = rand(2, 3, 7, 6), rand(4, 3, 3, 3, seed=1)
    want = conv2d_ref(x.astype(np.float64), w.astype(np.float64), stride, pad, dilation)
    got = run(backend, Y, x, w)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pooling(backend):
    X = te.placeholder((2, 3, 6, 8), name="X")
    a, b = te.reduce_axis(2, "a"), te.reduce_axis(2, "b")
    mx = te.compute((2, 3, 3, 4), lambda n, c, h, w: te.max(X[n, c, 2 * h + a, 2 * w + b],
                                                            axis=[a, b]), name="maxpool")
    p, q = te.reduce_axis(3, "p"), te.reduce_axis(3, "q")
    avg = te.compute((2, 3, 4, 6), lambda n, c, h, w: te.sum(X[n, c, h + p, w + q],
                                                             axis=[p, q]) / 9.0, name="avgpool")
    x = rand(2, 3, 6, 8)
    gm, ga = run(backend, [mx, avg], x)
    check(gm, x.reshape(2, 3, 3, 2, 4, 2).max(axis=(3, 5)))
    want = np.zeros((2, 3, 4, 6), np.float64)
    for dy in range(3):
        for dx in range(3):
            want += x[:, :, dy:dy + 4, dx:dx + 6]
    np.testing.assert_allclose(ga, want / 9, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_flatten_with_div_and_mod_indices(backend):
    X = te.placeholder((2, 3, 4, 4), name="X")
    Y = te.compute((2, 48), lambda n, k: X[n, k // 16, (k // 4) % 4, k % 4], name="flat")
    x = rand(2, 3, 4, 4)
    check(run(backend, Y, x), x.reshape(2, 48))


@pytest.mark.parametrize("backend", BACKENDS)
def test_clamped_blur(backend):
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: (X[te.maximum(i - 1, 0)] + X[i]
                                    + X[te.minimum(i + 1, n - 1)]) / 3.0, name="blur")
    f = te.build(Y, backend=backend)
    for size in (1, 2, 9):
        x = rand(size)
        xp = np.concatenate([x[:1], x, x[-1:]])
        check(f(x), (xp[:-2] + xp[1:-1] + xp[2:]) / np.float32(3))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("idx_dtype", ["int32", "int64"])
def test_embedding_lookup(idx_dtype, backend):
    E = te.placeholder((10, 4), name="E")
    idx = te.placeholder((6,), dtype=idx_dtype, name="idx")
    Y = te.compute((6, 4), lambda i, d: E[idx[i], d], name="emb")
    e = rand(10, 4)
    ids = np.array([0, 9, 3, 3, 7, 1], dtype=idx_dtype)
    check(run(backend, Y, e, ids), e[ids])


@pytest.mark.parametrize("backend", BACKENDS)
def test_softmax(backend):
    X = te.placeholder((3, 7), name="X")
    k1, k2 = te.reduce_axis(7, "k1"), te.reduce_axis(7, "k2")
    M = te.compute((3,), lambda i: te.max(X[i, k1], axis=k1), name="rowmax")
    Ex = te.compute((3, 7), lambda i, j: te.exp(X[i, j] - M[i]), name="ex")
    S = te.compute((3, 7), lambda i, j: Ex[i, j] / te.sum(Ex[i, k2], axis=k2), name="softmax")
    x = rand(3, 7, low=-20, high=20)
    z = np.exp(x - x.max(1, keepdims=True))
    got = run(backend, S, x)
    check(got, z / z.sum(1, keepdims=True))
    np.testing.assert_allclose(got.sum(1), 1, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_norm(backend):
    n = te.var("n")
    X = te.placeholder((n, 8), dtype="float64", name="X")
    G = te.placeholder((8,), dtype="float64", name="gamma")
    B = te.placeholder((8,), dtype="float64", name="beta")
    k1, k2 = te.reduce_axis(8, "k1"), te.reduce_axis(8, "k2")
    mu = te.compute((n,), lambda i: te.sum(X[i, k1], axis=k1) / 8, name="mu")
    var = te.compute((n,), lambda i: te.sum((X[i, k2] - mu[i]) ** 2, axis=k2) / 8, name="var")
    Y = te.compute((n, 8), lambda i, j: (X[i, j] - mu[i]) / te.sqrt(var[i] + 1e-5) * G[j]
                   + B[j], name="layernorm")
    x, g, b = (rand(5, 8, dtype="float64"), rand(8, dtype="float64", seed=1),
               rand(8, dtype="float64", seed=2))
    m = x.mean(1, keepdims=True)
    v = x.var(1, keepdims=True)
    check(run(backend, Y, x, g, b), (x - m) / np.sqrt(v + 1e-5) * g + b)
