"""Hand-written numpy forwards and gradients, dtype-generic.

Run on float32 inputs they are the "numpy" peer; run on float64 inputs they are
the reference the other systems' gradients are checked against
(``benchmarks.reference``), and the tests check them against finite differences.

Each case is a pair ``forward(p, **inputs) -> (Y, saved)`` and
``backward(p, saved, H) -> gradients`` (in the case's ``wrt`` order); ``saved``
holds what a hand-written backward keeps from the forward.

>>> import numpy as np
>>> fwd, bwd = IMPL["matmul"]
>>> A, B = np.ones((2, 3)), np.ones((3, 4))
>>> Y, saved = fwd({}, A=A, B=B)
>>> [g.shape for g in bwd({}, saved, np.ones((2, 4)))]
[(2, 3), (3, 4)]
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from benchmarks.cases import conv_out
from benchmarks.systems import Prepared

LABEL = "numpy (hand-written gradient)"
VJP_INCLUDES = "the hand-written backward alone, given what its forward saved"


def missing():
    """Nothing to install: this system always runs (None)."""
    return None


def prepare(case, p, inputs, H) -> Prepared:
    """The forward, and the backward given one forward's saved values.

    >>> from benchmarks.cases import CASES
    >>> p = CASES[0].params(quick=True)
    >>> prep = prepare(CASES[0], p, CASES[0].inputs(p), CASES[0].head((64, 64)))
    >>> [g.shape for g in prep.gradients()]
    [(64, 128), (128, 64)]
    """
    forward, backward = IMPL[case.key]
    _, saved = forward(p, **inputs)
    return Prepared(fwd=lambda: forward(p, **inputs)[0], vjp=lambda: backward(p, saved, H))


# {{{ cases


def _matmul_fwd(p, A, B):
    return A @ B, (A, B)


def _matmul_bwd(p, saved, H):
    A, B = saved
    return H @ B.T, A.T @ H


def _conv_geometry(p):
    s, pad, d = p["stride"], p["pad"], p["dil"]
    oh = conv_out(p["H"], p["KH"], s, pad, d)
    ow = conv_out(p["W"], p["KW"], s, pad, d)
    return s, pad, d, oh, ow


def _conv_fwd(p, X, W):
    s, pad, d, oh, ow = _conv_geometry(p)
    Xp = np.pad(X, ((0, 0), (0, 0), (pad, pad), (pad, pad))) if pad else X
    span = (d * (p["KH"] - 1) + 1, d * (p["KW"] - 1) + 1)
    # im2col as a strided view: (N, C, OH, OW, KH, KW)
    cols = sliding_window_view(Xp, span, axis=(2, 3))[:, :, ::s, ::s, ::d, ::d][:, :, :oh, :ow]
    Y = np.tensordot(cols, W, axes=([1, 4, 5], [1, 2, 3]))  # (N, OH, OW, F)
    return np.ascontiguousarray(Y.transpose(0, 3, 1, 2)), (cols, W, Xp.shape)


def _conv_bwd(p, saved, H):
    cols, W, padded_shape = saved
    s, pad, d, oh, ow = _conv_geometry(p)
    dW = np.tensordot(H, cols, axes=([0, 2, 3], [0, 2, 3]))  # (F, C, KH, KW)
    dcols = np.tensordot(H, W, axes=([1], [0]))  # (N, OH, OW, C, KH, KW)
    dXp = np.zeros(padded_shape, dtype=H.dtype)
    for ky in range(p["KH"]):
        for kx in range(p["KW"]):
            dXp[:, :, ky * d:ky * d + s * (oh - 1) + 1:s, kx * d:kx * d + s * (ow - 1) + 1:s] += \
                dcols[:, :, :, :, ky, kx].transpose(0, 3, 1, 2)
    dX = dXp[:, :, pad:pad + p["H"], pad:pad + p["W"]] if pad else dXp
    return np.ascontiguousarray(dX), dW


def _pool_windows(X, k):
    """(N, C, H, W) -> (N, C, H/k, W/k, k*k): non-overlapping k x k windows."""
    n, c, h, w = X.shape
    return X.reshape(n, c, h // k, k, w // k, k).transpose(0, 1, 2, 4, 3, 5).reshape(
        n, c, h // k, w // k, k * k)


def _maxpool_fwd(p, X):
    win = _pool_windows(X, p["k"])
    arg = win.argmax(axis=-1)[..., None]
    return np.take_along_axis(win, arg, axis=-1)[..., 0], (arg, X.shape)


def _maxpool_bwd(p, saved, H):
    arg, shape = saved
    k = p["k"]
    n, c, h, w = shape
    dwin = np.zeros(H.shape + (k * k,), dtype=H.dtype)
    np.put_along_axis(dwin, arg, H[..., None], axis=-1)
    return (dwin.reshape(n, c, h // k, w // k, k, k).transpose(0, 1, 2, 4, 3, 5)
            .reshape(shape),)


def _avgpool_fwd(p, X):
    k = p["k"]
    oh, ow = X.shape[2] - k + 1, X.shape[3] - k + 1
    Y = sum(X[:, :, ry:ry + oh, rx:rx + ow] for ry in range(k) for rx in range(k))
    return Y / (k * k), X.shape


def _avgpool_bwd(p, shape, H):
    k = p["k"]
    oh, ow = H.shape[2:]
    g = H / (k * k)
    dX = np.zeros(shape, dtype=H.dtype)
    for ry in range(k):
        for rx in range(k):
            dX[:, :, ry:ry + oh, rx:rx + ow] += g
    return (dX,)


def _flatten_fwd(p, X):
    return X.reshape(X.shape[0], -1).copy(), X.shape


def _flatten_bwd(p, shape, H):
    return (H.reshape(shape).copy(),)


def _softmax_fwd(p, X):
    e = np.exp(X - X.max(axis=-1, keepdims=True))
    Y = e / e.sum(axis=-1, keepdims=True)
    return Y, Y


def _softmax_bwd(p, Y, H):
    return (Y * (H - (H * Y).sum(axis=-1, keepdims=True)),)


def _layernorm_fwd(p, X, gamma, beta):
    mu = X.mean(axis=-1, keepdims=True)
    var = ((X - mu) ** 2).mean(axis=-1, keepdims=True)
    rstd = 1 / np.sqrt(var + X.dtype.type(p["eps"]))
    xhat = (X - mu) * rstd
    return xhat * gamma + beta, (xhat, rstd, gamma)


def _layernorm_bwd(p, saved, H):
    xhat, rstd, gamma = saved
    dxhat = H * gamma
    dX = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    return dX, (H * xhat).sum(axis=0), H.sum(axis=0)


def _bias_transpose_fwd(p, X, b):
    return np.ascontiguousarray((X + b).T), None


def _bias_transpose_bwd(p, saved, H):
    return np.ascontiguousarray(H.T), H.sum(axis=1)


def _ewma_fwd(p, d):
    dT = np.ascontiguousarray(d.T)  # rows are time steps
    e = dT[0].copy()
    half = d.dtype.type(0.5)
    for t in range(1, dT.shape[0]):
        e = half * dT[t] + half * e
    return e, d.shape


def _ewma_bwd(p, shape, H):
    R, T = shape
    half = H.dtype.type(0.5)
    ddT = np.empty((T, R), dtype=H.dtype)
    g = H
    for t in range(T - 1, 0, -1):  # adjoint of e[t] = .5 d[t] + .5 e[t-1], last step first
        ddT[t] = half * g
        g = half * g
    ddT[0] = g
    return (np.ascontiguousarray(ddT.T),)


def _mlp_fwd(p, X, W1, b1, W2, b2):
    h = np.tanh(X @ W1 + b1)
    return h @ W2 + b2, (X, W1, W2, h)


def _mlp_bwd(p, saved, H):
    X, W1, W2, h = saved
    dW2, db2 = h.T @ H, H.sum(axis=0)
    dz = (H @ W2.T) * (1 - h * h)
    return dz @ W1.T, X.T @ dz, dz.sum(axis=0), dW2, db2


def _embedding_fwd(p, E, idx):
    return E[idx], (E.shape, idx)


def _embedding_bwd(p, saved, H):
    shape, idx = saved
    dE = np.zeros(shape, dtype=H.dtype)
    np.add.at(dE, idx, H)
    return (dE,)


def _blur_fwd(p, X):
    Xp = np.concatenate([X[:1], X, X[-1:]])  # clamped boundary
    return (Xp[:-2] + Xp[1:-1] + Xp[2:]) / X.dtype.type(3), None


def _blur_bwd(p, saved, H):
    g = H / H.dtype.type(3)
    dX = g.copy()
    dX[:-1] += g[1:]   # X[i-1] feeds Y[i]
    dX[1:] += g[:-1]   # X[i+1] feeds Y[i]
    dX[0] += g[0]      # the clamped reads at both ends
    dX[-1] += g[-1]
    return (dX,)


IMPL = {
    "matmul": (_matmul_fwd, _matmul_bwd),
    "conv2d": (_conv_fwd, _conv_bwd),
    "maxpool": (_maxpool_fwd, _maxpool_bwd),
    "avgpool": (_avgpool_fwd, _avgpool_bwd),
    "flatten": (_flatten_fwd, _flatten_bwd),
    "softmax": (_softmax_fwd, _softmax_bwd),
    "layernorm": (_layernorm_fwd, _layernorm_bwd),
    "bias_transpose": (_bias_transpose_fwd, _bias_transpose_bwd),
    "ewma": (_ewma_fwd, _ewma_bwd),
    "mlp": (_mlp_fwd, _mlp_bwd),
    "embedding": (_embedding_fwd, _embedding_bwd),
    "blur": (_blur_fwd, _blur_bwd),
}

# }}}
