"""What the PyTorch and JAX adapters share, free of either framework.

A :class:`Program` is a tensor program prepared to be a framework operator:
its forward (also returning the values its gradient reads, as
``te.saved_values`` picks them), its gradient as another :class:`Program`
(so an operator's backward is itself such an operator and can be
differentiated again), and its output shapes as a function of its input
shapes, in plain ints or in a framework's symbolic ints.

The gradient of a program with several float outputs ``Y_k`` is the gradient
of ``L = sum_k sum(H_k * Y_k)`` with one head ``H_k`` per output: one
``te.differentiate`` of a scalar, whose adjoint of each ``Y_k`` is its head,
so an intermediate shared by two outputs is differentiated once.

>>> import numpy as np, tensorexpr as te
>>> X = te.placeholder((3,), name="X")
>>> Y = te.compute((3,), lambda i: te.exp(X[i]), name="Y")
>>> p = Program(Y)
>>> [t.name for t in p.outputs], p.n_outputs, [t.name for t in p.heads]
(['Y'], 1, ['d_Y'])
>>> y, = p.run([np.zeros(3, np.float32)])
>>> g = p.grad().run([np.zeros(3, np.float32), np.full(3, 2.0, np.float32), y])[0]
>>> g.tolist()
[2.0, 2.0, 2.0]
"""
from __future__ import annotations

import operator
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import TensorExprError, describe
from .ir import (Binary, Cast, Const, Expr, Placeholder, SizeVar, Tensor,
                 Unary, fresh_uid, is_float, topo_order)

_SIZE_OPS: Dict[str, Callable] = {"add": operator.add, "sub": operator.sub,
                                  "mul": operator.mul, "floordiv": operator.floordiv,
                                  "mod": operator.mod, "pow": operator.pow}


def eval_size(e: Expr, sizes: Dict[str, object], maximum: Callable = max,
              minimum: Callable = min):
    """The value of a size expression given the size variables' values.

    The values may be ints or a framework's symbolic ints (``torch.SymInt``,
    with ``maximum=torch.sym_max``), so a fake tensor's shape follows the program's.

    >>> import tensorexpr as te
    >>> n = te.var("n")
    >>> eval_size(te.compute((n - 2,), lambda i: 0.0).dims[0], {"n": 7})
    5
    """
    match e:
        case Const(value=v):
            return int(v)
        case SizeVar(name=name):
            return sizes[name]
        case Binary(op="max", a=a, b=b):
            return maximum(eval_size(a, sizes, maximum, minimum),
                           eval_size(b, sizes, maximum, minimum))
        case Binary(op="min", a=a, b=b):
            return minimum(eval_size(a, sizes, maximum, minimum),
                           eval_size(b, sizes, maximum, minimum))
        case Binary(op=op, a=a, b=b) if op in _SIZE_OPS:
            return _SIZE_OPS[op](eval_size(a, sizes, maximum, minimum),
                                 eval_size(b, sizes, maximum, minimum))
        case Unary(op="neg", a=a):
            return -eval_size(a, sizes, maximum, minimum)
        case Cast(a=a):
            return eval_size(a, sizes, maximum, minimum)
    raise TypeError(f"a tensor's size cannot be computed from {type(e).__name__} {e!r} "
                    f"outside the compiled program")


def op_name(text: str) -> str:
    """``text`` as an operator name: letters, digits and underscores, not starting with a digit.

    >>> op_name("conv+pool 2")
    'conv_pool_2'
    """
    name = re.sub(r"[^0-9A-Za-z_]+", "_", text).strip("_") or "op"
    return name if not name[0].isdigit() else "t_" + name


