"""The float64 reference gradients (the hand-written numpy backwards) are right.

Each case's reference VJP is checked against a central finite difference of
L = sum(H * Y) along a random direction, in float64: the reference is what every
system's error is measured against, so it must not merely agree with itself.
"""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.cases import CASES
from benchmarks.reference import reference, rel_err
from benchmarks.systems.numpy_sys import IMPL


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.id}-{c.key}")
def test_reference_gradient_matches_finite_differences(case):
    p = case.params(quick=True)
    inputs = case.inputs(p)
    Y, H, grads = reference(case, p, inputs)
    assert [g.shape for g in grads] == [inputs[n].shape for n in case.wrt]
    rng = np.random.default_rng(case.id)
    direction = {n: rng.standard_normal(inputs[n].shape) for n in case.wrt}
    wide = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in inputs.items()}

    def loss(eps):
        moved = {k: (v + eps * direction[k] if k in direction else v) for k, v in wide.items()}
        return float(np.sum(H * IMPL[case.key][0](p, **moved)[0]))

    eps = 1e-6
    numeric = (loss(eps) - loss(-eps)) / (2 * eps)
    analytic = sum(float(np.sum(g * direction[n])) for g, n in zip(grads, case.wrt))
    assert numeric == pytest.approx(analytic, rel=1e-6, abs=1e-8)


def test_float32_numpy_peer_is_close_but_not_identical_to_the_reference():
    case = CASES[7]  # softmax
    p = case.params(quick=True)
    inputs = case.inputs(p)
    Y, H, grads = reference(case, p, inputs)
    forward, backward = IMPL[case.key]
    y32, saved = forward(p, **inputs)
    g32 = backward(p, saved, H)
    assert y32.dtype == np.float32 and g32[0].dtype == np.float32
    assert 0 < rel_err(g32, grads) < 1e-5


def test_rel_err_flags_shape_and_nan():
    ref = [np.ones(3)]
    assert rel_err([np.ones(4)], ref) == float("inf")
    assert rel_err([np.array([1.0, np.nan, 1.0])], ref) == float("inf")
    assert rel_err([np.zeros(3)], [np.zeros(3)]) == 0.0
    assert rel_err([np.ones(3)], ref + ref) == float("inf")
