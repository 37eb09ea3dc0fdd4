"""tensorexpr.torch: tensor programs as PyTorch operators (autograd, compile, opcheck)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorexpr as te  # noqa: E402
import tensorexpr.torch as tet  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402
from tests.tensorexpr.interop_cases import CASES, conv_pool  # noqa: E402

BY_NAME = {c.name: c for c in CASES}
_OPS = {}


def _op(name):
    """One op per case for the whole module (each registers operators and builds)."""
    if name not in _OPS:
        outputs, inputs = BY_NAME[name].define()
        _OPS[name] = (tet.op(outputs, inputs=inputs, name=name), outputs, inputs)
    return _OPS[name]


def _tensors(name, n=3, seed=0, grad=True):
    arrays = BY_NAME[name].args(np.random.default_rng(seed), n)
    return [torch.from_numpy(a).requires_grad_(grad and a.dtype.kind == "f") for a in arrays]


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_forward_matches_the_numpy_backend(name):
    f, outputs, inputs = _op(name)
    ref = te.build(outputs, inputs=inputs, backend="numpy")
    for n in (2, 5):
        xs = _tensors(name, n, seed=n)
        got = f(*xs)
        want = ref(*[x.detach().numpy() for x in xs])
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert isinstance(g, torch.Tensor) and g.dtype == torch.float64
            np.testing.assert_allclose(g.detach().numpy(), w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_gradcheck_float64(name):
    f, _, _ = _op(name)
    for n in (1, 4):
        assert torch.autograd.gradcheck(f, tuple(_tensors(name, n, seed=n)))


@pytest.mark.parametrize("name", ["layer", "softmax", "ewma", "conv_pool", "embedding"])
def test_double_backward(name):
    """The backward is itself a differentiable op: gradients through the saved values
    (softmax's m and e, the recurrence) reach the inputs."""
    f, _, _ = _op(name)
    assert torch.autograd.gradgradcheck(f, tuple(_tensors(name, 3)))


def test_the_forward_runs_once_and_the_backward_is_given_the_saved_values(monkeypatch):
    f, _, _ = _op("softmax")
    p = f.program
    assert [t.name for t in p.saved] == ["m", "e", "s"] and [t.name for t in p.extras] == ["m", "e"]
    calls = []
    fwd, bwd = p.forward, f.grad_op().program.forward
    monkeypatch.setattr(p, "run", lambda arrays, run=p.run: calls.append("fwd") or run(arrays))
    g = f.grad_op().program
    monkeypatch.setattr(g, "run", lambda arrays, run=g.run: calls.append("bwd") or run(arrays))
    (x,) = _tensors("softmax", 4)
    y, s = f(x)
    (y * torch.arange(20.0, dtype=torch.float64).reshape(4, 5)).sum().backward()
    assert calls == ["fwd", "bwd"]
    assert "exp(" not in bwd.source and "exp(" in fwd.source  # the backward reads e, m, s
    want = torch.autograd.grad((torch.softmax(x, 1) * torch.arange(20.0, dtype=torch.float64)
                                .reshape(4, 5)).sum(), x)[0]
    torch.testing.assert_close(x.grad, want)


def test_gradients_of_several_outputs_are_summed():
    f, _, _ = _op("softmax")
    (x,) = _tensors("softmax", 3)
    y, s = f(x)
    w = torch.rand(3, 5, dtype=torch.float64)
    gx = torch.autograd.grad((y * w).sum() + (s ** 2).sum(), x)[0]
    xr = x.detach().requires_grad_()
    yr = torch.softmax(xr, 1)
    sr = torch.exp(xr - xr.max(1, keepdim=True).values).sum(1)
    torch.testing.assert_close(gx, torch.autograd.grad((yr * w).sum() + (sr ** 2).sum(), xr)[0])


def test_integer_inputs_get_no_gradient_and_the_scatter_adds_repeats():
    f, _, _ = _op("embedding")
    E = torch.rand(5, 3, dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([0, 2, 2, 4])
    f(E, idx).sum().backward()
    want = torch.zeros(5, 3, dtype=torch.float64)
    for i in idx.tolist():
        want[i] += 2 * E.detach()[i]
    torch.testing.assert_close(E.grad, want)
    assert f(E, idx).requires_grad and not idx.requires_grad


def test_contiguous_tensors_go_in_and_out_without_copies(monkeypatch):
    f, _, _ = _op("layer")
    xs = _tensors("layer", 3, grad=False)
    seen = {}
    run = f.program.run

    def spy(arrays):
        seen["in"] = arrays
        seen["out"] = run(arrays)
        return seen["out"]
    monkeypatch.setattr(f.program, "run", spy)
    y = f(*xs)
    assert all(np.shares_memory(a, x.numpy()) for a, x in zip(seen["in"], xs))
    assert np.shares_memory(seen["out"][0], y.numpy())


def test_non_contiguous_inputs_and_heads_and_views_of_inputs():
    f, _, _ = _op("flatten")
    x = torch.rand(4, 3, 2, dtype=torch.float64).permute(2, 1, 0).requires_grad_()
    y, z = f(x)
    torch.testing.assert_close(y, x.reshape(2, 12))
    c = torch.rand(2, 3, 4, dtype=torch.float64)
    assert not np.shares_memory(f(c)[0].numpy(), c.numpy())  # outputs never alias inputs
    y.sum().backward()  # the head is an expanded (stride 0) tensor
    torch.testing.assert_close(x.grad, torch.ones(2, 3, 4, dtype=torch.float64))


def test_call_by_input_name():
    f, _, _ = _op("layer")
    x, w, b = _tensors("layer", 2, grad=False)
    torch.testing.assert_close(f(b=b, W=w, X=x), f(x, w, b))
    with pytest.raises(TypeError, match="no input 'Z'"):
        f(x, w, Z=b)


def test_clear_errors_name_the_input_and_its_line():
    f, _, _ = _op("layer")
    x, w, b = _tensors("layer", 2, grad=False)
    with pytest.raises(TypeError, match=r"op 'layer': input 'X' must be torch.float64; got "
                                        r"torch.float32 .*\.to\(torch.float64\).*interop_cases"):
        f(x.float(), w, b)
    with pytest.raises(ValueError, match=r"input 'W' is on meta.*run on the CPU.*W.cpu\(\)"):
        f(x, w.to("meta"), b)  # (no GPU here; a CUDA tensor takes the same check)
    with pytest.raises(ValueError, match=r"op 'layer': input 'W' has shape \(5, 3\), expected "
                                         r"\(4, 3\).*interop_cases"):
        f(x, torch.rand(5, 3, dtype=torch.float64), b)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        f(x.numpy(), w, b)
    with pytest.raises(TypeError, match="takes 3 tensor"):
        f(x, w)


def test_forward_mode_is_refused_clearly():
    f, _, _ = _op("layer")
    x, w, b = _tensors("layer", 2, grad=False)
    with pytest.raises(NotImplementedError, match="input 'X' carries a forward-mode tangent"):
        torch.func.jvp(lambda x: f(x, w, b), (x,), (torch.ones_like(x),))
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level(), pytest.raises(NotImplementedError, match="input 'b'"):
        f(x, w, fwAD.make_dual(b, torch.ones_like(b)))


def test_int_and_bool_dtypes_round_trip():
    n = te.var("n")
    A = te.placeholder((n,), "int32", "A")
    M = te.placeholder((n,), "bool", "M")
    Y = te.compute((n,), lambda i: te.select(M[i], A[i] * 2, A[i]), name="Y")
    Z = te.compute((n,), lambda i: A[i] > 1, name="Z")
    f = tet.op([Y, Z])
    y, z = f(torch.tensor([1, 2, 3], dtype=torch.int32), torch.tensor([True, False, True]))
    assert y.dtype == torch.int32 and z.dtype == torch.bool
    assert y.tolist() == [2, 2, 6] and z.tolist() == [False, True, True]


def test_import_tensorexpr_needs_neither_torch_nor_jax():
    code = ("import sys, tensorexpr, tensorexpr.interop; "
            "assert 'torch' not in sys.modules and 'jax' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_opcheck_forward_and_backward_ops():
    f, _, _ = _op("softmax")
    (x,) = _tensors("softmax", 3)
    torch.library.opcheck(f.operator, (x,))
    heads = (torch.rand(3, 5, dtype=torch.float64), torch.rand(3, dtype=torch.float64))
    y, s, m, e = f.operator(x.detach())
    torch.library.opcheck(f.grad_op().operator, (x, *heads, m, e, s))


def test_torch_compile_fullgraph_with_forward_and_backward():
    """One inductor compile (slow): no graph break, the same gradient as eager, and a
    second batch size without an error (fake shapes come from the shape expressions)."""
    f, _, _ = _op("layer")

    def loss(x, w, b):
        return (f(x, w, b) ** 2).sum()
    compiled = torch.compile(loss, fullgraph=True)
    for n in (4, 6):
        xs = _tensors("layer", n, seed=n)
        compiled(*xs).backward()
        ref = [x.detach().requires_grad_() for x in xs]
        loss(*ref).backward()
        for a, r in zip(xs, ref):
            torch.testing.assert_close(a.grad, r.grad)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_conv_pool_gradients_match_torch_layers(n, seed):
    f, _, _ = _op("conv_pool")
    x, w, b = _tensors("conv_pool", n, seed=seed)
    y = f(x, w, b)
    h = torch.rand(y.shape, dtype=torch.float64)
    got = torch.autograd.grad((y * h).sum(), (x, w, b))
    ref = torch.nn.functional.max_pool2d(torch.relu(torch.nn.functional.conv2d(x, w, b)), 2)
    torch.testing.assert_close(y, ref)
    for g, r in zip(got, torch.autograd.grad((ref * h).sum(), (x, w, b))):
        torch.testing.assert_close(g, r)


def test_float32_program():
    outputs, inputs = conv_pool(dtype="float32")
    f = tet.op(outputs, inputs=inputs)
    x = torch.rand(2, 2, 6, 6, requires_grad=True)
    w = torch.rand(3, 2, 3, 3, requires_grad=True)
    b = torch.rand(3, requires_grad=True)
    f(x, w, b).sum().backward()
    assert x.grad.dtype == torch.float32 and w.grad.shape == (3, 2, 3, 3)
