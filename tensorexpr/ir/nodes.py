"""The IR's nodes: the node base (frozen, structurally hashed), scalar expressions
and tensors, and the constructors that type them (the semantics are in the
docstring of :mod:`tensorexpr.ir`).

>>> Const(1, "int64") + 2.5
(1.0 + 2.5)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Optional, Tuple, Union

import numpy as np

from ..errors import describe
from .dtypes import INDEX_DTYPE, DEFAULT_FLOAT, is_float, is_int, promote, check_dtype



# {{{ node base

#: each node class's dataclass field names, in order (``Node._key``)
_FIELD_NAMES: dict = {}


class Node:
    """Base of all IR nodes: frozen, structurally hashed (hash cached)."""

    __slots__ = ()

    def _key(self) -> tuple:
        # (the field names once per class: dataclasses.fields is slow, and every hash and
        # structural comparison asks)
        names = _FIELD_NAMES.get(type(self))
        if names is None:
            names = _FIELD_NAMES[type(self)] = tuple(f.name for f in fields(self))
        return tuple([getattr(self, n) for n in names])

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            # Children first, without recursion: an expression may be thousands deep.
            for n in _unhashed_postorder(self):
                # (into the instance dict directly: what object.__setattr__ of a frozen
                # dataclass does, without the attribute protocol)
                n.__dict__["_hash"] = hash((type(n).__name__,) + n._key())
            h = self.__dict__["_hash"]
        return h


def field_nodes(n: "Node"):
    """The nodes held in ``n``'s fields (directly or in tuples), tensors excluded.

    >>> from tensorexpr.ir import Const, Binary
    >>> [str(x) for x in field_nodes(Binary("add", Const(1, "int64"), Const(2, "int64"), "int64"))]
    ['1', '2']
    """
    for v in n._key():
        if isinstance(v, tuple):
            yield from (x for x in v if isinstance(x, Node) and not isinstance(x, Tensor))
        elif isinstance(v, Node) and not isinstance(v, Tensor):
            yield v


def _unhashed_postorder(root: "Node") -> list:
    """Nodes under ``root`` whose hash is not cached yet, children before parents."""
    out, seen, stack = [], set(), [(root, False)]
    while stack:
        n, expanded = stack.pop()
        if expanded:
            out.append(n)
            continue
        if id(n) in seen or "_hash" in n.__dict__:
            continue
        seen.add(id(n))
        stack.append((n, True))
        stack.extend((c, False) for c in field_nodes(n))
    return out


def same(a: Any, b: Any) -> bool:
    """Structural equality of two IR values (nodes, tuples of nodes, constants).

    Shared sub-expressions are compared once per pair, and without recursion, so
    deep expressions and DAGs whose trees are exponentially large compare fast.

    >>> from tensorexpr.ir import Const, same
    >>> same(Const(1, "int64"), Const(1, "int64"))
    True
    """
    done = set()
    stack = [(a, b)]
    while stack:
        a, b = stack.pop()
        if a is b:
            continue
        if isinstance(a, Node) or isinstance(b, Node):
            if type(a) is not type(b):
                return False
            if isinstance(a, Tensor):
                if a.uid != b.uid:
                    return False
                continue
            if (id(a), id(b)) in done:
                continue
            if hash(a) != hash(b):
                return False
            done.add((id(a), id(b)))
            stack.extend(zip(a._key(), b._key()))
        elif isinstance(a, tuple) and isinstance(b, tuple):
            if len(a) != len(b):
                return False
            stack.extend(zip(a, b))
        elif isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            continue
        elif not (type(a) is type(b) and a == b):
            return False
    return True



def kept_on(node: "Node", name: str, make):
    """``make()``, kept on ``node`` under ``name`` (an underscore attribute, which no field
    is) and returned again when asked again of the same node: for answers that are
    functions of an immutable node, asked again and again by passes and the lowering
    (its inputs, free axes, contexts...), as its hash is kept. The answer is shared:
    keep it immutable (a tuple, a frozenset).

    >>> from tensorexpr.ir import Const, Binary
    >>> x = Binary("add", Const(1, "int64"), Const(2, "int64"), "int64")
    >>> kept_on(x, "_demo", lambda: (1, 2)) is kept_on(x, "_demo", lambda: (3,))
    True
    """
    d = node.__dict__
    known = d.get(name)
    if known is None:
        # (into the instance dict directly: the node is a frozen dataclass)
        known = d[name] = make()
    return known

# }}}

# {{{ scalar expressions

BINARY_ARITH = ("add", "sub", "mul", "div", "floordiv", "mod", "pow", "max", "min")
BINARY_CMP = ("lt", "le", "eq", "ne", "gt", "ge")
#: the comparisons that test two values for equality bit for bit: a max's or min's
#: gradient tests its body with ``eq`` against the stored extremum (``passes.differentiate``'s
#: tie counts), so a float sum whose value reaches one (or a max's/min's body) must add its
#: terms in the same order wherever it is computed. An order test (``lt``) or an
#: elementwise max need not: where both sides are the same function of the inputs they
#: have the same derivative, whichever side wins; elsewhere a tie is a rounding accident.
TIE_TESTS = ("eq", "ne")
BINARY_LOGIC = ("and", "or")
UNARY_MATH = ("exp", "log", "sqrt", "tanh", "sigmoid", "sin", "cos", "erf", "abs", "floor", "ceil")
# ``stop_gradient`` is the identity in value; differentiation treats it as a constant.
UNARY_OPS = ("neg", "not", "stop_gradient") + UNARY_MATH
REDUCE_OPS = ("sum", "max", "min")
#: operations costly enough not to recompute freely: the C backend does not compute a
#: tensor calling them where it is read (``codegen.patterns.inlinable``), and a gradient
#: is given the forward tensors calling them (``build.saved_values``)
COSTLY_OPS = ("pow", "floordiv", "mod", "exp", "log", "sqrt", "tanh", "sigmoid", "sin", "cos",
              "erf")


class Expr(Node):
    """A scalar expression; ``dtype`` is a field of every concrete node.

    Python operators build new expressions (:func:`binary`, with the promotion
    rules of the module docstring); ``same`` tests structural equality.
    """

    __slots__ = ()
    dtype: str

    # Comparison operators build expressions; bool() of an ``eq``/``ne``
    # comparison answers structural (in)equality so that expressions can be
    # dictionary keys, the same trick TVM uses.
    def __eq__(self, other):  # type: ignore[override]
        return binary("eq", self, other)

    def __ne__(self, other):  # type: ignore[override]
        return binary("ne", self, other)

    __hash__ = Node.__hash__

    def __bool__(self):
        raise TypeError(
            "a tensor expression has no truth value while the program is being built; "
            "use te.select(cond, a, b) instead of `if`, and & | ~ instead of and/or/not")

    def __repr__(self) -> str:
        return _PRINTER["expr"](self)

    def __neg__(self):
        return unary("neg", self)

    def __pos__(self):
        return self

    def __abs__(self):
        """``abs(e)``, as ``te.abs(e)`` (a user writes Python's ``abs`` as often).

        >>> import tensorexpr as te
        >>> abs(te.const(-2.0))
        abs(-2.0)
        """
        return unary("abs", self)

    def __invert__(self):
        return unary("not", self)

    def astype(self, dtype: str) -> "Expr":
        """This expression converted to ``dtype`` (see :func:`cast`).

        >>> import tensorexpr as te
        >>> te.const(3).astype("float64")
        3.0d
        """
        return cast(self, dtype)


def _op_method(op, reflected=False):
    def method(self, other):
        return binary(op, other, self) if reflected else binary(op, self, other)
    method.__name__ = f"__{'r' if reflected else ''}{op}__"
    return method


for _name, _op in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"),
                   ("floordiv", "floordiv"), ("mod", "mod"), ("pow", "pow"),
                   ("and", "and"), ("or", "or")]:
    setattr(Expr, f"__{_name}__", _op_method(_op))
    setattr(Expr, f"__r{_name}__", _op_method(_op, reflected=True))
for _name, _op in [("lt", "lt"), ("le", "le"), ("gt", "gt"), ("ge", "ge")]:
    setattr(Expr, f"__{_name}__", _op_method(_op))


@dataclass(frozen=True, eq=False, repr=False)
class Const(Expr):
    """A literal. ``value`` is a Python bool, int or float matching ``dtype``."""

    value: Union[bool, int, float]
    dtype: str

    def __bool__(self):
        if self.dtype == "bool":
            return bool(self.value)
        return Expr.__bool__(self)


@dataclass(frozen=True, eq=False, repr=False)
class SizeVar(Expr):
    """A symbolic size (``te.var("n")``): an ``int64`` bound from array shapes at call time.

    Size variables are identified by name: ``te.var("n")`` twice is one variable.
    """

    name: str
    dtype: str = INDEX_DTYPE


@dataclass(frozen=True, eq=False, repr=False)
class Axis(Expr):
    """An index variable ranging over ``lo <= axis < hi``.

    Axes of a compute are created by ``te.compute`` (``lo = 0``, ``hi`` = the
    dimension); reduction axes by ``te.reduce_axis``. ``uid`` makes two axes with
    the same name distinct.
    """

    name: str
    lo: Expr
    hi: Expr
    uid: int
    dtype: str = INDEX_DTYPE


@dataclass(frozen=True, eq=False, repr=False)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: str

    def __bool__(self):
        # Only reached for ``eq``/``ne`` built by ``==``/``!=``: structural answer.
        if self.op == "eq":
            return same(self.a, self.b)
        if self.op == "ne":
            return not same(self.a, self.b)
        return Expr.__bool__(self)


@dataclass(frozen=True, eq=False, repr=False)
class Unary(Expr):
    op: str
    a: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    a: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    """``cond ? a : b``; only the taken branch is evaluated."""

    cond: Expr
    a: Expr
    b: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Read(Expr):
    """``tensor[indices]``; ``tensor`` is a :class:`Tensor` or a :class:`SelfRef`."""

    tensor: "Tensor"
    indices: Tuple[Expr, ...]
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(Expr):
    """``op`` over the points of ``axes``' box where ``where`` holds (None: everywhere)."""

    op: str
    body: Expr
    axes: Tuple[Axis, ...]
    where: Optional[Expr]
    dtype: str


# }}}

# {{{ tensors


@dataclass(frozen=True, eq=False, repr=False)
class Tensor(Node):
    """Base of tensor definitions. Identity is the ``uid``.

    ``shape`` holds :class:`Expr` sizes (``Const`` or expressions of
    :class:`SizeVar`); the public ``shape`` property gives ints where static.
    ``origin`` is the user's source line that defined the tensor, for errors.
    """

    name: str
    dims: Tuple[Expr, ...]
    dtype: str
    uid: int
    origin: str

    def __eq__(self, other):
        if isinstance(other, (Expr, bool, int, float)):
            self._no_arith()  # `T == 0` would silently be False: a forgotten index
        return isinstance(other, Tensor) and other.uid == self.uid

    def __hash__(self):
        return hash(("tensor", self.uid))

    @property
    def shape(self) -> tuple:
        """The sizes, ints where static (``Const``) and expressions of ``te.var`` otherwise.

        >>> import tensorexpr as te
        >>> te.placeholder((te.var("n"), 3), name="A").shape
        (n, 3)
        """
        return tuple(d.value if isinstance(d, Const) else d for d in self.dims)

    @property
    def ndim(self) -> int:
        """The number of dimensions.

        >>> import tensorexpr as te
        >>> te.placeholder((2, 3), name="A").ndim
        2
        """
        return len(self.dims)

    def __getitem__(self, idx) -> Expr:
        return read(self, idx)

    def __str__(self) -> str:
        return _PRINTER["tensor"](self)

    def __repr__(self) -> str:
        shape = ", ".join(str(s) for s in self.shape)
        return f"<{type(self).__name__} {self.name}[{shape}] {self.dtype}>"

    # Arithmetic on tensors is not elementwise broadcasting: say so clearly.
    def _no_arith(self, *_):
        example = ", ".join("ijklmn"[:self.ndim]) if self.ndim else "()"
        raise TypeError(
            f"tensor {self.name!r} is not a scalar expression; index it first "
            f"(e.g. {self.name}[{example}]) inside te.compute")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _no_arith
    __truediv__ = __rtruediv__ = __neg__ = _no_arith
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = _no_arith
    __lt__ = __le__ = __gt__ = __ge__ = __and__ = __rand__ = __or__ = __ror__ = _no_arith
    __invert__ = __abs__ = _no_arith

    def __iter__(self):
        # Without this, ``for x in T`` (or list(T)) would call T[0], T[1], ... forever.
        raise TypeError(f"tensor {self.name!r} is not iterable; index it inside te.compute")


@dataclass(frozen=True, eq=False, repr=False)
class Placeholder(Tensor):
    """An input tensor, bound to an array when the built function is called."""


@dataclass(frozen=True, eq=False, repr=False)
class SelfRef(Tensor):
    """The handle a recurrence body uses to read earlier points of itself."""


@dataclass(frozen=True, eq=False, repr=False)
class Carry:
    """The sequential axis of a recurrence: position in ``axes`` and direction."""

    axis: int
    step: int  # +1: ascending, -1: descending


@dataclass(frozen=True, eq=False, repr=False)
class Compute(Tensor):
    """``T[axes] = body`` over the box of ``dims``.

    ``self_ref`` is set for a recurrence: ``body`` may read it, and ``carry``
    (filled in by the order check) says which axis runs sequentially.
    ``checkpoints`` is the recurrence's memory budget hint (None: full tape).
    """

    axes: Tuple[Axis, ...] = ()
    body: Optional[Expr] = None
    self_ref: Optional[SelfRef] = None
    carry: Optional[Carry] = None
    checkpoints: Optional[int] = None


@dataclass(frozen=True, eq=False, repr=False)
class ScatterAdd(Tensor):
    """``T = 0; for axes in box where `where`: T[indices] += value``.

    Emitted by ``differentiate`` for data-dependent reads; differentiable itself.
    """

    axes: Tuple[Axis, ...] = ()
    where: Optional[Expr] = None
    indices: Tuple[Expr, ...] = ()
    value: Optional[Expr] = None


# }}}

# {{{ typed construction (the rules of "Values and types" above)


def const(value, dtype: Optional[str] = None) -> Const:
    """A literal of the given type (inferred from the Python value if omitted).

    Integers must fit the type (no silent wrap-around); a ``float32`` literal is
    rounded to float32 here, so every backend sees the same value.

    >>> import tensorexpr as te
    >>> te.const(2, "float32")
    2.0
    >>> te.const(7).dtype, te.const(0.5).dtype, te.const(True).dtype
    ('int64', 'float32', 'bool')
    """
    if isinstance(value, Const):
        value = value.value
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (bool, int, float)):
        raise TypeError(f"te.const takes a bool, int or float, not {type(value).__name__} "
                        f"{value!r}")
    if dtype is None:
        dtype = ("bool" if isinstance(value, bool) else
                 "int64" if isinstance(value, int) else "float32")
    dtype = check_dtype(dtype)
    if dtype == "bool":
        value = bool(value)
    elif is_int(dtype):
        if isinstance(value, float) and not value.is_integer():
            raise TypeError(f"{value!r} is not an integer; it cannot be a {dtype} constant")
        value = int(value)
        lo, hi = _INT_RANGE[dtype]
        if not lo <= value <= hi:
            raise ValueError(f"{value} does not fit in {dtype} [{lo}, {hi}]; use a wider "
                             f"type, e.g. te.const({value}, 'int64')"
                             if dtype == "int32" else
                             f"{value} does not fit in {dtype} [{lo}, {hi}]")
    else:
        value = _float(value, dtype)
    return Const(value, dtype)


