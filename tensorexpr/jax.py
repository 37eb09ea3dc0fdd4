"""Tensor programs as JAX functions: under ``jax.jit``, ``jax.grad``, ``jax.vjp``, ``jax.vmap``.

``tej.op(outputs, inputs=None, name=None, via="auto")`` is a ``jax.custom_vjp``
function. Its primal calls the compiled program; its forward rule returns the
values ``te.saved_values`` picks as residuals, and its backward rule is
``te.differentiate`` of the program, built as another such function given them,
so the forward runs once. Both rules being made of such functions, they are
differentiable in turn: ``jax.grad(jax.grad(f))`` works, the gradient through the
saved values reaching the inputs through the forward's own rule.

How the kernel is reached (``via``, passed on to the backward ops):

- ``"ffi"``: an XLA FFI custom call (``jax.ffi.ffi_call``) to one C++ handler
  (``codegen.xla_ffi``, compiled once and cached like kernels, registered for the
  CPU on first use) that calls the kernel's C entry point on XLA's buffers: no
  Python per call (~2 us over plain ``jnp`` for a tiny op's forward + backward
  here, against ~450 us through the callback; ``python -m
  benchmarks.interop_overhead``). Sizes are bound at trace time and travel as the
  call's attributes with the kernel's address; intermediates live in a scratch
  block XLA allocates as an extra result. An out-of-range data-dependent index is
  an XLA error (``OUT_OF_RANGE: ...``, raised by JAX as its runtime error) with the
  message the numpy path's ``IndexError`` has.
- ``"callback"``: ``jax.pure_callback`` into the built ``te.Function`` (Python on
  every call). It is the fallback where the FFI call cannot be used: without a
  C++ compiler, or when JAX's default backend is not the CPU (:func:`ffi_available`
  says why).
- ``"auto"`` (default): the FFI call where it can be used, else the callback.

``jax.vmap`` uses ``vmap_method="sequential"`` on both paths: the kernel is called
once per batch element, for the FFI call by a loop inside XLA, for the callback by a
loop on the host, for the forward and the backward alike. Forward-mode AD
(``jax.jvp``, ``jax.jacfwd``) is refused by JAX itself, as for every
``custom_vjp`` function. float64 programs need
``jax.config.update("jax_enable_x64", True)``.

jax is imported when this module is, never by ``import tensorexpr``.

>>> import jax, jax.numpy as jnp, tensorexpr as te, tensorexpr.jax as tej
>>> X = te.placeholder((3,), name="X")
>>> Y = te.compute((3,), lambda i: X[i] * X[i], name="Y")
>>> square = tej.op(Y)
>>> jax.grad(lambda x: square(x).sum())(jnp.array([1.0, 2.0, 3.0])).tolist()
[2.0, 4.0, 6.0]
"""
from __future__ import annotations

import threading
from typing import Dict, List, Optional

import jax
import numpy as np
from jax.custom_derivatives import SymbolicZero

from codegen import compiler, xla_ffi

from .errors import TensorExprError, describe
from .interop import GradOps, Program

__all__ = ["op", "Op", "VMAP_METHOD", "VIA", "ffi_available"]

#: how ``jax.vmap`` batches either call: one kernel call per batch element (for the FFI
#: call a loop inside XLA, for the callback a loop on the host)
VMAP_METHOD = "sequential"
#: the ways an op may reach its kernel (``op(..., via=)``)
VIA = ("auto", "ffi", "callback")


def op(outputs, inputs=None, name: Optional[str] = None, via: str = "auto") -> "Op":
    """A function of JAX arrays computing ``outputs`` (an array or a tuple, like
    ``te.build``), differentiable with ``jax.grad``/``jax.vjp`` for every float input.

    ``inputs=None`` takes every placeholder the outputs read, in creation order.
    Symbolic sizes are bound from the input shapes (at trace time). ``via`` says
    how the kernel is called: ``"ffi"`` an XLA FFI custom call (no Python per call),
    ``"callback"`` ``jax.pure_callback``, ``"auto"`` (default) the FFI call where
    :func:`ffi_available` says it can be used, else the callback. Its backward
    ops use the same.

    >>> import jax, jax.numpy as jnp, tensorexpr as te, tensorexpr.jax as tej
    >>> A = te.placeholder((2, 3), name="A")
    >>> k = te.reduce_axis(3, name="k")
    >>> S = te.compute((2,), lambda i: te.sum(A[i, k], axis=k), name="S")
    >>> jax.jit(tej.op(S))(jnp.ones((2, 3))).tolist()
    [3.0, 3.0]
    """
    return Op(Program(outputs, inputs, name), via)


# {{{ the FFI handler, registered with XLA once per process

