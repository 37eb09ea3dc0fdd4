"""Recurrent cells (tanh RNN, GRU, LSTM) for ``benchmarks.recurrence_memory``, in
tensorexpr, JAX and PyTorch, computing the same function of the same data.

Each cell runs over ``T`` steps of an input ``x[T, B, D]`` with hidden size ``H``
(state 0 before the first step); the input projections ``x @ Wx*`` are computed
for all steps before the recurrence, the recurrent products ``h[t-1] @ U*`` inside
it. The loss is ``sum(h[T-1] ** 2)`` and the gradient is taken w.r.t. every input
(``x`` and the weights), in :data:`NAMES` order:

* ``rnn``: ``h = tanh(x Wx + h' U)``;
* ``gru``: ``z = sig(x Wz + h' Uz)``, ``r = sig(x Wr + h' Ur)``,
  ``n = tanh(x Wn + r * (h' Un))``, ``h = (1 - z) n + z h'``;
* ``lstm``: ``i, f, o = sig(x Wi + h' Ui, ...)``, ``g = tanh(x Wg + h' Ug)``,
  ``c = f c' + i g``, ``h = o tanh(c)`` (tensorexpr keeps ``c`` and ``h`` in one
  recurrence ``s[T, B, 2, H]``: ``s[t, b, 0] = c``, ``s[t, b, 1] = h``).

Peer modes: JAX ``lax.scan`` under ``jax.jit`` with ``jax.grad``, the scan body
plain (``scan``), wrapped in ``jax.checkpoint`` (``remat``) or in
``jax.checkpoint(..., policy=nothing_saveable)`` (``remat0``); PyTorch a Python
loop with autograd (``loop``), or with ``torch.utils.checkpoint`` over each block
of ``T/k`` steps (``ckpt``, ``use_reentrant=False``).
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

CELLS = ("rnn", "gru", "lstm")
#: gates of each cell, in the order of its weights (input W*, then recurrent U*)
GATES = {"rnn": ("",), "gru": ("z", "r", "n"), "lstm": ("i", "f", "o", "g")}


def names(cell: str) -> List[str]:
    """The inputs of ``cell``'s gradient, in order.

    >>> names("gru")
    ['x', 'Wz', 'Wr', 'Wn', 'Uz', 'Ur', 'Un']
    """
    gates = GATES[cell]
    return ["x"] + [f"W{g}" for g in gates] + [f"U{g}" for g in gates]


def arrays(cell: str, T: int, B: int, H: int, D: int, seed: int = 0) -> List[np.ndarray]:
    """float32 data for ``names(cell)``: ``x`` uniform in [-1, 1), weights normal with
    standard deviation ``1/sqrt(fan-in)``: the same in every process.

    >>> [a.shape for a in arrays("rnn", 3, 2, 4, 5)]
    [(3, 2, 5), (5, 4), (4, 4)]
    """
    rng = np.random.default_rng(seed)
    out = [rng.uniform(-1.0, 1.0, (T, B, D)).astype(np.float32)]
    for n in names(cell)[1:]:
        rows = D if n[0] == "W" else H
        out.append((rng.standard_normal((rows, H)) / np.sqrt(rows)).astype(np.float32))
    return out


def te_cell(cell: str, T: int, B: int, H: int, D: int, checkpoints: Optional[int],
            dtype: str = "float32"):
    """``(inputs, state, h)``: ``cell``'s recurrence over ``T`` steps in tensorexpr, and
    ``h(t, b, j)`` reading its hidden state (the LSTM's state holds ``c`` and ``h``).

    >>> ins, s, h = te_cell("lstm", 4, 2, 3, 2, None)
    >>> s.shape, [p.name for p in ins][:3]
    ((4, 2, 2, 3), ['x', 'Wi', 'Wf'])
    """
    import tensorexpr as te
    gates = GATES[cell]
    x = te.placeholder((T, B, D), dtype, "x")
    Ws = [te.placeholder((D, H), dtype, f"W{g}") for g in gates]
    Us = [te.placeholder((H, H), dtype, f"U{g}") for g in gates]

    def project(Wg, g):
        kd = te.reduce_axis(D, f"d{g}")
        return te.compute((T, B, H), lambda t, b, j: te.sum(x[t, b, kd] * Wg[kd, j], axis=kd),
                          name=f"x{g or 'p'}")
    xs = [project(Wg, g) for Wg, g in zip(Ws, gates)]
    kk = te.reduce_axis(H, "k")

    if cell == "lstm":
        def prev(s, t, b, j, U):
            return te.select(t == 0, 0.0, te.sum(s[t - 1, b, 1, kk] * U[kk, j], axis=kk))

        def fn(s, t, b, w, j):
            i, f, o = (te.sigmoid(xg[t, b, j] + prev(s, t, b, j, U))
                       for xg, U in zip(xs[:3], Us[:3]))
            g = te.tanh(xs[3][t, b, j] + prev(s, t, b, j, Us[3]))
            c = f * te.select(t == 0, 0.0, s[t - 1, b, 0, j]) + i * g
            return te.select(w == 0, c, o * te.tanh(c))
        s = te.recurrence((T, B, 2, H), fn, name="s", dtype=dtype, checkpoints=checkpoints)
        return [x] + Ws + Us, s, lambda t, b, j: s[t, b, 1, j]

    def prev(h, t, b, j, U):
        return te.select(t == 0, 0.0, te.sum(h[t - 1, b, kk] * U[kk, j], axis=kk))
    if cell == "rnn":
        fn = lambda h, t, b, j: te.tanh(xs[0][t, b, j] + prev(h, t, b, j, Us[0]))
    elif cell == "gru":
        def fn(h, t, b, j):
            z = te.sigmoid(xs[0][t, b, j] + prev(h, t, b, j, Us[0]))
            r = te.sigmoid(xs[1][t, b, j] + prev(h, t, b, j, Us[1]))
            n = te.tanh(xs[2][t, b, j] + r * prev(h, t, b, j, Us[2]))
            return (1.0 - z) * n + z * te.select(t == 0, 0.0, h[t - 1, b, j])
    else:
        raise ValueError(f"unknown cell {cell!r}; use one of {', '.join(CELLS)}")
    h = te.recurrence((T, B, H), fn, name="h", dtype=dtype, checkpoints=checkpoints)
    return [x] + Ws + Us, h, lambda t, b, j: h[t, b, j]


def te_program(cell: str, T: int, B: int, H: int, D: int, checkpoints: Optional[int],
               loss: str = "last"):
    """``(inputs, gradients)`` of ``sum(h[T-1] ** 2)`` in tensorexpr (``loss="every"``:
    of the sum over every step of ``h[t] ** 2``).

    >>> ins, grads = te_program("gru", 4, 2, 3, 2, 2)
    >>> [g.shape for g in grads][:2]
    [(4, 2, 2), (2, 3)]
    """
    import tensorexpr as te
    ins, _, h = te_cell(cell, T, B, H, D, checkpoints)
    r1, r2 = te.reduce_axis(B), te.reduce_axis(H)
    if loss == "every":
        rt = te.reduce_axis(T)
        L = te.compute((), lambda: te.sum(h(rt, r1, r2) * h(rt, r1, r2), axis=[rt, r1, r2]),
                       name="L")
    else:
        L = te.compute((), lambda: te.sum(h(T - 1, r1, r2) * h(T - 1, r1, r2), axis=[r1, r2]),
                       name="L")
    return ins, list(te.differentiate(L, ins))


def _step(cell, hc, xg, Us, sig, tanh):
    """One step of ``cell`` for array modules with ``@`` (JAX, PyTorch): the new
    ``(h, c)`` from ``hc`` and the step's projected inputs ``xg`` (one per gate)."""
    h, c = hc
    if cell == "rnn":
        return tanh(xg[0] + h @ Us[0]), c
    if cell == "gru":
        z = sig(xg[0] + h @ Us[0])
        r = sig(xg[1] + h @ Us[1])
        n = tanh(xg[2] + r * (h @ Us[2]))
        return (1.0 - z) * n + z * h, c
    i, f, o = (sig(a + h @ U) for a, U in zip(xg[:3], Us[:3]))
    g = tanh(xg[3] + h @ Us[3])
    c = f * c + i * g
    return o * tanh(c), c


def jax_grad(cell: str, T: int, B: int, H: int, remat: str = "scan"):
    """A jitted function of ``arrays(cell, ...)`` returning the gradients (JAX ``lax.scan``).
    ``remat``: "scan" (plain body), "remat" (``jax.checkpoint``) or "remat0"
    (``jax.checkpoint`` with ``policy=nothing_saveable``).

    >>> g = jax_grad("rnn", 3, 2, 4)(*arrays("rnn", 3, 2, 4, 5))  # doctest: +SKIP
    >>> [a.shape for a in g]  # doctest: +SKIP
    [(3, 2, 5), (5, 4), (4, 4)]
    """
    import jax
    import jax.numpy as jnp
    n = len(GATES[cell])

    def body(carry, xg, Us):
        new = _step(cell, carry, xg, Us, jax.nn.sigmoid, jnp.tanh)
        return new, None

    if remat == "remat":
        body = jax.checkpoint(body)
    elif remat == "remat0":
        body = jax.checkpoint(body, policy=jax.checkpoint_policies.nothing_saveable)
    elif remat != "scan":
        raise ValueError(f"unknown JAX mode {remat!r}")

    def loss(x, *weights):
        Ws, Us = weights[:n], weights[n:]
        xs = tuple(jnp.einsum("tbd,dh->tbh", x, W) for W in Ws)
        zero = jnp.zeros((B, H), x.dtype)
        (h, _), _ = jax.lax.scan(lambda hc, xg: body(hc, xg, Us), (zero, zero), xs)
        return jnp.sum(h * h)
    return jax.jit(jax.grad(loss, argnums=tuple(range(1 + 2 * n))))


def torch_grad(cell: str, T: int, B: int, H: int, blocks: Optional[int] = None):
    """A function of ``arrays(cell, ...)`` returning the gradients as numpy arrays
    (PyTorch autograd over a Python loop); ``blocks``: checkpoint each of that many
    blocks of steps with ``torch.utils.checkpoint`` (``use_reentrant=False``).

    >>> g = torch_grad("gru", 4, 2, 3, blocks=2)(*arrays("gru", 4, 2, 3, 2))  # doctest: +SKIP
    >>> len(g)  # doctest: +SKIP
    7
    """
    import torch
    from torch.utils.checkpoint import checkpoint
    n = len(GATES[cell])

    def run(lo, hi, h, c, xs, Us):
        for t in range(lo, hi):
            h, c = _step(cell, (h, c), [a[t] for a in xs], Us,
                                    torch.sigmoid, torch.tanh)
        return h, c

    def grad(*data):
        ts = [torch.from_numpy(a).requires_grad_(True) for a in data]
        x, Ws, Us = ts[0], ts[1:1 + n], ts[1 + n:]
        xs = [x @ W for W in Ws]
        h = c = torch.zeros((B, H), dtype=x.dtype)
        if blocks is None:
            h, c = run(0, T, h, c, xs, Us)
        else:
            edges = [T * i // blocks for i in range(blocks + 1)]
            for lo, hi in zip(edges, edges[1:]):
                h, c = checkpoint(run, lo, hi, h, c, xs, Us, use_reentrant=False)
        return [g.numpy() for g in torch.autograd.grad((h * h).sum(), ts)]
    return grad


def compare(got: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> Tuple[float, float]:
    """``(max |diff|, max relative diff)`` over every gradient, relative to each
    gradient's largest magnitude.

    >>> compare([np.array([1.0, 2.0])], [np.array([1.0, 2.5])])
    (0.5, 0.2)
    """
    diff = rel = 0.0
    for a, b in zip(got, ref):
        d = float(np.max(np.abs(np.asarray(a, np.float64) - b), initial=0.0))
        diff = max(diff, d)
        rel = max(rel, d / max(float(np.max(np.abs(b), initial=0.0)), 1e-30))
    return diff, rel
