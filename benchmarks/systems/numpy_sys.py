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


# {{{ tier 2


def _bmm_fwd(p, A, Bm):
    return A @ Bm, (A, Bm)


def _bmm_bwd(p, saved, H):
    A, Bm = saved
    return H @ Bm.transpose(0, 2, 1), A.transpose(0, 2, 1) @ H


def _attention_fwd(p, Q, K, V):
    scale = Q.dtype.type(1 / np.sqrt(p["d"]))
    S = (Q @ K.transpose(0, 2, 1)) * scale
    e = np.exp(S - S.max(axis=-1, keepdims=True))
    P = e / e.sum(axis=-1, keepdims=True)
    return P @ V, (Q, K, V, P, scale)


def _attention_bwd(p, saved, H):
    Q, K, V, P, scale = saved
    dV = P.transpose(0, 2, 1) @ H
    dP = H @ V.transpose(0, 2, 1)
    dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True)) * scale
    return dS @ K, dS.transpose(0, 2, 1) @ Q, dV


def _depthwise_fwd(p, X, W):
    h, w = X.shape[2:]
    Xp = np.pad(X, ((0, 0), (0, 0), (1, 1), (1, 1)))
    Y = sum(Xp[:, :, ky:ky + h, kx:kx + w] * W[None, :, 0, ky, kx, None, None]
            for ky in range(3) for kx in range(3))
    return Y, (Xp, W)


def _depthwise_bwd(p, saved, H):
    Xp, W = saved
    h, w = H.shape[2:]
    dXp = np.zeros_like(Xp)
    dW = np.zeros_like(W)
    for ky in range(3):
        for kx in range(3):
            dXp[:, :, ky:ky + h, kx:kx + w] += H * W[None, :, 0, ky, kx, None, None]
            dW[:, 0, ky, kx] = np.einsum("nchw,nchw->c", H, Xp[:, :, ky:ky + h, kx:kx + w])
    return np.ascontiguousarray(dXp[:, :, 1:-1, 1:-1]), dW


def _conv1x1_fwd(p, X, W):
    return np.einsum("fc,nchw->nfhw", W[:, :, 0, 0], X, optimize=True), (X, W)


def _conv1x1_bwd(p, saved, H):
    X, W = saved
    dX = np.einsum("fc,nfhw->nchw", W[:, :, 0, 0], H, optimize=True)
    dW = np.einsum("nfhw,nchw->fc", H, X, optimize=True)
    return dX, dW[:, :, None, None]


def _conv1d_fwd(p, X, W):
    pad, k = p["pad"], p["K"]
    Xp = np.pad(X, ((0, 0), (0, 0), (pad, pad)))
    cols = sliding_window_view(Xp, k, axis=2)  # (N, C, L, K)
    return np.einsum("nclk,fck->nfl", cols, W, optimize=True), (cols, W, Xp.shape)


def _conv1d_bwd(p, saved, H):
    cols, W, padded_shape = saved
    pad, k, length = p["pad"], p["K"], H.shape[2]
    dW = np.einsum("nfl,nclk->fck", H, cols, optimize=True)
    dXp = np.zeros(padded_shape, dtype=H.dtype)
    for t in range(k):
        dXp[:, :, t:t + length] += np.einsum("nfl,fc->ncl", H, W[:, :, t], optimize=True)
    return np.ascontiguousarray(dXp[:, :, pad:pad + p["L"]]), dW


def _conv_transpose_geometry(p):
    s, pad, k = p["stride"], p["pad"], p["K"]
    full = ((p["H"] - 1) * s + k, (p["W"] - 1) * s + k)  # before cropping the padding
    return s, pad, k, full


def _conv_transpose_fwd(p, X, W):
    # every input pixel scatters a k x k patch of W, at stride s, into the output
    s, pad, k, (fh, fw) = _conv_transpose_geometry(p)
    h, w = X.shape[2:]
    Y = np.zeros((X.shape[0], W.shape[1], fh, fw), dtype=X.dtype)
    for ky in range(k):
        for kx in range(k):
            Y[:, :, ky:ky + s * (h - 1) + 1:s, kx:kx + s * (w - 1) + 1:s] += \
                np.einsum("nchw,cf->nfhw", X, W[:, :, ky, kx], optimize=True)
    return np.ascontiguousarray(Y[:, :, pad:fh - pad, pad:fw - pad]), (X, W)


