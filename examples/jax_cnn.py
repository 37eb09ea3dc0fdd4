"""The small CNN of ``torch_cnn.py`` in JAX: its conv + relu + max-pool layer is one
tensorexpr op inside a jitted loss, trained with a hand-written SGD step beside the
same model built from ``jax.lax`` convolution and pooling, in float64: the two loss
curves agree to 1e-8. Run it:

    python examples/jax_cnn.py
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import tensorexpr as te
import tensorexpr.jax as tej

C, FILTERS, H, CLASSES = 1, 4, 10, 4
P = (H - 2) // 2


def conv_pool_op(dtype="float64"):
    """relu(conv3x3(X, W) + b), max-pooled 2x2, over a symbolic batch size ``n``."""
    n = te.var("n")
    X = te.placeholder((n, C, H, H), dtype, "X")
    W = te.placeholder((FILTERS, C, 3, 3), dtype, "W")
    b = te.placeholder((FILTERS,), dtype, "b")
    c = te.reduce_axis(C, name="c")
    ky, kx = te.reduce_axis(3, name="ky"), te.reduce_axis(3, name="kx")
    conv = te.compute((n, FILTERS, H - 2, H - 2), lambda i, f, y, x: te.maximum(te.sum(
        X[i, c, y + ky, x + kx] * W[f, c, ky, kx], axis=[c, ky, kx]) + b[f], 0.0), name="conv")
    ry, rx = te.reduce_axis(2, name="ry"), te.reduce_axis(2, name="rx")
    pool = te.compute((n, FILTERS, P, P), lambda i, f, y, x: te.max(
        conv[i, f, 2 * y + ry, 2 * x + rx], axis=[ry, rx]), name="pool")
    return tej.op(pool, inputs=[X, W, b], name="conv_pool")


def lax_conv_pool(x, w, b):
    conv = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID") + b[None, :, None, None]
    return jax.lax.reduce_window(jax.nn.relu(conv), -jnp.inf, jax.lax.max,
                                 (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def init(seed):
    rng = np.random.default_rng(seed)
    return {"w": jnp.asarray(rng.standard_normal((FILTERS, C, 3, 3)) * 0.5),
            "b": jnp.full((FILTERS,), 0.01),
            "fc_w": jnp.asarray(rng.standard_normal((FILTERS * P * P, CLASSES)) * 0.1),
            "fc_b": jnp.zeros(CLASSES)}


def loss_fn(conv_pool):
    def loss(params, x, y):
        h = conv_pool(x, params["w"], params["b"]).reshape(x.shape[0], -1)
        logits = h @ params["fc_w"] + params["fc_b"]
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(x.shape[0]), y])
    return loss


def synthetic(n, rng):
    """Noisy images with a bright blob in one quadrant; the label is the quadrant."""
    labels = rng.integers(0, CLASSES, n)
    x = rng.uniform(0, 0.3, (n, C, H, H))
    for k, q in enumerate(labels):
        y0, x0 = (q // 2) * (H // 2), (q % 2) * (H // 2)
        x[k, :, y0 + 1:y0 + 4, x0 + 1:x0 + 4] += 1.0
    return jnp.asarray(x), jnp.asarray(labels)


def train(conv_pool, steps=30, batch=16, seed=0, lr=0.2):
    """The loss at each step of plain SGD, the step jitted."""
    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn(conv_pool))(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss

    params, rng, losses = init(seed), np.random.default_rng(seed + 1), []
    for _ in range(steps):
        params, loss = step(params, *synthetic(batch, rng))
        losses.append(float(loss))
    return losses


def main(steps=30):
    with jax.enable_x64(True):
        ours = train(conv_pool_op(), steps)
        ref = train(lax_conv_pool, steps)
    for k in range(0, steps, max(steps // 10, 1)):
        print(f"step {k:3d}  tensorexpr {ours[k]:.10f}  jax.lax {ref[k]:.10f}")
    gap = max(abs(a - b) for a, b in zip(ours, ref))
    print(f"largest difference of the loss curves: {gap:.2e}")
    return ours, ref


if __name__ == "__main__":
    main()
