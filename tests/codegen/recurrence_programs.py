"""Recurrent programs the checkpoint tests share: tanh RNN and GRU layers (one, or
stacked), their gradients through a head, and the check that a checkpointed build is
its full tape bit for bit.

>>> ins, grads = rnn(5, 2, 3, 2)
>>> [p.name for p in ins], [g.shape for g in grads]
(['x', 'W'], [(5, 2, 3), (3, 3)])
"""
from __future__ import annotations

import re

import numpy as np

import tensorexpr as te


def with_head(h, ins, head):
    """``(inputs, gradients of ins)`` through the recurrence ``h`` (steps, rows, units):
    of ``sum(h[T - 1] ** 2)`` (``head="last"``) or with a head ``Hd`` over every step
    (``head="every"``: every step's adjoint reads it, an input of the gradient)."""
    T, B, H = h.shape
    if head == "every":
        Hd = te.placeholder(h.shape, h.dtype, "Hd")
        return ins + [Hd], list(te.differentiate(h, ins, head=Hd))
    r1, r2 = te.reduce_axis(B), te.reduce_axis(H)
    L = te.compute((), lambda: te.sum(h[T - 1, r1, r2] * h[T - 1, r1, r2], axis=[r1, r2]),
                   name="L")
    return ins, list(te.differentiate(L, ins))


def tanh_layer(x, W, k, name):
    """``name[t] = tanh(x[t] + name[t - 1] @ W)``: a sum over the previous step."""
    T, B, H = x.shape
    kk = te.reduce_axis(H, "k")
    return te.recurrence((T, B, H), lambda h, t, b, j: te.tanh(x[t, b, j] + te.select(
        t == 0, 0.0, te.sum(h[t - 1, b, kk] * W[kk, j], axis=kk))), name=name, dtype=x.dtype,
        checkpoints=k)


def rnn(T, B, H, k, dtype="float32", head="last"):
    """A tanh RNN's gradients w.r.t. its inputs and its weights (a sum over the steps)."""
    x = te.placeholder((T, B, H), dtype, "x")
    W = te.placeholder((H, H), dtype, "W")
    return with_head(tanh_layer(x, W, k, "h"), [x, W], head)


def stacked(T, B, H, k, head="last"):
    """Two tanh layers, the second reading the first at every step."""
    x = te.placeholder((T, B, H), "float32", "x")
    W, V = (te.placeholder((H, H), "float32", n) for n in ("W", "V"))
    h = tanh_layer(x, W, k, "h")
    return with_head(tanh_layer(h, V, k, "g"), [x, W, V], head)


def random_arrays(ins, seed, shapes=None):
    # inputs in [-1, 1), square weights scaled by 1 / sqrt(H): tanh stays off saturation;
    # ``shapes``: name -> shape where a placeholder's is symbolic
    rng = np.random.default_rng(seed)
    out = []
    for p in ins:
        shape = tuple((shapes or {}).get(p.name, p.shape))
        a = (rng.standard_normal(shape) / np.sqrt(shape[0]) if len(shape) == 2
             else rng.uniform(-1.0, 1.0, shape))
        out.append(a.astype(p.dtype))
    return out


def agrees_with_its_full_tape(ins, grads, mode, seed=0, shapes=None):
    """The build of ``grads`` with ``ScheduleOptions(checkpoint=mode)``, after checking it
    bit-identical to the full tape of the same program and close to the numpy backend
    (each build's first call: no buffer of an earlier call can hide a missing value)."""
    arrays = random_arrays(ins, seed, shapes)
    ck = te.build(grads, inputs=ins, options=te.ScheduleOptions(checkpoint=mode))
    full = te.build(grads, inputs=ins, options=te.ScheduleOptions(checkpoint=False))
    ref = te.build(grads, inputs=ins, backend="numpy")
    got, want, r = (list(f(*arrays)) if len(grads) > 1 else [f(*arrays)]
                    for f in (ck, full, ref))
    for a, b, c in zip(got, want, r):
        assert np.array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-5)
    return ck


# T not a multiple of k, k = 1, k >= T (nothing recomputed: a ring of every step), T = 1,
# and T = k * 2 rows of a checkpoint (the ring of every step that revolve's memory equals)
STEPS = [(13, 3), (7, 1), (4, 9), (1, 1), (6, 2)]