_INT_RANGE = {"int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1)}


def _float(v, dtype: str) -> float:
    """``v`` rounded to ``dtype`` (out-of-range float32 values become +-inf, as in C)."""
    if dtype == "float32":
        with np.errstate(over="ignore"):
            return float(np.float32(v))
    return float(v)


def _wrap(v: int, dtype: str) -> int:
    """``v`` reduced modulo 2**bits into ``dtype``'s range (integer casts wrap, as in numpy)."""
    lo, hi = _INT_RANGE[dtype]
    return (v - lo) % (hi - lo + 1) + lo


def _is_scalar(x) -> bool:
    return isinstance(x, (bool, int, float)) and not isinstance(x, Expr)


def as_expr(x, like: Optional[str] = None) -> Expr:
    """Convert ``x`` to an expression; a Python scalar takes the type ``like``.

    >>> as_expr(2, "float64").dtype, as_expr(2).dtype, as_expr(0.5, "int32").dtype
    ('float64', 'int64', 'float32')
    """
    if isinstance(x, Expr):
        return x
    if isinstance(x, Tensor):
        raise TypeError(f"tensor {x.name!r} used as a scalar; index it (e.g. {x.name}[i])")
    if isinstance(x, np.generic):
        x = x.item()
    if not _is_scalar(x):
        raise TypeError(f"cannot use {type(x).__name__} {x!r} in a tensor expression")
    if like is None:
        return const(x)
    if isinstance(x, bool):
        return const(x, "bool" if like == "bool" else like)
    if isinstance(x, int):
        return const(x, "int64" if like == "bool" else like)
    return const(x, like if is_float(like) else "float32")


def coerce_pair(a, b):
    """Both operands as expressions, Python scalars weakly typed (they take the other's type).

    >>> [x.dtype for x in coerce_pair(const(1.0, "float64"), 2)]
    ['float64', 'float64']
    """
    if isinstance(a, Expr) and isinstance(b, Expr):
        return a, b
    if isinstance(a, Expr):
        return a, as_expr(b, a.dtype)
    if isinstance(b, Expr):
        return as_expr(a, b.dtype), b
    return as_expr(a), as_expr(b)


def cast(x, dtype: str) -> Expr:
    """Convert ``x`` to ``dtype`` (float to int truncates toward zero, like C).

    >>> import tensorexpr as te
    >>> te.cast(te.const(1), "float32").dtype
    'float32'
    """
    dtype = check_dtype(dtype)
    x = as_expr(x)
    if x.dtype == dtype:
        return x
    if isinstance(x, Const):
        v = x.value
        if dtype == "bool":
            return Const(bool(v), dtype)
        if is_int(dtype):
            if isinstance(v, float):
                lo, hi = _INT_RANGE[dtype]
                if not (math.isfinite(v) and lo - 1 < v < hi + 1):
                    return Cast(x, dtype)  # NaN / out of range: the backends' rule applies
                return Const(int(v), dtype)
            return Const(_wrap(int(v), dtype), dtype)
        return Const(_float(v, dtype), dtype)
    return Cast(x, dtype)


def _to_float(x: Expr) -> Expr:
    return x if is_float(x.dtype) else cast(x, DEFAULT_FLOAT)


def binary(op: str, a, b) -> Expr:
    """``a op b`` typed by the promotion rules above (what Python's operators build).

    ``op`` is one of ``BINARY_ARITH``, ``BINARY_CMP`` or ``BINARY_LOGIC``.

    >>> e = binary("div", const(7), 2)
    >>> e, e.dtype
    ((7.0 / 2.0), 'float32')
    >>> binary("max", const(1), const(2.5, "float64")).dtype
    'float64'
    """
    a, b = coerce_pair(a, b)
    if op in BINARY_LOGIC:
        if a.dtype != "bool" or b.dtype != "bool":
            sym = "&" if op == "and" else "|"
            raise TypeError(f"'{sym}' takes booleans (comparisons); got {a.dtype} and {b.dtype}")
        return Binary(op, a, b, "bool")
    t = promote(a.dtype, b.dtype)
    if t == "bool" and op not in BINARY_CMP and op not in ("max", "min"):
        t = "int64"  # arithmetic on booleans counts them, as in numpy
    if op == "div" and not is_float(t):
        t = DEFAULT_FLOAT
    a, b = cast(a, t), cast(b, t)
    if op in BINARY_CMP:
        return Binary(op, a, b, "bool")
    return Binary(op, a, b, t)


def unary(op: str, a) -> Expr:
    """``op(a)`` for ``op`` in ``UNARY_OPS``; math functions convert integers to float32.

    >>> unary("exp", const(1)).dtype, unary("abs", const(-1)).dtype
    ('float32', 'int64')
    >>> unary("abs", const(-1))
    max(-1, -(-1))
    """
    a = as_expr(a)
    if op == "not":
        if a.dtype != "bool":
            raise TypeError(f"'~' takes a boolean; got {a.dtype}")
        return Unary("not", a, "bool")
    if op == "neg":
        if a.dtype == "bool":
            raise TypeError("cannot negate a boolean; use ~")
        return Unary("neg", a, a.dtype)
    if op == "abs" and is_int(a.dtype):
        # max(a, -a): piecewise affine, so an index built with it (a reflection) has an
        # exact domain in isl and a value in eval_int, as min/max clamps do
        return Binary("max", a, Unary("neg", a, a.dtype), a.dtype)
    if op in ("floor", "ceil") and is_int(a.dtype):
        return a
    a = _to_float(a)
    return Unary(op, a, a.dtype)


def read(tensor: "Tensor", idx) -> "Read":
    """``tensor[idx]`` with checked integer indices (what ``Tensor.__getitem__`` builds).

    >>> import tensorexpr as te
    >>> A = te.placeholder((2, 3), name="A")
    >>> read(A, (1, 2)), A[1, 2].dtype
    (A[1, 2], 'float32')
    """
    if not isinstance(idx, tuple):
        idx = (idx,)
    if len(idx) != tensor.ndim:
        raise IndexError(f"{describe(tensor)} has {tensor.ndim} dimensions; "
                         f"indexed with {len(idx)} indices")
    out = []
    for k, x in enumerate(idx):
        if isinstance(x, slice):
            raise TypeError(f"{describe(tensor)}: slices are not supported in reads; "
                            f"write a te.compute over the slice's range instead")
        e = as_expr(x, INDEX_DTYPE)
        if not is_int(e.dtype):
            raise TypeError(f"{describe(tensor)}: index {k} is {e.dtype}, not an integer; "
                            f"use .astype('int64') if that is intended")
        out.append(cast(e, INDEX_DTYPE))
    return Read(tensor, tuple(out), tensor.dtype)


# }}}
# {{{ text of nodes

# The math-like text of nodes lives in ``tensorexpr.printer``, a layer above this
# module: it registers its functions here when imported (the package imports it
# before any node exists), so repr() needs no import of a client of the IR.
_PRINTER = {"expr": lambda e: f"<{type(e).__name__}>",
            "tensor": lambda t: repr(t)}


def register_printer(expr_text, tensor_text) -> None:
    """Make ``repr(expr)`` use ``expr_text(expr)`` and ``str(tensor)`` ``tensor_text(tensor)``.

    ``tensorexpr.printer`` registers :func:`~tensorexpr.printer.expr_str` and
    :func:`~tensorexpr.printer.tensor_str`; registering them again changes nothing.

    >>> from tensorexpr import printer
    >>> register_printer(printer.expr_str, printer.tensor_str)
    >>> Const(2, "int64") + 1
    (2 + 1)
    """
    _PRINTER["expr"], _PRINTER["tensor"] = expr_text, tensor_text


# }}}
