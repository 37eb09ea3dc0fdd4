"""Checkpointed steps emitted once as C functions (``codegen.step_functions``)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tensorexpr as te
from codegen.loopast import Block, Lit, Store, Var
from codegen.lower import Lowerer
from codegen.signature import Signature
from codegen.step_functions import Functions


def _rnn(T: int, k, mode: str):
    x = te.placeholder((T, 3, 4), name="x")
    W = te.placeholder((4, 4), name="W")
    j = te.reduce_axis(4, name="j")
    h = te.recurrence((T, 3, 4), lambda h, t, b, i: te.tanh(x[t, b, i] + te.select(
        t == 0, 0.0, te.sum(h[t - 1, b, j] * W[j, i], axis=j))), name="h", checkpoints=k)
    b, i = te.reduce_axis(3), te.reduce_axis(4)
    L = te.compute((), lambda: te.sum(h[T - 1, b, i] * h[T - 1, b, i], axis=[b, i]), name="L")
    grads = te.differentiate(L, [x, W])
    options = te.ScheduleOptions(checkpoint=mode) if mode == "segments" else None
    return [x, W], grads, options


@pytest.mark.parametrize("mode,calls", [("revolve", ("forward", "reverse")),
                                        ("segments", ("forward",))])
def test_each_step_is_one_function_and_the_values_are_the_full_tapes(mode, calls):
    ins, grads, options = _rnn(12, 3, mode)
    f = te.build(grads, inputs=ins, options=options)
    full = te.build(grads, inputs=ins, options=te.ScheduleOptions(checkpoint=False))
    rng = np.random.default_rng(1)
    data = [rng.standard_normal((12, 3, 4)).astype(np.float32),
            (rng.standard_normal((4, 4)) / 2).astype(np.float32)]
    for a, b in zip(f(*data), full(*data)):
        assert np.array_equal(a, b)
    lines = [x for x in str(f.schedule).splitlines() if x.startswith("function: ")]
    assert len(lines) == len(calls), lines
    for line, kind in zip(lines, calls):
        name, n = re.match(rf"function: (te_step\d+): a {kind} step of h \((\d+) calls\)",
                           line).groups()
        assert int(n) >= 2
        assert f.source.count(f"static void {name}(") == 1
        assert f.source.count(f"{name}(bufs, sizes, err, ") == int(n)
    assert "te_step" not in full.source and "function: " not in str(full.schedule)


def test_a_lowering_called_once_or_reading_the_callers_variables_stays_in_place():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    lw = Lowerer(Signature([B], [A]))
    fs = Functions(lw)
    outer = Var("k9", "int64")
    once = fs.call("once", "once", lambda t: [Store("b1", t, Lit(1.0, "float32"))],
                   (Lit(2, "int64"),))
    reads = [fs.call("reads", "reads", lambda t: [Store("b1", t, outer)], (Lit(k, "int64"),))
             for k in (0, 1)]
    body, functions = fs.finish([Block((once,)), *reads])
    assert functions == ()
    assert body[0] == Block((Block((Store("b1", Lit(2, "int64"), Lit(1.0, "float32")),)),))
    assert body[2] == Block((Store("b1", Lit(1, "int64"), outer),))
    assert lw.record.functions == ["once: in place (one call)",
                                   "reads: in place (it reads the caller's k9)"]
