"""User-facing errors and the source-line bookkeeping they rely on."""
from __future__ import annotations

import os
import sys

_PACKAGE_DIRS = tuple(
    os.path.dirname(os.path.abspath(p))
    for p in (__file__,
              os.path.join(os.path.dirname(__file__), "..", "passes", "x"),
              os.path.join(os.path.dirname(__file__), "..", "codegen", "x")))
# With the separator: a user's `tensorexpr_demo/model.py` is not inside `tensorexpr/`.
_PACKAGE_PREFIXES = tuple(d + os.sep for d in _PACKAGE_DIRS)


class TensorExprError(Exception):
    """Base class of errors a user's program can cause."""


class BoundsError(TensorExprError, IndexError):
    """A read may fall outside the tensor it reads (found statically)."""


class RecurrenceError(TensorExprError, ValueError):
    """A recurrence reads itself at a point that is not strictly earlier."""


class JacobianError(TensorExprError, ValueError):
    """``te.differentiate(..., head=None)`` would build a Jacobian nobody asked for."""


class ProgramTooLargeError(TensorExprError, ValueError):
    """Lowering a program would make C far larger than its expressions (codegen.size_bound)."""


class CompilerNotFoundError(TensorExprError, RuntimeError):
    """No C compiler is available for the C backend."""


class CompilerError(TensorExprError, RuntimeError):
    """The C compiler rejected generated code (a bug of ours: please report it)."""


def user_origin() -> str:
    """``file:line: code`` of the innermost stack frame outside this project's packages.

    In a script this reads like ``model.py:12: C = te.compute(...)``.

    >>> user_origin().startswith("<doctest tensorexpr.errors.user_origin")
    True
    """
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PACKAGE_PREFIXES):
            line = _source_line(path, frame.f_lineno)
            where = f"{os.path.relpath(path) if not path.startswith('<') else path}:{frame.f_lineno}"
            return f"{where}: {line}" if line else where
        frame = frame.f_back
    return "<unknown>"


def _source_line(path: str, lineno: int) -> str:
    import linecache
    return linecache.getline(path, lineno).strip()


def describe(tensor) -> str:
    """``tensor 'C' (defined at model.py:12: C = te.compute(...))``, for error messages.

    >>> import tensorexpr as te
    >>> describe(te.placeholder((2,), name="A"))  # doctest: +ELLIPSIS
    "tensor 'A' (defined at <doctest ...)"
    """
    return f"tensor {tensor.name!r} (defined at {tensor.origin})"