def gradient_of(outputs: Sequence[Tensor], inputs: Sequence[Tensor], heads: Sequence[Tensor]
                ) -> List[Tensor]:
    """The vector-Jacobian products of ``outputs`` (float) with one head per output, one
    tensor per input (float placeholders), each of its input's dtype.

    One output is differentiated with its head; several through the scalar
    ``L = sum_k sum(heads[k] * outputs[k])``.

    >>> import tensorexpr as te
    >>> X = te.placeholder((2,), name="X")
    >>> A = te.compute((2,), lambda i: X[i] * 2.0, name="A")
    >>> B = te.compute((2,), lambda i: X[i] * X[i], name="B")
    >>> HA, HB = te.placeholder((2,), name="HA"), te.placeholder((2,), name="HB")
    >>> (g,) = gradient_of([A, B], [X], [HA, HB])
    >>> import numpy as np
    >>> te.build(g, inputs=[X, HA, HB], backend="numpy")(
    ...     np.array([1, 3], np.float32), np.ones(2, np.float32), np.ones(2, np.float32)).tolist()
    [4.0, 8.0]
    """
    from . import api
    from passes.differentiate import differentiate

    if len(outputs) == 1:
        grads = differentiate(outputs[0], inputs=list(inputs), head=heads[0])
    else:
        def term(y, h):
            if not y.ndim:
                return h[()] * y[()]
            axes = [api.reduce_axis(d, name=f"r{k}") for k, d in enumerate(y.shape)]
            return api.sum(h[tuple(axes)] * y[tuple(axes)], axis=axes)

        def body():
            total = term(outputs[0], heads[0])
            for y, h in zip(outputs[1:], heads[1:]):
                total = total + term(y, h)
            return total
        loss = api.compute((), body, name="L", dtype=_widest(outputs))
        grads = differentiate(loss, inputs=list(inputs))
    out = []
    for g, x in zip(grads, inputs):
        if g.dtype != x.dtype:  # a float64 output of a float32 input: a float32 gradient
            g = api.compute(x.shape, lambda *i, g=g, x=x: g[i].astype(x.dtype),
                            name=f"{g.name}_{x.dtype}")
        out.append(g)
    return out


def _widest(tensors: Sequence[Tensor]) -> str:
    return "float64" if any(t.dtype == "float64" for t in tensors) else "float32"


