"""Tensor programs as PyTorch operators, differentiable with ``torch.autograd``.

``tet.op(outputs, inputs=None, name=None)`` registers the program's forward as a
custom operator (``torch.ops.tensorexpr.<name>_<n>``) with a fake
implementation whose output shapes come from the program's shape
expressions, so it runs under ``torch.compile(fullgraph=True)`` without a
graph break. Its autograd formula is ``te.differentiate`` of the program: the
forward also returns the values ``te.saved_values`` picks, saved by
``setup_context``, and the backward is another such operator given them, so
the forward runs once. The backward being an operator of the same kind, it is
differentiable again (double backward): gradients through the saved values
reach the inputs through the forward's own formula.

CPU tensors of the declared dtypes go in and out without copies (through
``Tensor.numpy()`` and ``torch.from_numpy``). Forward-mode AD is refused with
an error (te.differentiate generates reverse mode only).

torch is imported when this module is, never by ``import tensorexpr``.

>>> import torch, tensorexpr as te, tensorexpr.torch as tet
>>> X = te.placeholder((3,), dtype="float64", name="X")
>>> Y = te.compute((3,), lambda i: X[i] * X[i], name="Y")
>>> square = tet.op(Y)
>>> x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
>>> square(x).sum().backward()
>>> x.grad
tensor([2., 4., 6.], dtype=torch.float64)
"""
from __future__ import annotations

import keyword
import threading
from typing import List, Optional

import numpy as np
import torch
import torch.autograd.forward_ad as _forward_ad

from .errors import describe
from .interop import GradOps, Program, op_name

__all__ = ["op", "Op"]

NAMESPACE = "tensorexpr"
_LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")
_LOCK = threading.Lock()
#: operator name -> the registered operator (a program registers once per process)
_REGISTERED: dict = {}
_DTYPES = {"bool": torch.bool, "int32": torch.int32, "int64": torch.int64,
           "float32": torch.float32, "float64": torch.float64}


def op(outputs, inputs=None, name: Optional[str] = None) -> "Op":
    """A function of torch tensors computing ``outputs`` (a tensor or a tuple, like
    ``te.build``), differentiable with ``torch.autograd`` for every float input.

    ``inputs=None`` takes every placeholder the outputs read, in creation order;
    call the result positionally or by input name. Symbolic sizes are bound from
    the input shapes at each call. ``name`` names the registered operators
    (default: the outputs' names).

    >>> import torch, tensorexpr as te, tensorexpr.torch as tet
    >>> A = te.placeholder((2, 3), name="A")
    >>> k = te.reduce_axis(3, name="k")
    >>> S = te.compute((2,), lambda i: te.sum(A[i, k], axis=k), name="S")
    >>> rowsum = tet.op(S, name="rowsum")
    >>> rowsum(torch.ones(2, 3))
    tensor([3., 3.])
    >>> rowsum.qualname.startswith("tensorexpr::rowsum_")
    True
    """
    f = Op(Program(outputs, inputs, name))
    if f.program.differentiable:
        # Registered now, not when autograd first asks: a backward compiled by
        # torch.compile in another process (its graph cache) calls it by name at once.
        f.grad_op()
    return f


def _arg_names(program: Program) -> List[str]:
    names, seen = [], set()
    for t in program.inputs:
        n = op_name(t.name)
        if keyword.iskeyword(n) or n in ("self", "out", "Tensor"):
            n += "_"
        while n in seen:
            n += "_"
        seen.add(n)
        names.append(n)
    return names


