"""The benchmark cases in tensorexpr, written as a user would write them.

``define(case, p)`` gives the input placeholders (in the case's order) and the
output tensor; ``build_forward`` and ``build_vjp`` compile them (the runner and
the cached-rebuild subprocess share these, so both build exactly the same
programs). The VJP program is ``te.differentiate(Y, inputs=wrt, head=H)`` built
with every forward input, ``H`` and the forward values ``te.saved_values`` picks
(softmax's exponentials and row sums, a layer norm's mean and variance, an MLP's
hidden layer, maxpool's output) as inputs: like PyTorch's autograd and the
hand-written numpy backward, it is timed given what the forward saved. Those
values come from a second forward program, ``te.build([Y] + saved, inputs=ph)``,
run once when the case is prepared.

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
from codegen import compiler

LABEL = "tensorexpr"
VJP_INCLUDES = ("the built gradient program called with the inputs, H and the forward values "
                "te.saved_values picks (reductions, exp/tanh/... tensors the gradient reads; "
                "computed once beforehand by a forward that also returns them), i.e. the "
                "backward alone given what the forward saved; cheap elementwise forward values "
                "are recomputed inside it. The gradient recomputing every forward value "
                "instead is vjp_recompute_ms in the JSON (cases that save something); build_s "
                "also covers compiling and calling once the forward that returns the values")
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
    # The row maximum only shifts the exponentials for range: the softmax does not change
    # with it, so its exact gradient through the maximum is zero. Stopping the gradient there
    # (override None, as jax.nn.softmax's stop_gradient) saves the maximum's tie count and
    # the pass over X it needs.
    B, D = p["B"], p["D"]
    k1, k2 = te.reduce_axis((0, D), name="k1"), te.reduce_axis((0, D), name="k2")
    m = te.compute((B,), lambda i: te.max(X[i, k1], axis=k1), name="rowmax")
    e = te.compute((B, D), lambda i, j: te.exp(X[i, j] - m[i]), name="e")
    s = te.compute((B,), lambda i: te.sum(e[i, k2], axis=k2), name="rowsum")
    return te.compute((B, D), lambda i, j: e[i, j] / s[i], name="Y"), {m: None}


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


# {{{ tier 2


def _bmm(p, A, Bm):
    k = te.reduce_axis((0, p["K"]), name="k")
    return te.compute((p["B"], p["M"], p["N"]),
                      lambda b, i, j: te.sum(A[b, i, k] * Bm[b, k, j], axis=k), name="Y")


def _attention(p, Q, K, V):
    BH, L, d = p["BH"], p["L"], p["d"]
    kd = te.reduce_axis((0, d), name="kd")
    k1, k2, k3 = (te.reduce_axis((0, L), name=n) for n in ("k1", "k2", "k3"))
    scale = 1.0 / d ** 0.5
    S = te.compute((BH, L, L), lambda b, i, j: te.sum(Q[b, i, kd] * K[b, j, kd], axis=kd)
                   * scale, name="S")
    m = te.compute((BH, L), lambda b, i: te.max(S[b, i, k1], axis=k1), name="rowmax")
    # the shift by the row maximum is for range only: no gradient through it (README)
    e = te.compute((BH, L, L), lambda b, i, j: te.exp(S[b, i, j] - te.stop_gradient(m[b, i])),
                   name="e")
    s = te.compute((BH, L), lambda b, i: te.sum(e[b, i, k2], axis=k2), name="rowsum")
    P = te.compute((BH, L, L), lambda b, i, j: e[b, i, j] / s[b, i], name="P")
    return te.compute((BH, L, d), lambda b, i, c: te.sum(P[b, i, k3] * V[b, k3, c], axis=k3),
                      name="Y")


def _depthwise(p, X, W):
    H, Wd = p["H"], p["W"]
    ky, kx = te.reduce_axis((0, 3), name="ky"), te.reduce_axis((0, 3), name="kx")

    def body(n, c, y, x):
        iy, ix = y + ky - 1, x + kx - 1
        inside = (iy >= 0) & (iy < H) & (ix >= 0) & (ix < Wd)
        return te.sum(te.select(inside, X[n, c, iy, ix] * W[c, 0, ky, kx], 0.0), axis=[ky, kx])
    return te.compute((p["N"], p["C"], H, Wd), body, name="Y")


def _conv1x1(p, X, W):
    c = te.reduce_axis((0, p["C"]), name="c")
    return te.compute((p["N"], p["F"], p["H"], p["W"]),
                      lambda n, f, y, x: te.sum(X[n, c, y, x] * W[f, c, 0, 0], axis=c), name="Y")


def _conv1d(p, X, W):
    L, pad = p["L"], p["pad"]
    c, k = te.reduce_axis((0, p["C"]), name="c"), te.reduce_axis((0, p["K"]), name="k")

    def body(n, f, t):
        i = t + k - pad
        return te.sum(te.select((i >= 0) & (i < L), X[n, c, i] * W[f, c, k], 0.0), axis=[c, k])
    return te.compute((p["N"], p["F"], L), body, name="Y")


def _conv_transpose(p, X, W):
    # the gather form: output pixel (oy, ox) takes input pixel ((oy + pad - ky) / s, ...)
    # for every tap whose offset divides by the stride and lands inside the input
    s, pad, K, H, Wd = p["stride"], p["pad"], p["K"], p["H"], p["W"]
    oh, ow = (H - 1) * s - 2 * pad + K, (Wd - 1) * s - 2 * pad + K
    c = te.reduce_axis((0, p["C"]), name="c")
    ky, kx = te.reduce_axis((0, K), name="ky"), te.reduce_axis((0, K), name="kx")

    def body(n, f, y, x):
        ty, tx = y + pad - ky, x + pad - kx
        hit = ((ty % s == 0) & (tx % s == 0) & (ty >= 0) & (ty < H * s)
               & (tx >= 0) & (tx < Wd * s))
        return te.sum(X[n, c, ty // s, tx // s] * W[c, f, ky, kx], axis=[c, ky, kx], where=hit)
    return te.compute((p["N"], p["F"], oh, ow), body, name="Y")


def _groupnorm(p, X, gamma, beta):
    N, C, H, W, G, eps = p["N"], p["C"], p["H"], p["W"], p["G"], p["eps"]
    cg, count = C // G, C // G * H * W
    axes = [[te.reduce_axis((0, n), name=f"{a}{i}") for a, n in (("c", cg), ("y", H), ("x", W))]
            for i in (1, 2)]
    (c1, y1, x1), (c2, y2, x2) = axes
    mean = te.compute((N, G), lambda n, g: te.sum(X[n, g * cg + c1, y1, x1], axis=[c1, y1, x1])
                      / count, name="mean")
    var = te.compute((N, G), lambda n, g: te.sum(
        (X[n, g * cg + c2, y2, x2] - mean[n, g]) * (X[n, g * cg + c2, y2, x2] - mean[n, g]),
        axis=[c2, y2, x2]) / count, name="var")
    return te.compute((N, C, H, W), lambda n, c, y, x: (X[n, c, y, x] - mean[n, c // cg])
                      / te.sqrt(var[n, c // cg] + eps) * gamma[c] + beta[c], name="Y")


def _batchnorm(p, X, gamma, beta):
    N, C, H, W, eps = p["N"], p["C"], p["H"], p["W"], p["eps"]
    count = N * H * W
    (n1, y1, x1), (n2, y2, x2) = [[te.reduce_axis((0, size), name=f"{a}{i}")
                                   for a, size in (("n", N), ("y", H), ("x", W))] for i in (1, 2)]
    mean = te.compute((C,), lambda c: te.sum(X[n1, c, y1, x1], axis=[n1, y1, x1]) / count,
                      name="mean")
    var = te.compute((C,), lambda c: te.sum((X[n2, c, y2, x2] - mean[c])
                                            * (X[n2, c, y2, x2] - mean[c]),
                                            axis=[n2, y2, x2]) / count, name="var")
    return te.compute((N, C, H, W), lambda n, c, y, x: (X[n, c, y, x] - mean[c])
                      / te.sqrt(var[c] + eps) * gamma[c] + beta[c], name="Y")


def _xent(p, logits, labels):
    B, V = p["B"], p["V"]
    k1, k2, b = te.reduce_axis((0, V), name="k1"), te.reduce_axis((0, V), name="k2"), \
        te.reduce_axis((0, B), name="b")
    m = te.compute((B,), lambda i: te.max(logits[i, k1], axis=k1), name="rowmax")
    lse = te.compute((B,), lambda i: te.log(te.sum(te.exp(
        logits[i, k2] - te.stop_gradient(m[i])), axis=k2)) + te.stop_gradient(m[i]), name="lse")
    return te.compute((), lambda: te.sum(lse[b] - logits[b, labels[b]], axis=b) / B,
                      name="Y")


def _lstm(p, x, h, c, Wx, Wh, b):
    Hd = p["Hd"]
    kx, kh = te.reduce_axis((0, p["I"]), name="kx"), te.reduce_axis((0, Hd), name="kh")
    gates = te.compute((p["B"], 4 * Hd), lambda i, j: te.sum(x[i, kx] * Wx[kx, j], axis=kx)
                       + te.sum(h[i, kh] * Wh[kh, j], axis=kh) + b[j], name="gates")

    def cell(i, j):  # gates in torch's order: input, forget, cell, output
        c2 = (te.sigmoid(gates[i, Hd + j]) * c[i, j]
              + te.sigmoid(gates[i, j]) * te.tanh(gates[i, 2 * Hd + j]))
        return te.sigmoid(gates[i, 3 * Hd + j]) * te.tanh(c2)
    return te.compute((p["B"], Hd), cell, name="Y")


def _gru(p, x, Wx, Wh, b):
    T, B, Hd = p["T"], p["B"], p["Hd"]
    ki = te.reduce_axis((0, p["I"]), name="ki")
    xp = te.compute((T, B, 3 * Hd), lambda t, i, j: te.sum(x[t, i, ki] * Wx[ki, j], axis=ki)
                    + b[j], name="xp")
    kr, kz, kn = (te.reduce_axis((0, Hd), name=n) for n in ("kr", "kz", "kn"))

    def step(h, t, i, j):
        def hw(k, gate):  # (h[t-1] @ Wh)[i, gate * Hd + j]; h[-1] = 0
            return te.select(t == 0, 0.0, te.sum(h[t - 1, i, k] * Wh[k, gate * Hd + j], axis=k))
        r = te.sigmoid(xp[t, i, j] + hw(kr, 0))
        z = te.sigmoid(xp[t, i, Hd + j] + hw(kz, 1))
        n = te.tanh(xp[t, i, 2 * Hd + j] + r * hw(kn, 2))
        return (1.0 - z) * n + z * te.select(t == 0, 0.0, h[t - 1, i, j])
    return te.recurrence((T, B, Hd), step, name="Y")


def _rnn(p, x, Wx, Wh, b):
    T, B, Hd = p["T"], p["B"], p["Hd"]
    ki, kh = te.reduce_axis((0, p["I"]), name="ki"), te.reduce_axis((0, Hd), name="kh")
    xp = te.compute((T, B, Hd), lambda t, i, j: te.sum(x[t, i, ki] * Wx[ki, j], axis=ki)
                    + b[j], name="xp")
    return te.recurrence((T, B, Hd), lambda h, t, i, j: te.tanh(xp[t, i, j] + te.select(
        t == 0, 0.0, te.sum(h[t - 1, i, kh] * Wh[kh, j], axis=kh))), name="Y")


def _cumsum(p, X):
    return te.recurrence((p["R"], p["N"]), lambda c, r, t: te.select(
        t == 0, X[r, 0], c[r, t - 1] + X[r, t]), name="Y")


def _upsample(p, X):
    # half-pixel centres (align_corners=False): output row o lies between input rows
    # (o - 1) // 2 and (o + 1) // 2 (clamped), 3/4 of the way to the nearer one
    H, W = p["H"], p["W"]

    def lerp(o, size):
        lo, hi = te.maximum((o - 1) // 2, 0), te.minimum((o + 1) // 2, size - 1)
        return lo, hi, te.select(o % 2 == 0, 0.75, 0.25)

    def body(n, c, y, x):
        y0, y1, wy = lerp(y, H)
        x0, x1, wx = lerp(x, W)
        top = (1.0 - wx) * X[n, c, y0, x0] + wx * X[n, c, y0, x1]
        bottom = (1.0 - wx) * X[n, c, y1, x0] + wx * X[n, c, y1, x1]
        return (1.0 - wy) * top + wy * bottom
    return te.compute((p["N"], p["C"], 2 * H, 2 * W), body, name="Y")


def _pdist(p, A, Bm):
    k = te.reduce_axis((0, p["D"]), name="k")
    return te.compute((p["N"], p["M"]), lambda i, j: te.sum(
        (A[i, k] - Bm[j, k]) * (A[i, k] - Bm[j, k]), axis=k), name="Y")


def _seqmax(p, X):
    t = te.reduce_axis((0, p["L"]), name="t")
    return te.compute((p["N"], p["C"]), lambda n, c: te.max(X[n, c, t], axis=t), name="Y")


def _gelu(p, X):
    c = (2.0 / 3.141592653589793) ** 0.5

    def body(i, j):
        v = X[i, j]
        return 0.5 * v * (1.0 + te.tanh(c * (v + 0.044715 * v * v * v)))
    return te.compute((p["B"], p["D"]), body, name="Y")


def _l2norm(p, X):
    k = te.reduce_axis((0, p["D"]), name="k")
    norm = te.compute((p["B"],), lambda i: te.sqrt(te.sum(X[i, k] * X[i, k], axis=k)),
                      name="norm")
    return te.compute((p["B"], p["D"]), lambda i, j: X[i, j] / te.maximum(norm[i], p["eps"]),
                      name="Y")

# }}}


FORWARD = forward_table(globals())

# }}}


def define(case, p) -> Tuple[List[te.Tensor], te.Tensor]:
    """The placeholders of ``case`` (in its argument order) and its output tensor."""
    ph, Y, _ = define_with_override(case, p)
    return ph, Y


def define_with_override(case, p) -> Tuple[List[te.Tensor], te.Tensor, dict]:
    """``define`` and the ``override`` the case's gradient is taken with (a case
    function returns ``Y`` or ``(Y, override)``; ``{}`` when it has none).

    >>> from benchmarks.cases import CASES
    >>> softmax = next(c for c in CASES if c.key == "softmax")
    >>> [t.name for t in define_with_override(softmax, softmax.params(quick=True))[2]]
    ['rowmax']
    """
    ph = [te.placeholder(a.shape(p), dtype=a.dtype, name=a.name) for a in case.args]
    out = FORWARD[case.key](p, *ph)
    Y, override = out if isinstance(out, tuple) else (out, {})
    return ph, Y, override


def build_forward(case, p, backend: str):
    """``(function, seconds)``: the forward program compiled (no call)."""
    ph, Y = define(case, p)
    t0 = time.perf_counter()
    f = te.build(Y, inputs=ph, backend=backend)
    return f, time.perf_counter() - t0


def build_vjp(case, p, backend: str):
    """``(vjp, save, seconds)``: differentiate, pick the values to save
    (``te.saved_values``) and compile the forward that also returns them
    (``save``; None when the gradient needs none) and the VJP program given them
    (no call). ``vjp`` takes the forward's inputs, ``H``, then ``save``'s outputs
    after the first.

    Raises whatever ``te.differentiate`` or ``te.build`` raise.
    """
    ph, Y, override = define_with_override(case, p)
    H = te.placeholder(Y.shape, dtype=Y.dtype, name="H")
    t0 = time.perf_counter()
    grads = gradients(case, ph, Y, H, override)
    saved = te.saved_values(grads, Y)
    # the saving forward compiles on a thread while the gradient is lowered (and both
    # compiles share the two cores); the first calls wait for them (timed with the build)
    save = te.build([Y] + saved, inputs=ph, backend=backend, wait=False) if saved else None
    f = te.build(grads, inputs=ph + [H] + saved, backend=backend, wait=False)
    return f, save, time.perf_counter() - t0


def build_vjp_recompute(case, p, backend: str):
    """The VJP program that recomputes every forward value it reads, from the inputs
    and ``H`` alone (for the ``vjp_recompute_ms`` figure)."""
    ph, Y, override = define_with_override(case, p)
    H = te.placeholder(Y.shape, dtype=Y.dtype, name="H")
    return te.build(gradients(case, ph, Y, H, override), inputs=ph + [H], backend=backend)


def gradients(case, ph, Y, H, override) -> List[te.Tensor]:
    """The gradients of ``Y`` (head ``H``) with respect to the case's ``wrt`` inputs.

    >>> from benchmarks.cases import by_id
    >>> case = by_id(1)
    >>> ph, Y, override = define_with_override(case, case.params(quick=True))
    >>> H = te.placeholder(Y.shape, name="H")
    >>> [g.shape for g in gradients(case, ph, Y, H, override)]
    [(64, 128), (128, 64)]
    """
    by_name = {t.name: t for t in ph}
    grads = te.differentiate(Y, inputs=[by_name[n] for n in case.wrt], head=H, override=override)
    return [grads] if isinstance(grads, te.Tensor) else list(grads)


def prepare(case, p, inputs, H, backend: str = "c") -> Prepared:
    """Build (and call once) the forward and, if ``te.differentiate`` exists at call
    time, the VJP program given the saved forward values; failures become statuses.

    ``build_s`` covers differentiating, both programs' compiles, one call of the
    saving forward and the first VJP call. ``vjp_recompute`` (set when something is
    saved) calls the gradient that recomputes the saved values instead; it is built
    on its first call, so preparing never compiles it.

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
        cc = compiler.stats["compile_s"]
        f, seconds = build_forward(case, p, backend)
        prep.fwd_codegen_s = seconds - (compiler.stats["compile_s"] - cc)
        _, first = timed(lambda: f(*args))
        prep.fwd, prep.fwd_build_s = (lambda: f(*args)), seconds + first
    except Exception as exc:  # a failure of ours is reported as a status, not a crash
        prep.fwd_status = f"unsupported ({first_line(exc)})"
    if not hasattr(te, "differentiate"):
        prep.vjp_status = NO_DIFFERENTIATE
        return prep
    try:
        g, save, seconds = build_vjp(case, p, backend)
        prep.codegen_s = seconds  # the compiles run on threads: nothing above waited for one

        def first_call():
            vals = save(*args)[1:] if save is not None else ()
            g(*args, H, *vals)
            return vals
        saved, first = timed(first_call)
        prep.vjp, prep.build_s = (lambda: g(*args, H, *saved)), seconds + first
        if save is not None:
            prep.vjp_recompute = _lazy(lambda: build_vjp_recompute(case, p, backend),
                                       lambda r: r(*args, H))
    except Exception as exc:
        prep.vjp_status = f"unsupported ({first_line(exc)})"
    return prep


def _lazy(make, call):
    """A function that builds its program on the first call (``make``), then runs it."""
    built = []

    def run():
        if not built:
            built.append(make())
        return call(built[0])
    return run