def step_buffers(ins, grads, mode, T):
    """The shapes of the buffers with an axis of ``T`` of the gradient program ``grads``
    of ``ins`` built with ``Options(checkpoint=mode)`` (checked checkpointed): no input,
    no output, no input projection (``x @ W``, read by the steps: computed for all of them
    first, as JAX and PyTorch do).

    >>> ins, grads = rnn(40, 2, 3, 4)
    >>> step_buffers(ins, grads, True, 40)
    {}
    """
    from codegen.pipeline import generate
    from codegen.schedule import Options
    from codegen.signature import Signature
    sig = Signature(grads, ins)
    prog, src, _ = generate(sig, Options(checkpoint=mode))
    assert "checkpointed gradient" in src
    skip = {t.uid for t in list(ins) + list(grads)}
    return {t.name: sig.shape(t, {}) for t in prog.tensors
            if t.uid not in skip and T in sig.shape(t, {})
            and not all(isinstance(p, te.ir.Placeholder) for p in te.ir.tensor_inputs(t))}


def checkpointed(T, k, mode, ck=None) -> bool:
    """Is a recurrence of ``T`` steps with ``checkpoints=k`` checkpointed in ``mode``? With
    ``ck``, its build: not where its plan would keep no fewer bytes than the full tape
    (:func:`larger_plans`), which only few steps per checkpoint allow (``T <= 2 k + 1``:
    checked).

    >>> checkpointed(13, 3, True), checkpointed(7, 1, "segments"), checkpointed(1, 1, True)
    (True, False, False)
    """
    # one step has nothing to checkpoint; one segment (k = 1) would be the whole tape
    if T <= 1 or (mode == "segments" and k == 1):
        return False
    if ck is not None and larger_plans(ck):
        assert T <= 2 * k + 1, (T, k, ck.schedule.full_tape)
        return False
    return True


def larger_plans(ck) -> list:
    """``(plan bytes, full tape bytes)`` of each plan the schedule of the build ``ck``
    refused for keeping no fewer bytes than the full tape (each checked so).

    >>> class Build: schedule = type("S", (), {"full_tape": ("h (checkpoints=9: its plan "
    ...     "(h: revolve, 4 checkpoints x 2 rows) keeps no less than the full tape: 1,080 "
    ...     "bytes in 4 buffers (15 rows), the full tape 576 bytes (8 rows))",)})
    >>> larger_plans(Build())
    [(1080, 576)]
    """
    out = []
    for line in ck.schedule.full_tape:
        m = re.search(r"keeps no less than the full tape: ([\d,]+) bytes .*the full tape "
                      r"([\d,]+) bytes", line)
        if m:
            plan, tape = (int(g.replace(",", "")) for g in m.groups())
            assert plan >= tape, line
            out.append((plan, tape))
    return out


def gru_layer(x, Ws, Us, k, name):
    """A GRU layer over ``x`` (steps, rows, units) with input weights ``Ws`` and recurrent
    ``Us`` (z, r, n): its input projections ``x[t] @ W*`` are sums in its body, which
    ``passes.hoist`` moves into tensors of their own (``name_sum``) read at step ``t``.

    >>> x = te.placeholder((4, 2, 3), "float32", "x")
    >>> W = [te.placeholder((3, 3), "float32", n) for n in ("Wz", "Wr", "Wn")]
    >>> gru_layer(x, W, W, 2, "g").checkpoints
    2
    """
    T, B, H = x.shape

    def proj(t, b, j, W):
        d = te.reduce_axis(x.shape[2], "d")
        return te.sum(x[t, b, d] * W[d, j], axis=d)

    def prev(h, t, b, j, U):
        kk = te.reduce_axis(H, "k")
        return te.select(t == 0, 0.0, te.sum(h[t - 1, b, kk] * U[kk, j], axis=kk))

    def fn(h, t, b, j):
        z = te.sigmoid(proj(t, b, j, Ws[0]) + prev(h, t, b, j, Us[0]))
        r = te.sigmoid(proj(t, b, j, Ws[1]) + prev(h, t, b, j, Us[1]))
        n = te.tanh(proj(t, b, j, Ws[2]) + r * prev(h, t, b, j, Us[2]))
        return (1.0 - z) * n + z * te.select(t == 0, 0.0, h[t - 1, b, j])
    return te.recurrence((T, B, H), fn, name=name, dtype=x.dtype, checkpoints=k)


