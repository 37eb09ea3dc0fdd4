"""Every system's definition of every case computes the same function as the reference.

tensorexpr's forwards and VJPs run on the numpy reference backend here (fast to
build); tier 2's also on the C backend, against that backend's results. PyTorch
and JAX are checked only where installed (they are the ``bench`` extra).
"""
from __future__ import annotations

import pytest

import tensorexpr as te
import numpy as np

from benchmarks.cases import CASES, TIER2, by_id
from benchmarks.reference import TOLERANCE, reference, rel_err
from benchmarks.systems import module, te_sys

IDS = lambda c: f"{c.id}-{c.key}"  # noqa: E731


def _setup(case):
    p = case.params(quick=True)
    inputs = case.inputs(p)
    Y, H, grads = reference(case, p, inputs)
    return p, inputs, Y, H, grads


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_tensorexpr_forward_matches_reference(case):
    p, inputs, Y, H, _ = _setup(case)
    prep = te_sys.prepare(case, p, inputs, H, backend="numpy")
    assert prep.fwd_status == "ok"
    assert rel_err([prep.forward_output()], [Y]) < 1e-5


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_tensorexpr_gradient_matches_reference(case):
    p, inputs, Y, H, grads = _setup(case)
    prep = te_sys.prepare(case, p, inputs, H, backend="numpy")
    assert prep.vjp_status == "ok"
    assert rel_err(prep.gradients(), grads) < TOLERANCE


@pytest.mark.parametrize("case", TIER2, ids=IDS)
def test_tier2_c_backend_matches_the_numpy_backend(case, tmp_path, monkeypatch):
    """The compiled forward and VJP (given the saved values) agree with the reference
    interpreter to float32 rounding, and with the float64 reference."""
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path))
    p, inputs, Y, H, grads = _setup(case)
    c = te_sys.prepare(case, p, inputs, H, backend="c")
    ref = te_sys.prepare(case, p, inputs, H, backend="numpy")
    assert (c.fwd_status, c.vjp_status) == ("ok", "ok")
    scale = max(float(np.max(np.abs(Y))), 1e-30)
    assert np.max(np.abs(c.forward_output() - ref.forward_output())) / scale < 1e-5
    assert rel_err(c.gradients(), [g.astype(np.float64) for g in ref.gradients()]) < 1e-5
    assert rel_err(c.gradients(), grads) < TOLERANCE


@pytest.mark.parametrize("name", ["torch", "jax"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_peer_forward_and_gradient_match_reference(name, case):
    pytest.importorskip(name)
    p, inputs, Y, H, grads = _setup(case)
    prep = module(name).prepare(case, p, inputs, H)
    assert (prep.fwd_status, prep.vjp_status) == ("ok", "ok")
    assert rel_err([prep.forward_output()], [Y]) < 1e-5
    assert rel_err(prep.gradients(), grads) < TOLERANCE


def test_without_differentiate_the_forward_still_runs(monkeypatch):
    if hasattr(te, "differentiate"):
        monkeypatch.delattr(te, "differentiate")
    case = by_id(14)
    p, inputs, Y, H, _ = _setup(case)
    prep = te_sys.prepare(case, p, inputs, H, backend="numpy")
    assert prep.vjp is None and prep.vjp_status == te_sys.NO_DIFFERENTIATE
    assert prep.fwd_status == "ok" and prep.fwd_build_s > 0


def test_a_failing_differentiate_is_reported_with_its_message(monkeypatch):
    def refuse(*args, **kwargs):
        raise NotImplementedError("no adjoint for this read\nsecond line")
    monkeypatch.setattr(te, "differentiate", refuse, raising=False)
    case = by_id(1)
    p, inputs, Y, H, _ = _setup(case)
    prep = te_sys.prepare(case, p, inputs, H, backend="numpy")
    assert prep.vjp_status == "unsupported (no adjoint for this read)"
    assert prep.fwd is not None
