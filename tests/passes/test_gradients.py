"""passes.gradients: which inputs a request differentiates with respect to."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te


def embedding_loss():
    E = te.placeholder((5, 3), "float64", name="E")
    idx = te.placeholder((4,), dtype="int32", name="idx")
    mask = te.placeholder((4,), dtype="bool", name="mask")
    emb = te.compute((4, 3), lambda i, d: te.select(mask[i], E[idx[i], d], 0.0), name="emb")
    i, d = te.reduce_axis(4, name="i"), te.reduce_axis(3, name="d")
    L = te.compute((), lambda: te.sum(emb[i, d] * emb[i, d], axis=[i, d]), name="L")
    return E, idx, mask, L


@pytest.mark.parametrize("which", ["idx", "mask"])
def test_an_integer_or_boolean_input_is_refused_with_its_name_and_the_line(which):
    E, idx, mask, L = embedding_loss()
    bad = {"idx": idx, "mask": mask}[which]
    with pytest.raises(TypeError) as err:
        te.differentiate(L, [E, bad])
    msg = str(err.value)
    assert f"tensor {which!r}" in msg and bad.dtype in msg
    assert "test_gradients.py" in msg and "te.differentiate(L, [E, bad])" in msg
    assert "floating-point inputs" in msg


def test_without_inputs_only_the_float_placeholders_are_differentiated():
    E, idx, mask, L = embedding_loss()
    grads = te.differentiate(L)
    assert len(grads) == 1 and grads[0].shape == E.shape
    e, ids = np.random.default_rng(0).standard_normal((5, 3)), np.array([1, 3, 1, 0], np.int32)
    m = np.array([True, True, False, True])
    got = te.build(grads[0], inputs=[E, idx, mask], backend="numpy")(e, ids, m)
    want = np.zeros_like(e)
    for k in range(4):
        if m[k]:
            want[ids[k]] += 2 * e[ids[k]]
    assert np.allclose(got, want)


@pytest.mark.parametrize("bad", [np.ones((5, 3)), te.var("n"), "E", 3.0])
def test_an_input_that_is_not_a_tensor_is_refused_with_the_line(bad):
    E, idx, mask, L = embedding_loss()
    with pytest.raises(TypeError, match=rf"test_gradients.py.*not a {type(bad).__name__}"):
        te.differentiate(L, [E, bad])