def layers(kinds, T, B, H, k, head="last"):
    """``(inputs, gradients)`` of stacked layers over ``x[T, B, H]``, the first in
    ``kinds`` reading ``x``, each next one the previous one at every step (``"rnn"``:
    a tanh layer; ``"gru"``: :func:`gru_layer`), all with ``checkpoints=k``.

    >>> ins, grads = layers(("rnn", "gru"), 4, 2, 3, 2)
    >>> [p.name for p in ins]
    ['x', 'W1', 'Wz2', 'Wr2', 'Wn2', 'Uz2', 'Ur2', 'Un2']
    """
    x = te.placeholder((T, B, H), "float32", "x")
    ins, h = [x], x
    for n, kind in enumerate(kinds, 1):
        if kind == "rnn":
            W = te.placeholder((H, H), "float32", f"W{n}")
            ins.append(W)
            h = tanh_layer(h, W, k, f"h{n}")
            continue
        Ws = [te.placeholder((H, H), "float32", f"W{g}{n}") for g in "zrn"]
        Us = [te.placeholder((H, H), "float32", f"U{g}{n}") for g in "zrn"]
        ins += Ws + Us
        h = gru_layer(h, Ws, Us, k, f"h{n}")
    return with_head(h, ins, head)


def bidirectional(T, B, H, k, head="last", dtype="float32"):
    """A bidirectional tanh RNN: ``h`` over ``x``, ``g`` over ``x`` reversed in time
    (``g[t]`` reads ``x[T - 1 - t]``), the output ``y[t] = h[t] + g[T - 1 - t]``, under
    ``head``: as :func:`with_head` (``"last"``: ``sum(y[T - 1] ** 2)``, ``"every"``), or
    ``"concat"``: ``sum(c ** 2)`` of ``c[b] = concat(h[T - 1, b], g[T - 1, b])`` (each
    layer's last step, as users read them); ``"every+last"``: a head ``Hd`` over every
    step plus ``sum(y[T - 1] ** 2)``; ``"all"``: ``sum(y ** 2)`` over every step.

    >>> ins, grads = bidirectional(4, 2, 3, 2)
    >>> [p.name for p in ins]
    ['x', 'W', 'V']
    >>> [p.name for p in bidirectional(4, 2, 3, 2, "every+last")[0]]
    ['x', 'W', 'V', 'Hd']
    """
    x = te.placeholder((T, B, H), dtype, "x")
    W, V = (te.placeholder((H, H), dtype, n) for n in ("W", "V"))
    h = tanh_layer(x, W, k, "h")
    xr = te.compute((T, B, H), lambda t, b, j: x[T - 1 - t, b, j], name="xr")
    g = tanh_layer(xr, V, k, "g")
    y = te.compute((T, B, H), lambda t, b, j: h[t, b, j] + g[T - 1 - t, b, j], name="y")
    if head in ("last", "every"):
        return with_head(y, [x, W, V], head)
    ins = [x, W, V]
    r1, r2 = te.reduce_axis(B), te.reduce_axis(H)
    last = te.sum(y[T - 1, r1, r2] * y[T - 1, r1, r2], axis=[r1, r2])
    if head == "concat":
        c = te.compute((B, 2 * H), lambda b, j: te.select(j < H, h[T - 1, b, j],
                                                          g[T - 1, b, j - H]), name="c")
        r3 = te.reduce_axis(2 * H)
        L = te.compute((), lambda: te.sum(c[r1, r3] * c[r1, r3], axis=[r1, r3]), name="L")
    elif head == "every+last":
        Hd = te.placeholder((T, B, H), dtype, "Hd")
        ins.append(Hd)
        r0 = te.reduce_axis(T)
        L = te.compute((), lambda: te.sum(Hd[r0, r1, r2] * y[r0, r1, r2], axis=[r0, r1, r2])
                       + last, name="L")
    else:
        assert head == "all", head
        r0 = te.reduce_axis(T)
        L = te.compute((), lambda: te.sum(y[r0, r1, r2] * y[r0, r1, r2], axis=[r0, r1, r2]),
                       name="L")
    return ins, list(te.differentiate(L, [x, W, V]))


