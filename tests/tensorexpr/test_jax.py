"""tensorexpr.jax: tensor programs as JAX custom_vjp functions (jit, grad, vmap)."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import tensorexpr as te  # noqa: E402
import tensorexpr.jax as tej  # noqa: E402
from tests.tensorexpr.interop_cases import CASES  # noqa: E402

BY_NAME = {c.name: c for c in CASES}


@pytest.fixture(autouse=True)
def x64():
    """The shared cases are float64; other modules' tests keep JAX's default."""
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)

_OPS = {}


def _op(name):
    if name not in _OPS:
        outputs, inputs = BY_NAME[name].define()
        _OPS[name] = (tej.op(outputs, inputs=inputs, name=name), outputs, inputs)
    return _OPS[name]


def _arrays(name, n=3, seed=0):
    return [jnp.asarray(a) for a in BY_NAME[name].args(np.random.default_rng(seed), n)]


def _float_args(name, xs):
    """The op as a function of its float inputs (the others fixed), for check_grads."""
    f, _, inputs = _op(name)
    floats = [k for k, t in enumerate(inputs) if t.dtype.startswith("float")]

    def g(*fl):
        args = list(xs)
        for k, v in zip(floats, fl):
            args[k] = v
        return f(*args)
    return g, [xs[k] for k in floats]


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_forward_matches_the_numpy_backend_under_jit(name):
    f, outputs, inputs = _op(name)
    ref = te.build(outputs, inputs=inputs, backend="numpy")
    for n in (2, 5):
        xs = _arrays(name, n, seed=n)
        for fn in (f, jax.jit(f)):
            got, want = fn(*xs), ref(*[np.asarray(x) for x in xs])
            got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
            for g, w in zip(got, want):
                np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_gradients_against_finite_differences_to_second_order(name):
    """jax.grad of jax.grad: the backward is itself a custom_vjp op, and the gradient
    through the saved values reaches the inputs."""
    g, fl = _float_args(name, _arrays(name, 3))
    check_grads(g, fl, order=2, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)


def test_grad_of_grad_matches_jax_softmax():
    f, _, _ = _op("softmax")
    x, w, v = (jnp.asarray(np.random.default_rng(k).standard_normal((4, 5))) for k in range(3))

    def loss(x, f):
        y, s = f(x)
        return (y * w).sum() + (s ** 2).sum()

    def ref(x):
        return jax.nn.softmax(x, 1), jnp.exp(x - x.max(1, keepdims=True)).sum(1)

    def hvp(f):
        return jax.grad(lambda x: (jax.grad(loss)(x, f) * v).sum())(x)
    np.testing.assert_allclose(jax.grad(loss)(x, f), jax.grad(loss)(x, ref), atol=1e-12)
    np.testing.assert_allclose(jax.jit(lambda x: hvp(f))(x), hvp(ref), atol=1e-10)


def test_vjp_with_several_outputs_and_the_forward_run_once(monkeypatch):
    f, _, _ = _op("softmax")
    p = f.program
    calls = []
    monkeypatch.setattr(p, "run", lambda arrays, run=p.run: calls.append("fwd") or run(arrays))
    g = f.grad_op().program
    monkeypatch.setattr(g, "run", lambda arrays, run=g.run: calls.append("bwd") or run(arrays))
    (x,) = _arrays("softmax", 3)
    (y, s), vjp = jax.vjp(f, x)
    (gx,) = vjp((jnp.ones_like(y), jnp.zeros_like(s)))
    assert calls == ["fwd", "bwd"]
    np.testing.assert_allclose(gx, np.zeros((3, 5)), atol=1e-12)  # softmax rows sum to 1


@pytest.mark.parametrize("name", ["layer", "conv_pool", "ewma"])
def test_vmap_sequential_forward_and_gradient(name):
    assert tej.VMAP_METHOD == "sequential"
    f, _, _ = _op(name)
    batch = [_arrays(name, 3, seed=s) for s in range(4)]
    stacked = [jnp.stack(xs) for xs in zip(*batch)]
    got = jax.vmap(f)(*stacked)
    for k, xs in enumerate(batch):
        np.testing.assert_allclose(got[k], f(*xs), rtol=1e-12)

    def loss(*xs):
        return (f(*xs) ** 2).sum()
    grads = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1))))(*stacked)
    for k, xs in enumerate(batch):
        for a, b in zip(grads, jax.grad(loss, argnums=(0, 1))(*xs)):
            np.testing.assert_allclose(a[k], b, rtol=1e-10)


def test_integer_inputs_get_float0_cotangents():
    f, _, _ = _op("embedding")
    E, idx = jnp.asarray(np.random.default_rng(0).standard_normal((5, 3))), jnp.array([0, 2, 2])
    gE, gi = jax.grad(lambda E, i: f(E, i).sum(), argnums=(0, 1), allow_int=True)(E, idx)
    want = np.zeros((5, 3))
    for i in (0, 2, 2):
        want[i] += 2 * np.asarray(E)[i]
    np.testing.assert_allclose(gE, want)
    assert gi.dtype == jax.dtypes.float0


def test_forward_mode_is_refused_clearly():
    f, _, _ = _op("blur")
    (x,) = _arrays("blur", 3)
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff.*custom_vjp"):
        jax.jvp(f, (x,), (jnp.ones_like(x),))


def test_clear_errors_name_the_input_and_its_line():
    f, _, _ = _op("layer")
    x, w, b = _arrays("layer", 2)
    with pytest.raises(TypeError, match=r"op 'layer': input 'X' must be float64; got float32 "
                                        r".*astype.*interop_cases"):
        f(x.astype(jnp.float32), w, b)
    with pytest.raises(ValueError, match=r"op 'layer': input 'W' has shape \(5, 3\), expected "
                                         r"\(4, 3\).*interop_cases"):
        f(x, jnp.ones((5, 3)), b)
    with pytest.raises(ValueError, match="input 'b' must have 1 dimension"):
        f(x, w, jnp.ones((3, 1)))
    with pytest.raises(TypeError, match="must be a JAX array"):
        f(x, w, [1.0, 2.0, 3.0])


def test_float32_program_and_call_by_name():
    X = te.placeholder((3,), name="X")
    Y = te.compute((3,), lambda i: te.sin(X[i]), name="Y")
    f = tej.op(Y)
    x = jnp.array([0.0, 1.0, 2.0], jnp.float32)
    assert f(X=x).dtype == jnp.float32
    np.testing.assert_allclose(jax.grad(lambda x: f(x).sum())(x), np.cos(x), rtol=1e-6)
