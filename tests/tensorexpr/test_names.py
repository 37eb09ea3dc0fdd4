"""tensorexpr.names: te.build names every computed tensor of a program apart."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te


def two_embedding_gradients():
    E = te.placeholder((5, 3), "float64", name="E")
    idx = te.placeholder((4,), dtype="int32", name="idx")
    emb = te.compute((4, 3), lambda i, d: E[idx[i], d], name="emb")
    He = te.placeholder((4, 3), "float64", name="He")
    (dE1,) = te.differentiate(emb, [E], head=He)
    i, d = te.reduce_axis(4, name="i"), te.reduce_axis(3, name="d")
    L = te.compute((), lambda: te.sum(emb[i, d] * emb[i, d], axis=[i, d]), name="L")
    (dE2,) = te.differentiate(L, [E])
    assert dE1.name == dE2.name  # each call names its gradient alike
    return [E, idx, He], [dE1, dE2]


def test_two_gradients_of_one_name_are_named_apart_in_schedule_and_messages():
    inputs, outs = two_embedding_gradients()
    f = te.build(outs, inputs=inputs)
    lines = str(f.schedule).splitlines()
    assert len(lines) == len(set(lines)) == 2, lines
    first, second = outs[0].name, outs[0].name + "_2"
    assert f.schedule[first] is not f.schedule[second]
    e = np.random.default_rng(0).standard_normal((5, 3))
    ids, he = np.array([1, 3, 1, 0], np.int32), np.ones((4, 3))
    with pytest.raises(TypeError, match=f"output '{second}' is float32"):
        f(e, ids, he, out=(None, np.zeros((5, 3), np.float32)))
    g1, g2 = f(e, ids, he)
    r1, r2 = te.build(outs, inputs=inputs, backend="numpy")(e, ids, he)
    assert np.allclose(g1, r1) and np.allclose(g2, r2)
    assert g1[1].tolist() == [2.0, 2.0, 2.0] and np.allclose(g2[1], 4 * e[1])
    assert outs[1].name == first  # the caller's tensors are not renamed


@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_a_renamed_recurrence_still_reads_itself(backend):
    x = te.placeholder((6,), "float64", name="x")
    a = te.recurrence((6,), lambda h, t: te.select(t == 0, x[0], 0.5 * h[t - 1] + x[t]),
                      name="h", dtype="float64")
    b = te.recurrence((6,), lambda h, t: te.select(t == 0, a[0], h[t - 1] * a[t]),
                      name="h", dtype="float64")
    f = te.build([a, b], inputs=[x], backend=backend)
    if backend == "c":
        assert "h_2" in str(f.schedule)
    xv = np.random.default_rng(1).standard_normal(6)
    want_a = np.zeros(6)
    for t in range(6):
        want_a[t] = xv[0] if t == 0 else 0.5 * want_a[t - 1] + xv[t]
    got_a, got_b = f(xv)
    assert np.allclose(got_a, want_a) and np.allclose(got_b, np.cumprod(want_a))