def lstm_layer(x, Ws, Us, k, name):
    """An LSTM layer over ``x`` (steps, rows, units), its state ``name[t, b, 2, H]``
    holding ``c`` (0) and ``h`` (1), as ``benchmarks.recurrence_cells`` keeps it; input
    weights ``Ws`` and recurrent ``Us`` of the gates i, f, o, g.

    >>> x = te.placeholder((4, 2, 3), "float32", "x")
    >>> W = [te.placeholder((3, 3), "float32", n) for n in ("Wi", "Wf", "Wo", "Wg")]
    >>> lstm_layer(x, W, W, 2, "s").shape
    (4, 2, 2, 3)
    """
    T, B, H = x.shape

    def proj(t, b, j, W):
        d = te.reduce_axis(H, "d")
        return te.sum(x[t, b, d] * W[d, j], axis=d)

    def prev(s, t, b, j, U):
        kk = te.reduce_axis(H, "k")
        return te.select(t == 0, 0.0, te.sum(s[t - 1, b, 1, kk] * U[kk, j], axis=kk))

    def fn(s, t, b, w, j):
        i, f, o = (te.sigmoid(proj(t, b, j, W) + prev(s, t, b, j, U))
                   for W, U in zip(Ws[:3], Us[:3]))
        g = te.tanh(proj(t, b, j, Ws[3]) + prev(s, t, b, j, Us[3]))
        c = f * te.select(t == 0, 0.0, s[t - 1, b, 0, j]) + i * g
        return te.select(w == 0, c, o * te.tanh(c))
    return te.recurrence((T, B, 2, H), fn, name=name, dtype=x.dtype, checkpoints=k)


def batch_first(cell, T, B, H, k, head="last", dtype="float64"):
    """``(inputs, gradients)`` of a ``cell`` (``"rnn"``, ``"gru"`` or ``"lstm"``, as
    ``benchmarks.recurrence_cells`` writes them) laid out batch first: ``x[b, t, j]``,
    the state ``h[b, t, j]`` (an LSTM's ``s[b, t, 2, j]``: ``c`` and ``h``), its steps
    along its second axis; ``head`` as :func:`with_head`, or ``"one"``: the loss of shape
    ``(1,)`` (Jacobian-shaped gradients, their adjoint's steps along its second axis).

    >>> ins, grads = batch_first("gru", 4, 2, 3, 2)
    >>> [p.name for p in ins][:2], grads[0].shape
    (['x', 'Wz'], (2, 4, 3))
    """
    gates = {"rnn": ("",), "gru": ("z", "r", "n"), "lstm": ("i", "f", "o", "g")}[cell]
    x = te.placeholder((B, T, H), dtype, "x")
    Ws = [te.placeholder((H, H), dtype, f"W{g}") for g in gates]
    Us = [te.placeholder((H, H), dtype, f"U{g}") for g in gates]
    ins = [x] + Ws + Us

    def proj(b, t, j, W):
        d = te.reduce_axis(H, "d")
        return te.sum(x[b, t, d] * W[d, j], axis=d)

    def prev(h, b, t, j, U, *part):
        kk = te.reduce_axis(H, "k")
        return te.select(t == 0, 0.0, te.sum(h[(b, t - 1) + part + (kk,)] * U[kk, j], axis=kk))

    if cell == "lstm":
        def fn(s, b, t, w, j):
            i, f, o = (te.sigmoid(proj(b, t, j, W) + prev(s, b, t, j, U, 1))
                       for W, U in zip(Ws[:3], Us[:3]))
            g = te.tanh(proj(b, t, j, Ws[3]) + prev(s, b, t, j, Us[3], 1))
            c = f * te.select(t == 0, 0.0, s[b, t - 1, 0, j]) + i * g
            return te.select(w == 0, c, o * te.tanh(c))
        s = te.recurrence((B, T, 2, H), fn, name="s", dtype=dtype, checkpoints=k)
        h = s  # (read at its h part: a tensor of it would be a forward row)
    elif cell == "gru":
        def fn(h, b, t, j):
            z = te.sigmoid(proj(b, t, j, Ws[0]) + prev(h, b, t, j, Us[0]))
            r = te.sigmoid(proj(b, t, j, Ws[1]) + prev(h, b, t, j, Us[1]))
            n = te.tanh(proj(b, t, j, Ws[2]) + r * prev(h, b, t, j, Us[2]))
            return (1.0 - z) * n + z * te.select(t == 0, 0.0, h[b, t - 1, j])
        h = te.recurrence((B, T, H), fn, name="h", dtype=dtype, checkpoints=k)
    else:
        h = te.recurrence((B, T, H), lambda h, b, t, j: te.tanh(
            x[b, t, j] + prev(h, b, t, j, Us[0])), name="h", dtype=dtype, checkpoints=k)
        ins = [x, Us[0]]
    if head == "every":
        Hd = te.placeholder(h.shape, dtype, "Hd")
        return ins + [Hd], list(te.differentiate(h, ins, head=Hd))
    r1, r2 = te.reduce_axis(B), te.reduce_axis(H)
    part = (1,) if cell == "lstm" else ()
    last = lambda: h[(r1, T - 1) + part + (r2,)]  # noqa: E731
    L = te.compute(() if head == "last" else (1,), lambda *o: te.sum(last() * last(), axis=[
        r1, r2]), name="L", dtype=dtype)
    return ins, list(te.differentiate(L, ins))


