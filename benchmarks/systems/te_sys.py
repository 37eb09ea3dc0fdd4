"""The 14 cases in tensorexpr, written as a user would write them.

``define(case, p)`` gives the input placeholders (in the case's order) and the
output tensor; ``build_forward`` and ``build_vjp`` compile them (the runner and
the cached-rebuild subprocess share these, so both build exactly the same
programs). The VJP program is ``te.differentiate(Y, inputs=wrt, head=H)`` built
with every forward input and ``H`` as inputs.

>>> from benchmarks.cases import CASES
>>> ph, Y = define(CASES[0], CASES[0].params(quick=True))
>>> [t.name for t in ph], Y.shape
(['A', 'B'], (64, 64))
"""
from __future__ import annotations

import time
from typing import List, Tuple

import tensorexpr as te
from benchmarks.cases import conv_out
from benchmarks.systems import Prepared, first_line, forward_table, timed

LABEL = "tensorexpr"
VJP_INCLUDES = ("the built gradient program called with the inputs and H; forward "
                "intermediates the gradient reads are recomputed inside it")
NO_DIFFERENTIATE = "unsupported (te.differentiate not available yet)"


def missing():
    """Nothing to install: this system always runs (None)."""
    return None


# {{{ the cases


def _matmul(p, A, B):
    k = te.reduce_axis((0, p["K"]), name="k")
    return te.compute((p["M"], p["N"]), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")


def _conv2d(p, X, W):
    s, pad, dil = p["stride"], p["pad"], p["dil"]
    H, Wd = p["H"], p["W"]
    oh = conv_out(H, p["KH"], s, pad, dil)
    ow = conv_out(Wd, p["KW"], s, pad, dil)
    c = te.reduce_axis((0, p["C"]), name="c")
    ky = te.reduce_axis((0, p["KH"]), name="ky")
    kx = te.reduce_axis((0, p["KW"]), name="kx")

    def body(n, f, y, x):
        iy, ix = y * s + ky * dil - pad, x * s + kx * dil - pad
        term = X[n, c, iy, ix] * W[f, c, ky, kx]
        if pad:  # zero padding: the read is only evaluated inside the image
            term = te.select((iy >= 0) & (iy < H) & (ix >= 0) & (ix < Wd), term, 0.0)
        return te.sum(term, axis=[c, ky, kx])
    return te.compute((p["N"], p["F"], oh, ow), body, name="Y")


def _maxpool(p, X):
    k = p["k"]
    ry, rx = te.reduce_axis((0, k), name="ry"), te.reduce_axis((0, k), name="rx")
    return te.compute((p["N"], p["C"], p["H"] // k, p["W"] // k),
                      lambda n, c, y, x: te.max(X[n, c, y * k + ry, x * k + rx], axis=[ry, rx]),
                      name="Y")


def _avgpool(p, X):
    k = p["k"]
    ry, rx = te.reduce_axis((0, k), name="ry"), te.reduce_axis((0, k), name="rx")
    return te.compute((p["N"], p["C"], p["H"] - k + 1, p["W"] - k + 1),
                      lambda n, c, y, x: te.sum(X[n, c, y + ry, x + rx], axis=[ry, rx]) / (k * k),
                      name="Y")


def _flatten(p, X):
    H, W = p["H"], p["W"]
    return te.compute((p["N"], p["C"] * H * W),
                      lambda n, k: X[n, k // (H * W), (k // W) % H, k % W], name="Y")


def _softmax(p, X):
    B, D = p["B"], p["D"]
    k1, k2 = te.reduce_axis((0, D), name="k1"), te.reduce_axis((0, D), name="k2")
    m = te.compute((B,), lambda i: te.max(X[i, k1], axis=k1), name="rowmax")
    e = te.compute((B, D), lambda i, j: te.exp(X[i, j] - m[i]), name="e")
    s = te.compute((B,), lambda i: te.sum(e[i, k2], axis=k2), name="rowsum")
    return te.compute((B, D), lambda i, j: e[i, j] / s[i], name="Y")


def _layernorm(p, X, gamma, beta):
    B, D, eps = p["B"], p["D"], p["eps"]
    k1, k2 = te.reduce_axis((0, D), name="k1"), te.reduce_axis((0, D), name="k2")
    mean = te.compute((B,), lambda i: te.sum(X[i, k1], axis=k1) / D, name="mean")
    var = te.compute((B,), lambda i: te.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]),
                                            axis=k2) / D, name="var")
    return te.compute((B, D), lambda i, j: (X[i, j] - mean[i]) / te.sqrt(var[i] + eps)
                      * gamma[j] + beta[j], name="Y")


def _bias_transpose(p, X, b):
    return te.compute((p["N"], p["M"]), lambda j, i: X[i, j] + b[j], name="Y")


def _ewma(p, d):
    T, R = p["T"], p["R"]
    e = te.recurrence((T, R), lambda e, t, r: te.select(
        t == 0, d[r, 0], 0.5 * d[r, t] + 0.5 * e[t - 1, r]), name="e")
    return te.compute((R,), lambda r: e[T - 1, r], name="Y")


def _mlp(p, X, W1, b1, W2, b2):
    k1 = te.reduce_axis((0, p["I"]), name="k1")
    k2 = te.reduce_axis((0, p["Hd"]), name="k2")
    h = te.compute((p["B"], p["Hd"]),
                   lambda i, j: te.tanh(te.sum(X[i, k1] * W1[k1, j], axis=k1) + b1[j]), name="h")
    return te.compute((p["B"], p["O"]),
                      lambda i, o: te.sum(h[i, k2] * W2[k2, o], axis=k2) + b2[o], name="Y")


def _embedding(p, E, idx):
    return te.compute((p["I"], p["D"]), lambda i, d: E[idx[i], d], name="Y")


def _blur(p, X):
    n = p["n"]
    return te.compute((n,), lambda i: (X[te.maximum(i - 1, 0)] + X[i]
                                       + X[te.minimum(i + 1, n - 1)]) / 3.0, name="Y")


FORWARD = forward_table(globals())

# }}}


def define(case, p) -> Tuple[List[te.Tensor], te.Tensor]:
    """The placeholders of ``case`` (in its argument order) and its output tensor."""
    ph = [te.placeholder(a.shape(p), dtype=a.dtype, name=a.name) for a in case.args]
    return ph, FORWARD[case.key](p, *ph)


def build_forward(case, p, backend: str):
    """``(function, seconds)``: the forward program compiled (no call)."""
    ph, Y = define(case, p)
    t0 = time.perf_counter()
    f = te.build(Y, inputs=ph, backend=backend)
    return f, time.perf_counter() - t0


def build_vjp(case, p, backend: str):
    """``(function, seconds)``: differentiate + compile the VJP program (no call).

    Raises whatever ``te.differentiate`` or ``te.build`` raise.
    """
    ph, Y = define(case, p)
    H = te.placeholder(Y.shape, dtype=Y.dtype, name="H")
    by_name = {t.name: t for t in ph}
    t0 = time.perf_counter()
    grads = te.differentiate(Y, inputs=[by_name[n] for n in case.wrt], head=H)
    grads = [grads] if isinstance(grads, te.Tensor) else list(grads)
    f = te.build(grads, inputs=ph + [H], backend=backend)
    return f, time.perf_counter() - t0


def prepare(case, p, inputs, H, backend: str = "c") -> Prepared:
    """Build (and call once) the forward and, if ``te.differentiate`` exists at call
    time, the VJP program; failures become statuses.

    >>> from benchmarks.cases import CASES
    >>> case = CASES[6]
    >>> p = case.params(quick=True)
    >>> prep = prepare(case, p, case.inputs(p), None, backend="numpy")
    >>> prep.fwd_status, prep.forward_output().shape
    ('ok', (2, 512))
    """
    args = [inputs[a.name] for a in case.args]
    prep = Prepared(fwd=None, vjp=None)
    try:
        f, seconds = build_forward(case, p, backend)
        _, first = timed(lambda: f(*args))
        prep.fwd, prep.fwd_build_s = (lambda: f(*args)), seconds + first
    except Exception as exc:  # a failure of ours is reported as a status, not a crash
        prep.fwd_status = f"unsupported ({first_line(exc)})"
    if not hasattr(te, "differentiate"):
        prep.vjp_status = NO_DIFFERENTIATE
        return prep
    try:
        g, seconds = build_vjp(case, p, backend)
        _, first = timed(lambda: g(*args, H))
        prep.vjp, prep.build_s = (lambda: g(*args, H)), seconds + first
    except Exception as exc:
        prep.vjp_status = f"unsupported ({first_line(exc)})"
    return prep