_handler_lock = threading.Lock()
#: the loaded handler library (kept: XLA holds its function), or why it cannot be used
_handler: Dict[str, object] = {}
#: kernel functions an FFI call names by address, kept alive while this process may run
#: a compiled XLA program calling them (XLA's caches outlive the ops that traced them)
_kept: Dict[int, object] = {}


def ffi_available() -> Optional[str]:
    """None if ops can call kernels through the XLA FFI handler here, else why not.

    The handler is a C++ library compiled on first use (cached, like kernels) and
    registered with XLA for the CPU; it needs a C++ compiler (``$CXX``, ``c++``,
    ``g++`` or ``clang++``) and JAX's default backend to be the CPU.

    >>> ffi_available() is None or isinstance(ffi_available(), str)
    True
    """
    if jax.default_backend() != "cpu":
        return (f"JAX's default backend is {jax.default_backend()!r}; the FFI handler is "
                f"registered for the CPU only")
    with _handler_lock:
        if not _handler:
            try:
                lib = compiler.load(xla_ffi.handler_library(jax.ffi.include_dir()))
                jax.ffi.register_ffi_target(xla_ffi.TARGET,
                                            jax.ffi.pycapsule(lib[xla_ffi.SYMBOL]),
                                            platform="cpu")
                _handler["library"] = lib
            except (TensorExprError, OSError, AttributeError) as exc:
                _handler["error"] = f"the XLA FFI handler cannot be built or loaded: {exc}"
        return _handler.get("error")

# }}}


