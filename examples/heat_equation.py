"""A differentiable heat equation: ``u[t, x]`` diffuses an initial profile ``u0`` for
``T`` explicit Euler steps (a recurrence), and gradient descent on ``u0`` finds the
initial condition whose final state matches a target. The gradient is the adjoint
recurrence, running backwards in time, checked against float64 central
differences. Run it:

    python examples/heat_equation.py
"""
from __future__ import annotations

import numpy as np

import tensorexpr as te

NX, T, ALPHA = 32, 40, 0.2


def simulation(dtype="float32"):
    """``(u0, target, u, loss, du0)``: ``loss = sum_x (u[T-1, x] - target[x])^2``."""
    u0 = te.placeholder((NX,), dtype, name="u0")
    target = te.placeholder((NX,), dtype, name="target")

    def step(u, t, x):
        left = u[t - 1, te.maximum(x - 1, 0)]          # insulated ends: clamp
        right = u[t - 1, te.minimum(x + 1, NX - 1)]
        return te.select(t == 0, u0[x],
                         u[t - 1, x] + ALPHA * (left - 2.0 * u[t - 1, x] + right))
    u = te.recurrence((T, NX), step, name="u", dtype=dtype)
    x = te.reduce_axis(NX, name="x")
    loss = te.compute((), lambda: te.sum((u[T - 1, x] - target[x]) ** 2, axis=x), name="loss")
    (du0,) = te.differentiate(loss, [u0])
    return u0, target, u, loss, du0


def main(iterations=200, lr=0.2):
    """Returns (initial loss, final loss)."""
    u0, target, u, loss, du0 = simulation()
    f_loss = te.build(loss, inputs=[u0, target])
    f_grad = te.build(du0, inputs=[u0, target])
    xs = np.linspace(0, 1, NX, dtype=np.float32)
    goal = np.exp(-((xs - 0.3) / 0.15) ** 2).astype(np.float32)
    guess = np.zeros(NX, np.float32)
    # the gradient against float64 central differences of the numpy backend
    g64 = simulation("float64")
    v = np.random.default_rng(0).standard_normal(NX)
    goal64 = goal.astype(np.float64)
    num = np.zeros(NX)
    fl64 = te.build(g64[3], inputs=[g64[0], g64[1]], backend="numpy")
    for i in range(NX):
        e = np.zeros(NX)
        e[i] = 1e-6
        num[i] = (fl64(v + e, goal64) - fl64(v - e, goal64)) / 2e-6
    got = te.build(g64[4], inputs=[g64[0], g64[1]])(v, goal64)
    assert np.abs(got - num).max() < 1e-6 * np.abs(num).max(), np.abs(got - num).max()
    first = float(f_loss(guess, goal))
    for _ in range(iterations):
        guess -= lr * f_grad(guess, goal)
    last = float(f_loss(guess, goal))
    print(f"loss {first:.4f} -> {last:.6f} after {iterations} gradient steps")
    return first, last


if __name__ == "__main__":
    main()