def _conv_transpose_bwd(p, saved, H):
    X, W = saved
    s, pad, k, (fh, fw) = _conv_transpose_geometry(p)
    h, w = X.shape[2:]
    Hp = np.pad(H, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    dX, dW = np.zeros_like(X), np.zeros_like(W)
    for ky in range(k):
        for kx in range(k):
            g = Hp[:, :, ky:ky + s * (h - 1) + 1:s, kx:kx + s * (w - 1) + 1:s]
            dX += np.einsum("nfhw,cf->nchw", g, W[:, :, ky, kx], optimize=True)
            dW[:, :, ky, kx] = np.einsum("nfhw,nchw->cf", g, X, optimize=True)
    return dX, dW


def _norm_bwd(xhat, rstd, gamma, H, axes, param_axes):
    """The gradients of ``xhat * gamma + beta`` (``xhat`` normalised over ``axes``)."""
    shape = [1] * H.ndim
    shape[1] = -1
    dxhat = H * gamma.reshape(shape)
    dX = rstd * (dxhat - dxhat.mean(axis=axes, keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=axes, keepdims=True))
    return dX, (H * xhat).sum(axis=param_axes), H.sum(axis=param_axes)


def _groupnorm_fwd(p, X, gamma, beta):
    n, c, h, w = X.shape
    g = X.reshape(n, p["G"], c // p["G"], h, w)
    mu = g.mean(axis=(2, 3, 4), keepdims=True)
    var = ((g - mu) ** 2).mean(axis=(2, 3, 4), keepdims=True)
    rstd = 1 / np.sqrt(var + X.dtype.type(p["eps"]))
    xhat = (g - mu) * rstd
    y = xhat.reshape(X.shape) * gamma[:, None, None] + beta[:, None, None]
    return y, (xhat, rstd, gamma)


def _groupnorm_bwd(p, saved, H):
    xhat, rstd, gamma = saved
    dxhat = (H * gamma[:, None, None]).reshape(xhat.shape)
    axes = (2, 3, 4)
    dX = rstd * (dxhat - dxhat.mean(axis=axes, keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=axes, keepdims=True))
    flat = xhat.reshape(H.shape)
    return dX.reshape(H.shape), (H * flat).sum(axis=(0, 2, 3)), H.sum(axis=(0, 2, 3))


def _batchnorm_fwd(p, X, gamma, beta):
    mu = X.mean(axis=(0, 2, 3), keepdims=True)
    var = ((X - mu) ** 2).mean(axis=(0, 2, 3), keepdims=True)  # biased, as in training
    rstd = 1 / np.sqrt(var + X.dtype.type(p["eps"]))
    xhat = (X - mu) * rstd
    return xhat * gamma[:, None, None] + beta[:, None, None], (xhat, rstd, gamma)


def _batchnorm_bwd(p, saved, H):
    xhat, rstd, gamma = saved
    return _norm_bwd(xhat, rstd, gamma, H, (0, 2, 3), (0, 2, 3))


def _xent_fwd(p, logits, labels):
    m = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - m)
    s = e.sum(axis=1, keepdims=True)
    rows = np.arange(logits.shape[0])
    loss = np.mean(np.log(s[:, 0]) + m[:, 0] - logits[rows, labels])
    return np.asarray(loss, dtype=logits.dtype), (e / s, labels)


def _xent_bwd(p, saved, H):
    probs, labels = saved
    d = probs.copy()
    d[np.arange(d.shape[0]), labels] -= 1
    return (d * (H / d.shape[0]),)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _lstm_fwd(p, x, h, c, Wx, Wh, b):
    gates = x @ Wx + h @ Wh + b
    i, f, g, o = np.split(gates, 4, axis=1)
    i, f, g, o = _sigmoid(i), _sigmoid(f), np.tanh(g), _sigmoid(o)
    c2 = f * c + i * g
    tc = np.tanh(c2)
    return o * tc, (x, h, c, Wx, Wh, i, f, g, o, tc)


def _lstm_bwd(p, saved, H):
    x, h, c, Wx, Wh, i, f, g, o, tc = saved
    do = H * tc
    dc2 = H * o * (1 - tc * tc)
    dgates = np.concatenate([dc2 * g * i * (1 - i), dc2 * c * f * (1 - f),
                             dc2 * i * (1 - g * g), do * o * (1 - o)], axis=1)
    return (dgates @ Wx.T, dgates @ Wh.T, dc2 * f, x.T @ dgates, h.T @ dgates,
            dgates.sum(axis=0))


def _gru_fwd(p, x, Wx, Wh, b):
    T, B, hd = x.shape[0], x.shape[1], p["Hd"]
    xp = x @ Wx + b  # (T, B, 3Hd): the input projections of every step at once
    hs = np.zeros((T + 1, B, hd), dtype=x.dtype)  # hs[t + 1] = h after step t; hs[0] = 0
    tape = []
    for t in range(T):
        hw = hs[t] @ Wh
        r = _sigmoid(xp[t, :, :hd] + hw[:, :hd])
        z = _sigmoid(xp[t, :, hd:2 * hd] + hw[:, hd:2 * hd])
        n = np.tanh(xp[t, :, 2 * hd:] + r * hw[:, 2 * hd:])
        hs[t + 1] = (1 - z) * n + z * hs[t]
        tape.append((r, z, n, hw[:, 2 * hd:]))
    return hs[1:].copy(), (x, Wx, Wh, hs, tape)


def _gru_bwd(p, saved, H):
    x, Wx, Wh, hs, tape = saved
    hd = p["Hd"]
    dxp = np.zeros(x.shape[:2] + (3 * hd,), dtype=H.dtype)
    dWh = np.zeros_like(Wh)
    dh = np.zeros_like(hs[0])
    for t in range(x.shape[0] - 1, -1, -1):  # back through time, last step first
        r, z, n, hn = tape[t]
        dh = dh + H[t]
        dn = dh * (1 - z) * (1 - n * n)
        dz = dh * (hs[t] - n) * z * (1 - z)
        dr = dn * hn * r * (1 - r)
        dhw = np.concatenate([dr, dz, dn * r], axis=1)
        dxp[t] = np.concatenate([dr, dz, dn], axis=1)
        dWh += hs[t].T @ dhw
        dh = dh * z + dhw @ Wh.T
    dWx = np.tensordot(x, dxp, axes=([0, 1], [0, 1]))
    return dxp @ Wx.T, dWx, dWh, dxp.sum(axis=(0, 1))


def _rnn_fwd(p, x, Wx, Wh, b):
    xp = x @ Wx + b
    hs = np.zeros((x.shape[0] + 1,) + xp.shape[1:], dtype=x.dtype)
    for t in range(x.shape[0]):
        hs[t + 1] = np.tanh(xp[t] + hs[t] @ Wh)
    return hs[1:].copy(), (x, Wx, Wh, hs)


def _rnn_bwd(p, saved, H):
    x, Wx, Wh, hs = saved
    dxp = np.zeros(x.shape[:2] + Wh.shape[:1], dtype=H.dtype)
    dh = np.zeros_like(hs[0])
    for t in range(x.shape[0] - 1, -1, -1):
        dxp[t] = (dh + H[t]) * (1 - hs[t + 1] ** 2)
        dh = dxp[t] @ Wh.T
    dWh = np.tensordot(hs[:-1], dxp, axes=([0, 1], [0, 1]))
    dWx = np.tensordot(x, dxp, axes=([0, 1], [0, 1]))
    return dxp @ Wx.T, dWx, dWh, dxp.sum(axis=(0, 1))


def _cumsum_fwd(p, X):
    return np.cumsum(X, axis=-1), None


def _cumsum_bwd(p, saved, H):
    return (np.ascontiguousarray(np.cumsum(H[:, ::-1], axis=-1)[:, ::-1]),)


def _upsample_matrix(n, dtype):
    """(2n, n): 2x bilinear interpolation along one axis, half-pixel centres
    (``align_corners=False``), clamped at both edges."""
    out = np.arange(2 * n)
    lo, hi = np.maximum((out - 1) // 2, 0), np.minimum((out + 1) // 2, n - 1)
    w_hi = np.where(out % 2 == 0, 0.75, 0.25)
    M = np.zeros((2 * n, n), dtype=dtype)
    np.add.at(M, (out, lo), 1 - w_hi)
    np.add.at(M, (out, hi), w_hi)
    return M


def _upsample_fwd(p, X):
    My, Mx = _upsample_matrix(X.shape[2], X.dtype), _upsample_matrix(X.shape[3], X.dtype)
    return np.einsum("yh,nchw,xw->ncyx", My, X, Mx, optimize=True), (My, Mx)


def _upsample_bwd(p, saved, H):
    My, Mx = saved
    return (np.einsum("yh,ncyx,xw->nchw", My, H, Mx, optimize=True),)


def _pdist_fwd(p, A, Bm):
    diff = A[:, None, :] - Bm[None, :, :]
    return (diff * diff).sum(axis=-1), (A, Bm)


def _pdist_bwd(p, saved, H):
    A, Bm = saved
    two = H.dtype.type(2)
    dA = two * (A * H.sum(axis=1)[:, None] - H @ Bm)
    dB = two * (Bm * H.sum(axis=0)[:, None] - H.T @ A)
    return dA, dB


def _seqmax_fwd(p, X):
    arg = X.argmax(axis=-1)
    return np.take_along_axis(X, arg[..., None], axis=-1)[..., 0], (arg, X.shape)


def _seqmax_bwd(p, saved, H):
    arg, shape = saved
    dX = np.zeros(shape, dtype=H.dtype)
    np.put_along_axis(dX, arg[..., None], H[..., None], axis=-1)
    return (dX,)


_GELU_C = np.sqrt(2 / np.pi)


def _gelu_fwd(p, X):
    c, a = X.dtype.type(_GELU_C), X.dtype.type(0.044715)
    t = np.tanh(c * (X + a * X ** 3))
    return 0.5 * X * (1 + t), (X, t)


def _gelu_bwd(p, saved, H):
    X, t = saved
    c, a = X.dtype.type(_GELU_C), X.dtype.type(0.044715)
    return (H * (0.5 * (1 + t) + 0.5 * X * (1 - t * t) * c * (1 + 3 * a * X * X)),)


def _l2norm_fwd(p, X):
    norm = np.maximum(np.sqrt((X * X).sum(axis=1, keepdims=True)), X.dtype.type(p["eps"]))
    Y = X / norm
    return Y, (Y, norm)


def _l2norm_bwd(p, saved, H):
    Y, norm = saved  # (the norm is far above eps here: the clamp passes no gradient)
    return ((H - Y * (H * Y).sum(axis=1, keepdims=True)) / norm,)


# }}}

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
    "bmm": (_bmm_fwd, _bmm_bwd),
    "attention": (_attention_fwd, _attention_bwd),
    "depthwise": (_depthwise_fwd, _depthwise_bwd),
    "conv1x1": (_conv1x1_fwd, _conv1x1_bwd),
    "conv1d": (_conv1d_fwd, _conv1d_bwd),
    "conv_transpose": (_conv_transpose_fwd, _conv_transpose_bwd),
    "groupnorm": (_groupnorm_fwd, _groupnorm_bwd),
    "batchnorm": (_batchnorm_fwd, _batchnorm_bwd),
    "xent": (_xent_fwd, _xent_bwd),
    "lstm": (_lstm_fwd, _lstm_bwd),
    "gru": (_gru_fwd, _gru_bwd),
    "rnn": (_rnn_fwd, _rnn_bwd),
    "cumsum": (_cumsum_fwd, _cumsum_bwd),
    "upsample": (_upsample_fwd, _upsample_bwd),
    "pdist": (_pdist_fwd, _pdist_bwd),
    "seqmax": (_seqmax_fwd, _seqmax_bwd),
    "gelu": (_gelu_fwd, _gelu_bwd),
    "l2norm": (_l2norm_fwd, _l2norm_bwd),
}

# }}}