class Op(GradOps):
    """A tensor program as a ``jax.custom_vjp`` function; call it with arrays.

    >>> import tensorexpr as te, tensorexpr.jax as tej
    >>> X = te.placeholder((2,), name="X")
    >>> f = tej.op(te.compute((2,), lambda i: te.exp(X[i]), name="E"))
    >>> f.program.name
    'E'
    """

    def __init__(self, program: Program, via: str = "auto"):
        if via not in VIA:
            raise ValueError(f"via={via!r}: choose one of {', '.join(map(repr, VIA))}")
        #: how calls reach the kernel, as asked (see :func:`op`); :meth:`uses_ffi` resolves
        self.via = via
        self.program = program
        self._plans: Dict[tuple, xla_ffi.CallPlan] = {}
        self._dtypes = [np.dtype(t.dtype) for t in program.inputs]
        self._result_dtypes = [np.dtype(t.dtype) for t in program.results]
        self._n_in = len(program.inputs)
        self._n_out = program.n_outputs
        GradOps.__init__(self)
        self._all = jax.custom_vjp(self._primal)
        self._all.defvjp(self._fwd, self._bwd, symbolic_zeros=True)

    def derived(self, program: Program) -> "Op":
        """An op of ``program`` (the backward) calling its kernel the same way.

        >>> import tensorexpr as te, tensorexpr.jax as tej
        >>> X = te.placeholder((2,), name="X")
        >>> tej.op(te.compute((2,), lambda i: X[i] * X[i]), via="callback").grad_op().via
        'callback'
        """
        return Op(program, self.via)

    def uses_ffi(self) -> bool:
        """Do calls reach the kernel through the XLA FFI handler (else ``pure_callback``)?
        ``via="ffi"`` where the handler cannot be used raises ``TensorExprError`` saying why.

        >>> import tensorexpr as te, tensorexpr.jax as tej
        >>> X = te.placeholder((2,), name="X")
        >>> tej.op(te.compute((2,), lambda i: X[i] + 1.0), via="callback").uses_ffi()
        False
        """
        if self.via == "callback":
            return False
        why = ffi_available()
        if why is not None and self.via == "ffi":
            raise TensorExprError(f"op {self.program.name!r}: via='ffi' cannot be used: {why} "
                                  f"(use via='auto' to fall back to jax.pure_callback)")
        return why is None

    def __repr__(self):
        ins = ", ".join(t.name for t in self.program.inputs)
        outs = ", ".join(t.name for t in self.program.outputs)
        return f"<tensorexpr.jax.Op {self.program.name} ({ins}) -> ({outs})>"

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self._by_name(args, kwargs)
        if len(args) != self._n_in:
            raise TypeError(f"op {self.program.name!r} takes {self._n_in} array(s) "
                            f"({', '.join(t.name for t in self.program.inputs)}); "
                            f"got {len(args)}")
        args = tuple(self._checked(k, x) for k, x in enumerate(args))
        res = self._all(*args)
        return res[0] if self.program.single else tuple(res[:self._n_out])

    def _checked(self, k: int, x):
        t, want = self.program.inputs[k], self._dtypes[k]
        who = f"op {self.program.name!r}: input {t.name!r}"
        if isinstance(x, (np.ndarray, np.generic)):
            x = jax.numpy.asarray(x)
        if not hasattr(x, "dtype") or not hasattr(x, "shape"):
            raise TypeError(f"{who} must be a JAX array; got {type(x).__name__} "
                            f"({describe(t)})")
        if x.dtype != want:
            hint = f"convert it with .astype(jnp.{want})"
            if want.itemsize == 8 and not jax.config.jax_enable_x64:
                hint = ('64-bit types need jax.config.update("jax_enable_x64", True) '
                        'before arrays are made')
            raise TypeError(f"{who} must be {want}; got {x.dtype} ({hint}) ({describe(t)})")
        if len(x.shape) != t.ndim:
            raise ValueError(f"{who} must have {t.ndim} dimension(s); got shape "
                             f"{tuple(x.shape)} ({describe(t)})")
        return x

    def _by_name(self, args: tuple, kwargs: dict) -> tuple:
        names = [t.name for t in self.program.inputs]
        values = list(args) + [None] * (len(names) - len(args))
        for key, v in kwargs.items():
            if key not in names:
                raise TypeError(f"op {self.program.name!r} has no input {key!r}; its inputs "
                                f"are {', '.join(names)}")
            k = names.index(key)
            if k < len(args):
                raise TypeError(f"input {key!r} given twice (positionally and by name)")
            values[k] = v
        missing = [n for n, v in zip(names, values) if v is None]
        if missing:
            raise TypeError(f"op {self.program.name!r}: missing input(s) {', '.join(missing)}")
        return tuple(values)

    # {{{ the custom_vjp function: outputs, then the saved values that are not outputs

    def _host(self, *arrays):
        return tuple(self.program.run([np.asarray(a) for a in arrays]))

    def _primal(self, *xs):
        shapes = [tuple(x.shape) for x in xs]
        sizes = self.program.check_shapes(shapes)
        specs = [jax.ShapeDtypeStruct(s, d)
                 for s, d in zip(self.program.result_shapes(sizes), self._result_dtypes)]
        if not self.uses_ffi():
            return tuple(jax.pure_callback(self._host, specs, *xs, vmap_method=VMAP_METHOD))
        plan = self._plan(sizes, shapes)
        scratch = jax.ShapeDtypeStruct((plan.scratch_bytes,), np.uint8)
        call = jax.ffi.ffi_call(xla_ffi.TARGET, specs + [scratch], vmap_method=VMAP_METHOD)
        return tuple(call(*xs, **plan.attributes)[:-1])  # the scratch block is dropped

    def _plan(self, sizes: dict, shapes: List[tuple]) -> xla_ffi.CallPlan:
        """The FFI call's attributes at these sizes (the kernel built on first use)."""
        key = tuple(sorted(sizes.items()))
        plan = self._plans.get(key)
        if plan is None:
            plan = xla_ffi.call_plan(self.program.forward.impl, sizes, shapes,
                                     len(self.program.results))
            if plan.kernel is not None:
                _kept.setdefault(plan.kernel.entry_address(), plan.kernel)
            self._plans[key] = plan
        return plan

    def _fwd(self, *xs):
        values = [x.value for x in xs]  # symbolic_zeros: CustomVJPPrimal wrappers
        res = self._all(*values)
        kept = tuple(res[k] for k in self.program.saved_index)
        return res, (tuple(values), kept)

    def _bwd(self, residuals, cts):
        xs, kept = residuals
        p = self.program
        out = [np.zeros(x.shape, dtype=jax.dtypes.float0) for x in xs]  # integer inputs
        if not p.differentiable:
            return tuple(out)
        total = None
        heads = [cts[k] for k in p.float_outputs]
        if any(not isinstance(h, SymbolicZero) for h in heads):
            heads = [_dense(h) for h in heads]
            total = list(self.grad_op()(*xs, *heads, *kept))
        floats = [k for k, t in enumerate(p.results)
                  if k >= self._n_out and t.dtype in ("float32", "float64")]
        extra = [cts[k] for k in floats]
        if any(not isinstance(h, SymbolicZero) for h in extra):
            more = self.extras_grad_op()(*xs, *[_dense(h) for h in extra])
            total = list(more) if total is None else [a + b for a, b in zip(total, more)]
        if total is None:
            total = [jax.numpy.zeros_like(xs[k]) for k in p.float_inputs]
        for k, g in zip(p.float_inputs, total):
            out[k] = g
        return tuple(out)


    # }}}


def _dense(ct):
    """A cotangent as an array (a symbolic zero becomes zeros of its shape and dtype)."""
    if isinstance(ct, SymbolicZero):
        return jax.numpy.zeros(ct.aval.shape, ct.aval.dtype)
    return ct
