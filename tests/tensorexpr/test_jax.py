"""tensorexpr.jax: tensor programs as JAX custom_vjp functions (jit, grad, vmap)."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import tensorexpr as te  # noqa: E402
import tensorexpr.jax as tej  # noqa: E402
from codegen import xla_ffi  # noqa: E402
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


def _op(name, via="auto"):
    if (name, via) not in _OPS:
        outputs, inputs = BY_NAME[name].define()
        _OPS[name, via] = (tej.op(outputs, inputs=inputs, name=name, via=via), outputs, inputs)
    return _OPS[name, via]


def _needs_ffi():
    why = tej.ffi_available()
    if why is not None:
        pytest.skip(why)


def _primitives(jaxpr) -> list:
    """The names of the primitives a jaxpr runs, inner jaxprs (jit, custom_vjp) included."""
    out = []
    for eqn in jaxpr.eqns:
        out.append(eqn.primitive.name)
        for v in eqn.params.values():
            for sub in (v if isinstance(v, (tuple, list)) else (v,)):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    out += _primitives(inner)
    return out


def _arrays(name, n=3, seed=0):
    return [jnp.asarray(a) for a in BY_NAME[name].args(np.random.default_rng(seed), n)]


def _float_args(name, xs, via="auto"):
    """The op as a function of its float inputs (the others fixed), for check_grads."""
    f, _, inputs = _op(name, via)
    floats = [k for k, t in enumerate(inputs) if t.dtype.startswith("float")]

    def g(*fl):
        args = list(xs)
        for k, v in zip(floats, fl):
            args[k] = v
        return f(*args)
    return g, [xs[k] for k in floats]


@pytest.mark.parametrize("via", ["ffi", "callback"])
@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_forward_matches_the_numpy_backend_under_jit(name, via):
    if via == "ffi":
        _needs_ffi()
    f, outputs, inputs = _op(name, via)
    assert f.uses_ffi() == (via == "ffi")
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


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_the_ffi_call_and_the_callback_agree_on_values_and_gradients(name):
    """The same compiled kernels on both paths: equal to the last bit."""
    _needs_ffi()
    xs = _arrays(name, 3)
    results = []
    for via in ("ffi", "callback"):
        g, fl = _float_args(name, xs, via)
        out = g(*fl)
        grads = jax.jit(jax.grad(lambda *a: sum((o ** 2).sum() for o in _tuple(g(*a))),
                                 argnums=tuple(range(len(fl)))))(*fl)
        results.append([np.asarray(a) for a in _tuple(out) + tuple(grads)])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def test_ffi_calls_reach_the_kernel_without_python(monkeypatch):
    """Under jit, forward + backward are two FFI custom calls (the forward runs once,
    its saved values feed the backward) and no host callback; Python's ``run`` of
    either program is never called."""
    _needs_ffi()
    f, _, _ = _op("softmax", "ffi")
    g = f.grad_op()
    for p in (f.program, g.program):
        monkeypatch.setattr(p, "run", lambda arrays: pytest.fail("Python ran the kernel"))
    (x,) = _arrays("softmax", 3)

    def step(x, h):
        (y, s), vjp = jax.vjp(f, x)
        return vjp((h, jnp.zeros_like(s)))[0]
    h = jnp.ones((3, 5))
    names = _primitives(jax.make_jaxpr(step)(x, h).jaxpr)
    assert names.count("ffi_call") == 2 and "pure_callback" not in names
    np.testing.assert_allclose(jax.jit(step)(x, h), np.zeros((3, 5)), atol=1e-12)


def test_vjp_with_several_outputs_and_the_forward_run_once(monkeypatch):
    f, _, _ = _op("softmax", "callback")
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
    if f.uses_ffi():  # a loop inside XLA around the FFI call, no host callback
        names = _primitives(jax.make_jaxpr(jax.vmap(f))(*stacked).jaxpr)
        assert "ffi_call" in names and "pure_callback" not in names
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


def _gather():
    E = te.placeholder((4, 2), dtype="float64", name="E")
    idx = te.placeholder((3,), dtype="int32", name="idx")
    return te.compute((3, 2), lambda i, j: E[idx[i], j] * E[idx[i], j], name="G"), [E, idx]


def test_an_out_of_range_index_is_an_xla_error_with_the_numpy_paths_message():
    _needs_ffi()
    G, inputs = _gather()
    f = tej.op(G, inputs=inputs, via="ffi")
    E = jnp.asarray(np.random.default_rng(0).standard_normal((4, 2)))
    good, bad = jnp.array([0, 3, 1], jnp.int32), jnp.array([0, 7, 1], jnp.int32)
    np.testing.assert_allclose(jax.jit(f)(E, good), np.asarray(E)[[0, 3, 1]] ** 2)
    with pytest.raises(IndexError) as want:
        te.build(G, inputs=inputs)(np.asarray(E), np.asarray(bad))
    assert "reads 'E' at index 7 in dimension 0, outside its size 4" in str(want.value)
    for fn in (f, jax.jit(f)):
        with pytest.raises(Exception) as got:
            jax.block_until_ready(fn(E, bad))
        assert "OUT_OF_RANGE" in str(got.value) and str(want.value) in str(got.value)
        assert "test_jax.py" in str(got.value)  # the message names the tensor's line
    # the backward scatters to E's gradient at the same index: its own message
    with pytest.raises(Exception, match="scatters to index 7 in dimension 0, outside its "
                                        "size 4"):
        jax.block_until_ready(jax.jit(jax.grad(lambda E: f(E, bad).sum()))(E))
    np.testing.assert_allclose(jax.jit(f)(E, good), np.asarray(E)[[0, 3, 1]] ** 2)


def test_via_is_checked_and_passed_to_the_backward():
    X = te.placeholder((3,), dtype="float64", name="X")
    Y = te.compute((3,), lambda i: X[i] * X[i], name="Y")
    with pytest.raises(ValueError, match="via='cuda': choose one of 'auto', 'ffi', 'callback'"):
        tej.op(Y, via="cuda")
    f = tej.op(Y, via="callback")
    assert f.grad_op().via == "callback" and not f.grad_op().uses_ffi()
    x = jnp.array([1.0, 2.0, 3.0])
    names = _primitives(jax.make_jaxpr(jax.grad(lambda x: f(x).sum()))(x).jaxpr)
    assert "pure_callback" in names and "ffi_call" not in names


def test_the_handler_library_is_built_once_and_cached_on_disk(tmp_path):
    """A new process finds the handler in the cache: it starts no compiler (any
    subprocess fails there) and gets the same verified library."""
    _needs_ffi()
    import os
    import subprocess
    import sys

    from codegen import compiler
    path = xla_ffi.handler_library(jax.ffi.include_dir())
    assert compiler.verify(path)
    code = ("import subprocess, jax\n"
            "def refuse(*a, **k): raise AssertionError('started a process: ' + repr(a[:1]))\n"
            "subprocess.Popen = refuse\n"
            "from codegen import xla_ffi\n"
            "print(xla_ffi.handler_library(jax.ffi.include_dir()))\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=root), timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == path


def test_the_handler_is_keyed_by_the_ffi_headers(tmp_path):
    import shutil
    src = jax.ffi.include_dir()
    copy = tmp_path / "include"
    shutil.copytree(src, copy)
    assert xla_ffi.handler_source(str(copy)) == xla_ffi.handler_source(src)
    with open(copy / "xla" / "ffi" / "api" / "ffi.h", "a") as f:
        f.write("// another version\n")
    assert xla_ffi.handler_source(str(copy)) != xla_ffi.handler_source(src)


def test_without_a_cxx_compiler_auto_falls_back_and_ffi_says_why():
    """In a process whose $CXX does not exist: via="auto" runs through pure_callback,
    via="ffi" is refused with the reason."""
    import os
    import subprocess
    import sys
    code = ("import jax, jax.numpy as jnp, tensorexpr as te, tensorexpr.jax as tej\n"
            "X = te.placeholder((3,), name='X')\n"
            "Y = te.compute((3,), lambda i: X[i] * X[i], name='Y')\n"
            "print(tej.ffi_available())\n"
            "f = tej.op(Y)\n"
            "print(f.uses_ffi(), jax.jit(f)(jnp.arange(3.0, dtype=jnp.float32)).tolist())\n"
            "try:\n"
            "    tej.op(Y, via='ffi')(jnp.arange(3.0, dtype=jnp.float32))\n"
            "except te.TensorExprError as e:\n"
            "    print(e)\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=root, CXX="/nonexistent/c++"),
                         timeout=300)
    assert out.returncode == 0, out.stderr
    why, auto, refused = out.stdout.strip().splitlines()
    assert why.startswith("the XLA FFI handler cannot be built or loaded: $CXX is "
                          "'/nonexistent/c++'")
    assert auto == "False [0.0, 1.0, 4.0]"
    assert refused.startswith("op 'Y': via='ffi' cannot be used: the XLA FFI handler")
