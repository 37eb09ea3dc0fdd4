"""A recurrence as a layer of a torch module: an exponentially weighted moving average
with a learnable rate per channel, ``e[t] = a * d[t] + (1 - a) * e[t - 1]``, as one
tensorexpr op (its backward, a recurrence running the other way, is generated).

The module learns the rates that turn noisy series into their smoothed targets, beside
the same module written as a Python loop of torch operations, in float64: the two loss
curves agree to 1e-8, and the learned rates approach the true ones. Run it:

    python examples/torch_ewma.py
"""
from __future__ import annotations

import torch

import tensorexpr as te
import tensorexpr.torch as tet

CHANNELS = 3
TRUE_RATES = torch.tensor([0.2, 0.5, 0.8], dtype=torch.float64)


def ewma_op():
    """``e[t, r]`` over a symbolic number of steps ``T``; ``d`` is ``(channels, T)``."""
    T = te.var("T")
    d = te.placeholder((CHANNELS, T), "float64", "d")
    a = te.placeholder((CHANNELS,), "float64", "a")
    e = te.recurrence((T, CHANNELS), lambda e, t, r: te.select(
        t == 0, d[r, 0], a[r] * d[r, t] + (1.0 - a[r]) * e[t - 1, r]), name="ewma",
        dtype="float64")
    return tet.op(e, inputs=[d, a], name="ewma")


def loop_ewma(d, a):
    """The same recurrence as a loop of torch operations (the reference)."""
    out = [d[:, 0]]
    for t in range(1, d.shape[1]):
        out.append(a * d[:, t] + (1 - a) * out[-1])
    return torch.stack(out)


class Smoother(torch.nn.Module):
    """Learnable per-channel rates (a sigmoid keeps them in (0, 1)) and an EWMA."""

    def __init__(self, ewma=None):
        super().__init__()
        self.ewma = ewma if ewma is not None else loop_ewma
        self.logit = torch.nn.Parameter(torch.zeros(CHANNELS, dtype=torch.float64))

    def forward(self, d):
        return self.ewma(d, torch.sigmoid(self.logit))


def data(steps, generator):
    d = torch.randn(CHANNELS, steps, generator=generator, dtype=torch.float64)
    return d, loop_ewma(d, TRUE_RATES)


def train(ewma=None, steps=40, series=64, lr=2.0, seed=0):
    """The loss at each step of SGD, and the learned rates."""
    model = Smoother(ewma)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        d, target = data(series, gen)
        loss = ((model(d) - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, torch.sigmoid(model.logit).detach()


def main(steps=40):
    ours, rates = train(ewma_op(), steps)
    ref, ref_rates = train(None, steps)
    for k in range(0, steps, max(steps // 8, 1)):
        print(f"step {k:3d}  tensorexpr {ours[k]:.10f}  torch loop {ref[k]:.10f}")
    gap = max(abs(a - b) for a, b in zip(ours, ref))
    print(f"largest difference of the loss curves: {gap:.2e}")
    print(f"learned rates {[round(r, 3) for r in rates.tolist()]}, true {TRUE_RATES.tolist()}")
    return ours, ref, rates


if __name__ == "__main__":
    main()