class Program:
    """A tensor program prepared to be a framework operator.

    ``outputs`` and ``inputs`` are as for ``te.build`` (``inputs=None``: every
    placeholder the outputs read, in creation order; a computed tensor among
    them is a given value). With ``save=True`` the forward also returns the
    values its gradient reads (``extras``, after the outputs; see
    ``te.saved_values``), and :meth:`grad` takes them instead of recomputing
    them; with ``save=False`` (programs derived for higher derivatives) the
    gradient recomputes what it needs from the inputs.

    >>> import numpy as np, tensorexpr as te
    >>> X = te.placeholder((2,), name="X")
    >>> I = te.placeholder((2,), dtype="int32", name="I")
    >>> Y = te.compute((2,), lambda i: X[i] * I[i], name="Y")
    >>> p = Program(Y, name="scale")
    >>> p.name, p.float_inputs, p.differentiable
    ('scale', [0], True)
    """

    def __init__(self, outputs, inputs: Optional[Sequence[Tensor]] = None,
                 name: Optional[str] = None, save: bool = True):
        from .build import cut
        self.single = isinstance(outputs, Tensor)
        outs = [outputs] if self.single else list(outputs)
        if not outs or not all(isinstance(t, Tensor) for t in outs):
            raise TypeError("op() takes a tensor or a list of tensors as outputs")
        if inputs is None:
            inputs = sorted((t for t in topo_order(outs) if isinstance(t, Placeholder)),
                            key=lambda t: t.uid)
        elif isinstance(inputs, Tensor):
            inputs = [inputs]
        inputs = list(inputs)
        if not all(isinstance(t, Tensor) for t in inputs):
            raise TypeError("inputs= takes the tensors of the program (placeholders, or "
                            "computed tensors given as values)")
        self.user_inputs = inputs
        self.outputs, self.inputs = cut(outs, inputs)
        self.name = op_name(name or "_".join(t.name for t in self.outputs))
        self.n_outputs = len(self.outputs)
        self.float_inputs = [k for k, t in enumerate(self.inputs) if is_float(t.dtype)]
        self.float_outputs = [k for k, t in enumerate(self.outputs) if is_float(t.dtype)]
        self.differentiable = bool(self.float_inputs and self.float_outputs)
        self.heads = [self._head(self.outputs[k]) for k in self.float_outputs]
        self._grads: Optional[List[Tensor]] = None
        self._grad: Optional[Program] = None
        self._extras_grad: Optional[Program] = None
        self.saved: List[Tensor] = []
        self.extras: List[Tensor] = []
        if save and self.differentiable:
            from .build import saved_values
            self.saved = saved_values(self.gradients(), self.outputs)
            out_uids = {t.uid for t in self.outputs}
            self.extras = [t for t in self.saved if t.uid not in out_uids]
        everything = self.outputs + self.extras
        position = {t.uid: k for k, t in enumerate(everything)}
        #: where each saved value is among the forward's results (outputs, then extras)
        self.saved_index = [position[t.uid] for t in self.saved]
        self.results = everything
        self._size_source: Dict[str, Tuple[int, int]] = {}
        for k, t in enumerate(self.inputs):
            for d, dim in enumerate(t.dims):
                if isinstance(dim, SizeVar):
                    self._size_source.setdefault(dim.name, (k, d))
        self._forward = None
        self._key: Optional[str] = None

    def key(self) -> str:
        """A digest of what the forward computes (its results from its inputs): equal
        for two programs exactly when they compute the same, in any process.

        >>> import numpy as np, tensorexpr as te
        >>> n = te.var("n")
        >>> X = te.placeholder((n,), name="X")
        >>> T = te.compute((n,), lambda i: te.tanh(X[i]), name="T")
        >>> p = Program(te.compute((n,), lambda i: T[i] * T[i], name="Y"))
        >>> p.key() == Program(p.outputs).key(), p.key() == Program(T).key()
        (True, False)
        """
        if self._key is None:
            from codegen.fingerprint import fingerprint
            from codegen.signature import Signature
            self._key = fingerprint(Signature(self.results, self.inputs))
        return self._key

    @staticmethod
    def _head(y: Tensor) -> Placeholder:
        # Built here rather than by api.placeholder so that the head's dims may be
        # expressions of sizes (n - 2), which the forward's inputs bind.
        return Placeholder(f"d_{y.name}", y.dims, y.dtype, fresh_uid(), y.origin)

    @property
    def forward(self):
        """The built forward: the outputs, then the extra saved values (a ``te.Function``).

        >>> import numpy as np, tensorexpr as te
        >>> n = te.var("n")
        >>> X = te.placeholder((n,), name="X")
        >>> T = te.compute((n,), lambda i: te.tanh(X[i]), name="T")
        >>> p = Program(te.compute((n,), lambda i: T[i] * T[i], name="Y"))
        >>> type(p.forward).__name__, [t.name for t in p.results]
        ('Function', ['Y', 'T'])
        """
        if self._forward is None:
            from .build import build
            self._forward = build(self.results, inputs=self.inputs, name=self.name)
        return self._forward

    def run(self, arrays: Sequence[np.ndarray]) -> List[np.ndarray]:
        """The forward's results (outputs, then extras) as a list of arrays.

        >>> import numpy as np, tensorexpr as te
        >>> n = te.var("n")
        >>> X = te.placeholder((n,), name="X")
        >>> T = te.compute((n,), lambda i: te.tanh(X[i]), name="T")
        >>> p = Program(te.compute((n,), lambda i: T[i] * T[i], name="Y"))
        >>> [a.tolist() for a in p.run([np.zeros(2, np.float32)])]
        [[0.0, 0.0], [0.0, 0.0]]
        """
        try:
            out = self.forward(*arrays)
        except ValueError:
            # Say which op and where the input was declared (checked only on failure,
            # the happy path costs nothing more than the built function's own checks).
            self.check_shapes([a.shape for a in arrays])
            raise
        return [out] if len(self.results) == 1 else list(out)

    def gradients(self) -> List[Tensor]:
        """The gradient tensors, one per float input (see :func:`gradient_of`).

        >>> import numpy as np, tensorexpr as te
        >>> n = te.var("n")
        >>> X = te.placeholder((n,), name="X")
        >>> T = te.compute((n,), lambda i: te.tanh(X[i]), name="T")
        >>> p = Program(te.compute((n,), lambda i: T[i] * T[i], name="Y"))
        >>> [g.name for g in p.gradients()]
        ['dX']
        """
        if not self.differentiable:
            raise TensorExprError(f"op {self.name!r} has no float input and float output "
                                  f"to differentiate")
        if self._grads is None:
            self._grads = gradient_of([self.outputs[k] for k in self.float_outputs],
                                      [self.inputs[k] for k in self.float_inputs], self.heads)
        return self._grads

    def grad(self) -> "Program":
        """The backward as a program of ``inputs + heads + saved`` (one head per float
        output), returning one gradient per float input; differentiable in turn.

        >>> import numpy as np, tensorexpr as te
        >>> n = te.var("n")
        >>> X = te.placeholder((n,), name="X")
        >>> T = te.compute((n,), lambda i: te.tanh(X[i]), name="T")
        >>> p = Program(te.compute((n,), lambda i: T[i] * T[i], name="Y"))
        >>> p.grad().name, [t.name for t in p.grad().inputs]
        ('Y_grad', ['X', 'd_Y', 'T'])
        """
        if self._grad is None:
            self._grad = Program(self.gradients(), self.inputs + self.heads + self.saved,
                                 name=f"{self.name}_grad", save=False)
        return self._grad

    def extras_grad(self) -> "Program":
        """The gradient through the extra saved values: a program of ``inputs`` and one
        head per float extra, returning one gradient per float input. A higher derivative
        needs it (the backward reads the saved values, which depend on the inputs).

        >>> import numpy as np, tensorexpr as te
        >>> n = te.var("n")
        >>> X = te.placeholder((n,), name="X")
        >>> T = te.compute((n,), lambda i: te.tanh(X[i]), name="T")
        >>> p = Program(te.compute((n,), lambda i: T[i] * T[i], name="Y"))
        >>> p.extras_grad().name, [t.name for t in p.extras_grad().inputs]
        ('Y_saved_grad', ['X', 'd_T'])
        """
        if self._extras_grad is None:
            floats = [t for t in self.extras if is_float(t.dtype)]
            heads = [self._head(t) for t in floats]
            grads = gradient_of(floats, [self.inputs[k] for k in self.float_inputs], heads)
            self._extras_grad = Program(grads, self.inputs + heads,
                                        name=f"{self.name}_saved_grad", save=False)
        return self._extras_grad

    # {{{ shapes

    def sizes(self, shapes: Sequence[Sequence]) -> Dict[str, object]:
        """The size variables' values bound from the inputs' shapes.

        >>> import numpy as np, tensorexpr as te
        >>> n = te.var("n")
        >>> X = te.placeholder((n,), name="X")
        >>> T = te.compute((n,), lambda i: te.tanh(X[i]), name="T")
        >>> p = Program(te.compute((n,), lambda i: T[i] * T[i], name="Y"))
        >>> p.sizes([(5,)])
        {'n': 5}
        """
        return {name: shapes[k][d] for name, (k, d) in self._size_source.items()}

    def check_shapes(self, shapes: Sequence[Sequence], maximum: Callable = max,
                     minimum: Callable = min) -> Dict[str, object]:
        """The sizes bound from ``shapes``, after checking that every input has its
        declared shape; a mismatch is a ``ValueError`` naming the input.

        >>> import numpy as np, tensorexpr as te
        >>> n = te.var("n")
        >>> X = te.placeholder((n,), name="X")
        >>> T = te.compute((n,), lambda i: te.tanh(X[i]), name="T")
        >>> p = Program(te.compute((n,), lambda i: T[i] * T[i], name="Y"))
        >>> p.check_shapes([(5,)])
        {'n': 5}
        >>> p.check_shapes([(5, 3)])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: op 'Y': input 'X' must have 1 dimension(s); got shape (5, 3) (tensor 'X' ...)
        """
        sizes = self.sizes(shapes)
        for t, shape in zip(self.inputs, shapes):
            if len(shape) != t.ndim:
                raise ValueError(f"op {self.name!r}: input {t.name!r} must have {t.ndim} "
                                 f"dimension(s); got shape {tuple(shape)} ({describe(t)})")
            want = tuple(eval_size(d, sizes, maximum, minimum) for d in t.dims)
            if any(a != b for a, b in zip(shape, want)):
                bound = ", ".join(f"{k}={v}" for k, v in sizes.items()) or "no sizes"
                raise ValueError(
                    f"op {self.name!r}: input {t.name!r} has shape {tuple(shape)}, expected "
                    f"{want} (declared ({', '.join(str(s) for s in t.shape)}) with {bound}; "
                    f"{describe(t)})")
        return sizes

    def result_shapes(self, sizes: Dict[str, object], maximum: Callable = max,
                      minimum: Callable = min) -> List[tuple]:
        """The shapes of the forward's results (outputs, then extras) at ``sizes``.

        >>> import numpy as np, tensorexpr as te
        >>> n = te.var("n")
        >>> X = te.placeholder((n,), name="X")
        >>> T = te.compute((n,), lambda i: te.tanh(X[i]), name="T")
        >>> p = Program(te.compute((n,), lambda i: T[i] * T[i], name="Y"))
        >>> p.result_shapes({"n": 5})
        [(5,), (5,)]
        """
        return [tuple(eval_size(d, sizes, maximum, minimum) for d in t.dims)
                for t in self.results]

    # }}}


