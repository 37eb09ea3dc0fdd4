"""The 14 cases in JAX on the CPU: ``jax.jit`` of the forward and of ``jax.vjp``.

The VJP program is ``jax.jit(lambda inputs, H: jax.vjp(f, *inputs)[1](H))``: like
tensorexpr's, it receives the inputs and the head, and XLA keeps only the
forward work the gradient needs.

>>> len(FORWARD), FORWARD["conv2d"].__name__  # one function per case key
(12, '_conv2d')
"""
from __future__ import annotations

from benchmarks.systems import Prepared, first_line, forward_table, missing_module, timed

LABEL = "JAX (jax.jit of jax.vjp)"
VJP_INCLUDES = ("jax.jit(jax.vjp(f, *inputs)[1](H)) called with the inputs and H; "
                "forward intermediates the gradient reads are recomputed inside it")


def missing():
    """None if jax imports, else why not and how to install it."""
    return missing_module("jax")


# {{{ the cases (imports inside: this module must import without jax)


def _matmul(p, A, B):
    return A @ B


def _conv2d(p, X, W):
    from jax import lax
    pad = p["pad"]
    return lax.conv_general_dilated(
        X, W, window_strides=(p["stride"],) * 2, padding=[(pad, pad), (pad, pad)],
        rhs_dilation=(p["dil"],) * 2, dimension_numbers=("NCHW", "OIHW", "NCHW"))


def _maxpool(p, X):
    import jax.numpy as jnp
    from jax import lax
    k = p["k"]
    window = (1, 1, k, k)
    # Python-scalar init values: JAX differentiates reduce_window only when it can
    # recognise max/add with their identity as a constant.
    return lax.reduce_window(X, -jnp.inf, lax.max, window, window, "VALID")


def _avgpool(p, X):
    from jax import lax
    k = p["k"]
    total = lax.reduce_window(X, 0.0, lax.add, (1, 1, k, k), (1,) * 4, "VALID")
    return total / (k * k)


def _flatten(p, X):
    return X.reshape(X.shape[0], -1)


def _softmax(p, X):
    import jax
    return jax.nn.softmax(X, axis=-1)


def _layernorm(p, X, gamma, beta):
    import jax.numpy as jnp
    mu = X.mean(axis=-1, keepdims=True)
    var = ((X - mu) ** 2).mean(axis=-1, keepdims=True)
    return (X - mu) / jnp.sqrt(var + p["eps"]) * gamma + beta


def _bias_transpose(p, X, b):
    return (X + b).T


def _ewma(p, d):
    from jax import lax

    def step(e, dt):
        e = 0.5 * dt + 0.5 * e
        return e, None
    e, _ = lax.scan(step, d[:, 0], d.T[1:])
    return e


def _mlp(p, X, W1, b1, W2, b2):
    import jax.numpy as jnp
    return jnp.tanh(X @ W1 + b1) @ W2 + b2


def _embedding(p, E, idx):
    return E[idx]


def _blur(p, X):
    import jax.numpy as jnp
    Xp = jnp.concatenate([X[:1], X, X[-1:]])  # clamped boundary
    return (Xp[:-2] + Xp[1:-1] + Xp[2:]) / 3


FORWARD = forward_table(globals())

# }}}


def prepare(case, p, inputs, H) -> Prepared:
    """Compile or record the case, time its first calls; failures become statuses.

    >>> from benchmarks.cases import CASES
    >>> p = CASES[0].params(quick=True)
    >>> H = CASES[0].head((64, 64))
    >>> prep = prepare(CASES[0], p, CASES[0].inputs(p), H)  # doctest: +SKIP
    >>> [g.shape for g in prep.gradients()]  # doctest: +SKIP
    [(64, 128), (128, 64)]
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    f = FORWARD[case.key]
    # Without jax_enable_x64 JAX holds integers as int32; convert explicitly (no warning).
    arrays = {k: jnp.asarray(v.astype(np.int32) if v.dtype == np.int64 else v)
              for k, v in inputs.items()}
    wrt = [arrays[n] for n in case.wrt]
    fixed = {k: v for k, v in arrays.items() if k not in case.wrt}
    head = jnp.asarray(H)

    def of_wrt(*xs):
        return f(p, **fixed, **dict(zip(case.wrt, xs)))

    fwd_jit = jax.jit(of_wrt)
    vjp_jit = jax.jit(lambda xs, h: jax.vjp(of_wrt, *xs)[1](h))
    prep = Prepared(fwd=lambda: fwd_jit(*wrt).block_until_ready(), vjp=None,
                    to_numpy=lambda a: np.asarray(a))
    _, prep.fwd_build_s = timed(prep.fwd)  # trace + compile + first call
    try:
        _, prep.build_s = timed(lambda: jax.block_until_ready(vjp_jit(wrt, head)))
        prep.vjp = lambda: jax.block_until_ready(vjp_jit(wrt, head))
    except Exception as exc:
        prep.vjp_status = f"unsupported ({first_line(exc)})"
    return prep
