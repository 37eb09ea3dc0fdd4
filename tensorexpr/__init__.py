"""tensorexpr: pure tensor expressions, Jacobian-free gradients, generated C.

>>> import numpy as np, tensorexpr as te
>>> A = te.placeholder((2, 3), name="A")
>>> k = te.reduce_axis(3, name="k")
>>> S = te.compute((2,), lambda i: te.sum(A[i, k], axis=k), name="S")
>>> te.build(S, backend="numpy")(np.ones((2, 3), np.float32))
array([3., 3.], dtype=float32)
"""
# First: the printer gives nodes their text (repr); the IR below it cannot import it.
from . import printer  # noqa: F401
from .api import (abs, cast, ceil, compute, const, cos, erf, exp, floor, log, max, maximum, min,
                  minimum, placeholder, recurrence, reduce_axis, select, sigmoid, sin, sqrt,
                  stop_gradient, sum, tanh, var)
from .build import Function, build, saved_values
from .errors import (BoundsError, CompilerError, CompilerNotFoundError, JacobianError,
                     ProgramTooLargeError, RecurrenceError, TensorExprError)
from .ir import Tensor
from codegen.schedule import Options as ScheduleOptions  # noqa: E402 - te.build(options=...)

__all__ = ["abs", "cast", "ceil", "compute", "const", "cos", "erf", "exp", "floor", "log", "max",
           "maximum", "min", "minimum", "placeholder", "recurrence", "reduce_axis", "select",
           "sigmoid", "sin", "sqrt", "stop_gradient", "sum", "tanh", "var", "Function", "build",
           "saved_values", "BoundsError", "JacobianError",
           "CompilerError", "CompilerNotFoundError", "ProgramTooLargeError", "RecurrenceError",
           "TensorExprError",
           "Tensor", "ScheduleOptions"]


def differentiate(output, inputs=None, head=None, override=None, jacobian=False):
    """Vector-Jacobian products of ``output`` (a tensor, or a list of them, one head each); see :func:`passes.differentiate.differentiate`.

    Results are cached on disk across processes (:mod:`tensorexpr.differentiate_cache`).

    >>> import tensorexpr as te
    >>> X = te.placeholder((3,), name="X")
    >>> i = te.reduce_axis(3)
    >>> L = te.compute((), lambda: te.sum(X[i] * X[i], axis=i), name="L")
    >>> (dX,) = te.differentiate(L, [X])
    >>> dX.shape
    (3,)
    """
    from .collector import paused
    from .differentiate_cache import differentiate as cached
    with paused():  # (tensorexpr.collector: what it allocates lives to its end)
        return cached(output, inputs=inputs, head=head, override=override, jacobian=jacobian)


__all__.append("differentiate")

from . import nn  # noqa: E402 - layers built on the names above (te.nn.conv2d, ...)

__all__.append("nn")
