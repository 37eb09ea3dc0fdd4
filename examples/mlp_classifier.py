"""A two-layer MLP classifier trained with softmax cross-entropy, from the primitives.

The loss takes integer labels (a data-dependent read ``logits[b, label[b]]``), the
softmax's row maximum is a stop-gradient (``override={m: None}``: exact, and it
spares the backward a tie count), the forward gives the backward its saved values,
and the SGD step writes the parameters in place with ``out=``. One build serves
every batch size (``B`` is symbolic). Run it:

    python examples/mlp_classifier.py
"""
from __future__ import annotations

import numpy as np

import tensorexpr as te

IN, HID, CLASSES = 2, 16, 3


def model():
    """``(params, inputs, logits, loss, grads)`` of the mean over the batch of
    ``-log softmax(W2 relu(W1 x + b1) + b2)[y]``."""
    B = te.var("B")
    X = te.placeholder((B, IN), name="X")
    y = te.placeholder((B,), dtype="int32", name="y")
    W1 = te.placeholder((IN, HID), name="W1")
    b1 = te.placeholder((HID,), name="b1")
    W2 = te.placeholder((HID, CLASSES), name="W2")
    b2 = te.placeholder((CLASSES,), name="b2")
    k = te.reduce_axis(IN, name="k")
    h = te.compute((B, HID), lambda b, j: te.maximum(
        te.sum(X[b, k] * W1[k, j], axis=k) + b1[j], 0.0), name="h")
    kh = te.reduce_axis(HID, name="kh")
    logits = te.compute((B, CLASSES), lambda b, c: te.sum(h[b, kh] * W2[kh, c], axis=kh)
                        + b2[c], name="logits")
    c1, c2 = te.reduce_axis(CLASSES, name="c1"), te.reduce_axis(CLASSES, name="c2")
    m = te.compute((B,), lambda b: te.max(logits[b, c1], axis=c1), name="m")
    lse = te.compute((B,), lambda b: te.log(te.sum(te.exp(logits[b, c2] - m[b]), axis=c2))
                     + m[b], name="lse")
    rb = te.reduce_axis((0, B), name="rb")
    loss = te.compute((), lambda: te.sum(lse[rb] - logits[rb, y[rb]], axis=rb)
                      / te.cast(B, "float32"), name="loss")
    params = [W1, b1, W2, b2]
    grads = te.differentiate(loss, params, override={m: None})
    return params, [X, y], logits, loss, list(grads)


def blobs(n, rng):
    centers = np.array([[0.0, 2.0], [2.0, -1.0], [-2.0, -1.0]], np.float32)
    y = rng.integers(0, CLASSES, n).astype(np.int32)
    return (centers[y] + 0.5 * rng.standard_normal((n, IN))).astype(np.float32), y


def main(steps=60, lr=0.5, seed=0):
    """Train on Gaussian blobs; returns (losses, accuracy on held-out points)."""
    rng = np.random.default_rng(seed)
    params, data, logits, loss, grads = model()
    saved = te.saved_values(grads, loss)
    forward = te.build([loss] + saved, inputs=params + data)
    backward = te.build(grads, inputs=params + data + saved)
    sgd = [te.build(te.compute(p.shape, lambda *ix, p=p, g=g: p[ix] - lr * g[ix]),
                    inputs=[p, g]) for p, g in zip(params, grads)]
    values = [(0.5 * rng.standard_normal(p.shape)).astype(np.float32) for p in params]
    losses = []
    for _ in range(steps):
        x, y = blobs(64, rng)
        l_val, *kept = forward(*values, x, y)
        for step, v, g in zip(sgd, values, backward(*values, x, y, *kept)):
            step(v, g, out=v)                    # in place: the result is computed first
        losses.append(float(l_val))
    x, y = blobs(500, rng)
    predict = te.build(logits, inputs=params + data[:1])
    accuracy = float((predict(*values, x).argmax(1) == y).mean())
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, held-out accuracy {accuracy:.1%}")
    return losses, accuracy


if __name__ == "__main__":
    main()