class GradOps:
    """The backward operators of an adapter's op, built on first use as ops of the
    same adapter (:meth:`derived`): :meth:`grad_op` (inputs, one head per float
    output, the saved values) and :meth:`extras_grad_op` (the gradient through the
    saved values that are not outputs, needed by higher derivatives only). A subclass
    sets ``self.program`` and calls ``GradOps.__init__``.

    >>> import tensorexpr as te
    >>> X = te.placeholder((3,), name="X")
    >>> class Op(GradOps):
    ...     def __init__(self, program):
    ...         self.program = program
    ...         GradOps.__init__(self)
    >>> op = Op(Program(te.compute((3,), lambda i: te.tanh(X[i]), name="Y")))
    >>> op.grad_op().program.name, op.grad_op() is op.grad_op()
    ('Y_grad', True)
    """

    def __init__(self):
        self._grad_op = None
        self._extras_grad_op = None

    def derived(self, program: "Program"):
        """An op of ``program`` (a backward) like this one: ``type(self)(program)``; an
        adapter whose ops carry options overrides it to pass them on.

        >>> class Echo(GradOps):
        ...     def __init__(self, program):
        ...         self.program = program
        ...         GradOps.__init__(self)
        >>> import tensorexpr as te
        >>> X = te.placeholder((2,), name="X")
        >>> op = Echo(Program(te.compute((2,), lambda i: X[i] * X[i], name="Y")))
        >>> op.grad_op().program.name
        'Y_grad'
        """
        return type(self)(program)

    def grad_op(self):
        """The backward as an op of the inputs, one head per float output and the saved
        values (built on first use).

        >>> import tensorexpr as te
        >>> class Op(GradOps):
        ...     def __init__(self, program):
        ...         self.program = program
        ...         GradOps.__init__(self)
        >>> X = te.placeholder((3,), name="X")
        >>> op = Op(Program(te.compute((3,), lambda i: X[i] * X[i], name="Y")))
        >>> [t.name for t in op.grad_op().program.inputs]
        ['X', 'd_Y']
        """
        if self._grad_op is None:
            self._grad_op = self.derived(self.program.grad())
        return self._grad_op

    def extras_grad_op(self):
        """The gradient through the saved values that are not outputs, as an op
        (needed by higher derivatives only).

        >>> import tensorexpr as te
        >>> class Op(GradOps):
        ...     def __init__(self, program):
        ...         self.program = program
        ...         GradOps.__init__(self)
        >>> X = te.placeholder((3,), name="X")
        >>> T = te.compute((3,), lambda i: te.tanh(X[i]), name="T")
        >>> op = Op(Program(te.compute((3,), lambda i: T[i] * T[i], name="Y")))
        >>> op.extras_grad_op().program.name
        'Y_saved_grad'
        """
        if self._extras_grad_op is None:
            self._extras_grad_op = self.derived(self.program.extras_grad())
        return self._extras_grad_op
