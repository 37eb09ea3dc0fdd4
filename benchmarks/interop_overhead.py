"""``python -m benchmarks.interop_overhead``: per-call overhead of the PyTorch and JAX adapters.

A tiny op (``y = x * w`` on 8 float32 elements) is called forward and backward
(``torch.autograd.grad`` / a jitted ``jax.vjp``), so the time is the wrappers'
overhead, not arithmetic. Beside it: the same product as plain torch operations,
as a native PyTorch custom operator (``torch.library.custom_op`` over numpy, with
``register_autograd`` and a fake; the way a hand-written kernel is exposed), and in
JAX as plain jitted ``jnp``. The goal is tensorexpr.torch within 2x of the native
custom op. tensorexpr.jax is measured both ways in the same run: through its XLA FFI
custom call (the compiled kernel entered without Python) and through
``jax.pure_callback`` (``tej.op(..., via=...)``); where the FFI handler cannot be
built its row says why instead of a time.

Times are medians of interleaved calls (``benchmarks.timing``), in microseconds.

>>> rows = measure(quick=True)
>>> sorted(k for k in rows if k.startswith("jax: tensorexpr"))  # doctest: +NORMALIZE_WHITESPACE
['jax: tensorexpr.jax (XLA FFI custom call), jitted',
 'jax: tensorexpr.jax (pure_callback), jitted']
"""
from __future__ import annotations

import argparse
from typing import Dict, Optional

import numpy as np

from benchmarks.timing import QUICK, Budget, interleaved, median

SIZE = 8
FFI = "jax: tensorexpr.jax (XLA FFI custom call), jitted"
CALLBACK = "jax: tensorexpr.jax (pure_callback), jitted"


def _program():
    import tensorexpr as te
    X = te.placeholder((SIZE,), name="X")
    W = te.placeholder((SIZE,), name="W")
    return te.compute((SIZE,), lambda i: X[i] * W[i], name="Y"), [X, W]


_NATIVE: list = []  # the native custom op, registered once per process


def native_op():
    """``y = x * w`` as a native PyTorch custom operator over numpy (registered once)."""
    if _NATIVE:
        return _NATIVE[0]
    import torch

    # Explicit schemas: this module's annotations are strings (from __future__).
    @torch.library.custom_op("interop_bench::mul", mutates_args=(),
                             schema="(Tensor x, Tensor w) -> Tensor")
    def native(x, w):
        return torch.from_numpy(x.numpy() * w.numpy())

    @native.register_fake
    def _(x, w):
        return torch.empty_like(x)

    @torch.library.custom_op("interop_bench::mul_grad", mutates_args=(),
                             schema="(Tensor x, Tensor w, Tensor h) -> (Tensor, Tensor)")
    def native_grad(x, w, h):
        hn = h.numpy()
        return torch.from_numpy(hn * w.numpy()), torch.from_numpy(hn * x.numpy())

    @native_grad.register_fake
    def _(x, w, h):
        return torch.empty_like(x), torch.empty_like(w)

    def setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, h):
        x, w = ctx.saved_tensors
        return native_grad(x, w, h.contiguous())
    native.register_autograd(backward, setup_context=setup)
    _NATIVE.append(native)
    return native


def torch_calls() -> Dict[str, object]:
    """``{label: call}``: forward + backward of the tiny op, per torch system."""
    import torch
    import tensorexpr.torch as tet

    native = native_op()
    ours = tet.op(*_program())
    x = torch.rand(SIZE, requires_grad=True)
    w = torch.rand(SIZE, requires_grad=True)
    h = torch.rand(SIZE)

    def run(f):
        return lambda: torch.autograd.grad(f(x, w), (x, w), h)
    return {"torch: plain operations (x * w)": run(torch.mul),
            "torch: native custom op (torch.library.custom_op)": run(native),
            "torch: tensorexpr.torch": run(ours)}


def jax_calls() -> Dict[str, object]:
    """``{label: call}``: a jitted forward + vjp of the tiny op, per JAX system (the
    FFI row only where :func:`tensorexpr.jax.ffi_available` says it can be used)."""
    import jax
    import jax.numpy as jnp
    import tensorexpr.jax as tej

    x, w, h = (jnp.asarray(np.random.rand(SIZE).astype(np.float32)) for _ in range(3))

    def run(f):
        step = jax.jit(lambda x, w, h: jax.vjp(f, x, w)[1](h))
        return lambda: jax.block_until_ready(step(x, w, h))
    calls = {"jax: jnp, jitted": run(jnp.multiply)}
    if tej.ffi_available() is None:
        calls[FFI] = run(tej.op(*_program(), via="ffi"))
    calls[CALLBACK] = run(tej.op(*_program(), via="callback"))
    return calls


def measure(quick: bool = False) -> Dict[str, Optional[float]]:
    """Median microseconds per forward + backward call, per system (None: not measured)."""
    budget = QUICK if quick else Budget(sample_s=0.05, min_rounds=5, max_rounds=15, total_s=6.0)
    rows: Dict[str, Optional[float]] = {}
    for calls in (torch_calls, jax_calls):
        try:
            fns = calls()
        except ImportError:
            continue
        for label, rounds in interleaved(fns, budget).items():
            rows[label] = median(rounds) * 1e6
        if calls is jax_calls and FFI not in rows:
            rows[FFI] = None
    return rows


def report(rows: Dict[str, Optional[float]]) -> str:
    """The table, and the ratio the goal is stated in.

    >>> print(report({"torch: native custom op (torch.library.custom_op)": 40.0,
    ...               "torch: tensorexpr.torch": 50.0}))  # doctest: +NORMALIZE_WHITESPACE
    per-call overhead, forward + backward of y = x * w (8 elements), median us
      torch: native custom op (torch.library.custom_op)       40.0
      torch: tensorexpr.torch                                 50.0
    tensorexpr.torch / native custom op: 1.25x (goal: within 2x)
    """
    lines = [f"per-call overhead, forward + backward of y = x * w ({SIZE} elements), median us"]
    for label, us in rows.items():
        lines.append(f"  {label:<52s} " + (f"{us:8.1f}" if us is not None
                                           else "  unavailable here (see ffi_available())"))
    ours, native = rows.get("torch: tensorexpr.torch"), rows.get(
        "torch: native custom op (torch.library.custom_op)")
    if ours and native:
        lines.append(f"tensorexpr.torch / native custom op: {ours / native:.2f}x (goal: within 2x)")
    ffi, callback = rows.get(FFI), rows.get(CALLBACK)
    if ffi and callback:
        lines.append(f"tensorexpr.jax: XLA FFI call {ffi:.1f} us vs pure_callback "
                     f"{callback:.1f} us ({callback / ffi:.1f}x less overhead)")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.interop_overhead",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few rounds, under a second each")
    args = parser.parse_args(argv)
    print(report(measure(args.quick)))


if __name__ == "__main__":
    main()
