"""A small CNN in PyTorch whose conv + relu + max-pool layer is one tensorexpr op.

It is trained with SGD on synthetic data (images whose class is the quadrant with
the brightest blob) beside the same model built from torch layers, from the same
initial weights, in float64: the two loss curves agree to 1e-8. Run it:

    python examples/torch_cnn.py
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import tensorexpr as te
import tensorexpr.torch as tet

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
    return tet.op(pool, inputs=[X, W, b], name="conv_pool")


class Net(torch.nn.Module):
    """conv + relu + pool (tensorexpr, or torch layers if ``conv_pool`` is None), then a
    linear classifier."""

    def __init__(self, conv_pool=None):
        super().__init__()
        self.conv_pool = conv_pool
        self.weight = torch.nn.Parameter(torch.randn(FILTERS, C, 3, 3) * 0.5)
        self.bias = torch.nn.Parameter(torch.zeros(FILTERS) + 0.01)
        self.fc = torch.nn.Linear(FILTERS * P * P, CLASSES)

    def forward(self, x):
        if self.conv_pool is not None:
            h = self.conv_pool(x, self.weight, self.bias)
        else:
            h = F.max_pool2d(F.relu(F.conv2d(x, self.weight, self.bias)), 2)
        return self.fc(h.flatten(1))


def synthetic(n, generator):
    """Noisy images with a bright blob in one quadrant; the label is the quadrant."""
    labels = torch.randint(0, CLASSES, (n,), generator=generator)
    x = torch.rand(n, C, H, H, generator=generator) * 0.3
    for k, q in enumerate(labels.tolist()):
        y0, x0 = (q // 2) * (H // 2), (q % 2) * (H // 2)
        x[k, :, y0 + 1:y0 + 4, x0 + 1:x0 + 4] += 1.0
    return x, labels


def train(conv_pool=None, steps=30, batch=16, seed=0, lr=0.2):
    """The loss at each step of SGD."""
    torch.manual_seed(seed)
    model = Net(conv_pool).double()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    data = torch.Generator().manual_seed(seed + 1)
    losses = []
    for _ in range(steps):
        x, y = synthetic(batch, data)
        loss = F.cross_entropy(model(x.double()), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main(steps=30):
    ours = train(conv_pool_op(), steps)
    ref = train(None, steps)
    for k in range(0, steps, max(steps // 10, 1)):
        print(f"step {k:3d}  tensorexpr {ours[k]:.10f}  torch layers {ref[k]:.10f}")
    gap = max(abs(a - b) for a, b in zip(ours, ref))
    print(f"largest difference of the loss curves: {gap:.2e}")
    return ours, ref


if __name__ == "__main__":
    main()
