"""The benchmark cases in JAX on the CPU: ``jax.jit`` of the forward and of ``jax.vjp``.

The VJP program is ``jax.jit(lambda inputs, H: jax.vjp(f, *inputs)[1](H))``: like
tensorexpr's, it receives the inputs and the head, and XLA keeps only the
forward work the gradient needs.

>>> len(FORWARD), FORWARD["conv2d"].__name__  # one function per case key
(30, '_conv2d')
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


# {{{ tier 2


def _bmm(p, A, Bm):
    return A @ Bm


def _attention(p, Q, K, V):
    import jax
    S = Q @ K.transpose(0, 2, 1) / p["d"] ** 0.5
    return jax.nn.softmax(S, axis=-1) @ V


def _conv_nchw(X, W, pad, groups=1):
    from jax import lax
    return lax.conv_general_dilated(X, W, (1, 1), [(pad, pad), (pad, pad)],
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                    feature_group_count=groups)


def _depthwise(p, X, W):
    return _conv_nchw(X, W, 1, groups=X.shape[1])


def _conv1x1(p, X, W):
    return _conv_nchw(X, W, 0)


def _conv1d(p, X, W):
    from jax import lax
    return lax.conv_general_dilated(X, W, (1,), [(p["pad"], p["pad"])],
                                    dimension_numbers=("NCH", "OIH", "NCH"))


def _conv_transpose(p, X, W):
    from jax import lax
    # torch's conv_transpose2d: the input dilated by the stride, padded by k - 1 - pad,
    # convolved with the flipped kernel whose in/out channels are swapped (IOHW)
    k, pad = p["K"], p["pad"]
    edge = (k - 1 - pad, k - 1 - pad)
    return lax.conv_general_dilated(X, W[:, :, ::-1, ::-1], (1, 1), [edge, edge],
                                    lhs_dilation=(p["stride"],) * 2,
                                    dimension_numbers=("NCHW", "IOHW", "NCHW"))


def _groupnorm(p, X, gamma, beta):
    import jax.numpy as jnp
    n, c, h, w = X.shape
    g = X.reshape(n, p["G"], -1)
    mu = g.mean(axis=-1, keepdims=True)
    var = ((g - mu) ** 2).mean(axis=-1, keepdims=True)
    xhat = ((g - mu) / jnp.sqrt(var + p["eps"])).reshape(X.shape)
    return xhat * gamma[:, None, None] + beta[:, None, None]


def _batchnorm(p, X, gamma, beta):
    import jax.numpy as jnp
    mu = X.mean(axis=(0, 2, 3), keepdims=True)
    var = ((X - mu) ** 2).mean(axis=(0, 2, 3), keepdims=True)
    return (X - mu) / jnp.sqrt(var + p["eps"]) * gamma[:, None, None] + beta[:, None, None]


def _xent(p, logits, labels):
    import jax
    import jax.numpy as jnp
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, labels[:, None], axis=1).mean()


def _lstm(p, x, h, c, Wx, Wh, b):
    import jax
    import jax.numpy as jnp
    i, f, g, o = jnp.split(x @ Wx + h @ Wh + b, 4, axis=1)
    c2 = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    return jax.nn.sigmoid(o) * jnp.tanh(c2)


def _gru(p, x, Wx, Wh, b):
    import jax
    import jax.numpy as jnp
    from jax import lax
    hd = p["Hd"]

    def step(h, xp_t):
        hr, hz, hn = jnp.split(h @ Wh, 3, axis=1)
        xr, xz, xn = jnp.split(xp_t, 3, axis=1)
        r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
        h = (1 - z) * jnp.tanh(xn + r * hn) + z * h
        return h, h
    _, hs = lax.scan(step, jnp.zeros((x.shape[1], hd), x.dtype), x @ Wx + b)
    return hs


def _rnn(p, x, Wx, Wh, b):
    import jax.numpy as jnp
    from jax import lax

    def step(h, xp_t):
        h = jnp.tanh(xp_t + h @ Wh)
        return h, h
    _, hs = lax.scan(step, jnp.zeros((x.shape[1], Wh.shape[0]), x.dtype), x @ Wx + b)
    return hs


def _cumsum(p, X):
    import jax.numpy as jnp
    return jnp.cumsum(X, axis=-1)


def _upsample(p, X):
    import jax
    n, c, h, w = X.shape
    return jax.image.resize(X, (n, c, 2 * h, 2 * w), method="bilinear")


def _pdist(p, A, Bm):
    return ((A[:, None, :] - Bm[None, :, :]) ** 2).sum(-1)


def _seqmax(p, X):
    return X.max(axis=-1)


def _gelu(p, X):
    import jax
    return jax.nn.gelu(X, approximate=True)


def _l2norm(p, X):
    import jax.numpy as jnp
    return X / jnp.maximum(jnp.linalg.norm(X, axis=1, keepdims=True), p["eps"])

# }}}


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

    # The inputs not differentiated (indices, labels) are arguments of the jitted
    # functions, as a user's training step passes each batch's: closed over, they
    # would be compile-time constants baked into the executable (case 13's gather
    # by constant indices: 37 us, by argument indices: 68 us, as torch and te take them).
    def of_wrt(fixed, *xs):
        return f(p, **fixed, **dict(zip(case.wrt, xs)))

    fwd_jit = jax.jit(of_wrt)
    vjp_jit = jax.jit(lambda xs, fixed, h:
                      jax.vjp(lambda *ws: of_wrt(fixed, *ws), *xs)[1](h))
    prep = Prepared(fwd=lambda: fwd_jit(fixed, *wrt).block_until_ready(), vjp=None,
                    to_numpy=lambda a: np.asarray(a))
    _, prep.fwd_build_s = timed(prep.fwd)  # trace + compile + first call
    try:
        _, prep.build_s = timed(lambda: jax.block_until_ready(vjp_jit(wrt, fixed, head)))
        prep.vjp = lambda: jax.block_until_ready(vjp_jit(wrt, fixed, head))
    except Exception as exc:
        prep.vjp_status = f"unsupported ({first_line(exc)})"
    return prep
