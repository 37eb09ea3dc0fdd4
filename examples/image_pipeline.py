"""A differentiable image pipeline: a 3x3 box blur with clamped borders, a 2x
downsample (stride), a per-channel gain and a gamma curve, then an L2 loss against a
target. The gradient w.r.t. the image and the gains inverts the clamps (pieces), the
stride (a condition the C backend turns into a loop step) and the window (a sum over
its fibre); it is checked on the C backend against the numpy backend and against
float64 central differences. Run it:

    python examples/image_pipeline.py
"""
from __future__ import annotations

import numpy as np

import tensorexpr as te


def pipeline(C, H, W, dtype="float32"):
    """``(img, gain, target, out, loss)``."""
    img = te.placeholder((C, H, W), dtype, "img")
    gain = te.placeholder((C,), dtype, "gain")
    target = te.placeholder((C, H // 2, W // 2), dtype, "target")
    dy, dx = te.reduce_axis(3, "dy"), te.reduce_axis(3, "dx")
    blur = te.compute((C, H, W), lambda c, y, x: te.sum(img[
        c, te.minimum(te.maximum(y + dy - 1, 0), H - 1),
        te.minimum(te.maximum(x + dx - 1, 0), W - 1)], axis=[dy, dx]) / 9.0, name="blur")
    small = te.compute((C, H // 2, W // 2), lambda c, y, x: blur[c, 2 * y, 2 * x], name="small")
    out = te.compute(small.shape, lambda c, y, x: te.sqrt(
        te.maximum(gain[c] * small[c, y, x], 0.0) + 1e-3), name="out")
    r = [te.reduce_axis(s) for s in out.shape]
    loss = te.compute((), lambda: te.sum((out[r[0], r[1], r[2]] - target[r[0], r[1], r[2]])
                                         ** 2, axis=r), name="loss")
    return img, gain, target, out, loss


def main(seed=0):
    """Returns the largest relative errors (C vs numpy, numpy vs central differences)."""
    rng = np.random.default_rng(seed)
    img, gain, target, out, loss = pipeline(3, 16, 12)
    grads = te.differentiate(loss, [img, gain])
    a = [rng.uniform(0, 1, t.shape).astype(np.float32) for t in (img, gain, target)]
    c_vals = te.build(list(grads), inputs=[img, gain, target])(*a)
    n_vals = te.build(list(grads), inputs=[img, gain, target], backend="numpy")(*a)
    err_c = max(float(np.abs(c - n).max() / np.abs(n).max()) for c, n in zip(c_vals, n_vals))
    img64, gain64, target64, _, loss64 = pipeline(2, 6, 6, "float64")
    g64 = te.differentiate(loss64, [img64, gain64])
    b = [rng.uniform(0.2, 1, t.shape) for t in (img64, gain64, target64)]
    got = te.build(list(g64), inputs=[img64, gain64, target64], backend="numpy")(*b)
    f = te.build(loss64, backend="numpy")
    err_n = 0.0
    for k in (0, 1):
        num = np.zeros_like(b[k])
        for ix in np.ndindex(num.shape):
            plus, minus = [x.copy() for x in b], [x.copy() for x in b]
            plus[k][ix] += 1e-6
            minus[k][ix] -= 1e-6
            num[ix] = (f(*plus) - f(*minus)) / 2e-6
        err_n = max(err_n, float(np.abs(got[k] - num).max() / np.abs(num).max()))
    print(f"C vs numpy {err_c:.1e}, numpy vs central differences {err_n:.1e}")
    return err_c, err_n


if __name__ == "__main__":
    main()