class Op(GradOps):
    """A tensor program registered as PyTorch operators; call it with tensors.

    ``program`` is the :class:`tensorexpr.interop.Program`, ``qualname`` the
    forward operator's name (``tensorexpr::<name>_<n>``); ``operator`` is
    ``torch.ops.tensorexpr.<name>_<n>.default``, returning the outputs and then
    the saved values.

    >>> import torch, tensorexpr as te, tensorexpr.torch as tet
    >>> X = te.placeholder((2,), name="X")
    >>> f = tet.op(te.compute((2,), lambda i: te.exp(X[i]), name="E"))
    >>> f.program.n_outputs, f.qualname.split("::")[0]
    (1, 'tensorexpr')
    """

    def __init__(self, program: Program):
        self.program = program
        self._dtypes = [_DTYPES[t.dtype] for t in program.inputs]
        self._result_dtypes = [_DTYPES[t.dtype] for t in program.results]
        self._arg_names = _arg_names(program)
        GradOps.__init__(self)
        self._n_in = len(program.inputs)
        self._n_out = program.n_outputs
        self.operator = self._register()
        self.qualname = f"{NAMESPACE}::{self._opname}"

    def __repr__(self):
        ins = ", ".join(t.name for t in self.program.inputs)
        outs = ", ".join(t.name for t in self.program.outputs)
        return f"<tensorexpr.torch.Op {self.qualname} ({ins}) -> ({outs})>"

    # {{{ registration

    def _register(self):
        p = self.program
        # Named by what the program computes, not by a counter: torch.compile's graph
        # cache, shared across processes, calls operators by name, so a name must mean
        # the same program in every process (a counter gave another program's kernel).
        self._opname = f"{p.name}_{p.key()[:16]}"
        with _LOCK:
            if self._opname in _REGISTERED:
                return _REGISTERED[self._opname]
            _REGISTERED[self._opname] = operator = self._define()
        return operator

    def _define(self):
        p = self.program
        n_res = len(p.results)
        ret = "Tensor" if n_res == 1 else "(" + ", ".join(["Tensor"] * n_res) + ")"
        args = ", ".join(f"Tensor {a}" for a in self._arg_names)
        _LIBRARY.define(f"{self._opname}({args}) -> {ret}")
        qualname = f"{NAMESPACE}::{self._opname}"
        _LIBRARY.impl(self._opname, self._kernel, "CPU")
        torch.library.register_fake(qualname, self._fake, lib=_LIBRARY)
        torch.library.register_autograd(qualname, self._backward,
                                        setup_context=self._setup_context, lib=_LIBRARY)
        return getattr(getattr(torch.ops, NAMESPACE), self._opname).default

    def _kernel(self, *xs):
        arrays = [(x.detach() if x.requires_grad else x).numpy() for x in xs]
        outs = [_tensor(a) for a in self.program.run(arrays)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _fake(self, *xs):
        p = self.program
        sizes = p.check_shapes([x.shape for x in xs], torch.sym_max, torch.sym_min)
        shapes = p.result_shapes(sizes, torch.sym_max, torch.sym_min)
        device = xs[0].device if xs else torch.device("cpu")
        outs = [torch.empty(s, dtype=d, device=device)
                for s, d in zip(shapes, self._result_dtypes)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _setup_context(self, ctx, inputs, output):
        results = output if isinstance(output, tuple) else (output,)
        # A gradient that is None needs no work: the saved values' gradients are None
        # except when a higher derivative reaches them through the backward.
        ctx.set_materialize_grads(False)
        ctx.result_shapes = [r.shape for r in results]
        ctx.save_for_backward(*inputs, *[results[k] for k in self.program.saved_index])

    def _backward(self, ctx, *grads):
        p = self.program
        saved = ctx.saved_tensors
        xs, kept = saved[:self._n_in], saved[self._n_in:]
        out: List[Optional[torch.Tensor]] = [None] * self._n_in
        if not p.differentiable:
            return tuple(out)
        total = None
        heads = [grads[k] for k in p.float_outputs]
        if any(h is not None for h in heads):
            heads = [h if h is not None else torch.zeros(
                ctx.result_shapes[k], dtype=self._result_dtypes[k])
                for k, h in zip(p.float_outputs, heads)]
            total = list(self.grad_op()(*xs, *heads, *kept))
        floats = [k for k, t in enumerate(p.results) if k >= self._n_out
                  and t.dtype in ("float32", "float64")]
        extra = [grads[k] for k in floats]
        if any(h is not None for h in extra):
            extra = [h if h is not None else torch.zeros(
                ctx.result_shapes[k], dtype=self._result_dtypes[k])
                for k, h in zip(floats, extra)]
            more = self.extras_grad_op()(*xs, *extra)
            total = list(more) if total is None else [a + b for a, b in zip(total, more)]
        if total is not None:
            for k, g in zip(p.float_inputs, total):
                out[k] = g
        return tuple(out)


    # }}}

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self._by_name(args, kwargs)
        if len(args) != self._n_in:
            raise TypeError(f"op {self.program.name!r} takes {self._n_in} tensor(s) "
                            f"({', '.join(t.name for t in self.program.inputs)}); "
                            f"got {len(args)}")
        for k, x in enumerate(args):
            dt = self._dtypes[k]
            if type(x) is not torch.Tensor and not isinstance(x, torch.Tensor) \
                    or x.dtype != dt or x.device.type != "cpu":
                self._refuse(k, x)
        if not torch.compiler.is_compiling():
            for k, x in enumerate(args):
                if _forward_ad.unpack_dual(x).tangent is not None:
                    raise NotImplementedError(
                        f"op {self.program.name!r}: input {self.program.inputs[k].name!r} "
                        f"carries a forward-mode tangent (torch.func.jvp or forward_ad), "
                        f"which tensorexpr ops do not support: te.differentiate generates "
                        f"reverse mode only; use backward(), torch.autograd.grad or "
                        f"torch.func.vjp instead")
        res = self.operator(*args)
        if len(self.program.results) == 1:
            res = (res,)
        if self.program.single:
            return res[0]
        return tuple(res[:self._n_out])

    def _refuse(self, k: int, x):
        t = self.program.inputs[k]
        who = f"op {self.program.name!r}: input {t.name!r}"
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{who} must be a torch.Tensor; got {type(x).__name__} "
                            f"({describe(t)})")
        if x.device.type != "cpu":
            raise ValueError(f"{who} is on {x.device}, but tensorexpr kernels run on the CPU; "
                             f"pass {t.name}.cpu() ({describe(t)})")
        want = self._dtypes[k]
        raise TypeError(f"{who} must be {want}; got {x.dtype} (convert it with "
                        f".to({want})) ({describe(t)})")

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


def _tensor(a: np.ndarray) -> torch.Tensor:
    """``a`` as a tensor sharing its memory; a read-only view (an output that re-indexes
    an input) is copied, since an operator's outputs may not alias its inputs."""
    if not (a.flags.writeable and a.flags.owndata):
        a = a.copy()
    return torch.from_numpy(a)
