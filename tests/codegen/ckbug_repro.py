import sys; sys.path.insert(0, ".")
import numpy as np, tensorexpr as te
W = te.placeholder((16, 16), name="W"); x = te.placeholder((6, 3, 16), name="x")
k = te.reduce_axis(16, name="k")
h = te.recurrence((6, 3, 16), lambda h, t, b, j: te.tanh(x[t, b, j] + te.select(
    t == 0, 0.0, te.sum(h[t - 1, b, k] * W[k, j], axis=k))), name="h", checkpoints=2)
H = te.placeholder(h.shape, name="H")
dW, = te.differentiate(h, [W], head=H)
rng = np.random.default_rng(0)
a = [rng.standard_normal((6, 3, 16)).astype("float32"), (rng.standard_normal((16, 16)) * 0.3).astype("float32"), rng.standard_normal((6, 3, 16)).astype("float32")]
f = te.build(dW, [x, W, H]); r = te.build(dW, [x, W, H], backend="numpy")
print(f.schedule.checkpoint, np.abs(f(*a) - r(*a)).max())