def bidirectional_product(T, B, H, k, cell="gru"):
    """``(inputs, gradients)`` of ``sum(y[T - 1] ** 2)``, ``y[t] = h[t] * g[T - 1 - t]``:
    ``h`` over ``x``, ``g`` over ``x`` reversed, both ``cell`` layers (``"gru"``: one set
    of weights for both; ``"rnn"``: tanh layers). Each adjoint reads the other layer
    mirrored (``dh[t]`` reads ``g[T - 1 - t]``): no plan is smaller than the full tape.

    >>> [p.name for p in bidirectional_product(4, 2, 3, 2, "rnn")[0]]
    ['x', 'W', 'V']
    """
    x = te.placeholder((T, B, H), "float32", "x")
    xr = te.compute((T, B, H), lambda t, b, j: x[T - 1 - t, b, j], name="xr")
    if cell == "gru":
        Ws = [te.placeholder((H, H), "float32", n) for n in ("Wz", "Wr", "Wn")]
        Us = [te.placeholder((H, H), "float32", n) for n in ("Uz", "Ur", "Un")]
        h, g, ins = gru_layer(x, Ws, Us, k, "h"), gru_layer(xr, Ws, Us, k, "g"), [x] + Ws + Us
    else:
        W, V = (te.placeholder((H, H), "float32", n) for n in ("W", "V"))
        h, g, ins = tanh_layer(x, W, k, "h"), tanh_layer(xr, V, k, "g"), [x, W, V]
    y = te.compute((T, B, H), lambda t, b, j: h[t, b, j] * g[T - 1 - t, b, j], name="y")
    r1, r2 = te.reduce_axis(B), te.reduce_axis(H)
    L = te.compute((), lambda: te.sum(y[T - 1, r1, r2] * y[T - 1, r1, r2], axis=[r1, r2]),
                   name="L")
    return ins, list(te.differentiate(L, ins))


def scratch_bytes(ins, grads, mode) -> int:
    """The bytes of the buffers (neither inputs nor outputs) of the program of ``grads``
    built with ``Options(checkpoint=mode)``: what a call allocates beside its arrays.

    >>> ins, grads = rnn(40, 2, 3, 4)
    >>> scratch_bytes(ins, grads, True) < scratch_bytes(ins, grads, False)
    True
    """
    from codegen.pipeline import generate
    from codegen.schedule import Options
    from codegen.signature import Signature
    sig = Signature(grads, ins)
    prog = generate(sig, Options(checkpoint=mode))[0]
    skip = {t.uid for t in list(ins) + list(grads)}
    return sum(int(np.prod(sig.shape(t, {}))) * np.dtype(t.dtype).itemsize
               for t in prog.tensors if t.uid not in skip)
