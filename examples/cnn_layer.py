"""A CNN layer (convolution with padding and stride, bias, ReLU, 2x2 max pooling) and
its gradients, checked against numpy in float64 (forward: direct loops; gradients:
central differences), then built in float32 on the C backend. The gradients are
gathers: no scatter, no im2col, no Jacobian. Run it:

    python examples/cnn_layer.py
"""
from __future__ import annotations

import numpy as np

import tensorexpr as te


def layer(N, C, H, W, O, K=3, stride=1, pad=1, dtype="float32"):
    """``(inputs, out)``: ``maxpool2x2(relu(conv(X, Wt, stride, pad) + b))``."""
    X = te.placeholder((N, C, H, W), dtype, "X")
    Wt = te.placeholder((O, C, K, K), dtype, "Wt")
    b = te.placeholder((O,), dtype, "b")
    Ho, Wo = (H + 2 * pad - K) // stride + 1, (W + 2 * pad - K) // stride + 1
    c, kh, kw = te.reduce_axis(C, "c"), te.reduce_axis(K, "kh"), te.reduce_axis(K, "kw")

    def conv_at(n, o, h, w):
        y, x = stride * h + kh - pad, stride * w + kw - pad
        inside = (y >= 0) & (y < H) & (x >= 0) & (x < W)   # zero padding as a guard
        return te.sum(X[n, c, y, x] * Wt[o, c, kh, kw], axis=[c, kh, kw], where=inside)
    act = te.compute((N, O, Ho, Wo), lambda n, o, h, w: te.maximum(conv_at(n, o, h, w) + b[o],
                                                                  0.0), name="act")
    ph, pw = te.reduce_axis(2, "ph"), te.reduce_axis(2, "pw")
    out = te.compute((N, O, Ho // 2, Wo // 2), lambda n, o, h, w: te.max(
        act[n, o, 2 * h + ph, 2 * w + pw], axis=[ph, pw]), name="pool")
    return [X, Wt, b], out


def reference(x, wt, b, stride=1, pad=1):
    N, C, H, W = x.shape
    O, _, K, _ = wt.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    Ho, Wo = (H + 2 * pad - K) // stride + 1, (W + 2 * pad - K) // stride + 1
    conv = np.zeros((N, O, Ho, Wo))
    for h in range(Ho):
        for w in range(Wo):
            win = xp[:, :, stride * h:stride * h + K, stride * w:stride * w + K]
            conv[:, :, h, w] = np.einsum("nckl,ockl->no", win, wt)
    act = np.maximum(conv + b[None, :, None, None], 0)
    a = act[:, :, :Ho // 2 * 2, :Wo // 2 * 2]
    return a.reshape(N, O, Ho // 2, 2, Wo // 2, 2).max(axis=(3, 5))


def main(seed=0):
    """Returns the largest relative errors (forward, gradient) found."""
    rng = np.random.default_rng(seed)
    inputs, out = layer(1, 2, 6, 6, 3, stride=1, dtype="float64")
    H = te.placeholder(out.shape, "float64", "H")
    grads = te.differentiate(out, inputs, head=H)
    args = [rng.standard_normal(t.shape) for t in inputs]
    h = rng.standard_normal(out.shape)
    fwd = te.build(out, backend="numpy")(*args)
    err_f = float(np.abs(fwd - reference(*args)).max())
    got = te.build(list(grads), inputs=inputs + [H], backend="numpy")(*args, h)
    err_g = 0.0
    for k, g in enumerate(got):
        num = np.zeros_like(args[k])
        for ix in np.ndindex(num.shape):
            plus, minus = [a.copy() for a in args], [a.copy() for a in args]
            plus[k][ix] += 1e-6
            minus[k][ix] -= 1e-6
            num[ix] = ((reference(*plus) - reference(*minus)) * h).sum() / 2e-6
        err_g = max(err_g, float(np.abs(g - num).max() / np.abs(num).max()))
    # float32 on the C backend, strided, against the numpy backend
    inputs32, out32 = layer(2, 3, 9, 9, 4, stride=2)
    H32 = te.placeholder(out32.shape, "float32", "H")
    g32 = te.differentiate(out32, inputs32, head=H32)
    a32 = [rng.standard_normal(t.shape).astype(np.float32) for t in inputs32 + [H32]]
    f = te.build(list(g32), inputs=inputs32 + [H32])
    assert "scatter" not in f.source
    for c, n in zip(f(*a32), te.build(list(g32), inputs=inputs32 + [H32], backend="numpy")(*a32)):
        np.testing.assert_allclose(c, n, rtol=1e-4, atol=1e-4)
    print(f"forward error {err_f:.1e}, gradient error vs central differences {err_g:.1e}")
    return err_f, err_g


if __name__ == "__main__":
    main()
