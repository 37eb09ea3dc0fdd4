"""Elementwise activations, as ``torch.nn.functional``: ``relu``, ``leaky_relu``, ``elu``,
``silu``, ``softplus``, ``hardtanh``, ``sigmoid``, ``tanh``, ``gelu``.

Each returns a tensor of ``x``'s shape named after it (``x`` gives ``x_relu``);
:func:`erf`, which ``gelu`` needs and the language lacks as a primitive, is an
expression-level approximation usable on its own.

>>> import tensorexpr as te
>>> te.nn.gelu(te.placeholder((te.var("n"), 4), name="x")).shape
(n, 4)
"""
from __future__ import annotations

import math

from .. import api
from ..ir import Expr, Tensor, is_float
from .arguments import check_float_tensor, compute


def _elementwise(x: Tensor, fn, name: str) -> Tensor:
    return compute(x.shape, lambda *i: fn(x[i]), name=name)


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``; its gradient is 0 at 0, as torch's, and a NaN stays NaN (as in
    torch and JAX: ``x > 0`` is false for NaN, so it is not the test that picks ``x``).

    >>> import tensorexpr as te
    >>> te.nn.relu(te.placeholder((3,), name="x")).name
    'x_relu'
    """
    check_float_tensor(x, "relu")
    return _elementwise(x, lambda v: api.select(v <= 0, api.const(0.0, v.dtype), v),
                        f"{x.name}_relu")


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    """``x`` where positive, else ``negative_slope * x`` (torch's gradient at 0: the slope).

    >>> import tensorexpr as te
    >>> te.nn.leaky_relu(te.placeholder((3,), name="x"), 0.2).name
    'x_leaky_relu'
    """
    check_float_tensor(x, "leaky_relu")
    return _elementwise(x, lambda v: api.select(v > 0, v, v * negative_slope),
                        f"{x.name}_leaky_relu")


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where positive, else ``alpha * (exp(x) - 1)``.

    >>> import tensorexpr as te
    >>> te.nn.elu(te.placeholder((3,), name="x")).name
    'x_elu'
    """
    check_float_tensor(x, "elu")
    return _elementwise(x, lambda v: api.select(v > 0, v, alpha * (api.exp(v) - 1.0)),
                        f"{x.name}_elu")


def silu(x: Tensor) -> Tensor:
    """``x * sigmoid(x)`` (swish).

    >>> import tensorexpr as te
    >>> te.nn.silu(te.placeholder((3,), name="x")).name
    'x_silu'
    """
    check_float_tensor(x, "silu")
    return _elementwise(x, lambda v: v * api.sigmoid(v), f"{x.name}_silu")


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta x)) / beta``, and ``x`` itself where ``beta x > threshold``
    (torch's: no overflow). Written ``max(z, 0) + log(1 + exp(-|z|))`` so that a large
    negative ``z`` loses nothing either.

    >>> import tensorexpr as te
    >>> te.nn.softplus(te.placeholder((3,), name="x")).name
    'x_softplus'
    """
    check_float_tensor(x, "softplus")

    def fn(v):
        z = v * beta if beta != 1.0 else v
        soft = api.maximum(z, 0.0) + api.log(1.0 + api.exp(-api.abs(z)))
        return api.select(z > threshold, v, soft * (1.0 / beta) if beta != 1.0 else soft)
    return _elementwise(x, fn, f"{x.name}_softplus")


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """``x`` clamped to ``[min_val, max_val]``; gradient 1 strictly inside, 0 outside
    and at the ends (torch's).

    >>> import tensorexpr as te
    >>> te.nn.hardtanh(te.placeholder((3,), name="x")).name
    'x_hardtanh'
    """
    check_float_tensor(x, "hardtanh")
    return _elementwise(x, lambda v: api.select(v <= min_val, api.const(min_val, v.dtype),
                                                api.select(v >= max_val,
                                                           api.const(max_val, v.dtype), v)),
                        f"{x.name}_hardtanh")


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))`` elementwise.

    >>> import tensorexpr as te
    >>> te.nn.sigmoid(te.placeholder((3,), name="x")).name
    'x_sigmoid'
    """
    check_float_tensor(x, "sigmoid")
    return _elementwise(x, api.sigmoid, f"{x.name}_sigmoid")


def tanh(x: Tensor) -> Tensor:
    """``tanh(x)`` elementwise.

    >>> import tensorexpr as te
    >>> te.nn.tanh(te.placeholder((3,), name="x")).name
    'x_tanh'
    """
    check_float_tensor(x, "tanh")
    return _elementwise(x, api.tanh, f"{x.name}_tanh")


# Abramowitz & Stegun 7.1.26: erf(z) = 1 - (a1 t + ... + a5 t^5) exp(-z^2), t = 1/(1 + p z)
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf(v: Expr) -> Expr:
    """``erf(v)``, an expression: :func:`te.erf <tensorexpr.erf>` for float64; for
    float32, Abramowitz & Stegun 7.1.26 (within 1.5e-7, a few float32 ulps), which
    the C backend vectorizes where libm's ``erff`` would run a call per element.

    The float32 form is odd by construction (a select on the sign, so its
    derivative at 0 is that of the positive branch, ~2/sqrt(pi)); its derivative is
    the approximation's, within ~2e-7 of ``2/sqrt(pi) exp(-v**2)``.

    >>> import numpy as np, tensorexpr as te
    >>> x = te.placeholder((3,), dtype="float64", name="x")
    >>> f = te.build(te.compute((3,), lambda i: te.nn.erf(x[i])), backend="numpy")
    >>> np.round(f(np.array([-1.0, 0.0, 0.5])), 6)
    array([-0.842701,  0.      ,  0.5205  ])
    """
    v = api.as_expr(v)
    if not is_float(v.dtype):
        v = api.cast(v, "float32")
    if v.dtype == "float64":
        return api.erf(v)

    def positive(z):
        t = 1.0 / (1.0 + _ERF_P * z)
        poly = api.const(_ERF_A[-1], v.dtype)
        for a in reversed(_ERF_A[:-1]):
            poly = poly * t + a
        return 1.0 - poly * t * api.exp(-(z * z))

    return api.select(v >= 0, positive(v), -positive(-v))


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """``x * Phi(x)``, torch's ``gelu``; ``approximate="tanh"`` is torch's tanh formula.

    ``"none"`` uses :func:`erf` (exact for float64, within 1.5e-7 for float32).

    >>> import tensorexpr as te
    >>> te.nn.gelu(te.placeholder((3,), name="x"), approximate="tanh").name
    'x_gelu'
    """
    check_float_tensor(x, "gelu")
    if approximate == "none":
        fn = lambda v: 0.5 * v * (1.0 + erf(v * (1.0 / math.sqrt(2.0))))  # noqa: E731
    elif approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        fn = lambda v: 0.5 * v * (1.0 + api.tanh(c * (v + 0.044715 * v * v * v)))  # noqa: E731
    else:
        raise ValueError(f"te.nn.gelu: approximate must be 'none' or 'tanh', not "
                         f"{approximate!r}")
    return _elementwise(x, fn, f"{x.name}_gelu")
